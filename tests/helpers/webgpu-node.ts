/**
 * WebGPU for unit tests through Dawn in Node (src/cli/backend-webgpu-node.ts): the WGSL kernels run in Vitest
 * without a browser. Without an adapter (no Vulkan loader or driver) the tests skip with a test named after what
 * to install, never passing silently.
 */
import { it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import {
  NO_ADAPTER_HELP,
  nodeWebGpuAdapter,
  setNodeWebGpuBackend,
  type NodeWebGpuAdapter,
} from '../../src/cli/backend-webgpu-node';

/** The adapter Dawn finds here, or null (call at the top level of a test file: `await webGpuAdapter()`). */
export async function webGpuAdapter(): Promise<NodeWebGpuAdapter | null> {
  return nodeWebGpuAdapter();
}

/** Make tfjs's WebGPU backend current (PROD: no debug checks; see tests/helpers/backend.ts for why not IS_TEST). */
export async function useNodeWebGpu(): Promise<NodeWebGpuAdapter> {
  tf.env().set('PROD', true);
  const a = await setNodeWebGpuBackend();
  if (tf.getBackend() !== 'webgpu') throw new Error(`expected the webgpu backend, got ${tf.getBackend()}`);
  return a;
}

/** A skipped test that says why (call inside a describe when `webGpuAdapter()` gave null). */
export function skipWithoutAdapter(): void {
  it.skip(`SKIPPED: no WebGPU adapter in Node. ${NO_ADAPTER_HELP}`, () => {});
}
