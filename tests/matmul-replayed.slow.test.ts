/**
 * A matmul's GPU time from a recorded frame (src/bench/perf/matmul-replayed.ts), on Node WebGPU (SwiftShader): the
 * frame holds one dispatch a product for matMulFast and for tf.matMul at 128², the time a product is the best real
 * trial ÷ the products (the trials seen through the `trial` option), the figure of the round trip's order (`timeMatmul`:
 * on SwiftShader both are the CPU's work), and nothing stays behind (tensors, frames). Off WebGPU it refuses in words.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { timeMatmulReplayed } from '../src/bench/perf/matmul-replayed';
import { timeMatmul } from '../src/bench/webgpu-gpu';
import { matMulFast } from '../src/core/kernels/webgpu-matmul';
import { liveReplayFrames } from '../src/core/kernels/webgpu-replay';
import { replayTrialMs } from '../src/core/kernels/webgpu-replay-profile';
import { matmulFlops } from '../src/bench/perf/flops';

const adapter = await webGpuAdapter();

describe('timeMatmulReplayed off WebGPU', () => {
  it('says which backend it needs', async () => {
    const was = tf.getBackend();
    await tf.setBackend('cpu');
    try {
      const a = tf.zeros([4, 4]) as tf.Tensor2D;
      await expect(timeMatmulReplayed((x, y) => tf.matMul(x, y), a, a, 128)).rejects.toThrow(
        'timeMatmulReplayed: needs the webgpu backend, not cpu.',
      );
      a.dispose();
    } finally {
      if (was) await tf.setBackend(was);
    }
  });
});

describe('timeMatmulReplayed on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('times a product from its recorded frame: the best trial ÷ the products it holds; nothing left behind', async () => {
    const n = 128;
    const a = tf.randomNormal([n, n], 0, 1, 'float32', 1) as tf.Tensor2D;
    const b = tf.randomNormal([n, n], 0, 1, 'float32', 2) as tf.Tensor2D;
    const flops = matmulFlops(n, n, n);
    try {
      for (const [name, mm] of [
        ['matMulFast', (x: tf.Tensor2D, y: tf.Tensor2D) => matMulFast(x, y)],
        ['tf.matMul', (x: tf.Tensor2D, y: tf.Tensor2D) => tf.matMul(x, y)],
      ] as const) {
        const tensors = tf.memory().numTensors;
        const frames = liveReplayFrames();
        // The real trials, each figure seen: the result is their least ÷ 4, whatever the machine's load.
        const trials: { r: number; ms: number }[] = [];
        const rp = await timeMatmulReplayed(mm, a, b, flops, {
          calls: 4,
          trial: async (frame, r) => {
            const ms = await replayTrialMs(frame, r);
            trials.push({ r, ms });
            return ms;
          },
        });
        expect(rp.calls, name).toBe(4);
        // The frame holds exactly the 4 products, one dispatch each.
        expect(rp.dispatchesPerProduct, name).toBe(1);
        expect(rp.replaysPerTrial, name).toBeGreaterThanOrEqual(2);
        expect(
          trials.map((t) => t.r),
          name,
        ).toEqual([rp.replaysPerTrial, rp.replaysPerTrial, rp.replaysPerTrial]);
        expect(rp.msPerProduct, name).toBe(Math.min(...trials.map((t) => t.ms)) / 4);
        expect(rp.gflops, name).toBeCloseTo(flops / (rp.msPerProduct * 1e-3) / 1e9, 6);
        // The replays do the products' work: the same order as the round trip through tfjs. Measured alone 1.1–1.4×
        // the round trip's figure; 3.8× in CI, with other tests' processes on both cores while the round trip ran
        // (the two are timed at different moments), so the band is wide. A frame that ran nothing would read far
        // above it, a time multiplied by the products instead of divided far below (1/16 of the right figure).
        const rt = await timeMatmul(mm, a, b, flops, { iters: 4, minSeconds: 0.2, warmup: 1 });
        const ratio = rp.gflops / rt.gflops;
        const why = `${name}: replayed ${rp.gflops} against round trip ${rt.gflops} GFLOP/s`;
        expect(ratio, why).toBeGreaterThan(0.1);
        expect(ratio, why).toBeLessThan(20);
        expect(tf.memory().numTensors, name).toBe(tensors);
        expect(liveReplayFrames(), name).toBe(frames);
      }
      expect(await webGpuErrors()).toEqual([]);
    } finally {
      tf.dispose([a, b]);
    }
  }, 120_000);
});
