/**
 * One contract, two workers: the same scenarios against the real model worker's API (src/worker/api.ts, built in
 * Node on the CPU backend with a tiny random model read from disk and autosave in memory) and against the UI's
 * stand-in (src/ui/dev/fake-worker.ts): start runs to `steps` and pauses, pause stops after the step in flight,
 * a live change reaches the next step, a non-live change starts a new run, three non-finite steps in a row pause
 * the run with an error event, and a checkpoint exported and imported continues the run.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { memoryAutosaveStore } from '../src/services/autosave';
import { TabAutosave } from '../src/services/autosave-tabs';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import type { ModelFiles } from '../src/core/model/folder';
import type { ConfigPatch, RunStatus, TrainerEvent, WorkerApi } from '../src/worker/protocol';

// The worker's modules read `self` and `navigator` (worker globals); in Node the global object stands in for
// `self`, and a navigator without WebGPU for `navigator` (Node 20 has none).
(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const TINY = {
  model: 'tiny-test',
  task: 'sentiment',
  batchSize: 2,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: 4,
  seed: 5,
  saveEvery: 0,
} satisfies ConfigPatch;

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

async function realWorker(): Promise<Harness> {
  await useCpu();
  dir ??= await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  const { createWorkerApi } = await import('../src/worker/api');
  const { ModelSources } = await import('../src/worker/sources');
  class DiskSources extends ModelSources {
    override files(name: string): ModelFiles {
      return name === 'tiny-test' ? nodeFiles(dir) : super.files(name);
    }
    override loadTask = loadTaskNode;
  }
  const api = createWorkerApi({
    autosave: new TabAutosave(memoryAutosaveStore(), null),
    sources: (progress) => new DiskSources(progress),
  });
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
    const configured = await h.api.configure({ ...TINY, steps: 2 });
    expect(configured).toMatchObject({ state: 'idle', step: 0, steps: 2 });
    h.events.length = 0;
    expect((await h.api.start()).state).toBe('running');
    const end = await settled(h);
    expect(end).toMatchObject({ state: 'paused', step: 2 });
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
    const live = await h.api.setHyperparameters({ klCoef: 0.3, learningRate: 2e-4 });
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
    const s = await h.api.configure({ batchSize: 4, miniBatches: 2 });
    expect(s).toMatchObject({ state: 'idle', step: 0 });
    expect(s.config).toMatchObject({ batchSize: 4, miniBatches: 2, klCoef: 0.3 });
    expect(await h.api.history()).toEqual([]);
    // A live-only change keeps the (new, empty) run as it is.
    expect(await h.api.configure({ klCoef: 0.1 })).toMatchObject({ state: 'idle', step: 0 });
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
