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
