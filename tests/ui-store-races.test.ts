/**
 * What replaces the run (an import, a resume, a reward model, a model load, a launched run) against what else is on
 * its way to the worker: the page's start (backend, model, first configure) and config edits. The real worker runs
 * its calls one at a time in the order they arrive (src/worker/api.ts, `serial`), so a call sent while another
 * runs goes after it. The fake worker here gets that queue (`serialized`), and a call can be held back to open the
 * window a slow backend, file or download opens in a browser. Each case failed before the store waited for the
 * page's start (SliceContext.afterStart) and put these jobs in turn with the config messages (exclusive).
 */
import { describe, expect, it } from 'vitest';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker, type FakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { validateConfig } from '../src/common/config';
import { resumeAutosaveIntoStore, type ReliabilityWorker } from '../src/ui/lib/autosave';
import type { RunStatus } from '../src/worker/protocol';

type Method = (...a: unknown[]) => Promise<unknown>;

/**
 * The fake worker with the real one's queue: each call starts after the one before it ended. `hold(name)` holds
 * the next call of `name` at its start until the returned function is called.
 */
function serialized(fake: FakeWorker) {
  let queue: Promise<unknown> = Promise.resolve();
  const holds = new Map<string, Promise<void>>();
  const order: string[] = [];
  const f = fake as unknown as Record<string, Method>;
  for (const name of [
    'init',
    'setBackend',
    'loadModel',
    'configure',
    'importCheckpoint',
    'trainRewardModel',
    'reset',
    'start',
  ]) {
    const inner = f[name].bind(fake);
    f[name] = (...a: unknown[]) => {
      const run = queue.then(async () => {
        const held = holds.get(name);
        if (held) {
          holds.delete(name);
          await held;
        }
        order.push(name);
        return inner(...a);
      });
      queue = run.catch(() => undefined);
      return run;
    };
  }
  return {
    order,
    hold(name: string): () => void {
      let release = () => {};
      holds.set(name, new Promise<void>((r) => (release = r)));
      return () => release();
    },
  };
}

function harness(hash = '#batchSize=2&miniBatches=1') {
  const fake = createFakeWorker();
  const q = serialized(fake);
  const store: PlaygroundStore = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: () => {},
    sendDelayMs: 0,
  });
  return { fake, q, store };
}

const tick = () => new Promise((r) => setTimeout(r, 5));

/** A checkpoint as the fake worker reads it: a run at `step` of `config`. */
const checkpoint = (step: number, config: Record<string, unknown>) =>
  new TextEncoder().encode(
    JSON.stringify({
      step,
      config: validateConfig(config),
      history: Array.from({ length: step }, (_, i) => ({ step: i + 1, reward: i / 10 })),
    }),
  );

describe('what replaces the run waits for the page’s start and goes in turn with config edits', () => {
  it('a model loaded while the backend starts is the one kept (the page’s own load goes first)', async () => {
    const { q, store } = harness();
    const release = q.hold('init');
    const started = store.getState().actions.start();
    expect(store.getState().starting).toBe(true);
    const loaded = store.getState().actions.loadModel({ kind: 'hub', repo: 'someone/my-model' });
    await tick();
    release();
    await Promise.all([started, loaded]);
    expect(q.order.filter((n) => n === 'loadModel')).toHaveLength(2);
    expect(store.getState().model?.label).toContain('someone/my-model');
    expect(store.getState().runStatus?.config.model).toBe('someone/my-model');
    expect(store.getState().starting).toBe(false);
  });

  it('an import while the page starts: the imported run stays (no model load or first configure after it)', async () => {
    const { q, store } = harness('#batchSize=2&miniBatches=1&seed=9');
    const release = q.hold('init');
    const started = store.getState().actions.start();
    const imported = store
      .getState()
      .actions.importCheckpoint(checkpoint(3, { steps: 40, seed: 7, batchSize: 2, miniBatches: 1 }));
    await tick();
    expect(store.getState().ioTask).toBe('import');
    release();
    await Promise.all([started, imported]);
    const s = store.getState();
    expect(q.order.indexOf('importCheckpoint')).toBeGreaterThan(q.order.lastIndexOf('configure'));
    expect(s.runStatus).toMatchObject({ step: 3, state: 'paused' });
    expect(s.runStatus?.config.seed).toBe(7);
    expect(s.editedConfig.seed).toBe(7);
    expect(s.metrics).toHaveLength(3);
  });

  it('a setting edited while an import runs goes out after it, against the imported run, which stays', async () => {
    const { q, store } = harness();
    await store.getState().actions.start();
    const release = q.hold('importCheckpoint');
    const imported = store
      .getState()
      .actions.importCheckpoint(checkpoint(3, { steps: 40, seed: 7, batchSize: 2, miniBatches: 1 }));
    await tick();
    // A key that starts a new run: before the fix its configure, queued behind the import, dropped the imported run.
    store.getState().actions.setConfigValue('seed', 5);
    await tick();
    release();
    await imported;
    await store.getState().actions.flushConfig();
    const s = store.getState();
    expect(s.runStatus).toMatchObject({ step: 3, state: 'paused' });
    expect(s.runStatus?.config.seed).toBe(7);
    // The import replaced the config being edited (as it does without a race): the controls show the imported run's.
    expect(s.editedConfig.seed).toBe(7);
  });

  it('a setting edited while a reward model trains goes out after it and keeps its reward', async () => {
    const { q, store } = harness();
    await store.getState().actions.start();
    const release = q.hold('trainRewardModel');
    const trained = store.getState().actions.trainRewardModel('{"chosen":"a","rejected":"b"}\n');
    await tick();
    store.getState().actions.setConfigValue('seed', 5);
    await tick();
    release();
    await trained;
    await store.getState().actions.flushConfig();
    const inForce = store.getState().runStatus!.config;
    expect(inForce.reward).toEqual({ model: 'preference-reward-model' });
    expect(inForce.seed).toBe(5);
    expect(store.getState().editedConfig.reward).toEqual({ model: 'preference-reward-model' });
  });

  it('a resume clicked while the page starts is kept, with its config in the controls', async () => {
    const { fake, q, store } = harness('#batchSize=2&miniBatches=1&seed=9');
    const saved: RunStatus = {
      state: 'paused',
      phase: 'idle',
      step: 2,
      steps: 100,
      config: { ...validateConfig({ seed: 8, batchSize: 2, miniBatches: 1 }) },
    };
    // The resume as the real worker runs it: in its queue, restoring the run (here, the fake's import).
    const api = {
      resumeAutosave: async () => {
        await fake.importCheckpoint(checkpoint(2, saved.config as unknown as Record<string, unknown>));
        return saved;
      },
      history: () => fake.history(),
    } as unknown as ReliabilityWorker;
    const release = q.hold('init');
    const started = store.getState().actions.start();
    const resumed = resumeAutosaveIntoStore(api, store);
    await tick();
    release();
    await Promise.all([started, resumed]);
    await store.getState().actions.flushConfig();
    const s = store.getState();
    expect(s.runStatus).toMatchObject({ step: 2, state: 'paused' });
    expect(s.runStatus?.config.seed).toBe(8);
    expect(s.editedConfig.seed).toBe(8);
    expect(q.order.indexOf('importCheckpoint')).toBeGreaterThan(q.order.indexOf('loadModel'));
  });

  it('a linked comparison being re-run does not launch its next run over an imported finished run', async () => {
    const { q, store } = harness();
    await store.getState().actions.start();
    store.setState({ rerunQueue: [validateConfig({ seed: 3, steps: 4 })] });
    await store
      .getState()
      .actions.importCheckpoint(checkpoint(4, { steps: 4, seed: 7, batchSize: 2, miniBatches: 1 }));
    await tick();
    expect(store.getState().rerunQueue).toEqual([]);
    expect(q.order.slice(q.order.indexOf('importCheckpoint'))).toEqual(['importCheckpoint']);
    expect(store.getState().runStatus).toMatchObject({ step: 4, state: 'paused' });
  });

  it('start ends when the worker dies mid-start, or its event subscription fails', async () => {
    const a = harness();
    a.q.hold('init'); // never released: the worker is gone
    const started = a.store.getState().actions.start();
    expect(a.store.getState().starting).toBe(true);
    a.store.getState().actions.workerCrashed('The model worker stopped.');
    expect(a.store.getState().starting).toBe(false);
    void started;

    const b = harness();
    (b.fake as unknown as Record<string, Method>).subscribe = async () => {
      throw new Error('no events');
    };
    await b.store.getState().actions.start();
    expect(b.store.getState()).toMatchObject({
      starting: false,
      error: expect.stringContaining('no events'),
    });
    expect(b.store.getState().model).not.toBeNull();
  });
});
