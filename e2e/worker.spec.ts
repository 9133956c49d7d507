import { test, expect } from '@playwright/test';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';

/**
 * The model worker's API (src/worker/protocol.ts) driven directly, on the fast WASM backend: errors cross the
 * thread as plain messages, and tensors are not leaked. e2e/pages/worker.html exposes the comlink proxy.
 */
test('user errors arrive as UserError with the message and no stack', async ({ page }) => {
  const consoleWatch = watchConsole(page);
  await openWorkerPage(page);
  const errors = await page.evaluate(async () => {
    const w = window.modelWorker;
    await w.init('wasm');
    const caught: { name: string; message: string; stack?: string }[] = [];
    for (const attempt of [
      () => w.generate({ prompt: 'x', maxNewTokens: 2, temperature: 0, topK: 0, topP: 1, seed: 0 }),
      () => w.loadModel({ kind: 'url', baseUrl: '/no/such/folder' }),
    ]) {
      try {
        await attempt();
      } catch (e) {
        const err = e as Error;
        caught.push({ name: err.name, message: err.message, stack: err.stack });
      }
    }
    return caught;
  });
  expect(errors).toHaveLength(2);
  expect(errors[0]).toMatchObject({
    name: 'UserError',
    message: 'No model is loaded yet; load a model first.',
  });
  expect(errors[1].name).toBe('UserError');
  expect(errors[1].message).toContain('/no/such/folder: config.json is missing');
  for (const e of errors) expect(e.stack ?? '').not.toMatch(/\.ts:\d+/);
  expect(consoleWatch.errors).toEqual([]);
});

test('generate is seeded and leaks no tensors', async ({ page }) => {
  await openWorkerPage(page);
  const r = await page.evaluate(async () => {
    const w = window.modelWorker;
    await w.init('wasm');
    await w.loadModel({ kind: 'builtin', name: 'tiny' });
    const req = { prompt: 'seeded', maxNewTokens: 6, temperature: 0.9, topK: 20, topP: 0.95, seed: 42 };
    const before = await w.memory();
    const a = await w.generate(req);
    const b = await w.generate(req);
    const after = await w.memory();
    return { a, b, before, after };
  });
  expect(r.a.tokens.length).toBeGreaterThan(0);
  expect(r.b.tokens).toEqual(r.a.tokens);
  expect(r.a.logprobs.every((lp) => Number.isFinite(lp) && lp <= 0)).toBe(true);
  expect(r.after.numTensors).toBe(r.before.numTensors);
});

test('reloading a model or switching backend frees the old weights', async ({ page }) => {
  // Known core bug: GPT2.fromArrays (src/core/model/gpt2.ts) wraps `tf.tensor(data)` in `tf.variable(...)`
  // without disposing the tensor, so every load keeps one full copy of the weights alive. Remove this marker
  // when that is fixed (the test then passes, and Playwright reports the marker as an unexpected pass).
  await openWorkerPage(page);
  const r = await page.evaluate(async () => {
    const w = window.modelWorker;
    await w.init('wasm');
    await w.loadModel({ kind: 'builtin', name: 'tiny' });
    const once = await w.memory();
    await w.loadModel({ kind: 'builtin', name: 'tiny' });
    const reloaded = await w.memory();
    await w.setBackend('cpu');
    const switched = await w.memory();
    return { once, reloaded, switched };
  });
  expect(r.reloaded.numTensors).toBe(r.once.numTensors);
  expect(r.switched.numTensors).toBe(r.once.numTensors);
  expect(r.switched.numBytes).toBe(r.once.numBytes);
});
