/**
 * Autosave (src/services/autosave.ts): when it saves, and that a new save replaces the older one only once it is
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
} from '../src/services/autosave';
import { TabAutosave, type LockManagerLike } from '../src/services/autosave-tabs';
import { validateConfig } from '../src/common/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { isUserError } from '../src/common/errors';
import type { FileBody } from '../src/core/model/safetensors';
import type { PpoTrainer } from '../src/core/ppo/trainer';
import type { StepMetrics } from '../src/common/metrics';
import { disposeTrainer } from '../src/bench/perf/memory';

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

  it('a file above the largest value the browser stores goes in parts, each its own copy; load joins them', async () => {
    // Chromium refuses an IndexedDB value above ~127 MB ("The serialized keys and/or value are too large"): a store
    // that refuses values above 100 bytes, and a slot writing parts of at most 100.
    const map = new Map<string, unknown>();
    const base = memoryAutosaveStore(map);
    const tooLarge = (v: unknown) =>
      v instanceof Uint8Array && (v.length > 100 || v.buffer.byteLength > 100)
        ? new Error('The serialized keys and/or value are too large (size=250 bytes, max=100 bytes).')
        : null;
    const store: AutosaveStore = {
      ...base,
      set: async (k, v) => {
        const e = tooLarge(v);
        if (e) throw e;
        return base.set(k, v);
      },
    };
    const big = Uint8Array.from({ length: 250 }, (_, i) => (i * 7) % 251);
    const files = new Map([...filesOf(3), ['model.safetensors', big]]);
    // Whole, the save fails in words (the browser's own, without a doubled full stop), and nothing is left.
    const whole = await new AutosaveSlot(store).save(meta(3), async () => files);
    expect(whole.ok).toBe(false);
    expect(whole.ok ? '' : whole.message).toMatch(
      /storage refused it \(The serialized keys and\/or value are too large \(size=250 bytes, max=100 bytes\)\)\. There is no/,
    );
    expect(map.size).toBe(0);
    // In parts of 100: three entries for the big file, one for the small one, and the pointer.
    const slot = new AutosaveSlot(store, () => 1, undefined, 100);
    const r = await slot.save(meta(3), async () => files);
    expect(r.ok).toBe(true);
    const keys = [...map.keys()];
    expect(keys.filter((k) => /model\.safetensors#\d$/.test(k))).toHaveLength(3);
    expect(keys.filter((k) => k.endsWith(':trainer_state.json'))).toHaveLength(1);
    expect(map.size).toBe(5);
    const loaded = await slot.load();
    expect(loaded!.files.get('model.safetensors')).toEqual(big);
    expect(loaded!.files.get('trainer_state.json')).toEqual(files.get('trainer_state.json'));
    // Restoring holds the file and one part, not the file twice: each part is copied into the file before the next
    // is read. A store that, like IndexedDB, hands out a copy of each value and scribbles over the copy it handed
    // out before as soon as the next is asked for: the file still comes back whole. (Collecting every part first
    // and joining them after gives scribbles here.)
    let handedOut: Uint8Array | null = null;
    const copying = new AutosaveSlot(
      {
        ...store,
        get: async (k) => {
          handedOut?.fill(0xee);
          const v = await base.get(k);
          handedOut = v instanceof Uint8Array ? v.slice() : null;
          return handedOut ?? v;
        },
      },
      () => 1,
      undefined,
      100,
    );
    expect((await copying.load())!.files.get('model.safetensors')).toEqual(big);
    // A save written before file sizes were kept: its parts are joined after they are all read.
    const pointerKey = keys.find((k) => (map.get(k) as { format?: unknown })?.format !== undefined)!;
    const pointer = map.get(pointerKey) as { sizes?: unknown };
    map.set(pointerKey, { ...pointer, sizes: undefined });
    expect((await slot.load())!.files.get('model.safetensors')).toEqual(big);
    map.set(pointerKey, pointer);
    // A part cut short is refused as a missing one is (nothing half-read is handed on).
    const lastKey = keys.find((k) => k.endsWith('model.safetensors#2'))!;
    const last = map.get(lastKey) as Uint8Array;
    map.set(lastKey, last.subarray(0, 10));
    await expect(slot.load()).rejects.toThrow(
      /model\.safetensors is missing from the browser's storage or cut short/,
    );
    expect(map.size).toBe(0);
    await slot.save(meta(3), async () => files);
    // A part gone missing: the save is discarded with the clear error, as a missing file is.
    map.delete([...map.keys()].find((k) => k.endsWith('#1'))!);
    await expect(slot.load()).rejects.toThrow(/model\.safetensors is missing/);
    expect(map.size).toBe(0);
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

  it('a frozen file is written once per run: later saves of the run share its entries, another run writes its own', async () => {
    const map = new Map<string, unknown>();
    const base = memoryAutosaveStore(map);
    const sets: string[] = [];
    let failPointer = false;
    const store: AutosaveStore = {
      ...base,
      set: async (k, v) => {
        if (failPointer && k === 'current') throw new Error('the tab was closing');
        sets.push(k);
        return base.set(k, v);
      },
    };
    const slot = new AutosaveSlot(store, () => 1, undefined, 100);
    const ref = Uint8Array.from({ length: 250 }, (_, i) => (i * 3) % 256);
    const frozen = ['ref_model.safetensors', 'reward_model.safetensors'];
    const asked: string[][] = [];
    const make = (step: number) => async (shared: ReadonlySet<string>) => {
      asked.push([...shared]);
      const f = new Map([...filesOf(step), ['ref_model.safetensors', ref]]);
      for (const n of shared) f.delete(n);
      return f;
    };
    const refKeys = () => [...map.keys()].filter((k) => k.includes(':ref_model.safetensors')).sort();
    const total =
      250 + filesOf(2).get('model.safetensors')!.length + filesOf(2).get('trainer_state.json')!.length;

    expect(await slot.save(meta(2), make(2), null, frozen)).toMatchObject({
      ok: true,
      info: { bytes: total },
    });
    expect(asked.at(-1)).toEqual([]);
    const first = refKeys();
    expect(first).toHaveLength(3); // in parts of 100
    sets.length = 0;
    // The same run: the file is not made, not written, and its entries stay; the rest of step 2 is swept.
    expect(await slot.save(meta(4), make(4), null, frozen)).toMatchObject({
      ok: true,
      info: { bytes: total },
    });
    expect(asked.at(-1)).toEqual(['ref_model.safetensors']);
    expect(sets.filter((k) => k.includes('ref_model'))).toEqual([]);
    expect(refKeys()).toEqual(first);
    expect(map.size).toBe(1 + 2 + 3); // pointer, step 4's two files, the shared three parts
    let loaded = await slot.load();
    expect(loaded!.files.get('ref_model.safetensors')).toEqual(ref);
    expect(loaded!.files.get('model.safetensors')).toEqual(bytes(4, 1, 2, 3));
    // A save that fails while switching the pointer keeps the older save and the entries it shares.
    failPointer = true;
    expect(await slot.save(meta(5), make(5), null, frozen)).toMatchObject({ ok: false, kept: { step: 4 } });
    failPointer = false;
    expect(refKeys()).toEqual(first);
    expect(map.size).toBe(6);
    // And the next one still shares them (the save that wrote them is two saves back by now).
    expect((await slot.save(meta(6), make(6), null, frozen)).ok).toBe(true);
    expect(refKeys()).toEqual(first);
    expect(await slot.isTidy([...map.keys()].filter((k) => k.startsWith('save:')))).toBe(true);
    loaded = await slot.load();
    expect(loaded!.files.get('ref_model.safetensors')).toEqual(ref);
    expect(loaded!.files.get('model.safetensors')).toEqual(bytes(6, 1, 2, 3));
    // Another run in the same slot writes its own copy; the older run's is swept.
    expect((await slot.save(meta(1, 'run-b'), make(1), null, frozen)).ok).toBe(true);
    expect(asked.at(-1)).toEqual([]);
    expect(refKeys()).toHaveLength(3);
    expect(refKeys().some((k) => first.includes(k))).toBe(false);
    expect(map.size).toBe(6);
    // A save written before sizes were kept lends nothing (its file sizes are unknown).
    const pointer = map.get('current') as Record<string, unknown>;
    map.set('current', { ...pointer, sizes: undefined });
    expect((await slot.save(meta(2, 'run-b'), make(2), null, frozen)).ok).toBe(true);
    expect(asked.at(-1)).toEqual([]);
    await slot.discard();
    expect(map.size).toBe(0);
  });

  it('a file given as a ByteSource is streamed into parts, each its own copy; a wrong length fails the save in words', async () => {
    const map = new Map<string, unknown>();
    const stored: Uint8Array[] = [];
    const base = memoryAutosaveStore(map);
    const store: AutosaveStore = {
      ...base,
      set: async (k, v) => {
        if (v instanceof Uint8Array) stored.push(v);
        return base.set(k, v);
      },
    };
    const slot = new AutosaveSlot(store, () => 1, undefined, 100);
    const big = Uint8Array.from({ length: 250 }, (_, i) => (i * 7) % 251);
    /** `big` in chunks of 7 bytes (crossing the parts' edges), announcing `announced` bytes. */
    const source = (announced: number, data = big) => ({
      byteLength: announced,
      async *chunks() {
        for (let i = 0; i < data.length; i += 7) yield data.subarray(i, i + 7);
      },
    });
    expect(
      (
        await slot.save(
          meta(3),
          async () => new Map<string, FileBody>([...filesOf(3), ['model.safetensors', source(250)]]),
        )
      ).ok,
    ).toBe(true);
    expect([...map.keys()].filter((k) => /model\.safetensors#\d$/.test(k))).toHaveLength(3);
    for (const v of stored) expect(v.buffer.byteLength).toBeLessThanOrEqual(100);
    expect((await slot.load())!.files.get('model.safetensors')).toEqual(big);
    const keys = [...map.keys()].sort();
    for (const [announced, words] of [
      [251, 'fewer than the 251 bytes announced'],
      [249, 'more than the 249 bytes announced'],
    ] as const) {
      const r = await slot.save(
        meta(4),
        async () => new Map<string, FileBody>([...filesOf(4), ['model.safetensors', source(announced)]]),
      );
      expect(r).toMatchObject({ ok: false, reason: 'failed', kept: { step: 3 } });
      expect(r.ok ? '' : r.message).toContain(`model.safetensors: ${words}`);
      expect([...map.keys()].sort()).toEqual(keys);
    }
    // An empty file is one empty entry.
    expect(
      (await slot.save(meta(5), async () => new Map([['empty.bin', source(0, new Uint8Array(0))]]))).ok,
    ).toBe(true);
    expect((await slot.load())!.files.get('empty.bin')).toEqual(new Uint8Array(0));
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

/**
 * Web Locks for several tabs in one test: `tab()` is one tab's navigator.locks (the part autosave uses);
 * `close()` drops that tab's locks, as the browser does when a tab closes or crashes.
 */
function fakeLocks() {
  const held = new Map<string, { tab: number; release: () => void }>();
  let tabs = 0;
  const tab = () => {
    const me = ++tabs;
    const locks: LockManagerLike = {
      async request(name, options, callback) {
        if (held.has(name)) {
          if (options.ifAvailable) return callback(null);
          throw new Error('fake locks: waiting for a lock is not modelled');
        }
        let release!: () => void;
        const released = new Promise<void>((r) => (release = r));
        held.set(name, { tab: me, release });
        try {
          return await Promise.race([Promise.resolve(callback({ name })), released]);
        } finally {
          if (held.get(name)?.tab === me) held.delete(name);
        }
      },
      async query() {
        return { held: [...held.keys()].map((name) => ({ name })) };
      },
    };
    const close = () => {
      for (const [name, h] of held) {
        if (h.tab !== me) continue;
        held.delete(name);
        h.release();
      }
    };
    return { locks, close };
  };
  return { held, tab };
}

describe('autosave with several tabs (one slot per tab, Web Locks)', () => {
  let clock = 1000;
  const now = () => ++clock;
  const setup = () => {
    const map = new Map<string, unknown>();
    const store = memoryAutosaveStore(map);
    const locks = fakeLocks();
    let n = 0;
    /** A tab: its autosave and a way to close it. */
    const open = () => {
      const t = locks.tab();
      const autosave = new TabAutosave(store, t.locks, now, () => `tab-${++n}`, 0);
      return { autosave, close: t.close };
    };
    return { map, store, locks, open };
  };
  const save = (tab: TabAutosave, step: number, runId: string) =>
    tab.save(meta(step, runId), async () => filesOf(step));
  const stepOf = async (p: Promise<{ files: Map<string, Uint8Array> } | null>) => {
    const loaded = await p;
    return loaded ? loaded.files.get('model.safetensors')![0] : null;
  };

  it('two tabs training at once keep both saves; a tab still open is never offered or overwritten', async () => {
    const { map, open } = setup();
    const a = open();
    const b = open();
    expect((await save(a.autosave, 2, 'run-a')).ok).toBe(true);
    expect((await save(b.autosave, 3, 'run-b')).ok).toBe(true);
    expect((await save(a.autosave, 4, 'run-a')).ok).toBe(true);
    expect((await save(b.autosave, 5, 'run-b')).ok).toBe(true);
    expect(await a.autosave.info()).toMatchObject({ runId: 'run-a', step: 4 });
    expect(await b.autosave.info()).toMatchObject({ runId: 'run-b', step: 5 });
    expect(await stepOf(a.autosave.load())).toBe(4);
    expect(await stepOf(b.autosave.load())).toBe(5);
    // Two pointers, two files each: nothing of either tab was swept by the other.
    expect(map.size).toBe(6);

    // A third tab: both saves belong to open tabs, so there is nothing to offer, and resume says why.
    const c = open();
    expect(await c.autosave.info()).toBeNull();
    const err = await c.autosave.resume().catch((e: unknown) => e);
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toBe(
      'The autosaved runs in this browser belong to another tab of this app that is still open (each tab ' +
        'autosaves its own run). Continue it there, or close that tab and resume it here.',
    );
    // Its own run's saves do not touch theirs either.
    expect((await save(c.autosave, 1, 'run-c')).ok).toBe(true);
    expect(await stepOf(a.autosave.load())).toBe(4);
    expect(await stepOf(b.autosave.load())).toBe(5);
  });

  it('a closed tab’s save is offered in a new tab; resuming takes it (one tab only) and the first save replaces it', async () => {
    const { map, open } = setup();
    const a = open();
    const b = open();
    await save(a.autosave, 4, 'run-a');
    await save(b.autosave, 5, 'run-b');
    a.close(); // reload or crash

    const c = open();
    const d = open();
    expect(await c.autosave.info()).toMatchObject({ runId: 'run-a', step: 4 });
    expect(await d.autosave.info()).toMatchObject({ runId: 'run-a', step: 4 });
    const resumed = await c.autosave.resume();
    expect(resumed!.info).toMatchObject({ runId: 'run-a', step: 4 });
    expect(resumed!.files.get('model.safetensors')).toEqual(bytes(4, 1, 2, 3));
    // Now c holds it: d cannot take it too (b's is live), and d's offer is gone.
    expect(await d.autosave.info()).toBeNull();
    await expect(d.autosave.resume()).rejects.toThrow(/belong to another tab of this app that is still open/);
    // c shows the run it resumed, and recovery (load) finds it before c saved anything.
    expect(await c.autosave.info()).toMatchObject({ runId: 'run-a', step: 4 });
    expect(await stepOf(c.autosave.load())).toBe(4);

    expect((await save(c.autosave, 5, 'run-a')).ok).toBe(true);
    // a's slot is gone (replaced by c's); b's is untouched.
    expect([...map.keys()].filter((k) => k.includes('tab-1'))).toEqual([]);
    expect(await c.autosave.info()).toMatchObject({ runId: 'run-a', step: 5 });
    expect(await stepOf(b.autosave.load())).toBe(5);
    expect(map.size).toBe(6);
  });

  it('a tab closed a moment ago: its lock is given back late, and the new tab waits for it', async () => {
    const { locks, store } = setup();
    const tab = (id: string, settleMs: number) => {
      const t = locks.tab();
      return { ...t, autosave: new TabAutosave(store, t.locks, now, () => id, settleMs) };
    };
    // An older run of a tab closed long ago, and the run of a tab closing now (the newer one).
    const old = tab('tab-old', 0);
    await save(old.autosave, 9, 'run-old');
    old.close();
    const a = tab('tab-a', 0);
    await save(a.autosave, 3, 'run-a');
    const waiting = tab('tab-b', 2000);
    setTimeout(a.close, 300);
    const t0 = Date.now();
    expect(await waiting.autosave.info()).toMatchObject({ runId: 'run-a', step: 3 });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);

    // A tab that stays open, with the newest save: waited for in vain, then the older closed tab's is offered.
    const c = tab('tab-c', 0);
    await save(c.autosave, 1, 'run-c');
    const d = tab('tab-d', 300);
    expect((await d.autosave.resume())!.info.runId).toBe('run-a');
    const e = tab('tab-e', 300);
    const t1 = Date.now();
    expect(await e.autosave.info()).toMatchObject({ runId: 'run-old', step: 9 });
    expect(Date.now() - t1).toBeGreaterThanOrEqual(250);
    // With only tabs still open, nothing is offered.
    await e.autosave.resume(); // takes run-old
    expect(await tab('tab-f', 300).autosave.info()).toBeNull();
  });

  it('a new run replaces the save it was offered, and no other', async () => {
    const { open } = setup();
    const x = open();
    await save(x.autosave, 7, 'run-x');
    x.close();
    const y = open();
    await save(y.autosave, 9, 'run-y');
    y.close();

    const f = open();
    expect(await f.autosave.info()).toMatchObject({ runId: 'run-y', step: 9 }); // the newest
    expect((await save(f.autosave, 1, 'run-f')).ok).toBe(true);
    f.close();
    // run-y was offered and declined: replaced. run-x was never shown: still there, offered next.
    const g = open();
    expect(await g.autosave.info()).toMatchObject({ runId: 'run-f', step: 1 });
    expect((await g.autosave.resume())!.info.runId).toBe('run-f');
    const h = open();
    expect(await h.autosave.info()).toMatchObject({ runId: 'run-x', step: 7 });
    expect(await stepOf(h.autosave.resume())).toBe(7);
  });

  it('a tab that never showed the offer replaces nothing', async () => {
    const { open } = setup();
    const x = open();
    await save(x.autosave, 7, 'run-x');
    x.close();
    const quiet = open();
    await save(quiet.autosave, 1, 'run-q');
    await save(quiet.autosave, 2, 'run-q');
    quiet.close();
    const next = open();
    const info = await next.autosave.info();
    expect(info).toMatchObject({ runId: 'run-q', step: 2 });
    next.close();
    const another = open();
    await another.autosave.resume(); // takes run-q (the newest)
    const last = open();
    expect(await last.autosave.info()).toMatchObject({ runId: 'run-x', step: 7 });
  });

  it('the save of the single-slot format is offered, resumed, and replaced by the tab’s first save', async () => {
    const { map, store, open } = setup();
    const old = new AutosaveSlot(store, now); // the format before tabs: pointer "current"
    await old.save(meta(6, 'run-old'), async () => filesOf(6));
    expect(map.has('current')).toBe(true);

    const t = open();
    expect(await t.autosave.info()).toMatchObject({ runId: 'run-old', step: 6 });
    expect(await stepOf(t.autosave.resume())).toBe(6);
    expect((await save(t.autosave, 7, 'run-old')).ok).toBe(true);
    expect(map.has('current')).toBe(false);
    expect([...map.keys()].every((k) => k === 'slot:tab-1' || k.startsWith('save:tab-1/'))).toBe(true);
    expect(await stepOf(t.autosave.load())).toBe(7);
  });

  it('what a crashed tab left half-written is swept; a live tab’s save in progress is not', async () => {
    const { map, store, locks, open } = setup();
    // A tab that crashed in the middle of a save: entries of its slot, no pointer, no lock.
    map.set('save:dead-1/run-d-3-1-1:model.safetensors', bytes(3));
    // A live tab in the middle of its first save: files written, its pointer not yet.
    let letPointer!: () => void;
    const gate = new Promise<void>((r) => (letPointer = r));
    const slow: AutosaveStore = {
      ...store,
      set: async (k, v) => {
        if (k.startsWith('slot:')) await gate;
        return store.set(k, v);
      },
    };
    const liveTab = locks.tab();
    const live = new TabAutosave(slow, liveTab.locks, now, () => 'live-1');
    const pending = live.save(meta(2, 'run-l'), async () => filesOf(2));
    await new Promise((r) => setTimeout(r, 0));
    expect([...map.keys()].filter((k) => k.startsWith('save:live-1/'))).toHaveLength(2);

    const m = open();
    expect((await save(m.autosave, 1, 'run-m')).ok).toBe(true);
    expect([...map.keys()].some((k) => k.startsWith('save:dead-1/'))).toBe(false);
    expect([...map.keys()].filter((k) => k.startsWith('save:live-1/'))).toHaveLength(2);
    letPointer();
    expect((await pending).ok).toBe(true);
    expect(await stepOf(live.load())).toBe(2);
  });

  it('a resumed run whose first save fails (storage full) keeps the save it came from, and says so', async () => {
    const store = limitedStore(60, new FakeQuotaError());
    const locks = fakeLocks();
    const a = locks.tab();
    const tabA = new TabAutosave(store, a.locks, now, () => 'tab-a');
    await tabA.save(meta(4, 'run-a'), async () => filesOf(4));
    a.close();
    const b = locks.tab();
    const tabB = new TabAutosave(store, b.locks, now, () => 'tab-b');
    await tabB.resume();
    const big = new Map([...filesOf(5), ['optimizer.safetensors', new Uint8Array(64)]]);
    const r = await tabB.save(meta(5, 'run-a'), async () => big);
    expect(r).toMatchObject({ ok: false, reason: 'quota', kept: { step: 4, runId: 'run-a' } });
    expect(r.ok ? '' : r.message).toMatch(/The previous autosave \(step 4\) is kept\./);
    expect(await stepOf(tabB.load())).toBe(4);
  });

  it('discard forgets this tab’s save, or the one it offered; not one another tab just took', async () => {
    const { open } = setup();
    const a = open();
    await save(a.autosave, 3, 'run-a');
    await a.autosave.discard();
    expect(await a.autosave.info()).toBeNull();
    await save(a.autosave, 4, 'run-a');
    a.close();

    const b = open();
    const c = open();
    expect(await b.autosave.info()).toMatchObject({ step: 4 });
    expect(await c.autosave.info()).toMatchObject({ step: 4 });
    await c.autosave.resume();
    await expect(b.autosave.discard()).rejects.toThrow(
      'That autosaved run was just resumed in another tab of this app, so it was not discarded.',
    );
    expect(await stepOf(c.autosave.load())).toBe(4);
    c.close();
    const d = open();
    expect(await d.autosave.info()).toMatchObject({ step: 4 });
    await d.autosave.discard();
    expect(await open().autosave.info()).toBeNull();
  });

  it('without Web Locks: each tab still saves into its own slot; only the offered save is replaced', async () => {
    const map = new Map<string, unknown>();
    const store = memoryAutosaveStore(map);
    let n = 0;
    const open = () => new TabAutosave(store, null, now, () => `nl-${++n}`);
    const a = open();
    const b = open();
    await save(a, 2, 'run-a');
    await save(b, 3, 'run-b');
    await save(a, 4, 'run-a');
    expect(await stepOf(a.load())).toBe(4);
    expect(await stepOf(b.load())).toBe(3);
    const c = open();
    expect(await c.info()).toMatchObject({ runId: 'run-a' }); // the newest; cannot tell it is live
    await save(c, 1, 'run-c');
    expect(await a.load()).toBeNull(); // replaced (a writes it again at its next save)
    expect(await stepOf(b.load())).toBe(3);
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
    // Two steps' worth of state without the cost of training: a trainer built at step 2 with its history.
    const history = [1, 2].map((step) => ({ step, reward: step / 10 }) as unknown as StepMetrics);
    const t2 = await buildTrainer(t.cfg, res, { resume: { step: 2, history } });
    const ok = await slot.save({ ...meta(2), config: { ...t2.cfg } }, () => checkpointFiles(t2));
    disposeTrainer(t2);
    expect(ok.ok).toBe(true);

    const loaded = await slot.load();
    const back = await restoreTrainer(memoryFiles('autosave', loaded!.files), res);
    expect(back.step).toBe(2);
    expect(back.history.map((m) => m.step)).toEqual([1, 2]);
    back.disposeOptimizers();

    const t3 = await buildTrainer(t.cfg, res, { resume: { step: 3, history } });
    const ln = t3.models.policy.params.get('ln_f.bias')!;
    ln.assign(tf.fill(ln.shape, NaN));
    const r = await slot.save({ ...meta(3), config: { ...t3.cfg } }, () => checkpointFiles(t3));
    disposeTrainer(t3);
    expect(r).toMatchObject({ ok: false, reason: 'nonfinite', kept: { step: 2 } });
    expect(r.ok ? '' : r.message).toBe(
      'Autosave skipped at step 3: the weights hold NaN/Inf values. The previous autosave (step 2) is kept.',
    );
    expect((await slot.info())!.step).toBe(2);
  });
});
