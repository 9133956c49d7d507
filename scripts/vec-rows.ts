/**
 * The few-rows program's vector loads (src/core/kernels/webgpu-linear.ts, setWebGpuLinearVecRows; docs/gpu.md,
 * "Vector loads in the few-rows program") against its one-element loads, at Qwen2.5-1.5B's decode linears (q | k | v
 * in parts with the RMSNorm prologue, o_proj with the residual, gate_proj, up_proj with SwiGLU, down_proj) at 1 and
 * 16 rows, with the base in f32 and packed f16, on whatever adapter Node's Dawn finds (the few-rows route forced,
 * as a GPU runs it). Each pair is checked (max |vec − one| / max |one| ≤ 1e-5) and timed: `reps` calls in a row,
 * GPU kernel time from timestamp queries where the device has them (tf.time's kernelMs), else the wall time, which
 * on a fast GPU is the host's per-call cost, not the kernel's. One JSON line per (linear, dtype, rows), then a
 * summary; exit 1 if any check fails.
 * Usage: npx tsx scripts/vec-rows.ts [reps]   (default 200 on a GPU, 2 on a software adapter)
 */
import * as tf from '@tensorflow/tfjs-core';
import { adapterLabel, setNodeWebGpuBackend } from '../src/cli/backend-webgpu-node';
import { pairRelDiff, timeCalls } from './kernel-time';
import { packF16 } from '../src/core/kernels/webgpu-f16';
import {
  linearNtDecodeWebGpu,
  setWebGpuLinearColumns,
  setWebGpuLinearSmallRows,
  setWebGpuLinearVecRows,
  type LinearNtDecodeOptions,
} from '../src/core/kernels/webgpu-linear';

const adapter = await setNodeWebGpuBackend();
const reps = Number(process.argv[2] ?? (adapter.software ? 2 : 200));
if (!Number.isInteger(reps) || reps < 1)
  throw new Error(`reps must be a whole number ≥ 1, got ${process.argv[2]}.`);
console.log(JSON.stringify({ adapter: adapterLabel(adapter), software: adapter.software, reps }));
setWebGpuLinearColumns(false);
setWebGpuLinearSmallRows(64);

// Qwen2.5-1.5B: hidden 1536, 12 heads of 128 over 2 KV heads, SwiGLU 8960. A software adapter gets an eighth.
const div = adapter.software ? 8 : 1;
const H = 1536 / div;
const KV = 256 / div;
const I = 8960 / div;

const rand = (n: number, seed: number, scale: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => scale * Math.sin(seed * 12.9898 + i * 78.233));
const weight = (out: number, inn: number, seed: number, f16: boolean): tf.Tensor2D =>
  f16
    ? tf.tensor2d(packF16(rand(out * inn, seed, 0.02)), [out, inn / 2], 'int32')
    : tf.tensor2d(rand(out * inn, seed, 0.02), [out, inn]);

interface Linear {
  name: string;
  /** Output columns and input width. */
  out: number;
  inn: number;
  make: (M: number, f16: boolean) => { x: tf.Tensor2D; o: LinearNtDecodeOptions; owned: tf.Tensor[] };
}
const g = tf.tensor1d(rand(H, 3, 0.1).map((v) => 1 + v));
const LINEARS: Linear[] = [
  {
    name: 'q|k|v (3 parts, RMSNorm prologue, bias)',
    out: H + 2 * KV,
    inn: H,
    make: (M, f16) => {
      const w = [weight(H, H, 1, f16), weight(KV, H, 2, f16), weight(KV, H, 4, f16)];
      const bias = tf.tensor1d(rand(H + 2 * KV, 5, 0.1));
      const x = tf.tensor2d(rand(M * H, 6, 1), [M, H]);
      return { x, o: { w, bias, rms: { g, eps: 1e-6 } }, owned: [...w, bias, x] };
    },
  },
  {
    name: 'o_proj (residual)',
    out: H,
    inn: H,
    make: (M, f16) => {
      const w = [weight(H, H, 7, f16)];
      const x = tf.tensor2d(rand(M * H, 8, 1), [M, H]);
      const residual = tf.tensor2d(rand(M * H, 9, 1), [M, H]);
      return { x, o: { w, residual }, owned: [...w, x, residual] };
    },
  },
  {
    name: 'up_proj (RMSNorm prologue, SwiGLU with the gate)',
    out: I,
    inn: H,
    make: (M, f16) => {
      const w = [weight(I, H, 10, f16)];
      const x = tf.tensor2d(rand(M * H, 11, 1), [M, H]);
      const gate = tf.tensor2d(rand(M * I, 12, 1), [M, I]);
      return { x, o: { w, rms: { g, eps: 1e-6 }, gate }, owned: [...w, x, gate] };
    },
  },
  {
    name: 'down_proj (residual)',
    out: H,
    inn: I,
    make: (M, f16) => {
      const w = [weight(H, I, 13, f16)];
      const x = tf.tensor2d(rand(M * I, 14, 1), [M, I]);
      const residual = tf.tensor2d(rand(M * H, 15, 1), [M, H]);
      return { x, o: { w, residual }, owned: [...w, x, residual] };
    },
  },
];

let failed = 0;
const summary: Record<string, number> = {};
for (const f16 of [false, true]) {
  for (const M of [1, 16]) {
    for (const lin of LINEARS) {
      const { x, o, owned } = lin.make(M, f16);
      try {
        const run = (vec: boolean) => {
          setWebGpuLinearVecRows(vec);
          return linearNtDecodeWebGpu(x, o);
        };
        const relDiff = await pairRelDiff(run(false), run(true));
        const ok = Number.isFinite(relDiff) && relDiff <= 1e-5;
        if (!ok) failed++;
        const tOne = await timeCalls(() => run(false), reps);
        const tVec = await timeCalls(() => run(true), reps);
        const bytes = lin.out * lin.inn * (f16 ? 2 : 4);
        const key = `${lin.name.split(' ')[0]} ${f16 ? 'f16' : 'f32'} M${M}`;
        summary[key] = tOne.ms / tVec.ms;
        console.log(
          JSON.stringify({
            linear: lin.name,
            base: f16 ? 'f16' : 'f32',
            rows: M,
            shape: [lin.out, lin.inn],
            ok,
            relDiff,
            oneMs: tOne.ms,
            vecMs: tVec.ms,
            timedBy: tOne.source,
            speedup: tOne.ms / tVec.ms,
            weightGBps: { one: bytes / tOne.ms / 1e6, vec: bytes / tVec.ms / 1e6 },
          }),
        );
      } catch (e) {
        failed++;
        console.log(
          JSON.stringify({
            linear: lin.name,
            base: f16 ? 'f16' : 'f32',
            rows: M,
            error: (e as Error).message,
          }),
        );
      } finally {
        setWebGpuLinearVecRows(null);
        tf.dispose(owned);
      }
    }
  }
}
console.log(JSON.stringify({ speedupOneOverVec: summary, failed }));
process.exit(failed ? 1 : 0);
