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

/**
 * Compiles the WebGPU programs that `fn` would run, without running them, with the event loop free. Node's Dawn
 * compiles a pipeline synchronously at its first use, so a model's first forward and backward on SwiftShader
 * holds the loop for tens of seconds (24 s alone, 68 s beside another worker for a 2-layer Qwen2.5-1.5B slice),
 * and Vitest fails the whole run when a worker cannot answer its RPC for 60 s ("Timeout calling onTaskUpdate").
 * tfjs's WEBGPU_ENGINE_COMPILE_ONLY mode records no dispatch and creates each new pipeline with
 * createComputePipelineAsync; `checkCompileCompletionAsync` then awaits them all (Dawn compiles them off the
 * loop, in parallel). `fn` must not read tensors back (its values are not computed); what it returns is disposed.
 */
export async function precompile(fn: () => tf.TensorContainer): Promise<void> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`precompile needs the webgpu backend, got ${tf.getBackend()}`);
  const backend = tf.backend() as unknown as { checkCompileCompletionAsync(): Promise<void> };
  tf.env().set('WEBGPU_ENGINE_COMPILE_ONLY', true);
  try {
    tf.dispose(tf.tidy(() => fn()));
  } finally {
    tf.env().set('WEBGPU_ENGINE_COMPILE_ONLY', false);
  }
  await backend.checkCompileCompletionAsync();
}
