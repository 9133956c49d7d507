/**
 * The largest difference between two arrays of numbers and the reference's largest magnitude, which tests compare
 * as `abs < tol · max(1, scale)` (or relative to the scale alone): one copy for the tests of the fused kernels and
 * the hand-written gradients. (src/core/webgpu-fused.ts's relDiff is the checks' own, returning the ratio.)
 */
import { expect } from 'vitest';
import type * as tf from '@tensorflow/tfjs-core';

/** max |a − b| and max |b| over the elements; the lengths must agree. */
export function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): { abs: number; scale: number } {
  expect(a.length).toBe(b.length);
  let abs = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    abs = Math.max(abs, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return { abs, scale };
}

/** maxDiff of two tensors' values; the shapes must agree. */
export async function maxDiffOf(a: tf.Tensor, b: tf.Tensor): Promise<{ abs: number; scale: number }> {
  expect(a.shape).toEqual(b.shape);
  const [x, y] = await Promise.all([a.data(), b.data()]);
  return maxDiff(x, y);
}
