/**
 * decodeDispatchesPerToken (src/bench/f16-gpu.ts): the GPU dispatches a greedy token costs at batch 1, for the f16
 * rows' decode line. On WebGPU in Node (SwiftShader), a 2-layer Qwen3 with the base in f16: a whole number, the same
 * twice, at least the decode programs of its two layers (6 each: tests/llama-decode-dispatches.test.ts) and less
 * than the whole prefill of a 24-token generation.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { decodeDispatchesPerToken } from '../src/bench/f16-gpu';
import { Llama } from '../src/core/model/llama';
import { hostWeights, tinyQwen3 } from './helpers/f16-base';

const adapter = await webGpuAdapter();

describe('decodeDispatchesPerToken on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('a 2-layer Qwen3, base in f16: a whole number ≥ 12, the same twice; nothing left behind', async () => {
    const before = tf.memory().numTensors;
    const m = Llama.fromArrays(tinyQwen3, hostWeights(tinyQwen3, 9, 0.08, true), false, 'q3d', {
      baseDtype: 'f16',
    });
    try {
      const a = await decodeDispatchesPerToken(m);
      const b = await decodeDispatchesPerToken(m);
      expect(Number.isInteger(a)).toBe(true);
      expect(a).toBeGreaterThanOrEqual(2 * 6);
      expect(a).toBeLessThan(200);
      expect(b).toBe(a);
    } finally {
      m.dispose();
    }
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);
});
