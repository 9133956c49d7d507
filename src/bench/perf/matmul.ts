/**
 * The backend's matmul peak: GFLOP/s of an n×n by n×n product, the denominator of MFU. Warm-up calls first
 * (shader compilation on WebGPU, WASM heap growth), then `iters` timed products, each awaited through `data()`
 * so that the time includes the GPU finishing, not just the queueing.
 */
import * as tf from '@tensorflow/tfjs-core';
import { matmulFlops } from './flops';

export interface MatmulBench {
  n: number;
  iters: number;
  seconds: number;
  gflops: number;
}

export async function benchMatmul(
  n: number,
  opts: { iters?: number; warmup?: number; minSeconds?: number } = {},
): Promise<MatmulBench> {
  const warmup = opts.warmup ?? 2;
  const a = tf.randomNormal([n, n], 0, 1, 'float32', 1);
  const b = tf.randomNormal([n, n], 0, 1, 'float32', 2);
  // One round: `k` products queued back to back, then one readback of the last (a single GPU queue runs them
  // in order, so its data() waits for all); the download of one result is amortised over the k products.
  const round = async (k: number): Promise<void> => {
    const outs: tf.Tensor[] = [];
    for (let i = 0; i < k; i++) outs.push(tf.matMul(a, b));
    await outs[outs.length - 1].data();
    tf.dispose(outs);
  };
  try {
    for (let i = 0; i < warmup; i++) await round(1);
    const perRound = opts.iters ?? 2;
    const minMs = (opts.minSeconds ?? 0.5) * 1000;
    let iters = 0;
    const t0 = performance.now();
    // At least one round, and rounds until minSeconds has passed, so a fast backend is not timed on one call.
    while (iters === 0 || (performance.now() - t0 < minMs && iters < 400)) {
      await round(perRound);
      iters += perRound;
    }
    const seconds = (performance.now() - t0) / 1000;
    return { n, iters, seconds, gflops: (matmulFlops(n, n, n) * iters) / seconds / 1e9 };
  } finally {
    a.dispose();
    b.dispose();
  }
}

/**
 * GFLOP/s of an [m, k] by [k, n] product (any shape: decoding's 8-row products as well as square ones), timed as
 * benchMatmul times its squares: warm-up calls, then rounds of `iters` products until `minSeconds` have passed.
 */
export async function benchMatmulShape(
  m: number,
  k: number,
  n: number,
  opts: {
    iters?: number;
    warmup?: number;
    minSeconds?: number;
    /** The process's CPU seconds so far (Node: process.cpuUsage); without it gflopsCpu is null. */
    cpuClock?: () => number;
  } = {},
): Promise<{
  m: number;
  k: number;
  n: number;
  iters: number;
  seconds: number;
  gflops: number;
  /** The same per CPU second of this process (opts.cpuClock), steadier on a shared machine; null without a clock. */
  gflopsCpu: number | null;
}> {
  const a = tf.randomNormal([m, k], 0, 1, 'float32', 1);
  const b = tf.randomNormal([k, n], 0, 1, 'float32', 2);
  const round = async (r: number): Promise<void> => {
    const outs: tf.Tensor[] = [];
    for (let i = 0; i < r; i++) outs.push(tf.matMul(a, b));
    await outs[outs.length - 1].data();
    tf.dispose(outs);
  };
  try {
    for (let i = 0; i < (opts.warmup ?? 2); i++) await round(1);
    const perRound = opts.iters ?? 4;
    const minMs = (opts.minSeconds ?? 1) * 1000;
    let iters = 0;
    const cpu = opts.cpuClock ?? ((): number => NaN);
    const c0 = cpu();
    const t0 = performance.now();
    while (iters === 0 || (performance.now() - t0 < minMs && iters < 100_000)) {
      await round(perRound);
      iters += perRound;
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpuSeconds = cpu() - c0;
    const flops = matmulFlops(m, k, n) * iters;
    return {
      m,
      k,
      n,
      iters,
      seconds,
      gflops: flops / seconds / 1e9,
      gflopsCpu: opts.cpuClock ? flops / cpuSeconds / 1e9 : null,
    };
  } finally {
    a.dispose();
    b.dispose();
  }
}
