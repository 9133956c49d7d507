/**
 * peakBytesDuring (src/bench/perf/memory.ts): the largest live tensor bytes at any moment, by hand-worked
 * allocations, agreeing with tf.profile where tf.profile sees the moment, and leaving the engine's count intact.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { peakBytesDuring, peakMemoryDuring } from '../src/bench/perf/memory';

describe('peakBytesDuring', () => {
  beforeAll(useCpu);

  it('sees the largest moment: 1000 + 2000 floats live together, then freed', async () => {
    const base = tf.memory().numBytes;
    const peak = await peakBytesDuring(async () => {
      const a = tf.zeros([1000]);
      const b = tf.zeros([2000]);
      tf.dispose([a, b]);
      const c = tf.zeros([500]);
      c.dispose();
    });
    expect(peak - base).toBe(3000 * 4);
    expect(tf.memory().numBytes).toBe(base);
    // The engine's counter still works after the hook is removed.
    const d = tf.zeros([10]);
    expect(tf.memory().numBytes).toBe(base + 40);
    d.dispose();
    expect(tf.memory().numBytes).toBe(base);
  });

  it('is at least tf.profile’s peak for the same work (tf.profile samples after each kernel only)', async () => {
    const work = async () => {
      tf.tidy(() => {
        const x = tf.randomNormal([64, 64]);
        const y = tf.matMul(x, x);
        return tf.sum(tf.exp(y));
      }).dispose();
    };
    const prof = await tf.profile(work);
    const ours = await peakBytesDuring(work);
    expect(ours).toBeGreaterThanOrEqual(prof.peakBytes);
    expect(ours).toBeLessThan(prof.peakBytes + 64 * 64 * 4 * 2);
  });

  it('counts a buffer shared by several tensors once in liveBytesGrowth (tfjs counts it per tensor)', async () => {
    const base = tf.memory().numBytes;
    const held = tf.zeros([100]); // live before: not growth
    const m = await peakMemoryDuring(async () => {
      const a = tf.zeros([1000]);
      const views = [tf.reshape(a, [10, 100]), tf.reshape(a, [100, 10]), a.clone()]; // one buffer, four tensors
      const b = tf.zeros([250]);
      tf.dispose([b]);
      tf.dispose([a, ...views]);
      held.dispose(); // freeing what was there before lowers the count below its start
      const c = tf.zeros([50]);
      c.dispose();
    });
    expect(m.liveBytesGrowth).toBe((1000 + 250) * 4);
    expect(m.numBytes - base).toBe((100 + 4 * 1000 + 250) * 4);
    // Hooks removed: the engine counts as before.
    const z = tf.zeros([8]);
    const d = tf.reshape(z, [2, 4]);
    expect(tf.memory().numBytes).toBe(base + 2 * 8 * 4); // tfjs's count: per tensor
    tf.dispose([z, d]);
    expect(tf.memory().numBytes).toBe(base);
  });
});
