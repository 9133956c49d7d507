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
  initNodeWebGpu,
  setNodeWebGpuBackend,
  type NodeWebGpuAdapter,
} from '../../src/cli/backend-webgpu-node';

let why = NO_ADAPTER_HELP;

/** The adapter Dawn finds here, or null (call at the top level of a test file: `await webGpuAdapter()`). */
export async function webGpuAdapter(): Promise<NodeWebGpuAdapter | null> {
  try {
    return await initNodeWebGpu();
  } catch (e) {
    why = (e as Error).message;
    return null;
  }
}

const errors: string[] = [];
let listening = false;

/**
 * Make tfjs's WebGPU backend current (PROD: no debug checks; see tests/helpers/backend.ts for why not IS_TEST),
 * and collect the device's uncaptured errors: WebGPU reports an invalid pipeline or binding that way, never as a
 * throw, and drops the command buffer it was in. Tests assert `webGpuErrors()` is empty.
 */
export async function useNodeWebGpu(): Promise<NodeWebGpuAdapter> {
  tf.env().set('PROD', true);
  const a = await setNodeWebGpuBackend({ fatalErrors: false });
  if (tf.getBackend() !== 'webgpu') throw new Error(`expected the webgpu backend, got ${tf.getBackend()}`);
  if (!listening) {
    const device = (tf.backend() as unknown as { device: EventTarget }).device;
    device.addEventListener('uncapturederror', (e) =>
      errors.push(String((e as Event & { error?: { message?: string } }).error?.message ?? e)),
    );
    listening = true;
  }
  return a;
}

/** Uncaptured WebGPU errors since the last call (then cleared); waits for the queue so late ones arrive. */
export async function webGpuErrors(): Promise<string[]> {
  const device = (tf.backend() as unknown as { device: { queue: { onSubmittedWorkDone(): Promise<void> } } })
    .device;
  await device.queue.onSubmittedWorkDone();
  await new Promise((r) => setTimeout(r, 0));
  return errors.splice(0);
}

/** A skipped test that says why (call inside a describe when `webGpuAdapter()` gave null). */
export function skipWithoutAdapter(): void {
  it.skip(`SKIPPED: no WebGPU adapter in Node. ${why}`, () => {});
}
