/**
 * The fused linear on matMulFast's tile kernel (src/core/kernels/webgpu-linear.ts, setWebGpuLinearFastTiles; docs/gpu.md,
 * "The fused linear on the tile kernel") against its 64 × 64 tiles, at the products of a minibatch's scoring and
 * update: Qwen2.5-1.5B's linears with the base packed in f16 at 16 × 120 rows (x·Wᵀ + b forward, dy·W backward),
 * and GPT-2 124M's Conv1Ds at 16 × 64 rows (forward with gelu_new / residual, the backward's dz, dx = dz·Wᵀ and
 * dW = xᵀ·dz), on whatever adapter Node's Dawn finds. Each pair is checked (max |fast − tiles| / max |tiles| ≤ 1e-5)
 * and timed: `reps` calls in a row, GPU kernel time from timestamp queries where the device has them (tf.time's
 * kernelMs), else the wall time. One JSON line per product, then a summary with TFLOP/s both ways; exit 1 if any
 * check fails.
 * Usage: npx tsx scripts/linear-tiles.ts [reps]   (default 50 on a GPU, 1 on a software adapter)
 */
import * as tf from '@tensorflow/tfjs-core';
// Gradients (the GPT-2 backward's tf.grads): registered by the union package's Node bundle (src/cli/backend-node.ts).
import '@tensorflow/tfjs';
import { adapterLabel, setNodeWebGpuBackend } from '../src/cli/backend-webgpu-node';
import { pairRelDiff, timeCalls } from './kernel-time';
import { f16LinearNT, f16MatMulNN, packF16 } from '../src/core/kernels/webgpu-f16';
import { linearWebGpu, setWebGpuLinearFastTiles } from '../src/core/kernels/webgpu-linear';
import { matMulFastTile } from '../src/core/kernels/webgpu-matmul';

const adapter = await setNodeWebGpuBackend();
const reps = Number(process.argv[2] ?? (adapter.software ? 1 : 50));
if (!Number.isInteger(reps) || reps < 1)
  throw new Error(`reps must be a whole number ≥ 1, got ${process.argv[2]}.`);
console.log(JSON.stringify({ adapter: adapterLabel(adapter), software: adapter.software, reps }));

// Full shapes on a GPU; a software adapter gets an eighth of each side (a check that the script runs, no timing).
const div = adapter.software ? 8 : 1;
const rand = (n: number, seed: number, scale: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => scale * Math.sin(seed * 12.9898 + i * 78.233));

interface Product {
  name: string;
  /** C [M, N] with inner size K: for the FLOP count and the tile. */
  M: number;
  N: number;
  K: number;
  make: () => { run: () => tf.Tensor; owned: tf.Tensor[] };
}

const products: Product[] = [];
// Qwen2.5-1.5B: hidden 1536, 2 KV heads of 128, SwiGLU 8960; GRPO B16 × (56 prompt + 64 response) rows.
const QM = 1920 / div;
const QH = 1536 / div;
for (const [name, out, inn] of [
  ['q_proj', 1536 / div, QH],
  ['k_proj', 256 / div, QH],
  ['o_proj', QH, QH],
  ['gate_proj', 8960 / div, QH],
  ['down_proj', QH, 8960 / div],
] as const) {
  const weight = () => tf.tensor2d(packF16(rand(out * inn, out + inn, 0.02)), [out, inn / 2], 'int32');
  products.push({
    name: `qwen2.5-1.5b ${name} x·Wᵀ (f16)`,
    M: QM,
    N: out,
    K: inn,
    make: () => {
      const w = weight();
      const x = tf.tensor2d(rand(QM * inn, 1, 1), [QM, inn]);
      return { run: () => f16LinearNT(x, w), owned: [w, x] };
    },
  });
  products.push({
    name: `qwen2.5-1.5b ${name} dy·W (f16)`,
    M: QM,
    N: inn,
    K: out,
    make: () => {
      const w = weight();
      const dy = tf.tensor2d(rand(QM * out, 2, 1), [QM, out]);
      return { run: () => f16MatMulNN(dy, w), owned: [w, dy] };
    },
  });
}
// GPT-2 124M: width 768; PPO B16 × 64 rows.
const GM = 1024 / div;
const GC = 768 / div;
for (const [name, inn, out, gelu] of [
  ['c_attn', GC, 3 * GC, false],
  ['c_fc', GC, 4 * GC, true],
  ['mlp.c_proj', 4 * GC, GC, false],
] as const) {
  const parts = () => {
    const x = tf.variable(tf.tensor2d(rand(GM * inn, 3, 1), [GM, inn]));
    const w = tf.tensor2d(rand(inn * out, inn + out, 0.02), [inn, out]);
    const b = tf.tensor1d(rand(out, 4, 0.1));
    return { x, w, b };
  };
  products.push({
    name: `gpt2 ${name} forward${gelu ? ' (gelu_new)' : ''}`,
    M: GM,
    N: out,
    K: inn,
    make: () => {
      const { x, w, b } = parts();
      return { run: () => linearWebGpu(x, w, b, { gelu }), owned: [x, w, b] };
    },
  });
  products.push({
    name: `gpt2 ${name} backward (${gelu ? 'dz, ' : ''}dx, dW, db)`,
    // dx and dW: two products of the forward's size (dz recomputes a third where gelu_new is on).
    M: GM,
    N: out,
    K: inn * (gelu ? 3 : 2),
    make: () => {
      const { x, w, b } = parts();
      const dy = tf.tensor2d(rand(GM * out, 5, 1), [GM, out]);
      const wv = tf.variable(w);
      const bv = tf.variable(b);
      const run = () => {
        const g = tf.grads((xi, wi, bi) =>
          tf.sum(tf.mul(linearWebGpu(xi as tf.Tensor2D, wi as tf.Tensor2D, bi as tf.Tensor1D, { gelu }), dy)),
        )([x, wv, bv]);
        const flat = tf.concat(g.map((t) => tf.reshape(t, [-1])));
        tf.dispose(g);
        return flat;
      };
      return { run, owned: [x, w, b, dy, wv, bv] };
    },
  });
}

let failed = 0;
const summary: Record<string, { tilesTflops: number; fastTflops: number; speedup: number }> = {};
for (const p of products) {
  let owned: tf.Tensor[] = [];
  try {
    const made = p.make();
    owned = made.owned;
    const run = (fast: boolean) => {
      setWebGpuLinearFastTiles(fast);
      return made.run();
    };
    const relDiff = await pairRelDiff(run(false), run(true));
    const ok = Number.isFinite(relDiff) && relDiff <= 1e-5;
    if (!ok) failed++;
    const tTiles = await timeCalls(() => run(false), reps);
    const tFast = await timeCalls(() => run(true), reps);
    const flops = 2 * p.M * p.N * p.K;
    const tile = matMulFastTile(p.M, p.N);
    summary[p.name] = {
      tilesTflops: flops / tTiles.ms / 1e9,
      fastTflops: flops / tFast.ms / 1e9,
      speedup: tTiles.ms / tFast.ms,
    };
    console.log(
      JSON.stringify({
        product: p.name,
        shape: [p.M, p.N, p.K],
        fastTile: `${tile.tm}x${tile.tn}x${tile.bk}`,
        ok,
        relDiff,
        tilesMs: tTiles.ms,
        fastMs: tFast.ms,
        timedBy: tTiles.source,
        ...summary[p.name],
      }),
    );
  } catch (e) {
    failed++;
    console.log(JSON.stringify({ product: p.name, error: (e as Error).message }));
  } finally {
    setWebGpuLinearFastTiles(null);
    tf.dispose(owned);
  }
}
console.log(JSON.stringify({ summary, failed }));
process.exit(failed ? 1 : 0);
