import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
// Gradients: tfjs-core registers none by itself. The union package's Node bundle registers them all in
// tfjs's global registry (its ESM twin, tfjs-core/dist/register_all_gradients, does not load in plain Node).
import '@tensorflow/tfjs';
import { UserError } from '../common/errors';
import { registerWasmExtraKernels } from '../core/kernels/wasm-extra';

export type NodeBackend = 'wasm' | 'cpu' | 'webgpu';

/** Node: WASM by default (≈4× the CPU backend here), `cpu` for exact reference runs. */
export async function setNodeBackend(name: string = 'wasm'): Promise<NodeBackend> {
  if (name !== 'wasm' && name !== 'cpu' && name !== 'webgpu') {
    throw new UserError(`--backend must be "wasm", "cpu" or "webgpu" in Node, got "${name}".`);
  }
  // PROD: skip tfjs debug checks and its "install tfjs-node" banner (tfjs-node cannot install here).
  tf.env().set('PROD', true);
  registerWasmExtraKernels();
  if (name === 'webgpu') {
    // Dawn through the `webgpu` package; a UserError naming what to install when no adapter is found.
    const w = await import('./backend-webgpu-node');
    const adapter = await w.setNodeWebGpuBackend();
    process.stderr.write(`webgpu: ${w.adapterLabel(adapter)}\n`);
    const kernels = w.kernelsLabel(adapter);
    if (kernels) process.stderr.write(`webgpu kernels: ${kernels}\n`);
    return name;
  }
  const ok = await tf.setBackend(name);
  if (!ok) throw new UserError(`could not initialise the ${name} backend.`);
  await tf.ready();
  return name;
}

/**
 * On WebGPU, the device's largest storage-buffer binding (models then hold `wte` in vocabulary chunks that fit,
 * docs/tfjs.md trap 8); undefined on the other backends (no limit).
 */
export function nodeBindingLimit(): number | undefined {
  if (tf.getBackend() !== 'webgpu') return undefined;
  const device = (
    tf.backend() as unknown as { device?: { limits?: { maxStorageBufferBindingSize?: number } } }
  ).device;
  return device?.limits?.maxStorageBufferBindingSize;
}
