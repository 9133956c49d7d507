/**
 * The fused linear's kernels chosen by timing on the device (src/core/backend/webgpu-tune.ts), forced on SwiftShader
 * at a sixteenth of the shapes, with the few-rows route forced as a GPU runs it: both forms of each of the three
 * switches (the vector loads, the tile kernel, the f32 LM head at decode) recorded, replayed and timed, their values
 * agreeing, the choice in force afterwards, the settings left as they were, and no tensor or recording left behind.
 * Slow tier: it compiles and times every form on the software adapter (about 45 s). The rest of the tuning's tests:
 * tests/webgpu-tune.test.ts.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  TUNE_MIN_GAIN,
  TUNE_SOFTWARE_SCALE,
  resetWebGpuKernelTuning,
  tuneWebGpuLinear,
} from '../src/core/backend/webgpu-tune';
import {
  saveWebGpuLinearSmallRows,
  setWebGpuLinearColumns,
  setWebGpuHeadRows,
  setWebGpuLinearFastTiles,
  setWebGpuLinearSmallRows,
  setWebGpuLinearVecRows,
  webGpuHeadRows,
  webGpuLinearFastTiles,
  webGpuLinearKernelsInForce,
  webGpuLinearVecRows,
} from '../src/core/kernels/webgpu-linear';
import { liveReplayFrames } from '../src/core/kernels/webgpu-replay';

const adapter = await webGpuAdapter();

describe('tuneWebGpuLinear on Node WebGPU, forced', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  afterEach(() => {
    setWebGpuLinearVecRows(null);
    setWebGpuLinearFastTiles(null);
    setWebGpuHeadRows(null);
    resetWebGpuKernelTuning();
  });

  it('forced: both forms of each switch timed from replays, agreeing, the choice in force after', async () => {
    const restore = saveWebGpuLinearSmallRows();
    setWebGpuLinearColumns(false);
    setWebGpuLinearSmallRows(64);
    try {
      const tensors = tf.memory().numTensors;
      const bytes = () => (tf.memory() as { numBytesAllocatedInGPU?: number }).numBytesAllocatedInGPU ?? 0;
      const allocated = bytes();
      const t = await tuneWebGpuLinear({
        software: true,
        force: true,
        scale: TUNE_SOFTWARE_SCALE,
        calls: 2,
        trialMs: 0,
      });
      for (const c of [t.vecRows, t.fastTiles, t.headRows!]) {
        expect(c.how).toBe('timed');
        expect(c.offMs).toBeGreaterThan(0);
        expect(c.onMs).toBeGreaterThan(0);
        expect(c.relDiff).toBeLessThanOrEqual(1e-5);
        expect(c.on).toBe(c.onMs! <= TUNE_MIN_GAIN * c.offMs!);
        expect(c.why).toMatch(/ ms without, .* ms with\)$/);
      }
      expect(t.ms).toBeGreaterThan(0);
      // The choice is in force where nothing was set; the settings are as they were (null).
      expect(webGpuLinearVecRows()).toBeNull();
      expect(webGpuLinearFastTiles()).toBeNull();
      expect(webGpuHeadRows()).toBeNull();
      expect(webGpuLinearKernelsInForce()).toEqual({
        vecRows: t.vecRows.on,
        fastTiles: t.fastTiles.on,
        headRows: t.headRows!.on,
      });
      expect(tf.memory().numTensors).toBe(tensors);
      expect(liveReplayFrames()).toBe(0);
      // The products' buffers are given back to the device, not kept in tfjs's pool.
      expect(bytes()).toBeLessThanOrEqual(allocated);
      expect(await webGpuErrors()).toEqual([]);
    } finally {
      restore();
      setWebGpuLinearColumns(null);
    }
  }, 120_000);
});
