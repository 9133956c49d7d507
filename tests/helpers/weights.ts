/**
 * Comparing two trainers' trained weights (the tests that say two runs are the same step: micro-batches, the
 * device's fallback plan, the recorded update, the f16 base).
 */
import type { PpoTrainer } from '../../src/core/ppo/trainer';

/** The policy's and the value model's trained variables, as host arrays, in order. */
export async function trainedWeights(t: PpoTrainer): Promise<number[][]> {
  return Promise.all(
    [...t.models.policy.trainableVariables(), ...(t.models.value?.trainableVariables() ?? [])].map(
      async (v) => Array.from(await v.data()),
    ),
  );
}

/** The largest difference between `a` and `b`, relative to the largest magnitude in `a`. */
export function maxRelToScale(a: number[][], b: number[][]): number {
  let worst = 0;
  let scale = 0;
  a.forEach((row) => row.forEach((x) => (scale = Math.max(scale, Math.abs(x)))));
  a.forEach((row, i) => row.forEach((x, j) => (worst = Math.max(worst, Math.abs(x - b[i][j])))));
  return worst / Math.max(scale, 1e-12);
}
