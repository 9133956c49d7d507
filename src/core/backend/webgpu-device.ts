/**
 * The GPUDevice tfjs's WebGPU backend runs on, asked for with the adapter's own storage-buffer limit.
 *
 * tfjs-backend-webgpu 4.22 registers a factory that requests a device with six of the adapter's limits (workgroup
 * storage, workgroups per dimension, buffer sizes, workgroup size) and leaves `maxStorageBuffersPerShaderStage` at
 * WebGPU's default of 8. A program of ours that binds more (the decode attention that also writes the new key and value
 * into the cache, the q|k|v projection reading each LoRA B where it lies: docs/tfjs.md, "Storage buffers per program")
 * is then refused. Adapters offer more: Dawn's SwiftShader in Node 12, Chromium's SwiftShader 10 (Chrome rounds adapter
 * limits to tiers; e2e/pages/kernels.ts reports it), desktop GPUs typically 10 or more. `useWebGpuDeviceLimits`
 * replaces tfjs's factory (before any backend instance exists) by the same one that also asks for the adapter's
 * `maxStorageBuffersPerShaderStage`; everything else is tfjs's (its features: timestamp-query and bgra8unorm-storage
 * where offered; its power preference flag; the WebGPUBackend class itself). Programs read the device's limit through
 * kernels/webgpu-common.ts `storageBuffersPerProgram()` and fall back to their smaller variants where it is 8, so the
 * numbers never depend on it.
 */
import * as tf from '@tensorflow/tfjs-core';

/** The WebGPU members the factory uses (TypeScript's DOM / worker libs have no WebGPU types here). */
interface AdapterLike {
  features: { has(name: string): boolean };
  limits: Record<string, number>;
  info?: unknown;
  requestAdapterInfo?: () => Promise<unknown>;
  requestDevice(descriptor: {
    requiredFeatures: string[];
    requiredLimits: Record<string, number>;
  }): Promise<unknown>;
}
type BackendClass = new (device: never, adapterInfo?: never) => tf.KernelBackend;

/** The limits tfjs-backend-webgpu 4.22's factory requests, and the one it leaves at the default. */
export const TFJS_REQUESTED_LIMITS = [
  'maxComputeWorkgroupStorageSize',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupSizeX',
  'maxComputeInvocationsPerWorkgroup',
] as const;
const STORAGE_BUFFERS_LIMIT = 'maxStorageBuffersPerShaderStage';

const OURS = Symbol('ppo-webgpu-factory');

/** The device descriptor our factory requests from `adapter`: tfjs's, plus the adapter's storage-buffer limit. */
export function deviceDescriptorFor(adapter: Pick<AdapterLike, 'features' | 'limits'>): {
  requiredFeatures: string[];
  requiredLimits: Record<string, number>;
} {
  const requiredFeatures = ['timestamp-query', 'bgra8unorm-storage'].filter((f) => adapter.features.has(f));
  const requiredLimits: Record<string, number> = {};
  for (const k of [...TFJS_REQUESTED_LIMITS, STORAGE_BUFFERS_LIMIT]) {
    const v = adapter.limits[k];
    if (typeof v === 'number') requiredLimits[k] = v;
  }
  return { requiredFeatures, requiredLimits };
}

/**
 * Replace tfjs-backend-webgpu's 'webgpu' factory by one that requests the adapter's storage-buffer limit too
 * (above). `Backend` is tfjs-backend-webgpu's WebGPUBackend (passed in, so that this module does not import the
 * package: in Node it must be imported only once navigator.gpu is in place). Does nothing where no 'webgpu'
 * factory is registered (no navigator.gpu), where a WebGPU backend instance already exists (its device is made),
 * or where ours is already in place. Returns whether ours is the registered factory afterwards.
 */
export function useWebGpuDeviceLimits(Backend: BackendClass): boolean {
  const existing = tf.findBackendFactory('webgpu') as
    (((...a: never[]) => unknown) & { [OURS]?: true }) | null;
  if (!existing) return false;
  if (existing[OURS]) return true;
  const engine = tf.engine() as unknown as {
    registry: Record<string, unknown>;
    backendName: string | null;
    pendingBackendInit: unknown;
  };
  // A device made, or being made (removing the factory would orphan that init): leave tfjs's in place.
  if (engine.registry.webgpu) return false;
  if (engine.backendName === 'webgpu' && engine.pendingBackendInit != null) return false;
  const factory = Object.assign(
    async (): Promise<tf.KernelBackend> => {
      const gpu = (globalThis as { navigator?: { gpu?: { requestAdapter(o: object): Promise<unknown> } } })
        .navigator?.gpu;
      if (!gpu) throw new Error('WebGPU: navigator.gpu is gone.');
      const adapter = (await gpu.requestAdapter({
        powerPreference: tf.env().get('WEBGPU_USE_LOW_POWER_GPU') ? 'low-power' : 'high-performance',
      })) as AdapterLike | null;
      if (!adapter) throw new Error('WebGPU: the browser offers no adapter.');
      const device = await adapter.requestDevice(deviceDescriptorFor(adapter));
      const info =
        adapter.info ??
        (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo().catch(() => undefined) : undefined);
      return new Backend(device as never, info as never);
    },
    { [OURS]: true as const },
  );
  tf.removeBackend('webgpu');
  // tfjs-backend-webgpu's own priority.
  tf.registerBackend('webgpu', factory, 3);
  return true;
}
