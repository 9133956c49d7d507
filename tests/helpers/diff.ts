/**
 * The largest difference between two arrays of numbers and the reference's largest magnitude, which tests compare
 * as `abs < tol · max(1, scale)` (or relative to the scale alone): one copy for the tests of the fused kernels and
 * the hand-written gradients; and the largest element-wise relative difference (maxRelDiff), for results that
 * must agree digit for digit even where they are small. (src/core/backend/webgpu-fused.ts's relDiff is the checks' own,
 * returning the difference relative to the reference's largest magnitude.)
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

/**
 * max |a − b| / max(floor, |b|) over the elements: each element's difference relative to its own reference value
 * (b), stricter than a difference relative to the largest value wherever the reference is small (an Adam second
 * moment, a weight near 0); `floor` keeps an exact 0 in b from dividing by 0. The lengths must agree; a NaN in
 * either gives NaN (Math.max keeps it), which fails any `toBeLessThan`.
 */
export function maxRelDiff(a: ArrayLike<number>, b: ArrayLike<number>, floor: number): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    worst = Math.max(worst, Math.abs(a[i] - b[i]) / Math.max(floor, Math.abs(b[i])));
  }
  return worst;
}

/** maxRelDiff of two tensors' values; the shapes must agree. */
export async function maxRelDiffOf(a: tf.Tensor, b: tf.Tensor, floor: number): Promise<number> {
  expect(a.shape).toEqual(b.shape);
  const [x, y] = await Promise.all([a.data(), b.data()]);
  return maxRelDiff(x, y, floor);
}
