/**
 * WebGPU checks on whatever adapter Node's Dawn finds (run on a machine with a real GPU; the same checks run on
 * SwiftShader in Vitest): the fused kernels against the plain ops, the fused Adam against tfjs's Adam, greedy
 * decode on WebGPU against the CPU backend, and the fixed cost of one dispatch. Prints one JSON line per check
 * and exits 1 if any check fails. Usage: npx tsx scripts/gpu-checks.ts
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { setNodeWebGpuBackend, adapterLabel } from '../src/cli/backend-webgpu-node';
import { registerFusedAdamKernels } from '../src/core/fused-adam';
import { FUSED_KERNEL_CHECKS, LLAMA_FUSED_KERNEL_CHECKS } from '../src/core/webgpu-fused';
import { checkFusedAdam } from '../src/bench/bench';
import { measureDispatchOverhead } from '../src/bench/webgpu-gpu';
import { loadLM } from '../src/core/model/folder';
import { nodeResources } from '../src/cli/train';
import { generate } from '../src/core/model/sampling';
import { sampleRowsHost, sampleTokens } from '../src/core/model/sample-op';
import { Rng } from '../src/core/rng';

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
await tf.setBackend('cpu');
const onCpu = await greedy();
await tf.setBackend('webgpu');
report('greedy decode webgpu = cpu', JSON.stringify(onGpu) === JSON.stringify(onCpu), {
  tokens: onGpu[0].slice(0, 8),
});

process.exit(failed ? 1 : 0);
