import { test, expect } from '@playwright/test';
import type { TrainerEvent } from '../src/worker/protocol';
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';

/**
 * The model worker's Hugging Face Hub loader (src/core/hub.ts + src/worker/sources.ts) against a local server
 * shaped like the Hub (`/{repo}/resolve/main/{file}`): streamed download with progress events, Cache Storage
 * so a second load makes no request, and the memory budget refusing a model before its weights are fetched.
 * The app itself only ever uses https://huggingface.co; `hubBase` is a loopback-only test hook.
 */

const FIXTURE = new URL('../tests/fixtures/parity/tiny-plain/', import.meta.url);
const FILES: Record<string, Buffer> = {
  'config.json': readFileSync(new URL('config.json', FIXTURE)),
  'model.safetensors': readFileSync(new URL('model.safetensors', FIXTURE)),
};

let server: Server;
let hubBase: string;
const hits: string[] = [];

test.beforeAll(async () => {
  server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    hits.push(path);
    const m = /^\/some-org\/tiny\/resolve\/main\/(config\.json|model\.safetensors)$/.exec(path);
    const headers = { 'access-control-allow-origin': '*' };
    if (!m) return void res.writeHead(404, headers).end();
    const body = FILES[m[1]];
    res.writeHead(200, {
      ...headers,
      'content-type': 'application/octet-stream',
      'content-length': String(body.length),
    });
    // Several chunks, so the worker reports progress between 0 and 1.
    const parts = 4;
    const size = Math.ceil(body.length / parts);
    let i = 0;
    const next = () => {
      const chunk = body.subarray(i * size, (i + 1) * size);
      i++;
      if (i >= parts) res.end(chunk);
      else res.write(chunk, () => setTimeout(next, 20));
    };
    next();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  hubBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

test.afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

type Progress = Extract<TrainerEvent, { type: 'progress' }>;

test('(d) Hub loader: progress while downloading, then served from Cache Storage with no request', async ({
  page,
}) => {
  test.setTimeout(180_000);
  const consoleWatch = watchConsole(page);
  await openWorkerPage(page);
  // The page is cross-origin isolated (COEP require-corp, vite.config.ts): the Hub's CORS responses still load.
  expect(await page.evaluate(() => self.crossOriginIsolated)).toBe(true);
  const weights = () => hits.filter((h) => h.endsWith('/model.safetensors')).length;
  const configs = () => hits.filter((h) => h.endsWith('/config.json')).length;

  const run = (budget?: number) =>
    page.evaluate(
      async ({ base, budget }) => {
        type W = {
          init(p: string): Promise<unknown>;
          subscribe(cb: unknown): Promise<unknown>;
          loadModel(s: unknown, o?: unknown): Promise<{ label: string; params: number; n_embd: number }>;
          generate(r: unknown): Promise<{ tokens: number[] }>;
          memory(): Promise<{ numTensors: number }>;
        };
        const w = window.modelWorker as unknown as W;
        const win = window as unknown as { hubEvents?: unknown[] };
        if (!win.hubEvents) {
          await w.init('wasm');
          const url = performance
            .getEntriesByType('resource')
            .map((e) => e.name)
            .find((n) => /deps\/comlink\.js/.test(n));
          if (!url) throw new Error('the page did not load comlink');
          const { proxy } = (await import(/* @vite-ignore */ url)) as { proxy: <T>(x: T) => T };
          win.hubEvents = [];
          await w.subscribe(proxy((e: unknown) => void win.hubEvents!.push(e)));
        }
        win.hubEvents!.length = 0;
        const source = { kind: 'hub', repo: 'some-org/tiny', hubBase: base };
        try {
          const summary = await w.loadModel(source, budget ? { memoryBudgetBytes: budget } : undefined);
          const gen = await w.generate({
            prompt: 'Hi',
            maxNewTokens: 3,
            temperature: 0,
            topK: 0,
            topP: 1,
            seed: 1,
          });
          await new Promise((r) => setTimeout(r, 100));
          return { summary, tokens: gen.tokens.length, events: win.hubEvents!, error: null };
        } catch (e) {
          return {
            summary: null,
            tokens: 0,
            events: win.hubEvents!,
            error: { name: (e as Error).name, message: (e as Error).message },
          };
        }
      },
      { base: hubBase, budget },
    );

  // Over budget: refused after reading config.json only, before any weights are downloaded.
  const refused = await run(10_000);
  expect(refused.error).toEqual({
    name: 'UserError',
    message: expect.stringMatching(
      /^some-org\/tiny has 0\.0 M parameters \(0\.0 GB of weights\); loading it needs ≈ 0\.0 GB: the weights, and while they load, a weight at a time, the largest weight's values on the host \(0\.00 GB\) and .*; that is over the 0\.0 GB budget here\. Choose a smaller model/,
    ) as unknown as string,
  });
  expect(weights()).toBe(0);

  const first = await run(8 * 1024 ** 3);
  expect(first.error).toBeNull();
  expect(first.summary).toMatchObject({ label: 'some-org/tiny', n_embd: 24 });
  expect(first.tokens).toBeGreaterThan(0);
  expect(weights()).toBe(1);
  const progress = (first.events as Progress[]).filter((e) => e.type === 'progress' && e.task === 'download');
  const weightProgress = progress.filter((e) => e.message.includes('model.safetensors'));
  expect(weightProgress[0]).toMatchObject({ fraction: 0 });
  expect(weightProgress.some((e) => e.fraction !== null && e.fraction > 0 && e.fraction < 1)).toBe(true);
  expect(weightProgress.at(-1)).toMatchObject({
    fraction: 1,
    message: expect.stringMatching(
      /^Downloading some-org\/tiny model\.safetensors: [\d.]+ \/ [\d.]+ MB$/,
    ) as unknown as string,
  });
  const fractions = weightProgress.map((e) => e.fraction ?? 0);
  expect([...fractions].sort((a, b) => a - b)).toEqual(fractions);

  // Second load: no request reaches the server; progress says where the bytes came from.
  const before = hits.length;
  const second = await run();
  expect(second.error).toBeNull();
  expect(second.summary).toEqual(first.summary);
  expect(hits.length).toBe(before);
  expect(weights()).toBe(1);
  expect(configs()).toBe(1); // fetched by the refused load (the budget check reads it), cached since
  const cached = (second.events as Progress[]).filter((e) => e.type === 'progress');
  expect(cached.map((e) => e.message)).toEqual([
    'some-org/tiny config.json: from the browser cache',
    'some-org/tiny config.json: from the browser cache',
    'some-org/tiny model.safetensors: from the browser cache',
  ]);

  // The hook accepts loopback addresses only.
  const rejected = await page.evaluate(async () => {
    const w = window.modelWorker as unknown as { loadModel(s: unknown): Promise<unknown> };
    try {
      await w.loadModel({ kind: 'hub', repo: 'some-org/tiny', hubBase: 'https://example.com' });
      return null;
    } catch (e) {
      return (e as Error).message;
    }
  });
  expect(rejected).toBe(
    'hubBase is for tests only and must be a loopback address (http://127.0.0.1:PORT), got "https://example.com".',
  );
  expect(consoleWatch.errors).toEqual([]);
});
