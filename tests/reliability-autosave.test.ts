/**
 * Autosave (src/core/autosave.ts): when it saves, and that a new save replaces the older one only once it is
 * completely written — a full disk (QuotaExceededError), a failure half-way or NaN/Inf weights keep the older
 * save. The IndexedDB side and the reload are e2e/reliability-worker.spec.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import {
  AUTOSAVE_MAX_INTERVAL,
  AutosaveSlot,
  autosaveDue,
  autosaveInterval,
  isQuotaError,
  memoryAutosaveStore,
  type AutosaveStore,
} from '../src/core/autosave';
import { validateConfig } from '../src/core/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { isUserError } from '../src/core/errors';
import type { PpoTrainer } from '../src/core/ppo/trainer';
import type { StepMetrics } from '../src/core/ppo/metrics';

const bytes = (...xs: number[]) => new Uint8Array(xs);
const meta = (step: number, runId = 'run-a') => ({
  step,
  config: { model: 'tiny', steps: 100 },
  label: 'built-in tiny',
  runId,
  historyLength: step,
});
const filesOf = (step: number) =>
  new Map([
    ['model.safetensors', bytes(step, 1, 2, 3)],
    ['trainer_state.json', new TextEncoder().encode(JSON.stringify({ step }))],
  ]);

/** A store that fails `set` with `error` once more than `budget` bytes of Uint8Array were written. */
function limitedStore(
  budget: number,
  error: unknown,
): AutosaveStore & { map: Map<string, unknown>; full: boolean } {
  const map = new Map<string, unknown>();
  const used = () =>
    [...map.values()].reduce((n: number, v) => n + (v instanceof Uint8Array ? v.length : 0), 0);
  const s = {
    map,
    full: false,
    ...memoryAutosaveStore(map),
    async set(k: string, v: unknown) {
      const add = v instanceof Uint8Array ? v.length : 0;
      if (s.full || used() + add > budget) {
        s.full = true;
        throw error;
      }
      map.set(k, v);
    },
  };
  return s;
}

class FakeQuotaError extends Error {
  constructor() {
    super('The quota has been exceeded.');
    this.name = 'QuotaExceededError';
  }
}

describe('autosave schedule', () => {
  it('saves every min(saveEvery, 10) steps; saveEvery 0 = only on pause and at the end', () => {
    expect(AUTOSAVE_MAX_INTERVAL).toBe(10);
    expect(autosaveInterval(50)).toBe(10);
    expect(autosaveInterval(3)).toBe(3);
    expect(autosaveInterval(0)).toBe(0);
    const due = (saveEvery: number) => [1, 2, 3, 6, 10, 20, 25].filter((s) => autosaveDue(s, saveEvery));
    expect(due(50)).toEqual([10, 20]);
    expect(due(3)).toEqual([3, 6]);
    expect(due(1)).toEqual([1, 2, 3, 6, 10, 20, 25]);
    expect(due(0)).toEqual([]);
    expect(autosaveDue(0, 1)).toBe(false);
  });

  it('recognises quota errors however they are spelled', () => {
    expect(isQuotaError(new FakeQuotaError())).toBe(true);
    expect(isQuotaError({ name: 'NS_ERROR_DOM_QUOTA_REACHED' })).toBe(true);
    expect(isQuotaError({ code: 22 })).toBe(true);
    expect(isQuotaError(new Error('disk I/O'))).toBe(false);
    expect(isQuotaError(null)).toBe(false);
  });
});

describe('autosave slot', () => {
  it('a new save replaces the older one, whose entries are swept; load gives the files back', async () => {
    const map = new Map<string, unknown>();
    let now = 1000;
    const slot = new AutosaveSlot(memoryAutosaveStore(map), () => now);
    expect(await slot.info()).toBeNull();
    expect(await slot.load()).toBeNull();

    const a = await slot.save(meta(2), async () => filesOf(2));
    expect(a).toMatchObject({
      ok: true,
      info: { step: 2, savedAt: 1000, runId: 'run-a', bytes: expect.any(Number) },
    });
    now = 2000;
    const b = await slot.save(meta(4), async () => filesOf(4));
    expect(b.ok).toBe(true);
    expect(await slot.info()).toMatchObject({
      step: 4,
      savedAt: 2000,
      label: 'built-in tiny',
      historyLength: 4,
    });
    // Pointer + the two files of the step-4 save; nothing of step 2 is left.
    expect(map.size).toBe(3);
    const loaded = await slot.load();
    expect(loaded!.info.step).toBe(4);
    expect(loaded!.files.get('model.safetensors')).toEqual(bytes(4, 1, 2, 3));

    await slot.discard();
    expect(await slot.info()).toBeNull();
    expect(map.size).toBe(0);
  });

  it('storage full (QuotaExceededError): the older save is kept, the half-written one removed, and the message says so', async () => {
    const store = limitedStore(40, new FakeQuotaError());
    const slot = new AutosaveSlot(store);
    expect((await slot.save(meta(2), async () => filesOf(2))).ok).toBe(true);
    const keysBefore = [...store.map.keys()].sort();

    const big = new Map([...filesOf(3), ['optimizer.safetensors', new Uint8Array(64)]]);
    const r = await slot.save(meta(3), async () => big);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.reason).toBe('quota');
    expect(r.message).toMatch(/^Autosave failed at step 3: the browser's storage for this site is full/);
    expect(r.message).toMatch(/The previous autosave \(step 2\) is kept\./);
    expect(r.message).toMatch(/export a checkpoint/);
    expect(r.kept).toMatchObject({ step: 2 });
    expect([...store.map.keys()].sort()).toEqual(keysBefore);
    expect((await slot.load())!.files.get('model.safetensors')).toEqual(bytes(2, 1, 2, 3));
  });

  it('a failure while switching the pointer keeps the older save', async () => {
    const map = new Map<string, unknown>();
    const base = memoryAutosaveStore(map);
    let failPointer = false;
    const store: AutosaveStore = {
      ...base,
      set: async (k, v) => {
        if (failPointer && k === 'current') throw new Error('the tab was closing');
        return base.set(k, v);
      },
    };
    const slot = new AutosaveSlot(store);
    await slot.save(meta(5), async () => filesOf(5));
    failPointer = true;
    const r = await slot.save(meta(6), async () => filesOf(6));
    expect(r).toMatchObject({ ok: false, reason: 'failed', kept: { step: 5 } });
    expect(r.ok ? '' : r.message).toMatch(
      /storage refused it \(the tab was closing\)\. The previous autosave \(step 5\) is kept/,
    );
    expect((await slot.info())!.step).toBe(5);
    expect(map.size).toBe(3);
  });

  it('entries a crash left half-written are swept by the next good save', async () => {
    const map = new Map<string, unknown>([['save:crashed-7-1:model.safetensors', bytes(9)]]);
    const slot = new AutosaveSlot(memoryAutosaveStore(map));
    await slot.save(meta(8), async () => filesOf(8));
    expect([...map.keys()].some((k) => k.includes('crashed'))).toBe(false);
  });

  it('a save whose file went missing is discarded with a clear UserError', async () => {
    const map = new Map<string, unknown>();
    const slot = new AutosaveSlot(memoryAutosaveStore(map));
    await slot.save(meta(3), async () => filesOf(3));
    const key = [...map.keys()].find((k) => k.endsWith(':model.safetensors'))!;
    map.delete(key);
    const err = await slot.load().catch((e: unknown) => e);
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toMatch(
      /The autosave of step 3 is incomplete \(model\.safetensors is missing/,
    );
    expect(await slot.info()).toBeNull();
  });
});

describe('autosave of a real run (CPU, tiny model)', () => {
  let t: PpoTrainer;
  let res: Resources;
  beforeAll(async () => {
    await useCpu();
    const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
    res = { modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p), loadTask: loadTaskNode };
    const cfg = validateConfig({
      model: 'tiny-test',
      task: 'sentiment',
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
      saveEvery: 1,
    });
    t = await buildTrainer(cfg, res);
  });

  it('writing a checkpoint (every autosave) leaks no tensors', async () => {
    await checkpointFiles(t); // warm-up: first-use constants
    const before = tf.memory().numTensors;
    for (let i = 0; i < 3; i++) await checkpointFiles(t);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('restores at the saved step with the history; never saves NaN/Inf weights (the older save stays)', async () => {
    const slot = new AutosaveSlot(memoryAutosaveStore());
    // Two steps' worth of state without the cost of training: the step counter and its history.
    t.step = 2;
    t.history = [1, 2].map((step) => ({ step, reward: step / 10 }) as unknown as StepMetrics);
    const ok = await slot.save({ ...meta(2), config: { ...t.cfg } }, () => checkpointFiles(t));
    expect(ok.ok).toBe(true);

    const loaded = await slot.load();
    const back = await restoreTrainer(memoryFiles('autosave', loaded!.files), res);
    expect(back.step).toBe(2);
    expect(back.history.map((m) => m.step)).toEqual([1, 2]);
    back.dispose();

    const ln = t.models.policy.params.get('ln_f.bias')!;
    const saved = ln.clone();
    ln.assign(tf.fill(ln.shape, NaN));
    t.step = 3;
    const r = await slot.save({ ...meta(3), config: { ...t.cfg } }, () => checkpointFiles(t));
    ln.assign(saved);
    saved.dispose();
    expect(r).toMatchObject({ ok: false, reason: 'nonfinite', kept: { step: 2 } });
    expect(r.ok ? '' : r.message).toBe(
      'Autosave skipped at step 3: the weights hold NaN/Inf values. The previous autosave (step 2) is kept.',
    );
    expect((await slot.info())!.step).toBe(2);
  });
});
