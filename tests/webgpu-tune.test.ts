/**
 * The fused linear's kernels chosen by timing on the device (src/core/backend/webgpu-tune.ts): the decision from a
 * timing (hand cases), explicit settings kept and not timed, nothing timed on a software adapter unless forced, a
 * timing remembered per adapter; a form whose run fails, or whose values differ, is left off with the reason in
 * words. The forced timing of every form on SwiftShader (about 45 s): tests/webgpu-tune.slow.test.ts.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import {
  TUNE_MIN_GAIN,
  TUNE_VERSION,
  adapterTuneKey,
  type RememberedTuning,
  type TuneStore,
  decideByTiming,
  describeKernelTuning,
  resetWebGpuKernelTuning,
  tuneWebGpuLinear,
  webGpuKernelTuning,
} from '../src/core/backend/webgpu-tune';
import {
  setWebGpuHeadRows,
  setWebGpuLinearFastTiles,
  setWebGpuLinearTuned,
  setWebGpuLinearVecRows,
  vecRowsWidth,
  fastTileApplies,
  webGpuHeadRows,
  webGpuHeadRowsInForce,
  webGpuLinearFastTiles,
  webGpuLinearKernelsInForce,
  webGpuLinearVecRows,
} from '../src/core/kernels/webgpu-linear';
import { liveReplayFrames } from '../src/core/kernels/webgpu-replay';

const adapter = await webGpuAdapter();

describe('decideByTiming (no GPU needed)', () => {
  it('on only where the values agree and the form is at least TUNE_MIN_GAIN faster', () => {
    expect(TUNE_MIN_GAIN).toBe(0.9);
    expect(decideByTiming('x', 1, 0.5, 0)).toMatchObject({ on: true });
    expect(decideByTiming('x', 1, 0.9, 1e-7).on).toBe(true);
    expect(decideByTiming('x', 1, 0.91, 0).on).toBe(false);
    expect(decideByTiming('x', 1, 1.5, 0).on).toBe(false);
    const differ = decideByTiming('vector loads', 1, 0.1, 2e-5);
    expect(differ.on).toBe(false);
    expect(differ.why).toContain('differ');
    expect(decideByTiming('x', 1, 0.1, NaN).on).toBe(false);
    expect(decideByTiming('x', 0, 0, 0).on).toBe(false);
    expect(decideByTiming('x', 1, Infinity, 0).on).toBe(false);
    expect(decideByTiming('vector loads', 2, 1, 0).why).toBe(
      'vector loads on: timed faster on this device (2.000 ms without, 1.000 ms with)',
    );
  });

  it('a setting wins over the tuned choice; the tuned choice over the shipped off', () => {
    try {
      const nt = { transA: false, transB: true, packedB: true };
      expect(webGpuLinearKernelsInForce()).toEqual({ fastTiles: false, vecRows: false, headRows: false });
      setWebGpuLinearTuned({ vecRows: true, fastTiles: true, headRows: true });
      expect(webGpuLinearKernelsInForce()).toEqual({ fastTiles: true, vecRows: true, headRows: true });
      expect(vecRowsWidth(nt, 1536)).toBe(8);
      expect(fastTileApplies({})).toBe(true);
      expect(webGpuHeadRowsInForce()).toBe(true);
      setWebGpuLinearVecRows(false);
      setWebGpuLinearFastTiles(false);
      setWebGpuHeadRows(false);
      expect(vecRowsWidth(nt, 1536)).toBe(0);
      expect(fastTileApplies({})).toBe(false);
      expect(webGpuHeadRowsInForce()).toBe(false);
      expect(webGpuLinearKernelsInForce()).toEqual({ fastTiles: false, vecRows: false, headRows: false });
    } finally {
      setWebGpuLinearVecRows(null);
      setWebGpuLinearFastTiles(null);
      setWebGpuHeadRows(null);
      resetWebGpuKernelTuning();
    }
  });
});

describe('tuneWebGpuLinear on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  afterEach(() => {
    setWebGpuLinearVecRows(null);
    setWebGpuLinearFastTiles(null);
    setWebGpuHeadRows(null);
    resetWebGpuKernelTuning();
  });

  it('times nothing on a software adapter, and keeps explicit settings', async () => {
    expect(adapter!.software).toBe(true);
    const t = await tuneWebGpuLinear({ software: true });
    expect(t.ms).toBe(0);
    expect(t.vecRows).toMatchObject({ on: false, how: 'not timed' });
    expect(t.vecRows.why).toContain('software adapter');
    expect(t.fastTiles).toMatchObject({ on: false, how: 'not timed' });
    expect(t.headRows).toMatchObject({ on: false, how: 'not timed' });
    expect(webGpuKernelTuning()).toBe(t);
    // A record from before the head's form (two forms) reads as it did.
    const { headRows: _head, ...older } = t;
    expect(_head).toBeDefined();
    expect(describeKernelTuning(older)).toBe(
      'vector loads in the few-rows program and the tile kernel for the tiled products off: not timed: a software ' +
        'adapter (its speed says nothing of a GPU’s).',
    );
    expect(describeKernelTuning(t)).toBe(
      'vector loads in the few-rows program, the tile kernel for the tiled products and the few-rows program for ' +
        'the f32 LM head at decode off: not timed: a software adapter (its speed says nothing of a GPU’s).',
    );

    setWebGpuLinearVecRows(true);
    const s = await tuneWebGpuLinear({ software: false, skip: true });
    expect(s.vecRows).toMatchObject({ on: true, how: 'set' });
    expect(s.fastTiles.why).toContain('PPO_WEBGPU_TUNE=0');
    expect(describeKernelTuning(s)).toBe(
      'vector loads in the few-rows program on: set explicitly; the tile kernel for the tiled products off: ' +
        'not timed: timing turned off (PPO_WEBGPU_TUNE=0); the few-rows program for the f32 LM head at decode ' +
        'off: not timed: timing turned off (PPO_WEBGPU_TUNE=0).',
    );
  });

  it('remembers a timing per adapter: the next start uses it untimed; PPO_WEBGPU_TUNE=1 times again', async () => {
    const saved = new Map<string, RememberedTuning>();
    const store: TuneStore = {
      get: async (k) => saved.get(k) ?? null,
      set: async (k, v) => void saved.set(k, v),
    };
    const key = adapterTuneKey({ vendor: 'v', architecture: 'a', device: 'd', description: 'x' });
    expect(key).toBe(`${TUNE_VERSION}|v|a|d|x`);
    const x = tf.ones([4, 8]);
    let made = 0;
    const products = {
      vecRows: () => [
        () => {
          made++;
          return { run: () => tf.tidy(() => tf.add(x, 1)), owned: [] };
        },
      ],
      fastTiles: () => [() => ({ run: () => tf.tidy(() => tf.mul(x, 2)), owned: [] })],
      headRows: () => [() => ({ run: () => tf.tidy(() => tf.mul(x, 3)), owned: [] })],
    };
    const base = { software: false, calls: 2, trialMs: 0, products, store, adapterKey: key };
    try {
      const first = await tuneWebGpuLinear(base);
      expect(first.vecRows.how).toBe('timed');
      expect(made).toBe(1);
      expect([...saved.keys()]).toEqual([key]);
      expect(saved.get(key)!.vecRows).toEqual({ ...first.vecRows, at: saved.get(key)!.at });
      expect(saved.get(key)!.headRows).toEqual({ ...first.headRows, at: saved.get(key)!.at });
      expect(first.headRows!.how).toBe('timed');

      const again = await tuneWebGpuLinear(base);
      expect(made).toBe(1); // nothing built, nothing timed
      expect(again.ms).toBe(0);
      expect(again.vecRows).toMatchObject({
        on: first.vecRows.on,
        how: 'remembered',
        offMs: first.vecRows.offMs,
      });
      expect(again.vecRows.why).toBe(`${first.vecRows.why}, as timed on ${saved.get(key)!.at.slice(0, 10)}`);
      expect(webGpuLinearKernelsInForce().vecRows).toBe(first.vecRows.on);
      expect(again.headRows).toMatchObject({ on: first.headRows!.on, how: 'remembered' });
      expect(webGpuLinearKernelsInForce().headRows).toBe(first.headRows!.on);

      await tuneWebGpuLinear({ ...base, force: true });
      expect(made).toBe(2);
      // Another adapter, or a store that cannot be read: timed.
      await tuneWebGpuLinear({ ...base, adapterKey: adapterTuneKey({ vendor: 'w' }) });
      expect(made).toBe(3);
      await tuneWebGpuLinear({
        ...base,
        store: {
          get: () => Promise.reject(new Error('no disk')),
          set: () => Promise.reject(new Error('no disk')),
        },
      });
      expect(made).toBe(4);
    } finally {
      x.dispose();
    }
    expect(liveReplayFrames()).toBe(0);
  });

  it('a record with one form missing: that one is timed, the others kept as they were timed, with their date', async () => {
    const key = adapterTuneKey({ vendor: 'v2' });
    const old = '2026-11-02T10:00:00.000Z';
    const timedChoice = (on: boolean) => ({
      on,
      how: 'timed' as const,
      why: `x ${on ? 'on' : 'off'}: timed`,
      offMs: 1,
      onMs: on ? 0.5 : 2,
      relDiff: 0,
    });
    const saved = new Map<string, RememberedTuning>([
      [key, { at: old, vecRows: timedChoice(true), fastTiles: timedChoice(false) }],
    ]);
    const store: TuneStore = {
      get: async (k) => saved.get(k) ?? null,
      set: async (k, v) => void saved.set(k, v),
    };
    const x = tf.ones([4, 8]);
    let made = 0;
    const product = () => {
      made++;
      return { run: () => tf.tidy(() => tf.add(x, 1)), owned: [] };
    };
    const products = { vecRows: () => [product], fastTiles: () => [product], headRows: () => [product] };
    const base = { software: false, calls: 2, trialMs: 0, products, store, adapterKey: key };
    try {
      const first = await tuneWebGpuLinear(base);
      expect(made).toBe(1); // the head alone
      expect(first.vecRows).toMatchObject({
        on: true,
        how: 'remembered',
        why: 'x on: timed, as timed on 2026-11-02',
      });
      expect(first.headRows!.how).toBe('timed');
      const rec = saved.get(key)!;
      expect(rec.at).not.toBe(old);
      expect(rec.vecRows).toEqual({ ...timedChoice(true), at: old });
      expect(rec.fastTiles).toEqual({ ...timedChoice(false), at: old });
      expect(rec.headRows).toMatchObject({ how: 'timed', at: rec.at });
      // The next start reuses all three, untimed, each with the date it was timed on.
      const again = await tuneWebGpuLinear(base);
      expect(made).toBe(1);
      expect(again.ms).toBe(0);
      expect(again.vecRows.why).toBe('x on: timed, as timed on 2026-11-02');
      expect(again.headRows).toMatchObject({ how: 'remembered', on: first.headRows!.on });
      expect(webGpuLinearKernelsInForce()).toEqual({
        vecRows: true,
        fastTiles: false,
        headRows: first.headRows!.on,
      });
    } finally {
      x.dispose();
    }
  });

  it('a product that cannot be made leaves its form off, in words; the backend goes on', async () => {
    const t = await tuneWebGpuLinear({
      software: true,
      force: true,
      products: {
        vecRows: () => [
          () => {
            throw new Error('out of host memory');
          },
        ],
        fastTiles: () => {
          throw new Error('no such shape');
        },
        headRows: () => [
          () => {
            throw new Error('no head here');
          },
        ],
      },
    });
    expect(t.vecRows.why).toBe(
      'vector loads in the few-rows program off: timing it failed on this device (out of host memory)',
    );
    expect(t.fastTiles.why).toBe(
      'the tile kernel for the tiled products off: timing it failed on this device (no such shape)',
    );
    expect(t.headRows!.why).toBe(
      'the few-rows program for the f32 LM head at decode off: timing it failed on this device (no head here)',
    );
    expect(webGpuLinearKernelsInForce()).toEqual({ vecRows: false, fastTiles: false, headRows: false });
  });

  it('a form whose run fails, or whose values differ, stays off and says why', async () => {
    const tensors = tf.memory().numTensors;
    const x = tf.ones([4, 8]);
    const t = await tuneWebGpuLinear({
      software: true,
      force: true,
      calls: 2,
      trialMs: 0,
      products: {
        // The "on" form gives other values: never chosen, however fast.
        vecRows: () => [{ run: () => tf.tidy(() => tf.mul(x, webGpuLinearVecRows() ? 2 : 1)), owned: [] }],
        fastTiles: () => [
          {
            run: () => {
              if (webGpuLinearFastTiles()) throw new Error('no such kernel here');
              return tf.tidy(() => tf.add(x, 1));
            },
            owned: [],
          },
        ],
        headRows: () => [{ run: () => tf.tidy(() => tf.add(x, webGpuHeadRows() ? 1e-3 : 0)), owned: [] }],
      },
    });
    x.dispose();
    expect(t.vecRows).toMatchObject({ on: false, how: 'timed', relDiff: 1 });
    expect(t.vecRows.why).toContain('differ');
    expect(t.fastTiles).toMatchObject({ on: false, how: 'not timed' });
    expect(t.fastTiles.why).toBe(
      'the tile kernel for the tiled products off: timing it failed on this device (no such kernel here)',
    );
    expect(t.headRows).toMatchObject({ on: false, how: 'timed' });
    expect(t.headRows!.relDiff).toBeCloseTo(1e-3, 6); // above TUNE_MAX_REL_DIFF: off however fast
    expect(webGpuLinearKernelsInForce()).toEqual({ vecRows: false, fastTiles: false, headRows: false });
    expect(webGpuLinearFastTiles()).toBeNull();
    expect(webGpuHeadRows()).toBeNull();
    expect(tf.memory().numTensors).toBe(tensors);
    expect(liveReplayFrames()).toBe(0);
  });
});
