/**
 * The shape of a kernel function as the project's kernels register it with tfjs (tf.registerKernel): tfjs's own
 * KernelFunc, with the backend left to each kernel to narrow (WebGpuBackendLike, the WASM backend, the CPU one).
 */
import type * as tf from '@tensorflow/tfjs-core';

export type KernelFn<R extends tf.TensorInfo | tf.TensorInfo[] = tf.TensorInfo | tf.TensorInfo[]> = (args: {
  inputs: tf.NamedTensorInfoMap;
  backend: unknown;
  attrs?: tf.NamedAttrMap;
}) => R;
