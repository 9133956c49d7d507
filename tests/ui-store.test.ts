/**
 * The store against the fake worker (src/ui/dev/fake-worker.ts): the same WorkerApi as the real one, stepped by
 * hand. Config in the URL hash, live vs next-run settings, the event stream into metrics / samples / alerts,
 * exports and imports.
 */
import { describe, expect, it } from 'vitest';
import type { ModelWorker } from '../src/ui/bridge';
import type { TrainerEvent } from '../src/worker/protocol';
import { createFakeWorker, type FakeWorker } from '../src/ui/dev/fake-worker';
import { readConfigHash } from '../src/ui/lib/url-config';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { SAMPLE_STEPS_KEPT } from '../src/ui/store/training-slice';
import { pendingKeys, runStarted } from '../src/ui/store/config-sync';

interface Harness {
  fake: FakeWorker;
  store: PlaygroundStore;
  hashes: string[];
  downloads: { name: string; data: Uint8Array | string; type: string }[];
}

async function started(hash = '', opts: { start?: boolean } = {}): Promise<Harness> {
  const fake = createFakeWorker();
  const hashes: string[] = [];
  const downloads: Harness['downloads'] = [];
  const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: (h) => hashes.push(h),
    download: (name, data, type) => downloads.push({ name, data, type }),
    sendDelayMs: 0,
  });
  if (opts.start !== false) await store.getState().actions.start();
  return { fake, store, hashes, downloads };
}

const calls = (f: FakeWorker, name: string) => f.calls.filter(([n]) => n === name).map(([, a]) => a);
const flush = () => new Promise((r) => setTimeout(r, 0));

describe('config in the URL hash', () => {
  it('reads the hash, and a change writes one that reads back to the same config', async () => {
    const h = await started('#batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=1000&seed=7');
    const s = h.store.getState();
    expect(s.error).toBeNull();
    expect(s.editedConfig).toMatchObject({
      batchSize: 2,
      miniBatches: 1,
      responseLength: 4,
      steps: 1000,
      seed: 7,
    });
    s.actions.setConfigValue('klCoef', 0.2);
    const hash = h.hashes[h.hashes.length - 1];
    expect(hash).toContain('klCoef=0.2');
    expect(hash).toContain('seed=7');
    expect(readConfigHash(hash)).toEqual({ config: h.store.getState().editedConfig, error: null });
    // The worker got the same config (every key, nulls for the optional ones left out).
    await s.actions.flushConfig();
    const sent = calls(h.fake, 'configure').at(-1) as Record<string, unknown>;
    expect(sent).toMatchObject({ batchSize: 2, klCoef: 0.2, seed: 7, reward: null, prompts: null });
  });

  it('a tampered hash is a clear error and the defaults are used', async () => {
    for (const [hash, words] of [
      ['#klCoef=banana', '"klCoef" must be a number from 0 to 10'],
      ['#batchSize=99999', '"batchSize" must be an integer from 1 to 4096'],
      ['#learningrate=0.1', 'Did you mean "learningRate"'],
      ['#klCoef=%E0%A4%A', 'broken %-escape'],
    ]) {
      const h = await started(hash, { start: false });
      const s = h.store.getState();
      expect(s.error).toContain('could not be used, so the defaults are loaded instead');
      expect(s.error).toContain(words);
      expect(s.editedConfig.klCoef).toBe(0.05);
      expect(s.editedConfig.batchSize).toBe(16);
    }
  });

  it('an edit that breaks a rule between keys is shown, and not sent', async () => {
    const h = await started('#batchSize=4&miniBatches=2');
    const before = calls(h.fake, 'configure').length;
    h.store.getState().actions.setConfigValue('batchSize', 3);
    expect(h.store.getState().configProblem).toContain('must be divisible by "miniBatches"');
    expect(calls(h.fake, 'configure').length).toBe(before);
  });

  it('a pasted link (hashchange) replaces the config, in one configure', async () => {
    const h = await started();
    const before = calls(h.fake, 'configure').length;
    h.store.getState().actions.hashChanged('#klCoef=0.3&task=length');
    expect(h.store.getState().editedConfig).toMatchObject({ klCoef: 0.3, task: 'length' });
    await h.store.getState().actions.flushConfig();
    expect(h.store.getState().runStatus?.config).toMatchObject({ klCoef: 0.3, task: 'length' });
    expect(calls(h.fake, 'configure').length).toBe(before + 1);
  });
});

describe('the run', () => {
  it('start: backend, subscription, model, config — in that order', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    expect(h.fake.calls.map(([n]) => n).slice(0, 4)).toEqual(['init', 'subscribe', 'loadModel', 'configure']);
    const s = h.store.getState();
    expect(s.model?.label).toBe('built-in tiny');
    expect(s.runStatus).toMatchObject({ state: 'idle', step: 0 });
    expect(s.runStatus?.config.batchSize).toBe(2);
  });

  it('starting: true from start until its first configure answered, so a restore cannot be dropped by them', async () => {
    const h = await started('#batchSize=2&miniBatches=1', { start: false });
    expect(h.store.getState().starting).toBe(false);
    // What the store holds at each of start's calls to the worker.
    const seen: [string, boolean][] = [];
    for (const name of ['init', 'loadModel', 'configure'] as const) {
      const f = h.fake[name] as (...a: unknown[]) => Promise<unknown>;
      (h.fake as unknown as Record<string, unknown>)[name] = async (...a: unknown[]) => {
        const out = await f(...a);
        seen.push([name, h.store.getState().starting]);
        return out;
      };
    }
    const done = h.store.getState().actions.start();
    expect(h.store.getState().starting).toBe(true);
    await done;
    expect(seen).toEqual([
      ['init', true],
      ['loadModel', true],
      ['configure', true],
    ]);
    expect(h.store.getState().starting).toBe(false);
    expect(h.store.getState().runStatus?.config.batchSize).toBe(2);
  });

  it('starting ends when the backend or the model fails to start, too', async () => {
    const h = await started('', { start: false });
    h.fake.loadModel = async () => {
      throw new Error('no such model');
    };
    await h.store.getState().actions.start();
    expect(h.store.getState()).toMatchObject({ starting: false, modelLoadState: 'error' });
    const g = await started('', { start: false });
    g.fake.init = async () => {
      throw new Error('no backend');
    };
    await g.store.getState().actions.start();
    expect(g.store.getState()).toMatchObject({ starting: false, backendLoadState: 'error' });
  });

  it('step events fill metrics, samples and alerts; Step N follows', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    const a = h.store.getState().actions;
    await a.stepRun();
    for (let i = 0; i < 7; i++) await h.fake.tick();
    const s = h.store.getState();
    expect(s.metrics.map((m) => m.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(s.runStatus?.step).toBe(8);
    expect(s.samples.at(-1)?.step).toBe(8);
    expect(s.samples.at(-1)?.samples.length).toBe(2);
    expect(s.alerts.map((x) => x.id)).toEqual(['entropy-low']);
    a.dismissAlert('entropy-low');
    for (let i = 0; i < 7; i++) await h.fake.tick();
    expect(h.store.getState().alerts).toEqual([]);
  });

  it("each step's event carries the worker's tensor memory into the store, without asking for it", async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    await h.store.getState().actions.stepRun();
    await flush();
    const asked = calls(h.fake, 'memory').length;
    for (let i = 0; i < 4; i++) {
      await h.fake.tick();
      expect(h.store.getState().memory).toEqual({
        numTensors: 42 + 2 + i,
        numBytes: 1024 * 1024,
        backend: 'wasm',
        peakBytes: 3 * 1024 * 1024, // the step's peak comes with its event
      });
    }
    await flush();
    expect(calls(h.fake, 'memory').length).toBe(asked);
  });

  it('keeps every metric but only the last 50 steps of samples', async () => {
    const h = await started('#batchSize=1&miniBatches=1&steps=100000');
    for (let i = 0; i < 120; i++) await h.fake.tick();
    const s = h.store.getState();
    expect(s.metrics.length).toBe(120);
    expect(s.samples.length).toBe(SAMPLE_STEPS_KEPT);
    expect(s.samples[0].step).toBe(71);
  });

  it('a live key reaches the running job and shows in the next step’s metrics', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    const a = h.store.getState().actions;
    await a.stepRun();
    expect(h.store.getState().metrics.at(-1)?.klCoef).toBe(0.05);
    a.setConfigValue('klCoef', 0.4);
    await a.flushConfig();
    expect(calls(h.fake, 'setHyperparameters')).toEqual([{ klCoef: 0.4 }]);
    await a.stepRun();
    expect(h.store.getState().metrics.at(-1)?.klCoef).toBe(0.4);
  });

  it('a pasted link that changes two live keys of a running job sends them as one patch', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    const a = h.store.getState().actions;
    await a.stepRun();
    a.hashChanged('#batchSize=2&miniBatches=1&klCoef=0.3&learningRate=0.0003&seed=9');
    await a.flushConfig();
    // seed is not live: it waits for Reset.
    expect(calls(h.fake, 'setHyperparameters')).toEqual([{ klCoef: 0.3, learningRate: 0.0003 }]);
    expect(h.store.getState().runStatus?.config).toMatchObject({ klCoef: 0.3, learningRate: 0.0003 });
  });

  it('a crashed worker: its last status stays, shown stopped, and nothing waits for it', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    const a = h.store.getState().actions;
    await a.stepRun();
    await a.startRun();
    const before = h.store.getState().runStatus;
    expect(before?.state).toBe('running');
    a.workerCrashed('The model worker stopped.');
    const s = h.store.getState();
    expect(s.error).toBe('The model worker stopped.');
    expect(s.backendLoadState).toBe('error');
    expect(s.modelLoadState).toBe('error');
    expect(s.command).toBeNull();
    expect(s.runStatus).toEqual({ ...before, state: 'paused', phase: 'idle' });
  });

  it('a non-live key waits for Reset ("applies on reset"), which configures and drops the history', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    const a = h.store.getState().actions;
    await a.stepRun();
    const configures = calls(h.fake, 'configure').length;
    a.setConfigValue('batchSize', 4);
    await a.flushConfig();
    expect(calls(h.fake, 'configure').length).toBe(configures);
    expect(calls(h.fake, 'setHyperparameters')).toEqual([]);
    let s = h.store.getState();
    expect(runStarted(s.runStatus)).toBe(true);
    expect(pendingKeys(s.editedConfig, s.runStatus?.config)).toEqual(['batchSize']);
    await a.resetRun();
    s = h.store.getState();
    expect(s.runStatus).toMatchObject({ state: 'idle', step: 0 });
    expect(s.runStatus?.config.batchSize).toBe(4);
    expect(s.metrics).toEqual([]);
    expect(s.samples).toEqual([]);
    expect(pendingKeys(s.editedConfig, s.runStatus?.config)).toEqual([]);
  });

  it('pause stops; a failing step (reward code in a loop) is a plain error and the run pauses', async () => {
    const h = await started('#batchSize=2&miniBatches=1');
    const a = h.store.getState().actions;
    await a.startRun();
    expect(h.store.getState().runStatus?.state).toBe('running');
    await a.pauseRun();
    expect(h.store.getState().runStatus?.state).toBe('paused');
    a.editRewardCode('while (true) {}');
    await a.applyRewardCode();
    expect(h.store.getState().rewardCodeInUse).toBe(true);
    await a.stepRun().catch(() => undefined);
    await flush();
    const s = h.store.getState();
    expect(s.error).toContain('time limit');
    expect(s.error).not.toContain('Something went wrong');
    expect(s.runStatus?.state).toBe('paused');
  });

  it('a syntax error in reward code is shown and the code is not marked in use', async () => {
    const h = await started();
    const a = h.store.getState().actions;
    a.editRewardCode('return (');
    await a.applyRewardCode();
    expect(h.store.getState().error).toContain('syntax error');
    expect(h.store.getState().rewardCodeInUse).toBe(false);
  });
});

describe('models, rewards and files', () => {
  it('generates with the Generate panel settings, and shows the reply with its prompt', async () => {
    const h = await started();
    const a = h.store.getState().actions;
    a.setGenerateParam('prompt', 'Hello');
    a.setGenerateParam('maxNewTokens', 3);
    await a.generate();
    const s = h.store.getState();
    expect(s.error).toBeNull();
    expect(s.generating).toBe(false);
    expect(s.output?.prompt).toBe('Hello');
    expect(s.output?.reply.promptTokens).toBe('Hello'.length);
  });

  it('settings the worker changes itself (a trained reward model) reach the controls; the link leaves it out', async () => {
    const h = await started('#klCoef=0.1');
    await h.store.getState().actions.trainRewardModel('{"prompt":"a","chosen":"b","rejected":"c"}\n');
    const s = h.store.getState();
    expect(s.rewardModel?.heldOutAccuracy).toBe(0.75);
    expect(s.editedConfig.reward).toEqual({ model: 'preference-reward-model' });
    expect(h.hashes.at(-1)).toBe('klCoef=0.1');
  });

  it('loading a Hub model makes it config `model` (and the link)', async () => {
    const h = await started();
    await h.store.getState().actions.loadModel({ kind: 'hub', repo: 'distilbert/distilgpt2' });
    expect(h.store.getState().editedConfig.model).toBe('distilbert/distilgpt2');
    // An 82 M-parameter model also gets LoRA preselected (tests/ui-lora-estimate.test.tsx), which the link keeps.
    expect(h.hashes.at(-1)).toBe('model=distilbert%2Fdistilgpt2&lora=8&learningRate=0.0003');
  });

  it('exports a checkpoint zip and metrics; importing restores the history and the step', async () => {
    const h = await started('#batchSize=2&miniBatches=1&klCoef=0.2');
    const a = h.store.getState().actions;
    for (let i = 0; i < 3; i++) await a.stepRun();
    await a.exportCheckpoint();
    await a.exportMetrics('csv');
    await a.exportMetrics('json');
    await a.exportTrlConfig();
    expect(h.downloads.map((d) => [d.name, d.type])).toEqual([
      ['checkpoint-3.zip', 'application/zip'],
      ['ppo-metrics-step-3.csv', 'text/csv'],
      ['ppo-metrics-step-3.json', 'application/json'],
      ['trl-ppo-config.json', 'application/json'],
    ]);
    const zip = h.downloads[0].data as Uint8Array;

    a.setConfigValue('klCoef', 0.05);
    await a.resetRun();
    expect(h.store.getState().metrics).toEqual([]);
    await a.importCheckpoint(zip);
    const s = h.store.getState();
    expect(s.error).toBeNull();
    expect(s.runStatus?.step).toBe(3);
    expect(s.metrics.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(s.editedConfig.klCoef).toBe(0.2);
    expect(h.hashes.at(-1)).toContain('klCoef=0.2');
    await a.stepRun();
    expect(h.store.getState().metrics.map((m) => m.step)).toEqual([1, 2, 3, 4]);
  });

  it("an import's step and config in force are the worker's word: the UI makes up no status of its own", async () => {
    // The worker's events and its answers travel on different comlink ports, so the status event of an import
    // can come after the import's answer. Until it comes, the run is what the worker last said.
    const fake = createFakeWorker();
    let held: TrainerEvent[] | null = null;
    let toStore: (e: TrainerEvent) => void = () => {};
    const api = {
      ...fake,
      subscribe(cb: (e: TrainerEvent) => void) {
        toStore = cb;
        return fake.subscribe((e) => (held ? held.push(e) : cb(e)));
      },
    };
    let zip: Uint8Array | null = null;
    const store = createPlaygroundStore(api as unknown as ModelWorker, 'auto', {
      hash: '#batchSize=2&miniBatches=1&klCoef=0.2',
      writeHash: () => {},
      download: (_name, data) => {
        zip = data as Uint8Array;
      },
      sendDelayMs: 0,
    });
    const a = store.getState().actions;
    await a.start();
    for (let i = 0; i < 3; i++) await a.stepRun();
    await a.exportCheckpoint();
    a.setConfigValue('klCoef', 0.05);
    await a.resetRun();

    held = [];
    await a.importCheckpoint(zip!);
    let s = store.getState();
    expect(s.error).toBeNull();
    expect(s.editedConfig.klCoef).toBe(0.2);
    expect(s.metrics.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(s.runStatus).toMatchObject({ step: 0, config: { klCoef: 0.05 } });

    const late: TrainerEvent[] = held;
    held = null;
    expect(late.map((e) => e.type)).toContain('status');
    for (const e of late) toStore(e);
    s = store.getState();
    expect(s.runStatus).toMatchObject({ state: 'paused', step: 3, config: { klCoef: 0.2 } });
    expect(pendingKeys(s.editedConfig, s.runStatus?.config)).toEqual([]);
    expect(s.metrics.map((m) => m.step)).toEqual([1, 2, 3]);
  });

  it('a file that is not a checkpoint is a plain error and keeps the run', async () => {
    const h = await started();
    await h.store.getState().actions.stepRun();
    await h.store.getState().actions.importCheckpoint(new Uint8Array([1, 2, 3]));
    const s = h.store.getState();
    expect(s.error).toBe('This file is not a checkpoint zip.');
    expect(s.metrics.length).toBe(1);
  });
});
