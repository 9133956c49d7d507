import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
// Gradients: tfjs-core registers none by itself. The union package's Node bundle registers them all in
// tfjs's global registry (its ESM twin, tfjs-core/dist/register_all_gradients, does not load in plain Node).
import '@tensorflow/tfjs';
import { UserError } from '../common/errors';
import { registerWasmExtraKernels } from '../core/kernels/wasm-extra';
import { setSharedPrefixDefault } from '../core/model/shared-prefix';

export type NodeBackend = 'wasm' | 'cpu' | 'webgpu';

/** Node: WASM by default (≈4× the CPU backend here), `cpu` for exact reference runs. */
export async function setNodeBackend(name: string = 'wasm'): Promise<NodeBackend> {
  if (name !== 'wasm' && name !== 'cpu' && name !== 'webgpu') {
    throw new UserError(`--backend must be "wasm", "cpu" or "webgpu" in Node, got "${name}".`);
  }
  // PROD: skip tfjs debug checks and its "install tfjs-node" banner (tfjs-node cannot install here).
  tf.env().set('PROD', true);
  registerWasmExtraKernels();
  applySharedPrefix();
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

/**
 * `PPO_SHARED_PREFIX`: "0" makes trainers (PPO's family and DPO) and generation run every row's prompt in full, "1"
 * (the default) runs a prompt that rows share once (src/core/model/shared-prefix.ts); unset leaves the default. For
 * timing both ways (a bench).
 */
export function applySharedPrefix(raw = process.env.PPO_SHARED_PREFIX): boolean | null {
  const v = raw?.trim();
  if (!v) return null;
  if (v !== '0' && v !== '1') {
    throw new UserError(
      `PPO_SHARED_PREFIX must be 1 (a prompt rows share runs once) or 0 (every row in full), got "${raw}".`,
    );
  }
  setSharedPrefixDefault(v === '1');
  return v === '1';
}
