/**
 * The fused WGSL kernels' checks (src/core/backend/webgpu-fused.ts: layer norm, Conv1D with its epilogue,
 * causal attention, token log-prob and entropy; the Llama family's RMSNorm, SwiGLU and grouped-query attention
 * with RoPE inside, prefill and decode) and the fused Adam's, in the browser on WebGPU: the same
 * functions Vitest runs on Node's Dawn (tests/webgpu-fused.test.ts) and scripts/gpu-checks.ts on real GPUs.
 * Exposes window.runKernelChecks(), which resolves to { backend, adapter, checks: { name: result | {error} } }.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { FUSED_KERNEL_CHECKS, LLAMA_FUSED_KERNEL_CHECKS } from '../../src/core/backend/webgpu-fused';
import { registerWebGpuAddNChunked } from '../../src/core/kernels/webgpu-addn';
import { useWebGpuDeviceLimits } from '../../src/core/backend/webgpu-device';
import { storageBuffersPerProgram } from '../../src/core/kernels/webgpu-common';
import { registerFusedAdamKernels } from '../../src/core/optim/fused-adam';
import { checkFusedAdam } from '../../src/bench/bench';

declare global {
  interface Window {
    runKernelChecks: () => Promise<{
      backend: string;
      adapter: string;
      storageBuffersPerProgram: number;
      checks: Record<string, Record<string, unknown>>;
    }>;
  }
}

window.runKernelChecks = async () => {
  registerWebGpuAddNChunked();
  registerFusedAdamKernels();
  // The device the app's worker makes (src/worker/backend-web.ts): the adapter's storage buffers per program.
  useWebGpuDeviceLimits(WebGPUBackend as never);
  if (!(await tf.setBackend('webgpu'))) throw new Error('the webgpu backend did not start');
  await tf.ready();
  const info = (tf.backend() as unknown as { adapterInfo?: { vendor?: string; architecture?: string } })
    .adapterInfo;
  const checks: Record<string, Record<string, unknown>> = {};
  for (const [name, check] of Object.entries({ ...FUSED_KERNEL_CHECKS, ...LLAMA_FUSED_KERNEL_CHECKS })) {
    try {
      checks[name] = { ...(await check()) };
    } catch (e) {
      checks[name] = { error: (e as Error).message };
    }
  }
  checks['fused Adam'] = { ...(await checkFusedAdam()) };
  return {
    backend: tf.getBackend(),
    adapter: `${info?.vendor ?? ''} ${info?.architecture ?? ''}`.trim(),
    storageBuffersPerProgram: storageBuffersPerProgram(),
    checks,
  };
};
document.body.dataset.ready = 'true';
