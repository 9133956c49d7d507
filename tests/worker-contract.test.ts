/**
 * One contract, two workers: the same scenarios against the real model worker's API (src/worker/api.ts, built in
 * Node on the CPU backend with a tiny random model read from disk and autosave in memory) and against the UI's
 * stand-in (src/ui/dev/fake-worker.ts): start runs to `steps` and pauses, pause stops after the step in flight,
 * a live change reaches the next step, a non-live change starts a new run, three non-finite steps in a row pause
 * the run with an error event, and a checkpoint exported and imported continues the run.
 */
import { describe, it, expect, beforeAll, afterEach, vi } from 'vitest';
import { nodeWorkerApi, TINY_WORKER_RUN } from './helpers/worker';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import type {
  ModelWorkerApi,
  ReliabilityEvent,
  RunStatus,
  TrainerEvent,
  WorkerApi,
} from '../src/worker/protocol';
import { HEAP_BUDGET_ENV } from '../src/core/model/oom';
import { FusedAdamOptimizer } from '../src/core/optim/fused-adam';

// The worker's modules read `self` and `navigator` (worker globals); in Node the global object stands in for
// `self`, and a navigator without WebGPU for `navigator` (Node 20 has none).
(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const TINY = TINY_WORKER_RUN;

/**
 * A reward whose scores are finite doubles but beyond float32's range: the returns become ±Infinity in the
 * value loss, so every update is skipped as non-finite (the guard of docs/engine.md).
 */
const OVERFLOWING_REWARD = { mix: [{ name: 'length', weight: 1e300 }] };

interface Harness {
  api: WorkerApi;
  events: TrainerEvent[];
}

let dir: string;

async function realWorker(): Promise<Harness & { api: ModelWorkerApi }> {
  await useCpu();
  dir ??= await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  const api = await nodeWorkerApi({ tinyDir: dir });
  expect((await api.init('cpu')).backend).toBe('cpu');
  const events: TrainerEvent[] = [];
  await api.subscribe((e) => void events.push(e));
  return { api, events };
}

async function fakeWorker(): Promise<Harness> {
  const api = createFakeWorker({ stepMs: 2 });
  const events: TrainerEvent[] = [];
  await api.subscribe((e) => void events.push(e));
  return { api, events };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, test: () => boolean, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!test()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

const stepsOf = (events: TrainerEvent[]) => events.flatMap((e) => (e.type === 'step' ? [e] : []));
const errorsOf = (events: TrainerEvent[]) => events.flatMap((e) => (e.type === 'error' ? [e] : []));
const lastStatus = (events: TrainerEvent[]): RunStatus | undefined =>
  events.flatMap((e) => (e.type === 'status' ? [e.status] : [])).at(-1);

/**
 * The status a config change caused: its call answers with the change's number (RunStatus.configSeq), and the
 * status comes as an event (sent before the answer) carrying that number.
 */
async function changed(h: Harness, answer: Promise<number>): Promise<RunStatus> {
  const seq = await answer;
  const s = h.events.flatMap((e) => (e.type === 'status' && e.status.configSeq === seq ? [e.status] : []));
  expect(s).toHaveLength(1);
  return s[0];
}

/** Until the run stopped: no longer running, and no step in flight. */
async function settled(h: Harness): Promise<RunStatus> {
  await waitFor('the run to stop', () => {
    const s = lastStatus(h.events);
    return s !== undefined && s.state !== 'running' && s.phase === 'idle';
  });
  // A step that was in flight when pause() answered ends with its own step event and status: wait them out.
  let n = -1;
  while (n !== stepsOf(h.events).length) {
    n = stepsOf(h.events).length;
    await sleep(150);
  }
  return lastStatus(h.events)!;
}

describe.each([
  ['the model worker (CPU, in Node)', realWorker],
  ['the UI’s stand-in worker', fakeWorker],
])('worker contract: %s', (_name, make) => {
  let h: Harness;
  beforeAll(async () => {
    h = await make();
  });

  it('start runs to `steps`, then pauses; starting a finished run is a UserError', async () => {
    const configured = await changed(h, h.api.configure({ ...TINY, steps: 2 }));
    expect(configured).toMatchObject({ state: 'idle', step: 0, steps: 2 });
    h.events.length = 0;
    expect((await h.api.start()).state).toBe('running');
    const end = await settled(h);
    expect(end).toMatchObject({ state: 'paused', step: 2 });
    // Each step carries the memory held after it and its peak: at least what the step before it left held.
    const mem = stepsOf(h.events).map((e) => e.memory!);
    expect(mem).toHaveLength(2);
    expect(mem[0].peakBytes).toBeGreaterThan(0);
    expect(mem[1].peakBytes).toBeGreaterThanOrEqual(mem[0].numBytes);
    expect(stepsOf(h.events).map((e) => e.metrics.step)).toEqual([1, 2]);
    expect(errorsOf(h.events)).toEqual([]);
    const err = await h.api.start().catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).name).toBe('UserError');
    expect((err as Error).message).toBe(
      'The run has done its 2 steps; raise "steps" to continue it, or reset.',
    );
  });

  it('pause stops the run after the step in flight; the run keeps its steps', async () => {
    // `steps` is live: raising it continues the same run.
    await h.api.setHyperparameters({ steps: 1000 });
    h.events.length = 0;
    await h.api.start();
    await waitFor('a step', () => stepsOf(h.events).length > 0);
    const paused = await h.api.pause();
    expect(paused.state).toBe('paused');
    const end = await settled(h);
    expect(end.state).toBe('paused');
    const ran = stepsOf(h.events).map((e) => e.metrics.step);
    expect(ran[0]).toBe(3);
    expect(end.step).toBe(ran.at(-1));
    expect(end.step).toBeLessThan(1000);
    expect((await h.api.history()).map((m) => m.step)).toEqual(
      Array.from({ length: end.step }, (_, i) => i + 1),
    );
  });

  it('a live change reaches the next step; a non-live key is refused by setHyperparameters', async () => {
    const before = (await h.api.history()).length;
    const live = await changed(h, h.api.setHyperparameters({ klCoef: 0.3, learningRate: 2e-4 }));
    expect(live.config).toMatchObject({ klCoef: 0.3, learningRate: 2e-4 });
    expect(live.step).toBe(before);
    h.events.length = 0;
    const after = await h.api.stepOnce();
    expect(after).toMatchObject({ state: 'paused', step: before + 1 });
    const [step] = stepsOf(h.events);
    expect(step.metrics).toMatchObject({ step: before + 1, klCoef: 0.3, learningRate: 2e-4 });

    const err = await h.api.setHyperparameters({ batchSize: 4 }).catch((e: Error) => e);
    expect((err as Error).name).toBe('UserError');
    expect((err as Error).message).toMatch(
      /^setHyperparameters: "batchSize" cannot change on a running job; start a new run\. Keys that can: .*learningRate/,
    );
    expect((await h.api.history()).length).toBe(before + 1);
  });

  it('a non-live change through configure starts a new run', async () => {
    const s = await changed(h, h.api.configure({ batchSize: 4, miniBatches: 2 }));
    expect(s).toMatchObject({ state: 'idle', step: 0 });
    expect(s.config).toMatchObject({ batchSize: 4, miniBatches: 2, klCoef: 0.3 });
    expect(await h.api.history()).toEqual([]);
    // A live-only change keeps the (new, empty) run as it is.
    expect(await changed(h, h.api.configure({ klCoef: 0.1 }))).toMatchObject({ state: 'idle', step: 0 });
  });

  it('configure and setHyperparameters answer a number, not a status: the status comes once, as its event', async () => {
    for (const call of [
      () => h.api.configure({ klCoef: 0.2 }),
      () => h.api.setHyperparameters({ klCoef: 0.25 }),
    ]) {
      h.events.length = 0;
      const answer: unknown = await call();
      expect(typeof answer).toBe('number');
      const statuses = h.events.flatMap((e) => (e.type === 'status' ? [e.status] : []));
      expect(statuses).toHaveLength(1);
      expect(statuses[0].configSeq).toBe(answer);
    }
    // Numbered in order: the next change has the next number.
    const a = await h.api.setHyperparameters({ klCoef: 0.3 });
    expect(await h.api.configure({ klCoef: 0.3 })).toBe(a + 1);
  });

  it('three non-finite steps in a row pause the run with an error event', async () => {
    await h.api.configure({ ...TINY, steps: 10, klCoef: 0.05, reward: OVERFLOWING_REWARD });
    h.events.length = 0;
    await h.api.start();
    const end = await settled(h);
    expect(end).toMatchObject({ state: 'paused', step: 3 });
    const steps = stepsOf(h.events);
    expect(steps.map((e) => e.metrics.step)).toEqual([1, 2, 3]);
    for (const e of steps) expect(e.alerts.map((a) => a.id)).toContain('non-finite');
    const errors = errorsOf(h.events);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toEqual({
      type: 'error',
      userError: true,
      message:
        'Stopped at step 3: three steps in a row had NaN/Inf losses or gradients (updates skipped, so the ' +
        'weights are unchanged by them). The run is paused; lower the learning rate (or maxGradNorm), check ' +
        'that the reward returns finite numbers, and press Start, or reset.',
    });
    // The error comes after the third step's event, and nothing ran after it.
    const order = h.events.filter((e) => e.type === 'step' || e.type === 'error').map((e) => e.type);
    expect(order).toEqual(['step', 'step', 'step', 'error']);
  });

  it('export a checkpoint, reset, import it: the run continues at its step with its history', async () => {
    await h.api.configure({ ...TINY, steps: 100, reward: null });
    await h.api.stepOnce();
    await h.api.stepOnce();
    const history = await h.api.history();
    expect(history.map((m) => m.step)).toEqual([1, 2]);
    const zip = await h.api.exportCheckpoint();
    expect(zip.bytes.length).toBeGreaterThan(0);
    expect((await h.api.reset()).step).toBe(0);
    expect(await h.api.history()).toEqual([]);
    const summary = await h.api.importCheckpoint(zip.bytes);
    expect(summary).toMatchObject({ step: 2, historyLength: 2 });
    expect(summary.config).toMatchObject({ ...TINY, steps: 100 });
    expect(await h.api.history()).toEqual(history);
    h.events.length = 0;
    expect(await h.api.stepOnce()).toMatchObject({ state: 'paused', step: 3 });
    expect(stepsOf(h.events).map((e) => e.metrics.step)).toEqual([3]);
  });
});

describe('the model worker running out of memory mid-step (CPU, in Node)', () => {
  let h: Harness & { api: ModelWorkerApi };
  const rel: ReliabilityEvent[] = [];
  beforeAll(async () => {
    h = await realWorker();
    await h.api.subscribeReliability((e) => void rel.push(e));
  });
  afterEach(() => {
    delete process.env[HEAP_BUDGET_ENV];
    vi.restoreAllMocks();
  });

  const autosavedSteps = () => rel.flatMap((e) => (e.type === 'autosaved' ? [e.info.step] : []));

  it('a forced-small heap budget pauses the run with the clear error; the last autosave is the one from before', async () => {
    await h.api.configure({ ...TINY, steps: 2, saveEvery: 1, reward: null });
    h.events.length = 0;
    await h.api.start();
    expect(await settled(h)).toMatchObject({ state: 'paused', step: 2 });
    // The cadence (every min(saveEvery, 10) steps) and the stop: one autosave per step.
    expect(autosavedSteps()).toEqual([1, 2]);
    const before = await h.api.autosaveInfo();
    expect(before).toMatchObject({ step: 2, historyLength: 2, current: true });

    // Step 3 with a budget below what the run holds: it runs out at the first phase boundary, after generating.
    await h.api.setHyperparameters({ steps: 10 });
    process.env[HEAP_BUDGET_ENV] = '1000';
    h.events.length = 0;
    rel.length = 0;
    await h.api.start();
    const end = await settled(h);
    expect(end).toMatchObject({ state: 'paused', phase: 'idle', step: 2 });
    expect(stepsOf(h.events)).toEqual([]);
    const errors = errorsOf(h.events);
    expect(errors).toHaveLength(1);
    expect(errors[0].userError).toBe(true);
    expect(errors[0].message).toMatch(
      /^Ran out of memory while generating responses at step 3: this process's memory could not hold the run's tensors \(\d+\.\d [kM]B of tensors are live, over the 1\.0 kB budget\)\. Lower batchSize or responseLength \(the KV cache grows with both\), or choose a smaller model\. The run stopped at step 3 and saves nothing from here on \(the step was left half-done\); its last checkpoint or autosave, written before step 3, is intact\.$/,
    );
    // Nothing saved over the last good autosave.
    expect(rel.filter((e) => e.type === 'autosaved' || e.type === 'autosave-failed')).toEqual([]);
    expect(await h.api.autosaveInfo()).toEqual(before);

    // Start again: refused in words, still nothing saved.
    h.events.length = 0;
    await h.api.start();
    await settled(h);
    expect(errorsOf(h.events).map((e) => e.message)).toEqual([
      'Step 3 ran out of memory while generating, so this run can neither go on nor be saved; resume its last ' +
        'checkpoint or autosave (written before that step, and intact), or start it again.',
    ]);
    await expect(h.api.exportCheckpoint()).rejects.toThrow(/can neither go on nor be saved/);
    expect(await h.api.autosaveInfo()).toEqual(before);

    // The autosave continues the run at step 2.
    delete process.env[HEAP_BUDGET_ENV];
    expect(await h.api.resumeAutosave()).toMatchObject({ state: 'paused', step: 2 });
    await h.api.setHyperparameters({ steps: 10 }); // it was saved with steps 2
    h.events.length = 0;
    expect(await h.api.stepOnce()).toMatchObject({ state: 'paused', step: 3 });
    expect(stepsOf(h.events).map((e) => e.metrics.step)).toEqual([3]);
  });

  it('a WASM trap mid-update (simulated) pauses the run with the same clear error and no autosave of that state', async () => {
    await h.api.configure({ ...TINY, steps: 10, saveEvery: 1, reward: null, seed: 6 });
    await h.api.stepOnce();
    const before = await h.api.autosaveInfo();
    expect(before).toMatchObject({ step: 1, current: true });
    vi.spyOn(FusedAdamOptimizer.prototype, 'applyControlled').mockImplementation(() => {
      const e = new Error('memory access out of bounds');
      e.name = 'RuntimeError';
      e.stack =
        'RuntimeError: memory access out of bounds\n    at wasm://wasm/00a3b2c6:wasm-function[512]:0x2c1f4';
      throw e;
    });
    h.events.length = 0;
    rel.length = 0;
    await h.api.start();
    expect(await settled(h)).toMatchObject({ state: 'paused', step: 1 });
    const [error] = errorsOf(h.events);
    expect(error.userError).toBe(true);
    expect(error.message).toMatch(
      /^Ran out of memory while updating \(the PPO minibatch backward passes\) at step 2: .*the backend said "memory access out of bounds"\)\. Lower batchSize or responseLength, raise miniBatches .* \(its weights and optimiser state may be half-updated\); its last checkpoint or autosave, written before step 2, is intact\.$/,
    );
    expect(error.message).not.toMatch(/RuntimeError|wasm-function/);
    expect(rel.filter((e) => e.type === 'autosaved' || e.type === 'autosave-failed')).toEqual([]);
    expect(await h.api.autosaveInfo()).toEqual(before);
  });
});
