/**
 * Timing and checking shared by the kernel scripts (scripts/vec-rows.ts, scripts/linear-tiles.ts). timeCalls: ms per
 * call of `reps` calls
 * of `f`, GPU kernel time from timestamp queries where the device has them (tf.time's kernelMs), else the wall
 * time, which on a fast GPU is the host's per-call cost, not the kernel's. Two untimed calls first (compile, warm).
 */
import * as tf from '@tensorflow/tfjs-core';

export async function timeCalls(
  f: () => tf.Tensor,
  reps: number,
): Promise<{ ms: number; source: 'kernel' | 'wall' }> {
  for (let i = 0; i < 2; i++) {
    const t = f();
    await t.data();
    t.dispose();
  }
  const t = await tf.time(() => {
    for (let i = 0; i < reps; i++) f().dispose();
  });
  const kernel = (t as { kernelMs?: unknown }).kernelMs;
  if (typeof kernel === 'number' && kernel > 0) return { ms: kernel / reps, source: 'kernel' };
  const t0 = performance.now();
  let last: tf.Tensor | null = null;
  for (let i = 0; i < reps; i++) {
    last?.dispose();
    last = f();
  }
  await last!.data();
  last!.dispose();
  return { ms: (performance.now() - t0) / reps, source: 'wall' };
}

// max |b − a| / max |a| of two results of one product computed two ways (both read, then disposed).
export { pairRelDiff } from '../src/core/backend/webgpu-tune';
