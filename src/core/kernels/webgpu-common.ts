/**
 * What the fused WGSL kernels share (webgpu-layernorm, -linear, -attention, -decode-attention, -logprob, and the
 * fused Adam): the slice of tfjs-backend-webgpu's backend they call, and registering a set of kernels for 'webgpu'.
 * docs/tfjs.md, trap 5. (Their checks against the plain ops, and the relative difference those report, are in
 * src/core/backend/webgpu-fused.ts: the kernels import nothing of the model.)
 */
import * as tf from '@tensorflow/tfjs-core';

/**
 * The part of tfjs-backend-webgpu's WebGPUBackend the kernels use: run a WGSL program on tensor inputs, free a
 * tensor's data, read the device's limits.
 */
export interface WebGpuBackendLike {
  device: { limits: { maxStorageBuffersPerShaderStage: number } };
  disposeData(dataId: object, force?: boolean): boolean;
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

/** WebGPU's default storage buffers per shader stage (what every adapter offers, and tfjs's own device has). */
export const DEFAULT_STORAGE_BUFFERS = 8;

/**
 * Storage buffers a program may bind on the current WebGPU device, its output included: the device's
 * maxStorageBuffersPerShaderStage (above 8 where core/backend/webgpu-device.ts made the device), else 8.
 */
export function storageBuffersPerProgram(): number {
  if (tf.getBackend() !== 'webgpu') return DEFAULT_STORAGE_BUFFERS;
  const device = (tf.backend() as unknown as Partial<WebGpuBackendLike>).device;
  const n = device?.limits?.maxStorageBuffersPerShaderStage;
  const got = typeof n === 'number' && n >= DEFAULT_STORAGE_BUFFERS ? n : DEFAULT_STORAGE_BUFFERS;
  return cap === null ? got : Math.min(got, cap);
}

let cap: number | null = null;

/**
 * Hold storageBuffersPerProgram() to at most `n` (null: the device's): for tests and comparisons of the forms a
 * device with fewer storage buffers runs. Returns the previous cap.
 */
export function capStorageBuffersPerProgram(n: number | null): number | null {
  if (n !== null && (!Number.isInteger(n) || n < DEFAULT_STORAGE_BUFFERS))
    throw new Error(
      `capStorageBuffersPerProgram: an integer ≥ ${DEFAULT_STORAGE_BUFFERS} or null, got ${n}.`,
    );
  const was = cap;
  cap = n;
  return was;
}
