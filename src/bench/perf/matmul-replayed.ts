/**
 * A matmul's GPU time alone, from a recorded frame (issue #31's ≥ 25 TFLOP/s at 2048², docs/gpu.md "Dawn toggles,
 * and what the next lease should time for the matmul", point 2).
 *
 * `timeMatmul` (bench/webgpu-gpu.ts) and `benchMatmul` (./matmul.ts) time products through tfjs: each one a program
 * run by tfjs's JavaScript (~140 µs of host time on an H200), a fresh output from tfjs's pool, and a round of 8
 * ending in a readback of the whole last product (16 MB at 2048²) and its wait. At ~1.2 ms a product those extras
 * can hide 15–30 % of the kernel's speed. This times the same products without them:
 *
 * - `calls` products `mm(a, b)` are recorded once through tfjs (kernels/webgpu-replay.ts: the programs tfjs runs,
 *   their pipelines, bind groups and buffers), each output released before the next product, as a loop would;
 * - the recording is replayed r and then 2r times back to back, each batch waited for, and
 *   (t(2r) − t(r)) / r is one replay's time, so that the wait's own latency cancels; the best of three trials,
 *   after about 20 ms of warm-up (kernels/webgpu-replay-profile.ts's helpers, which the kernel tuning uses too);
 * - ms a product = a replay's time ÷ `calls`.
 *
 * What it measures is the GPU's time for the products' dispatches in one compute pass, the passes' own cost
 * included: a kernel's speed, not the engine's (an engine that encodes each product through tfjs pays the host's
 * cost too, unless its loop is recorded, as the decode and update are). Reported under names of their own
 * (`matmulTflops2048Replayed`, `matmulFastTflops2048Replayed`, the sweep's `tflopsReplayed`), beside the round-trip
 * figures, which keep their meaning.
 */
import * as tf from '@tensorflow/tfjs-core';
import { ReplayFrame, replayBackend } from '../../core/kernels/webgpu-replay';
import { replayTrialMs, replaysPerTrial, warmReplays } from '../../core/kernels/webgpu-replay-profile';

export interface ReplayedMatmul {
  /** Products recorded in the frame (each replay runs them all). */
  calls: number;
  /** Dispatches the frame holds per product (matMulFast's: 1; tfjs's: 1 unless it splits K). */
  dispatchesPerProduct: number;
  /** Replays per trial (r; each trial runs r and then 2r). */
  replaysPerTrial: number;
  /** GPU time of one product, ms: the best trial's time a replay ÷ calls. */
  msPerProduct: number;
  /** flops ÷ msPerProduct, GFLOP/s. */
  gflops: number;
}

/**
 * GFLOP/s of `mm(a, b)` from the GPU time of a recorded frame of `calls` products (module comment). Needs the
 * WebGPU backend (throws otherwise). `trialMs`: about how long a trial's r replays take (default 20); `trial`: how
 * a trial is timed (default `replayTrialMs`).
 */
export async function timeMatmulReplayed(
  mm: (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor,
  a: tf.Tensor2D,
  b: tf.Tensor2D,
  flops: number,
  o: {
    calls?: number;
    trialMs?: number;
    /** One trial's ms a replay (default webgpu-replay-profile's `replayTrialMs`); tests wrap it to see its figures. */
    trial?: (frame: ReplayFrame, r: number) => Promise<number>;
  } = {},
): Promise<ReplayedMatmul> {
  const backend = replayBackend();
  if (!backend) throw new Error(`timeMatmulReplayed: needs the webgpu backend, not ${tf.getBackend()}.`);
  const calls = Math.max(1, Math.floor(o.calls ?? 8));
  // One product through tfjs first: its pipeline compiled outside the recording.
  const first = mm(a, b);
  await first.data();
  first.dispose();
  const { frame, result } = ReplayFrame.record(backend, () => {
    let y = mm(a, b);
    for (let i = 1; i < calls; i++) {
      y.dispose();
      y = mm(a, b);
    }
    return y;
  }, []);
  try {
    const r = replaysPerTrial(await warmReplays(frame), o.trialMs ?? 20);
    const trial = o.trial ?? replayTrialMs;
    let best = Infinity;
    for (let t = 0; t < 3; t++) best = Math.min(best, await trial(frame, r));
    const msPerProduct = best / calls;
    return {
      calls,
      dispatchesPerProduct: frame.recorded().length / calls,
      replaysPerTrial: r,
      msPerProduct,
      gflops: flops / (msPerProduct * 1e-3) / 1e9,
    };
  } finally {
    frame.dispose();
    result.dispose();
  }
}
