/**
 * The browser half of `npm run bench`: starts a Vite dev server on a free port (no HMR, no file watching), launches
 * Debian's Chromium with the WebGPU-through-SwiftShader flags, opens e2e/pages/bench.html once per backend and
 * collects each page's window.benchResult. Everything it starts is stopped before it returns (or on Ctrl-C).
 *
 * The pages are cross-origin isolated, as the app is (vite.config.ts sends COOP + COEP), so WASM runs tfjs's
 * threaded build on the app's thread count. With the WASM backend (and the ppo section), two more page loads time
 * the same PPO update on 1 thread and on all threads (`?wasmThreads=1`, then the default): the wasm result's
 * `wasmThreads` field, { threads, speedup = 1-thread ÷ N-thread update seconds, updateSeconds1, updateSecondsN,
 * isolated } (src/bench/perf/report.ts reads it).
 *
 * Standalone: tsx src/cli/bench-browser.ts [--quick] [--backends webgpu,wasm] [--sections gen,lm] [--flags JSON]
 *   [--mode adamcheck|threads] [--no-coi] [--no-threads] [--profile-threads] [--timeout S]  prints one JSON
 *   object (one result per backend). `--mode threads --backends wasm` runs only the threads measurement.
 */
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Browser } from '@playwright/test';
import type { ViteDevServer } from 'vite';
import type { WasmThreadsBench } from '../bench/perf/report';
import os from 'node:os';
import { CHROMIUM_ARGS } from './chromium-args';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

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
  /**
   * Extra query parameters (e.g. mode=adamcheck; wasmThreads=1 runs the backend pages' WASM on one thread, the
   * threads measurement keeps its own 1 and default).
   */
  query?: Record<string, string>;
  /**
   * false: serve without cross-origin isolation (COOP/COEP `unsafe-none`), so WASM runs single-threaded as on a
   * host that sends no headers. Default: isolated, as vite.config.ts serves the app.
   */
  crossOriginIsolated?: boolean;
  /** false: skip the 1-thread vs N-thread PPO update measurement on WASM. */
  wasmThreads?: boolean;
  /** Also profile one step per thread count (kernel time by kernel), in the wasm result's `wasmThreadsProfile`. */
  profileThreads?: boolean;
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
        // vite.config.ts's server.headers isolate the page; these are merged over them.
        headers:
          o.crossOriginIsolated === false
            ? { 'Cross-Origin-Opener-Policy': 'unsafe-none', 'Cross-Origin-Embedder-Policy': 'unsafe-none' }
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
    /** Open the bench page with `query`, wait for its result (or keep what it finished in time). */
    const runPage = async (
      label: string,
      query: Record<string, string>,
      limitSeconds: number,
    ): Promise<BrowserBenchResult> => {
      const t0 = performance.now();
      const page = await browser!.newPage();
      page.on('console', (m) => {
        const text = m.text();
        if (text.startsWith('[bench]')) log(`chromium/${label}: ${text.slice(8)}`);
        else if (m.type() === 'error') log(`chromium/${label} console error: ${text.slice(0, 300)}`);
      });
      page.on('pageerror', (e) => log(`chromium/${label} page error: ${e.message.slice(0, 300)}`));
      const q = new URLSearchParams({ quick: o.quick ? '1' : '0', ...(o.query ?? {}) });
      // A page's own query wins; an empty value drops the parameter (the all-threads page drops wasmThreads).
      for (const [k, v] of Object.entries(query)) {
        if (v === '') q.delete(k);
        else q.set(k, v);
      }
      if (o.sections) q.set('sections', o.sections.join(','));
      if (o.flags) q.set('flags', JSON.stringify(o.flags));
      let result: Record<string, unknown> | null = null;
      let error: string | null = null;
      try {
        await page.goto(`${base}/e2e/pages/bench.html?${q}`);
        await page.waitForFunction(() => window.benchResult || window.benchError, undefined, {
          timeout: limitSeconds * 1000,
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
      log(`chromium/${label}: ${error ? `failed: ${error}` : 'done'} in ${seconds.toFixed(0)} s`);
      return { backend: query.backend, result, error, seconds };
    };
    const threadsOnly = o.query?.mode === 'threads';
    for (const backend of o.backends) {
      if (threadsOnly) continue;
      results.push(await runPage(backend, { backend }, o.timeoutSeconds?.(backend) ?? 600));
    }
    const ppoWanted = !o.sections || o.sections.includes('ppo');
    if (o.backends.includes('wasm') && o.wasmThreads !== false && (ppoWanted || threadsOnly)) {
      const limit = o.timeoutSeconds?.('wasm') ?? 600;
      const measured = await measureWasmThreads(runPage, limit, !!o.profileThreads, log);
      let wasm = results.find((r) => r.backend === 'wasm');
      if (!wasm) results.push((wasm = { backend: 'wasm', result: {}, error: null, seconds: 0 }));
      if (measured.error) wasm.error = [wasm.error, measured.error].filter(Boolean).join('; ');
      if (wasm.result && measured.threads) wasm.result.wasmThreads = measured.threads;
      if (wasm.result && measured.profile) wasm.result.wasmThreadsProfile = measured.profile;
    }
    return { chromiumVersion, results };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stop();
  }
}

type RunPage = (
  label: string,
  query: Record<string, string>,
  limitSeconds: number,
) => Promise<BrowserBenchResult>;

/**
 * The PPO update on 1 thread, then on the page's default (all threads, at most 8), one page load each
 * (`mode=threads`): the same config, warm-up and timed steps as the ppo section (benchPpoStep's timeUpdate).
 */
export async function measureWasmThreads(
  runPage: RunPage,
  limitSeconds: number,
  profile: boolean,
  log: (msg: string) => void,
): Promise<{ threads: WasmThreadsBench | null; profile: unknown; error: string | null }> {
  const extra: Record<string, string> = {
    backend: 'wasm',
    mode: 'threads',
    ...(profile ? { profile: '1' } : {}),
  };
  const one = await runPage('wasm, 1 thread', { ...extra, wasmThreads: '1' }, limitSeconds);
  // All threads = the machine's logical cores (the app's default leaves one to the page).
  const all = await runPage(
    'wasm, all threads',
    { ...extra, wasmThreads: String(Math.min(os.cpus().length, 8)) },
    limitSeconds,
  );
  type Run = {
    threads: number;
    isolated: boolean;
    ppo: { timeUpdate: number };
    matmul512Gflops: number;
    profile?: unknown;
  };
  const r1 = one.result?.threadsRun as Run | undefined;
  const rN = all.result?.threadsRun as Run | undefined;
  const errors = [one.error && `1 thread: ${one.error}`, all.error && `all threads: ${all.error}`].filter(
    Boolean,
  );
  if (!r1 || !rN) return { threads: null, profile: null, error: errors.join('; ') || 'no threads result' };
  const threads: WasmThreadsBench = {
    threads: rN.threads,
    speedup: r1.ppo.timeUpdate / rN.ppo.timeUpdate,
    updateSeconds1: r1.ppo.timeUpdate,
    updateSecondsN: rN.ppo.timeUpdate,
    isolated: rN.isolated,
  };
  log(
    `chromium/wasm threads: update ${threads.updateSeconds1.toFixed(2)} s on 1 thread, ` +
      `${threads.updateSecondsN.toFixed(2)} s on ${threads.threads}: ×${threads.speedup.toFixed(2)}` +
      (threads.isolated ? '' : ' (page not cross-origin isolated: both ran one thread)') +
      `; 512² matmul ${r1.matmul512Gflops.toFixed(1)} → ${rN.matmul512Gflops.toFixed(1)} GFLOP/s`,
  );
  return {
    threads,
    profile: profile ? { oneThread: r1.profile, allThreads: rN.profile } : null,
    error: errors.join('; ') || null,
  };
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
    crossOriginIsolated: !args.includes('--no-coi'),
    wasmThreads: !args.includes('--no-threads'),
    profileThreads: args.includes('--profile-threads'),
  });
  process.stdout.write(JSON.stringify(session) + '\n');
}
