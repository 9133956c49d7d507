/**
 * The browser half of `npm run bench`: starts a Vite dev server on a free port (no HMR, no file watching), launches
 * Debian's Chromium with the WebGPU-through-SwiftShader flags, opens e2e/pages/bench.html once per backend and
 * collects each page's window.benchResult. Everything it starts is stopped before it returns (or on Ctrl-C).
 *
 * Standalone: tsx scripts/bench-browser.ts [--quick] [--backends webgpu,wasm] [--sections gen,lm] [--flags JSON]
 *   [--mode adamcheck] [--coi] [--timeout S]  prints one JSON object (one result per backend).
 */
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Browser } from '@playwright/test';
import type { ViteDevServer } from 'vite';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan=swiftshader',
  '--use-webgpu-adapter=swiftshader',
  '--use-angle=swiftshader',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export function chromiumPath(): string | null {
  const p = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  return existsSync(p) ? p : null;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

export interface BrowserBenchOptions {
  backends: string[];
  quick: boolean;
  sections?: string[];
  /** tfjs flags to set in the page before the backend starts. */
  flags?: Record<string, unknown>;
  /** Extra query parameters (e.g. mode=adamcheck). */
  query?: Record<string, string>;
  /**
   * Serve with COOP/COEP so the page is cross-origin isolated (SharedArrayBuffer: tfjs's threaded WASM build).
   * The app's own servers do not send these headers today; this measures what they would give.
   */
  crossOriginIsolated?: boolean;
  /** Per-page limit in seconds. */
  timeoutSeconds?: (backend: string) => number;
  log?: (msg: string) => void;
}

export interface BrowserBenchResult {
  backend: string;
  result: Record<string, unknown> | null;
  error: string | null;
  seconds: number;
}

export interface BrowserSession {
  chromiumVersion: string;
  results: BrowserBenchResult[];
}

/** Run the bench page once per backend; always stops the browser and the server it started. */
export async function runBrowserBench(o: BrowserBenchOptions): Promise<BrowserSession> {
  const exe = chromiumPath();
  if (!exe)
    throw new Error(
      `no Chromium at ${process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'} (set CHROMIUM_PATH, or apt-get install chromium)`,
    );
  const log = o.log ?? ((m: string) => process.stderr.write(`${m}\n`));
  let server: ViteDevServer | null = null;
  let browser: Browser | null = null;
  const stop = async (): Promise<void> => {
    const b = browser;
    const s = server;
    browser = null;
    server = null;
    await b?.close().catch(() => {});
    await s?.close().catch(() => {});
  };
  const onSignal = (sig: NodeJS.Signals): void => {
    void stop().finally(() => process.kill(process.pid, sig));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    // vite.config.ts turns off HMR and file watching under PPO_E2E: an edit saved mid-run must not reload the page.
    process.env.PPO_E2E = '1';
    const { createServer } = await import('vite');
    const port = await freePort();
    server = await createServer({
      root: ROOT,
      configFile: path.join(ROOT, 'vite.config.ts'),
      logLevel: 'error',
      clearScreen: false,
      server: {
        port,
        strictPort: true,
        host: '127.0.0.1',
        headers: o.crossOriginIsolated
          ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' }
          : {},
      },
    });
    await server.listen();
    const base = `http://127.0.0.1:${port}`;
    log(`bench: vite dev server on ${base}`);
    const { chromium } = await import('@playwright/test');
    browser = await chromium.launch({ executablePath: exe, args: CHROMIUM_ARGS, headless: true });
    const chromiumVersion = browser.version();
    const results: BrowserBenchResult[] = [];
    for (const backend of o.backends) {
      const t0 = performance.now();
      const page = await browser.newPage();
      page.on('console', (m) => {
        const text = m.text();
        if (text.startsWith('[bench]')) log(`chromium/${backend}: ${text.slice(8)}`);
        else if (m.type() === 'error') log(`chromium/${backend} console error: ${text.slice(0, 300)}`);
      });
      page.on('pageerror', (e) => log(`chromium/${backend} page error: ${e.message.slice(0, 300)}`));
      const q = new URLSearchParams({ backend, quick: o.quick ? '1' : '0', ...(o.query ?? {}) });
      if (o.sections) q.set('sections', o.sections.join(','));
      if (o.flags) q.set('flags', JSON.stringify(o.flags));
      let result: Record<string, unknown> | null = null;
      let error: string | null = null;
      try {
        await page.goto(`${base}/e2e/pages/bench.html?${q}`);
        const limit = (o.timeoutSeconds?.(backend) ?? 600) * 1000;
        await page.waitForFunction(() => window.benchResult || window.benchError, undefined, {
          timeout: limit,
          polling: 1000,
        });
        const got = await page.evaluate(() => ({ r: window.benchResult, e: window.benchError }));
        result = (got.r as Record<string, unknown>) ?? null;
        error = got.e ?? null;
      } catch (e) {
        error = (e as Error).message.split('\n')[0];
        // Keep what the page finished before its time ran out.
        result =
          ((await page.evaluate(() => window.benchPartial).catch(() => null)) as Record<
            string,
            unknown
          > | null) ?? null;
      } finally {
        await page.close().catch(() => {});
      }
      const seconds = (performance.now() - t0) / 1000;
      log(`chromium/${backend}: ${error ? `failed: ${error}` : 'done'} in ${seconds.toFixed(0)} s`);
      results.push({ backend, result, error, seconds });
    }
    return { chromiumVersion, results };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stop();
  }
}

// Standalone use.
if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const args = process.argv.slice(2);
  const opt = (name: string): string | undefined => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const session = await runBrowserBench({
    backends: (opt('backends') ?? 'webgpu,wasm').split(','),
    quick: args.includes('--quick'),
    sections: opt('sections')?.split(','),
    flags: opt('flags') ? JSON.parse(opt('flags')!) : undefined,
    query: opt('mode') ? { mode: opt('mode')! } : undefined,
    timeoutSeconds: () => Number(opt('timeout') ?? 1800),
    crossOriginIsolated: args.includes('--coi'),
  });
  process.stdout.write(JSON.stringify(session) + '\n');
}
