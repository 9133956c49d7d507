/**
 * Issue #33, defect 4: an edit back to the previous value, made while the worker has not yet answered the first
 * edit, must not be overwritten by that answer (src/ui/store/config-sync.ts, mergeWorkerConfig + editsInFlight).
 */
import { describe, expect, it } from 'vitest';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';
import { mergeWorkerConfig } from '../src/ui/store/config-sync';
import { defaultConfig } from '../src/ui/lib/url-config';
import type { TrainConfigWire } from '../src/worker/protocol';

/**
 * The fake worker under load: while held, its events and the answers of `held` methods wait, in order, until
 * `release()` (as a busy worker's messages queue up behind the page's own work).
 */
function slowWorker(held: readonly string[]) {
  const fake = createFakeWorker();
  let release!: () => void;
  let gate: Promise<void> | null = null;
  const api = new Proxy(fake, {
    get(target, prop) {
      const v = (target as unknown as Record<string | symbol, unknown>)[prop];
      if (typeof v !== 'function') return v;
      const f = v.bind(target) as (...a: unknown[]) => Promise<unknown>;
      if (prop === 'subscribe') {
        return (cb: (e: unknown) => void) =>
          f((e: unknown) => {
            if (gate) void gate.then(() => cb(e));
            else cb(e);
          });
      }
      if (!held.includes(String(prop))) return f;
      return async (...args: unknown[]) => {
        const out = await f(...args);
        if (gate) await gate;
        return out;
      };
    },
  });
  return {
    fake,
    api: api as unknown as ModelWorker,
    hold: () => {
      gate = new Promise<void>((r) => (release = r));
    },
    release: () => {
      gate = null;
      release();
    },
  };
}

const configureCalls = (f: ReturnType<typeof createFakeWorker>, name: string) =>
  f.calls.filter(([n]) => n === name).map(([, a]) => a as Record<string, unknown>);

describe('edits in flight are not overwritten by the answer to an earlier edit', () => {
  it('before a run: A → B → A while configure(B) is unanswered ends at A, here and in the worker', async () => {
    const w = slowWorker(['configure']);
    const store = createPlaygroundStore(w.api, 'auto', { writeHash: () => {}, sendDelayMs: 0 });
    const a = store.getState().actions;
    await a.start();
    const original = store.getState().editedConfig.batchSize;
    w.hold();
    a.setConfigValue('batchSize', original * 2);
    await new Promise((r) => setTimeout(r, 0));
    a.setConfigValue('batchSize', original);
    expect(store.getState().editsInFlight).toContain('batchSize');
    w.release();
    await a.flushConfig();
    expect(store.getState().editedConfig.batchSize).toBe(original);
    expect(store.getState().runStatus?.config.batchSize).toBe(original);
    expect(configureCalls(w.fake, 'configure').at(-1)?.batchSize).toBe(original);
    expect(store.getState().editsInFlight).toEqual([]);
  });

  it('during a run: a live key A → B → A while setHyperparameters(B) is unanswered ends at A', async () => {
    const w = slowWorker(['setHyperparameters']);
    const store = createPlaygroundStore(w.api, 'auto', {
      hash: '#batchSize=2&miniBatches=1',
      writeHash: () => {},
      sendDelayMs: 0,
    });
    const a = store.getState().actions;
    await a.start();
    await a.stepRun();
    w.hold();
    a.setConfigValue('klCoef', 0.4);
    await new Promise((r) => setTimeout(r, 0));
    a.setConfigValue('klCoef', 0.05);
    expect(store.getState().editsInFlight).toContain('klCoef');
    // The edit shown from here on: the answer to B lands before A is sent (and answered), so the end state alone
    // would be A whether or not B's answer overwrote the edit in between.
    const shown: number[] = [];
    const unsubscribe = store.subscribe((s) => void shown.push(s.editedConfig.klCoef));
    w.release();
    await a.flushConfig();
    unsubscribe();
    expect(shown.length).toBeGreaterThan(0);
    expect(shown.filter((k) => k !== 0.05)).toEqual([]);
    expect(store.getState().editedConfig.klCoef).toBe(0.05);
    expect(store.getState().runStatus?.config.klCoef).toBe(0.05);
  });

  it('mergeWorkerConfig: a key in flight keeps the edit; others take the worker’s change', () => {
    const edited = defaultConfig();
    const before = { ...edited } as unknown as TrainConfigWire;
    const after = { ...before, batchSize: 32, seed: 99 } as TrainConfigWire;
    const merged = mergeWorkerConfig(edited, before, after, ['batchSize']);
    expect(merged.batchSize).toBe(edited.batchSize);
    expect(merged.seed).toBe(99);
  });
});

describe('a live change is marked for the charts at the first step that uses it', () => {
  it('klCoef 0.05 → 0.4 after step 1 is a mark at step 2; Reset drops the marks', async () => {
    const fake = createFakeWorker();
    const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
      hash: '#batchSize=2&miniBatches=1',
      writeHash: () => {},
      sendDelayMs: 0,
    });
    const a = store.getState().actions;
    await a.start();
    await a.stepRun();
    expect(store.getState().changeMarks).toEqual([]);
    a.setConfigValue('klCoef', 0.4);
    await a.flushConfig();
    expect(store.getState().changeMarks).toEqual([{ step: 2, text: 'klCoef 0.05 → 0.4' }]);
    await a.resetRun();
    expect(store.getState().changeMarks).toEqual([]);
  });

  it('the answer (a number) may come before its status event: the change waits for that event', async () => {
    // Events on their own channel, later than the answers (comlink's callback port is not the call's port).
    const fake = createFakeWorker();
    const api = new Proxy(fake, {
      get(target, prop) {
        const v = (target as unknown as Record<string | symbol, unknown>)[prop];
        if (prop !== 'subscribe' || typeof v !== 'function')
          return typeof v === 'function' ? v.bind(target) : v;
        return (cb: (e: unknown) => void) => fake.subscribe((e) => void setTimeout(() => cb(e), 20));
      },
    });
    const store = createPlaygroundStore(api as unknown as ModelWorker, 'auto', {
      hash: '#batchSize=2&miniBatches=1',
      writeHash: () => {},
      sendDelayMs: 0,
    });
    const a = store.getState().actions;
    await a.start();
    await a.stepRun();
    await new Promise((r) => setTimeout(r, 50));
    a.setConfigValue('klCoef', 0.4);
    await a.flushConfig();
    expect(store.getState().runStatus?.config.klCoef).toBe(0.4);
    expect(store.getState().editsInFlight).toEqual([]);
    expect(store.getState().changeMarks).toEqual([{ step: 2, text: 'klCoef 0.05 → 0.4' }]);
  });
});
