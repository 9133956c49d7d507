/**
 * AddN on WebGPU for any number of inputs.
 *
 * tfjs-backend-webgpu 4.22 runs AddN as one program with a storage buffer per input, plus the output. A device
 * offers 8 storage buffers per shader stage unless asked for more (tfjs does not ask), so `tf.addN` of more than
 * 7 tensors makes an invalid pipeline. WebGPU reports that as an uncaptured validation error, not a throw: the
 * whole command buffer it was batched into is dropped, so the sum reads back stale memory and every other kernel
 * in that batch (an optimizer's weight updates, for one) silently never runs. Our gradient norm is
 * addN(Σg² per variable) over 16+ variables: on WebGPU it read 8 while the loss was 0, and the weights did not
 * move. (Concat splits its inputs against this limit; AddN does not.) See docs/tfjs.md.
 *
 * This wraps the registered kernel: up to (limit − 1) inputs go to it as they are; more are summed in groups of
 * that size, then the partial sums, so every program stays within the limit. Same values (float32 addition in a
 * different grouping for more than limit − 1 inputs).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { WebGpuBackendLike } from './webgpu-common';

const MARK = Symbol.for('ppo.webgpuAddNChunked');

/** Replace the webgpu AddN with the grouped one (idempotent; needs tfjs-backend-webgpu imported). */
export function registerWebGpuAddNChunked(): boolean {
  const cfg = tf.getKernel('AddN', 'webgpu');
  if (!cfg) return false;
  if ((cfg.kernelFunc as unknown as Record<symbol, boolean>)[MARK]) return true;
  const original = cfg.kernelFunc;
  const kernelFunc: tf.KernelFunc = (args) => {
    const backend = args.backend as unknown as WebGpuBackendLike;
    const perProgram = Math.max(2, backend.device.limits.maxStorageBuffersPerShaderStage - 1);
    let parts = args.inputs as unknown as tf.TensorInfo[];
    if (parts.length <= perProgram) return original(args);
    const made = new Set<tf.TensorInfo>();
    while (parts.length > perProgram) {
      const next: tf.TensorInfo[] = [];
      for (let i = 0; i < parts.length; i += perProgram) {
        const group = parts.slice(i, i + perProgram);
        if (group.length === 1) {
          next.push(group[0]);
          continue;
        }
        const sum = original({ ...args, inputs: group as unknown as tf.NamedTensorInfoMap }) as tf.TensorInfo;
        made.add(sum);
        next.push(sum);
      }
      parts = next;
    }
    const out = original({ ...args, inputs: parts as unknown as tf.NamedTensorInfoMap }) as tf.TensorInfo;
    for (const t of made) backend.disposeData(t.dataId);
    return out;
  };
  (kernelFunc as unknown as Record<symbol, boolean>)[MARK] = true;
  tf.unregisterKernel('AddN', 'webgpu');
  tf.registerKernel({ ...cfg, kernelFunc });
  return true;
}
