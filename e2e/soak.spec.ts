import { test, expect, type Page } from '@playwright/test';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { BackendPref, MemoryReport, ModelWorkerApi, TrainerEvent } from '../src/worker/protocol';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';

/**
 * Soak in Chromium: the real model worker (e2e/pages/worker.html) runs PPO on the shipped tiny model with its
 * run loop (start → steps → autosaves to IndexedDB) and every `step` event carries tf.memory() taken at the same
 * point of the step (src/worker/run.ts). After a warm-up the figures must be exactly the same at every step
 * and after the run: a leak of one tensor per step would show as +1 per step.
 *
 *  - WASM: 500 steps of the sentiment task (the CI run), autosaving every 10 steps: tensor count and bytes.
 *  - WebGPU (SwiftShader here: 10–30 s per step even at these shapes): 6 steps by default, autosaving every 2,
 *    with tfjs-backend-webgpu's GPU buffer figures flat too: the bytes tensors hold (numBytesInGPU) and the
 *    bytes of every buffer created, its reuse pool included (numBytesAllocatedInGPU). The pool keys on exact
 *    sizes, so the prompts are fixed to one length bucket: a new shape would add buffers without any leak.
 *    SOAK_WEBGPU_STEPS=500 runs the full length (hours on SwiftShader; minutes on a real GPU).
 */

type Memory = MemoryReport;
interface Sample extends Memory {
  step: number;
}
type SoakWorker = ModelWorkerApi;
type Ev = TrainerEvent;

declare global {
  interface Window {
    soak: { samples: Sample[]; errors: string[]; done: boolean };
  }
}

/** Small shapes so that 500 steps fit in CI. */
const SHAPES = {
  model: 'tiny',
  task: 'sentiment',
  seed: 2,
  batchSize: 2,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: 4,
};
const WASM = { steps: 500, warmUp: 20, config: { ...SHAPES, saveEvery: 50 } };
const WEBGPU = {
  steps: Number(process.env.SOAK_WEBGPU_STEPS ?? 6),
  // Step 1 builds the pool; step 2's autosave adds the read-back buffers; from step 3 on nothing is new.
  warmUp: 3,
  config: {
    ...SHAPES,
    saveEvery: 2,
    // 10–13 bytes: one query bucket (src/core/ppo/trainer.ts bucket), so every step has the same shapes.
    prompts: ['The movie was', 'My day was', 'This book is', 'The game was'],
  },
};

async function soak(
  page: Page,
  backend: BackendPref,
  run: { steps: number; config: Record<string, unknown> },
  timeoutMs: number,
) {
  const { steps, config } = run;
  await openWorkerPage(page);
  const report = await page.evaluate(
    async ({ pref, cfg, steps }) => {
      const w = window.modelWorker as unknown as SoakWorker;
      const report = await w.init(pref);
      window.soak = { samples: [], errors: [], done: false };
      await w.subscribe(
        window.comlinkProxy((e: Ev) => {
          if (e.type === 'step') {
            if (!e.memory) window.soak.errors.push(`step ${e.metrics.step} came without memory`);
            else window.soak.samples.push({ step: e.metrics.step, ...e.memory });
          } else if (e.type === 'error') {
            window.soak.errors.push(e.message);
          } else if (e.type === 'status' && e.status.state === 'paused' && e.status.step === steps) {
            window.soak.done = true;
          }
        }),
      );
      await w.discardAutosave();
      await w.configure({ ...cfg, steps });
      return report;
    },
    { pref: backend, cfg: config, steps },
  );
  const t0 = Date.now();
  await page.evaluate(() => (window.modelWorker as unknown as SoakWorker).start());
  await page.waitForFunction(() => window.soak.done || window.soak.errors.length > 0, undefined, {
    timeout: timeoutMs,
    polling: 1000,
  });
  const seconds = (Date.now() - t0) / 1000;
  const end = await page.evaluate(async () => {
    const w = window.modelWorker as unknown as SoakWorker;
    // After the run's last autosave (it runs before any call queued after the final step).
    const final = await w.memory();
    await w.discardAutosave();
    return { final, samples: window.soak.samples, errors: window.soak.errors };
  });
  return { report, seconds, ...end };
}

/** The figures of `keys` at every step from `warmUp` on equal those at `warmUp`, and so do those after the run. */
function expectFlat(
  samples: Sample[],
  final: Memory,
  run: { steps: number; warmUp: number },
  keys: (keyof Memory)[],
): void {
  const { steps, warmUp } = run;
  expect(samples.map((s) => s.step)).toEqual(Array.from({ length: steps }, (_, i) => i + 1));
  const ref = samples[warmUp - 1];
  expect(ref.step).toBe(warmUp);
  const pick = (m: Memory) => Object.fromEntries(keys.map((k) => [k, m[k]]));
  for (const k of keys) expect(typeof ref[k], `${k} is reported`).toBe('number');
  const off = samples.filter((s) => s.step >= warmUp && keys.some((k) => s[k] !== ref[k]));
  expect(
    off.map((s) => ({ step: s.step, ...pick(s) })),
    `steps whose figures differ from step ${warmUp}'s ${JSON.stringify(pick(ref))}`,
  ).toEqual([]);
  expect(pick(samples[steps - 1])).toEqual(pick(ref));
  expect(pick(final), 'after the run and its last autosave').toEqual(pick(ref));
}

function summary(samples: Sample[], final: Memory, warmUp: number, keys: (keyof Memory)[]): string {
  const show = (m: Memory) => keys.map((k) => `${k} ${m[k]}`).join(', ');
  const at = (step: number) => `step ${step}: ${show(samples[step - 1])}`;
  return [at(1), at(warmUp), at(samples.length), `after: ${show(final)}`].join('; ');
}

test.describe('soak: tf.memory() stays flat over a long run in Chromium', () => {
  let consoleWatch: { errors: string[] };
  test.beforeEach(({ page }) => {
    consoleWatch = watchConsole(page);
  });
  test.afterEach(() => {
    expect(consoleWatch.errors, 'console errors').toEqual([]);
  });

  test(`WASM: ${WASM.steps} steps of the tiny model, tensor count and bytes flat`, async ({ playwright }) => {
    // About 0.3–0.5 s per step on a busy 2-core machine, autosaves included.
    test.setTimeout(480_000);
    // A profile on disk, as a person's browser has: an incognito context keeps IndexedDB in memory, where the
    // 50 autosaves of this run (35 MB each, the previous one deleted after each) were not given back in time
    // and the 4 GB in-memory quota ran out at step 430 once (the app said so and kept the previous autosave).
    const use = test.info().project.use;
    const dir = await mkdtemp(path.join(tmpdir(), 'soak-profile-'));
    const context = await playwright.chromium.launchPersistentContext(dir, {
      ...use.launchOptions,
      headless: true,
      baseURL: use.baseURL,
      viewport: use.viewport,
    });
    const page = context.pages()[0] ?? (await context.newPage());
    consoleWatch = watchConsole(page);
    let r: Awaited<ReturnType<typeof soak>>;
    try {
      r = await soak(page, 'wasm', WASM, 450_000);
    } finally {
      await context.close();
      await rm(dir, { recursive: true, force: true });
    }
    const keys: (keyof Memory)[] = ['numTensors', 'numBytes'];
    console.log(
      `soak wasm: ${WASM.steps} steps in ${r.seconds.toFixed(0)} s; ${summary(r.samples, r.final, WASM.warmUp, keys)}`,
    );
    expect(r.report.backend).toBe('wasm');
    expect(r.errors).toEqual([]);
    expect(r.samples.every((s) => s.backend === 'wasm')).toBe(true);
    expectFlat(r.samples, r.final, WASM, keys);
  });

  test(`WebGPU: ${WEBGPU.steps} steps, tensors, bytes and GPU buffer bytes flat`, async ({ page }) => {
    // SwiftShader: the first step compiles the shaders; then 10–30 s per step on a busy 2-core machine.
    test.setTimeout(120_000 + WEBGPU.steps * 30_000);
    const r = await soak(page, 'webgpu', WEBGPU, 90_000 + WEBGPU.steps * 30_000);
    const keys: (keyof Memory)[] = ['numTensors', 'numBytes', 'numBytesInGPU', 'numBytesAllocatedInGPU'];
    console.log(
      `soak webgpu: ${WEBGPU.steps} steps in ${r.seconds.toFixed(0)} s; ${summary(r.samples, r.final, WEBGPU.warmUp, keys)}`,
    );
    expect(r.report.backend, 'WebGPU must be available (the flags in playwright.config.ts)').toBe('webgpu');
    expect(r.errors).toEqual([]);
    expect(r.samples.every((s) => s.backend === 'webgpu')).toBe(true);
    expect(WEBGPU.steps, 'SOAK_WEBGPU_STEPS must leave steps after the warm-up').toBeGreaterThan(
      WEBGPU.warmUp,
    );
    expectFlat(r.samples, r.final, WEBGPU, keys);
  });
});
