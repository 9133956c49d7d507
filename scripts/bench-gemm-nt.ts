/**
 * A·Bᵀ with few rows of A on WASM (one thread): gemm.wat's gemm_nt against the routes it replaced (the (B·Aᵀ)ᵀ swap
 * to XNNPACK, or gemm.wat with Bᵀ packed per call), for decoding's shapes: Qwen2.5-0.5B's projections, GPT-2's
 * c_attn, and both LM heads. Per shape and rows: ms per product, GFLOP/s, B's GB/s, the largest difference between
 * the two routes' results, and which route ran. `npx tsx scripts/bench-gemm-nt.ts`; run nothing else heavy beside it.
 * ROWS=1,4,… picks the rows, SHAPES=[[K,N],…] the shapes, NT_ROWS the second run's GEMM_NT_MAX_ROWS (default 64).
 */
import * as tf from '@tensorflow/tfjs-core';
import * as wasm from '@tensorflow/tfjs-backend-wasm';
import { setNodeBackend } from '../src/cli/backend-node';
import { gemmNtStats, setGemmNtMaxRows, swappedStats, whileGenerating } from '../src/core/kernels/wasm-extra';
wasm.setThreadsCount(1);
await setNodeBackend('wasm');
const shapes = [
  [896, 4864],
  [4864, 896],
  [768, 2304],
  [768, 50257],
  [896, 151936],
];
// As generation runs them (gemm_nt runs only inside whileGenerating).
await whileGenerating(async () => {
  for (const [K, N] of process.env.SHAPES ? (JSON.parse(process.env.SHAPES) as number[][]) : shapes) {
    const w = tf.randomNormal([N, K]) as tf.Tensor2D;
    for (const M of (process.env.ROWS ?? '1,2,4,8,16,32,63').split(',').map(Number)) {
      const x = tf.randomNormal([M, K]) as tf.Tensor2D;
      const res: string[] = [];
      let ref: Float32Array | null = null;
      for (const rows of [0, Number(process.env.NT_ROWS ?? 64)]) {
        setGemmNtMaxRows(rows);
        const s0 = gemmNtStats.calls;
        const w0 = swappedStats.calls;
        const y0 = tf.matMul(x, w, false, true);
        const d = (await y0.data()) as Float32Array;
        if (!ref) ref = d.slice();
        else {
          let e = 0;
          for (let i = 0; i < d.length; i++) e = Math.max(e, Math.abs(d[i] - ref[i]));
          res.push(`maxdiff ${e.toExponential(1)}`);
        }
        y0.dispose();
        const reps = Math.max(3, Math.round(2e9 / (2 * M * K * N)));
        const t = performance.now();
        for (let r = 0; r < reps; r++) tf.matMul(x, w, false, true).dispose();
        const ms = (performance.now() - t) / reps;
        res.push(
          `${rows ? 'nt' : 'old'} ${ms.toFixed(2)} ms ${((2 * M * K * N) / ms / 1e6).toFixed(1)} GF/s ${((4 * N * K) / ms / 1e6).toFixed(1)} GB/s [nt ${gemmNtStats.calls - s0} sw ${swappedStats.calls - w0}]`,
        );
      }
      console.log(`K ${K} N ${N} M ${M}: ${res.join(' | ')}`);
      x.dispose();
    }
    w.dispose();
  }
});
