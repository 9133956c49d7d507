/**
 * What the fused WGSL kernels share (webgpu-layernorm, -linear, -attention, -decode-attention, -logprob, and the
 * fused Adam): the slice of tfjs-backend-webgpu's backend they call, registering a set of kernels for 'webgpu',
 * and the relative difference their checks report. docs/tfjs.md, trap 5.
 */
import * as tf from '@tensorflow/tfjs-core';

/** The part of tfjs-backend-webgpu's WebGPUBackend the kernels use: run a WGSL program on tensor inputs. */
export interface WebGpuBackendLike {
  runWebGPUProgram(
    program: unknown,
    inputs: tf.TensorInfo[],
    outputDtype: tf.DataType,
    uniforms?: { type: 'float32' | 'int32'; data: number[] }[],
    output?: tf.TensorInfo,
  ): tf.TensorInfo;
}

/** Register each kernel for 'webgpu' unless one of that name is there (idempotent; the backend need not be loaded). */
export function registerWebGpuKernels(kernels: Record<string, unknown>): void {
  for (const [kernelName, kernelFunc] of Object.entries(kernels)) {
    if (!tf.getKernel(kernelName, 'webgpu')) {
      tf.registerKernel({ kernelName, backendName: 'webgpu', kernelFunc: kernelFunc as tf.KernelFunc });
    }
  }
}

/**
 * max |a − b| / max |b| over the elements (relative to the reference's scale, so entries near 0 do not blow it
 * up); Infinity when the lengths differ or a NaN appears (a NaN must not read as agreement).
 */
export async function relDiff(a: tf.Tensor, b: tf.Tensor): Promise<number> {
  const [x, y] = await Promise.all([a.data(), b.data()]);
  let d = 0;
  let scale = 0;
  for (let i = 0; i < x.length; i++) {
    d = Math.max(d, Math.abs(x[i] - y[i]));
    scale = Math.max(scale, Math.abs(y[i]));
  }
  return x.length === y.length && Number.isFinite(d) ? d / Math.max(scale, 1e-30) : Infinity;
}
