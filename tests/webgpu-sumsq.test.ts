/**
 * The squared global norm in one program per 7 tensors on WebGPU (src/core/kernels/webgpu-sumsq.ts) against a
 * float64 loop and the plain ops it replaces (addN of sum(square)); NaN and Inf pass through; a tensor over the
 * fused bound keeps the plain ops; the program count. Node WebGPU (Dawn; SwiftShader here).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { MAX_FUSED, setWebGpuSumSquares, sumOfSquares } from '../src/core/kernels/webgpu-sumsq';
import { countDispatches } from '../src/core/kernels/webgpu-count';

const adapter = await webGpuAdapter();

const values = (n: number, seed: number) =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 12.9898 + i * 78.233) * 1.7);

describe('sum of squares over many tensors on WebGPU (Node, Dawn)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('15 tensors of ragged sizes (3 programs): within 1e-6 of float64 and of addN(sum(square))', async () => {
    const sizes = [1, 3, 255, 256, 257, 1000, 6144, 24576, 70000, 7, 8, 9, 100, 2304 * 8, 33];
    const xs = sizes.map((n, k) => tf.tensor1d(values(n, k + 1)));
    let want = 0;
    sizes.forEach((n, k) => values(n, k + 1).forEach((x) => (want += x * x)));
    const before = tf.memory().numTensors;
    const fused = await countDispatches(() => sumOfSquares(xs));
    setWebGpuSumSquares(false);
    const plain = await countDispatches(() => sumOfSquares(xs)).finally(() => setWebGpuSumSquares(true));
    const [f, p] = [(await fused.result.data())[0], (await plain.result.data())[0]];
    expect(Math.abs(f - want) / want).toBeLessThan(1e-6);
    expect(Math.abs(f - p) / want).toBeLessThan(1e-6);
    console.log(
      `sum of squares of 15 tensors: fused ${fused.dispatches} dispatches, plain ${plain.dispatches}; rel. diff vs float64 ${Math.abs(f - want) / want}`,
    );
    expect(fused.dispatches).toBeLessThanOrEqual(3 + 1); // three groups, then their AddN
    expect(plain.dispatches).toBeGreaterThanOrEqual(2 * sizes.length);
    tf.dispose([fused.result, plain.result]);
    expect(tf.memory().numTensors).toBe(before);
    tf.dispose(xs);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('NaN and Inf reach the sum; a tensor over the fused bound and an empty one take the plain ops', async () => {
    const nan = tf.tensor1d([1, NaN, 2]);
    const inf = tf.tensor1d([Infinity, 1]);
    const ok = tf.tensor1d([3, 4]);
    expect(Number.isNaN((await sumOfSquares([ok, nan]).data())[0])).toBe(true);
    expect((await sumOfSquares([ok, inf]).data())[0]).toBe(Infinity);
    const big = tf.fill([MAX_FUSED + 5], 0.5);
    const empty = tf.tensor1d([]);
    const s = (await sumOfSquares([ok, big, empty]).data())[0];
    expect(Math.abs(s - (25 + 0.25 * (MAX_FUSED + 5))) / s).toBeLessThan(1e-6);
    tf.dispose([nan, inf, ok, big, empty]);
    expect(await webGpuErrors()).toEqual([]);
  });
});
