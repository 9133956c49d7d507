/**
 * Times every generated matMulFast variant (src/core/kernels/webgpu-matmul.ts, MATMUL_FAST_VARIANTS) that fits
 * this device's limits, the tile kernel's per-shape default, and tfjs's tf.matMul, at 2048³ and GPT-2's shapes,
 * in one run (issue #31: pick the fastest from a single short GPU run). Each (kernel, shape) is timed as the GPU
 * bench times matmuls (timeMatmul: warm-up, repeated products, the last one read back) and checked against
 * tf.matMul on the same inputs (maxRelDiff = max |ours − tf.matMul| / max |tf.matMul|; ok when ≤ 1e-4). At the first
 * shape (2048³; 128³ on --small) each kernel is also timed from a recorded frame of 8 products (src/bench/perf/
 * matmul-replayed.ts: the GPU's time alone, without tfjs's per-program host cost and the readback): `tflopsReplayed`.
 *
 * Usage: npx tsx scripts/matmul-sweep.ts [--small] [--variants name,name,...] [--seconds S]
 *   --small (implied on a software adapter): 128³ and the GPT-2 shapes cut down, a few variants only (SwiftShader
 *   compiles each shader in seconds); --variants: only these (also "tile" and "tfjs"); --seconds: the least time
 *   per timing (default 0.12; 0 on --small). A deadline (50 s on a GPU) skips what is left, 2048³ runs first.
 * Output: one JSON line {adapter, limits}, one per (kernel, shape) {kernel, shape, m, n, k, transB, tflops,
 * gflops, maxRelDiff, ok, ms, tflopsReplayed?} (or {kernel, shape, skipped | error}), and last
 * {"best2048": {variant, tflops}, "best2048Replayed": {variant, tflops}, "bestPerShape": {shape: {variant, tflops}},
 * "tfjs": {shape: tflops}, "tfjs2048Replayed": tflops, "seconds"}.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { adapterLabel, setNodeWebGpuBackend } from '../src/cli/backend-webgpu-node';
import { timeMatmul } from '../src/bench/webgpu-gpu';
import { timeMatmulReplayed } from '../src/bench/perf/matmul-replayed';
import { matmulFlops } from '../src/bench/perf/flops';
import {
  MATMUL_FAST_MIN_GROUPS_DEFAULT,
  MATMUL_FAST_VARIANTS,
  type MatMulFastLimits,
  matMulFast,
  matMulFastPlan,
  matMulFastVariantBytes,
  matMulFastVariantFits,
  setWebGpuMatMulFastTiles,
  setWebGpuMatMulFastVariant,
  webGpuMatMulFastApplies,
} from '../src/core/kernels/webgpu-matmul';

const args = process.argv.slice(2);
const arg = (name: string): string | undefined => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const t0 = performance.now();
const elapsed = () => (performance.now() - t0) / 1000;

const adapter = await setNodeWebGpuBackend();
const small = args.includes('--small') || adapter.software;
const limits = (tf.backend() as unknown as { device: { limits: MatMulFastLimits } }).device.limits;
console.log(
  JSON.stringify({
    adapter: adapterLabel(adapter),
    software: adapter.software,
    small,
    limits: {
      maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
    },
  }),
);

interface Shape {
  name: string;
  m: number;
  n: number;
  k: number;
  transB: boolean;
}
const SHAPES: Shape[] = small
  ? [
      { name: '128³', m: 128, n: 128, k: 128, transB: false },
      { name: 'lm_head/16', m: 4, n: 3142, k: 48, transB: true },
    ]
  : [
      { name: '2048³', m: 2048, n: 2048, k: 2048, transB: false },
      { name: 'c_attn 512×2304×768', m: 512, n: 2304, k: 768, transB: false },
      { name: 'attn.c_proj 512×768×768 Bᵀ', m: 512, n: 768, k: 768, transB: true },
      { name: 'mlp.c_fc 512×3072×768', m: 512, n: 3072, k: 768, transB: false },
      { name: 'mlp.c_proj 512×768×3072', m: 512, n: 768, k: 3072, transB: false },
      { name: 'lm_head 16×50257×768 Bᵀ', m: 16, n: 50257, k: 768, transB: true },
    ];
const deadline = Number(arg('--deadline') ?? (small ? 600 : 60));
const minSeconds = Number(arg('--seconds') ?? (small ? 0 : 0.12));
const timing = small ? { iters: 1, minSeconds, warmup: 1 } : { iters: 8, minSeconds, warmup: 2 };

const only = arg('--variants')?.split(',');
const defaultSmall = ['tfjs', 'tile', 'v128x128k8r8x8db', 'v64x64k16r4x4db'];
const pick = (name: string) => (only ? only.includes(name) : !small || defaultSmall.includes(name));
type Kernel = { name: string; set: () => void };
const kernels: Kernel[] = [];
if (pick('tfjs')) kernels.push({ name: 'tfjs', set: () => {} });
if (pick('tile'))
  kernels.push({
    name: 'tile',
    set: () => {
      setWebGpuMatMulFastVariant(null);
      setWebGpuMatMulFastTiles({ tile: null, minGroups: MATMUL_FAST_MIN_GROUPS_DEFAULT });
    },
  });
for (const v of MATMUL_FAST_VARIANTS) {
  if (!pick(v.name)) continue;
  if (!matMulFastVariantFits(v, limits)) {
    console.log(
      JSON.stringify({ kernel: v.name, skipped: `needs ${matMulFastVariantBytes(v)} B of workgroup memory` }),
    );
    continue;
  }
  kernels.push({ name: v.name, set: () => setWebGpuMatMulFastVariant(v.name) });
}

const device = (tf.backend() as unknown as { device: EventTarget }).device;
const gpuErrors: string[] = [];
device.addEventListener('uncapturederror', (e) =>
  gpuErrors.push(String((e as Event & { error?: { message?: string } }).error?.message ?? e)),
);

const best: Record<string, { variant: string; tflops: number }> = {};
const tfjs: Record<string, number> = {};
let bestReplayed: { variant: string; tflops: number } | null = null;
let tfjsReplayed: number | null = null;
for (const s of SHAPES) {
  const a = tf.randomNormal([s.m, s.k], 0, 1, 'float32', 1) as tf.Tensor2D;
  const b = tf.randomNormal(s.transB ? [s.n, s.k] : [s.k, s.n], 0, 1, 'float32', 2) as tf.Tensor2D;
  const ref = tf.matMul(a, b, false, s.transB);
  const refAbsT = tf.tidy(() => tf.max(tf.abs(ref)));
  const refAbs = (await refAbsT.data())[0];
  refAbsT.dispose();
  const flops = matmulFlops(s.m, s.k, s.n);
  for (const kern of kernels) {
    const base = { kernel: kern.name, shape: s.name, m: s.m, n: s.n, k: s.k, transB: s.transB };
    if (elapsed() > deadline) {
      console.log(JSON.stringify({ ...base, skipped: `deadline ${deadline} s` }));
      continue;
    }
    const k0 = performance.now();
    try {
      kern.set();
      const mm =
        kern.name === 'tfjs'
          ? (x: tf.Tensor2D, y: tf.Tensor2D) => tf.matMul(x, y, false, s.transB)
          : (x: tf.Tensor2D, y: tf.Tensor2D) => matMulFast(x, y, false, s.transB);
      if (kern.name !== 'tfjs' && !webGpuMatMulFastApplies(a, b, false, s.transB))
        throw new Error('matMulFast does not apply');
      const diffT = tf.tidy(() => tf.max(tf.abs(tf.sub(mm(a, b), ref))));
      const diff = (await diffT.data())[0];
      diffT.dispose();
      const r = await timeMatmul(mm, a, b, flops, timing);
      const tflops = r.gflops / 1000;
      const replayed =
        s === SHAPES[0]
          ? (await timeMatmulReplayed(mm, a, b, flops, { calls: small ? 2 : 8 })).gflops / 1000
          : null;
      const maxRelDiff = refAbs > 0 ? diff / refAbs : diff;
      const ok = Number.isFinite(maxRelDiff) && maxRelDiff <= 1e-4 && gpuErrors.length === 0;
      const plan = kern.name === 'tfjs' ? null : matMulFastPlan(s.m, s.n, s.k, { transB: s.transB });
      console.log(
        JSON.stringify({
          ...base,
          tflops: +tflops.toFixed(3),
          gflops: +r.gflops.toPrecision(4),
          maxRelDiff,
          ok,
          iters: r.iters,
          ms: Math.round(performance.now() - k0),
          ...(replayed === null ? {} : { tflopsReplayed: +replayed.toFixed(3) }),
          ...(plan ? { tile: `${plan.tm}×${plan.tn}/${plan.bk}`, checked: plan.checked } : {}),
          ...(gpuErrors.length ? { gpuErrors: gpuErrors.splice(0) } : {}),
        }),
      );
      if (kern.name === 'tfjs') tfjs[s.name] = +tflops.toFixed(3);
      else if (ok && (!best[s.name] || tflops > best[s.name].tflops))
        best[s.name] = { variant: kern.name, tflops: +tflops.toFixed(3) };
      if (replayed !== null && kern.name === 'tfjs') tfjsReplayed = +replayed.toFixed(3);
      else if (replayed !== null && ok && (!bestReplayed || replayed > bestReplayed.tflops))
        bestReplayed = { variant: kern.name, tflops: +replayed.toFixed(3) };
    } catch (e) {
      console.log(JSON.stringify({ ...base, error: (e as Error).message, gpuErrors: gpuErrors.splice(0) }));
    } finally {
      setWebGpuMatMulFastVariant(null);
    }
  }
  tf.dispose([a, b, ref]);
}
console.log(
  JSON.stringify({
    best2048: best[SHAPES[0].name] ?? null,
    best2048Replayed: bestReplayed,
    bestPerShape: best,
    tfjs,
    tfjs2048Replayed: tfjsReplayed,
    seconds: +elapsed().toFixed(1),
  }),
);
