/**
 * WebGPU checks on whatever adapter Node's Dawn finds (run on a machine with a real GPU; the same checks run on
 * SwiftShader in Vitest): the fused kernels against the plain ops, the fused Adam against tfjs's Adam, greedy
 * decode on WebGPU against the CPU backend and the replayed decode (model/decode-replay.ts) against the unrecorded one, the register-blocked matmul (matMulFast) against tf.matMul and a
 * float64 loop at 2048² and GPT-2's shapes, and the fixed cost of one dispatch. Prints one JSON line per check
 * and exits 1 if any check fails. Usage: npx tsx scripts/gpu-checks.ts
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { setNodeWebGpuBackend, adapterLabel } from '../src/cli/backend-webgpu-node';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import { FUSED_KERNEL_CHECKS, LLAMA_FUSED_KERNEL_CHECKS } from '../src/core/backend/webgpu-fused';
import { checkFusedAdam } from '../src/bench/bench';
import { MATMUL_SHAPE_ROWS, MATMUL_SHAPES, measureDispatchOverhead } from '../src/bench/webgpu-gpu';
import { matMulFast, matMulFastPlan, webGpuMatMulFastApplies } from '../src/core/kernels/webgpu-matmul';
import { loadLM } from '../src/core/model/folder';
import { nodeResources } from '../src/cli/train';
import { generate } from '../src/core/model/sampling';
import { sampleRowsHost, sampleTokens } from '../src/core/model/sample-op';
import { Rng } from '../src/core/base/rng';
import { lastDecodeReplayStats, setDecodeReplay } from '../src/core/model/decode-replay';

let failed = 0;
const report = (name: string, ok: boolean, detail: Record<string, unknown>): void => {
  if (!ok) failed++;
  console.log(JSON.stringify({ check: name, ok, ...detail }));
};

registerFusedAdamKernels();
const adapter = await setNodeWebGpuBackend();
console.log(JSON.stringify({ adapter: adapterLabel(adapter), software: adapter.software }));

const over = await measureDispatchOverhead(adapter.software ? 50 : 2000);
report('dispatch overhead', true, { msPerDispatch: over });

const adam = await checkFusedAdam();
report('fused Adam vs tf.train.adam', !!adam && adam.maxRelDiff < 1e-5 && adam.fusedCalls > 0, { ...adam });

// The fused kernels against tfjs's ops on this adapter (float32: differences come from summation order).
for (const [name, check] of Object.entries({ ...FUSED_KERNEL_CHECKS, ...LLAMA_FUSED_KERNEL_CHECKS })) {
  try {
    const r = await check();
    report(`fused ${name} vs ops`, r.maxRelValue < 1e-4 && r.maxRelGrad < 1e-4, { ...r });
  } catch (e) {
    report(`fused ${name} vs ops`, false, { error: (e as Error).message });
  }
}

// Device sampling (src/core/kernels/webgpu-sample.ts) against the JavaScript path on the same uniforms, at GPT-2's
// vocabulary: the same token except where a uniform lies within 1e-5 of a CDF boundary, and never outside top-k.
{
  const B = 16;
  const V = 50257;
  const rng = new Rng(5);
  let same = 0;
  let outside = 0;
  let total = 0;
  for (const [T, k, p] of [
    [1, 0, 1],
    [0.7, 50, 1],
    [1, 0, 0.9],
    [1.3, 50, 0.95],
  ]) {
    for (let rep = 0; rep < 4; rep++) {
      const x = Float32Array.from({ length: B * V }, () => 8 * (rng.next() - 0.5));
      const u = Float32Array.from({ length: B }, () => rng.next());
      const logits = tf.tensor2d(x, [B, V]);
      const r = sampleTokens(logits, { temperature: T, topK: k, topP: p, uniforms: u, impl: 'kernel' });
      const got = await r.tokens.data();
      tf.dispose([logits, r.tokens, r.logprobs, r.fullLogprobs]);
      const want = sampleRowsHost(x, B, V, T, k, p, u);
      for (let b = 0; b < B; b++) {
        total++;
        if (got[b] === want.tokens[b]) same++;
        if (k > 0) {
          const row = x.subarray(b * V, (b + 1) * V);
          const above = row.reduce((n, v) => n + (v > row[got[b]] ? 1 : 0), 0);
          if (above >= k) outside++;
        }
      }
    }
  }
  report('device sampling = host sampling (V 50257)', outside === 0 && same >= total - 2, {
    same,
    total,
    outsideTopK: outside,
  });
}

// matMulFast (src/core/kernels/webgpu-matmul.ts) against tf.matMul on this device, and against a float64 loop on 16
// rows spread over C, at 2048² and GPT-2's shapes at 512 rows (a software adapter: 256² and 8 rows at 1/16 of each
// size). Both are float32 with different summation orders: max |ours − ref| / max |ref| well under 1e-5.
{
  const soft = adapter.software;
  const cases = [
    {
      name: `${soft ? 256 : 2048}²`,
      m: soft ? 256 : 2048,
      k: soft ? 256 : 2048,
      n: soft ? 256 : 2048,
      transB: false,
    },
    ...MATMUL_SHAPES.map((s) => ({
      name: s.name,
      m: soft ? 8 : MATMUL_SHAPE_ROWS,
      k: soft ? Math.ceil(s.k / 16) : s.k,
      n: soft ? Math.ceil(s.n / 16) : s.n,
      transB: s.transB,
    })),
  ];
  for (const c of cases) {
    const label = `matMulFast = tf.matMul and float64, ${c.m}×${c.k}·${c.transB ? `(${c.n}×${c.k})ᵀ` : `${c.k}×${c.n}`} (${c.name})`;
    try {
      const a = tf.randomNormal([c.m, c.k], 0, 1, 'float32', 7) as tf.Tensor2D;
      const b = tf.randomNormal(c.transB ? [c.n, c.k] : [c.k, c.n], 0, 1, 'float32', 8) as tf.Tensor2D;
      const applies = webGpuMatMulFastApplies(a, b, false, c.transB);
      const fastT = matMulFast(a, b, false, c.transB);
      const plainT = tf.matMul(a, b, false, c.transB);
      const [fast, plain, ah, bh] = await Promise.all([fastT.data(), plainT.data(), a.data(), b.data()]);
      tf.dispose([a, b, fastT, plainT]);
      let dPlain = 0;
      let sPlain = 0;
      for (let i = 0; i < fast.length; i++) {
        dPlain = Math.max(dPlain, Math.abs(fast[i] - plain[i]));
        sPlain = Math.max(sPlain, Math.abs(plain[i]));
      }
      let d64 = 0;
      let s64 = 0;
      for (let t = 0; t < 16; t++) {
        const r = Math.min(c.m - 1, Math.floor((t * c.m) / 16));
        for (let j = 0; j < c.n; j++) {
          let acc = 0;
          for (let k = 0; k < c.k; k++)
            acc += ah[r * c.k + k] * (c.transB ? bh[j * c.k + k] : bh[k * c.n + j]);
          d64 = Math.max(d64, Math.abs(fast[r * c.n + j] - acc));
          s64 = Math.max(s64, Math.abs(acc));
        }
      }
      const relPlain = dPlain / sPlain;
      const rel64 = d64 / s64;
      const plan = matMulFastPlan(c.m, c.n, c.k, { transB: c.transB });
      report(label, applies && relPlain <= 1e-5 && rel64 <= 1e-5, {
        applies,
        tile: `${plan.tm}×${plan.tn}`,
        vec: { a: plan.vecA, b: plan.vecB, c: plan.vecC },
        maxRelVsTfjs: relPlain,
        maxRelVsFloat64: rel64,
      });
    } catch (e) {
      report(label, false, { error: (e as Error).message });
    }
  }
}

// Greedy decode: the same tokens on WebGPU and on the CPU backend.
const greedy = async (): Promise<number[][]> => {
  const { model } = await loadLM(nodeResources.modelFiles('tiny'), { trainable: false, label: 'g' });
  try {
    const prompts = [
      [84, 104, 101, 32],
      [65, 32, 102, 105, 108, 109],
    ];
    const r = await generate(model, prompts, {
      maxNewTokens: 24,
      temperature: 0,
      padId: 257,
      rng: 1,
      stopToken: null,
    });
    return r.tokens;
  } finally {
    model.dispose();
  }
};
const onGpu = await greedy();
const replayStats = lastDecodeReplayStats();
setDecodeReplay(false);
const unrecorded = await greedy();
setDecodeReplay(true);
report('replayed decode = unrecorded decode (greedy)', JSON.stringify(onGpu) === JSON.stringify(unrecorded), {
  ...replayStats,
});
await tf.setBackend('cpu');
const onCpu = await greedy();
await tf.setBackend('webgpu');
report('greedy decode webgpu = cpu', JSON.stringify(onGpu) === JSON.stringify(onCpu), {
  tokens: onGpu[0].slice(0, 8),
});

process.exit(failed ? 1 : 0);
