/**
 * Choosing the tfjs backend inside the worker, and saying honestly what was chosen and why.
 *
 * `auto` prefers WebGPU on a hardware adapter. A software adapter (SwiftShader, or any adapter the browser
 * marks as a fallback) is correct but slower than WASM, so `auto` skips it and says so; naming `webgpu`
 * explicitly uses it anyway (the end-to-end tests do this to prove the WebGPU path on machines without a GPU).
 * An explicit choice that cannot start falls back along WASM → WebGL → CPU, with a notice naming what happened.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-webgl';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { getThreadsCount, setThreadsCount, setWasmPaths } from '@tensorflow/tfjs-backend-wasm';
// The WASM binaries ship with the app (hashed assets in a build), so the backend works offline.
import wasmPlainUrl from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm?url';
import wasmSimdUrl from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm?url';
import wasmThreadedSimdUrl from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-threaded-simd.wasm?url';
import type {
  BackendName,
  BackendOptions,
  BackendPref,
  BackendReport,
  AdapterReport,
  WasmThreadsReport,
} from './protocol';
import { startWasmWithThreads, wasmThreadsFor } from './wasm-threads';
import { WASM_HEAP_BYTES, type DeviceLimits } from './device-limits';
import { registerWebGpuAddNChunked } from '../core/kernels/webgpu-addn';
import { useWebGpuDeviceLimits } from '../core/backend/webgpu-device';
import { createStore, get as idbGet, set as idbSet, type UseStore } from 'idb-keyval';
import {
  TUNE_SOFTWARE_SCALE,
  adapterTuneKey,
  tuneWebGpuLinear,
  type RememberedTuning,
  type TuneStore,
} from '../core/backend/webgpu-tune';

// tfjs-webgpu's AddN of more than 7 tensors is an invalid pipeline that drops its whole command batch.
registerWebGpuAddNChunked();
// tfjs's device with the adapter's storage buffers per program (core/backend/webgpu-device.ts).
useWebGpuDeviceLimits(WebGPUBackend as never);

setWasmPaths({
  'tfjs-backend-wasm.wasm': wasmPlainUrl,
  'tfjs-backend-wasm-simd.wasm': wasmSimdUrl,
  'tfjs-backend-wasm-threaded-simd.wasm': wasmThreadedSimdUrl,
});

/** Whether the page is cross-origin isolated (SharedArrayBuffer: tfjs's threaded WASM build can load). */
const isolated = (): boolean =>
  (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === true;

/** Logical cores, where the environment says (a browser or worker; Node 20 has no navigator). */
const cores = (): number | undefined =>
  (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency;

/** The WASM backend's thread count, for when it starts (docs/tfjs.md, "Cross-origin isolation and WASM threads"). */
let wasmThreads = wasmThreadsFor(cores());
// Also tfjs's own setting, in case something starts the backend other than trySetBackend.
setThreadsCount(wasmThreads);

/** Whether tfjs has built its WASM backend (it reads the thread count once, then). */
function wasmStarted(): boolean {
  try {
    getThreadsCount();
    return true;
  } catch {
    return false;
  }
}

/**
 * Apply `options` that must come before the WASM backend starts: the thread count (an override, else the
 * default). Once WASM has started in this worker its count is fixed; a later request changes nothing, and the
 * report says the count in use.
 */
export function applyBackendOptions(options: BackendOptions | undefined): void {
  if (!wasmStarted()) wasmThreads = wasmThreadsFor(cores(), options?.wasmThreads);
  if (options?.tuneKernels !== undefined) tuneOnSoftware = options.tuneKernels;
}

/** Whether the fused linear's kernels are timed on a software adapter too (BackendOptions.tuneKernels). */
let tuneOnSoftware = false;

/** The WASM backend's threads, when it is the current backend. */
export function wasmThreadsReport(): WasmThreadsReport | undefined {
  if (tf.getBackend() !== 'wasm' || !wasmStarted()) return undefined;
  return { threads: getThreadsCount(), isolated: isolated() };
}

/** What WASM → WebGL → CPU means when the preferred backend is unavailable. */
const FALLBACK_ORDER: BackendName[] = ['wasm', 'webgl', 'cpu'];

const LABEL: Record<BackendName, string> = { webgpu: 'WebGPU', wasm: 'WASM', webgl: 'WebGL', cpu: 'CPU' };

// The few WebGPU members we read. TypeScript's WebWorker lib has no WebGPU types (they live in @webgpu/types).
interface GpuAdapterInfoLike {
  vendor?: string;
  architecture?: string;
  description?: string;
  device?: string;
}
interface GpuAdapterLike {
  info?: GpuAdapterInfoLike;
  isFallbackAdapter?: boolean;
  requestAdapterInfo?: () => Promise<GpuAdapterInfoLike>;
}
interface GpuLike {
  requestAdapter(options?: {
    powerPreference?: 'low-power' | 'high-performance';
  }): Promise<GpuAdapterLike | null>;
}

/** The adapter tfjs-backend-webgpu would get (it asks for 'high-performance'), or why there is none. */
export async function probeWebGpu(): Promise<{ adapter: AdapterReport | null; reason: string | null }> {
  const gpu = (self.navigator as Navigator & { gpu?: GpuLike }).gpu;
  if (!gpu) return { adapter: null, reason: 'This browser has no WebGPU' };
  let adapter: GpuAdapterLike | null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (e) {
    return { adapter: null, reason: `WebGPU could not find an adapter (${(e as Error).message})` };
  }
  if (!adapter) return { adapter: null, reason: 'WebGPU is present but the browser offers no adapter' };
  const info: GpuAdapterInfoLike =
    adapter.info ?? (await adapter.requestAdapterInfo?.().catch(() => undefined)) ?? {};
  const vendor = info.vendor ?? '';
  const architecture = info.architecture ?? '';
  const description = info.description ?? info.device ?? '';
  const isSoftware =
    adapter.isFallbackAdapter === true ||
    (info as { isFallbackAdapter?: boolean }).isFallbackAdapter === true ||
    /swiftshader/i.test(`${vendor} ${architecture} ${description}`);
  return { adapter: { vendor, architecture, description, isSoftware }, reason: null };
}

async function trySetBackend(name: BackendName): Promise<boolean> {
  if (!tf.findBackendFactory(name)) return false;
  try {
    const set = () => tf.setBackend(name);
    const ok = await (name === 'wasm' && !wasmStarted()
      ? startWasmWithThreads(wasmThreads, setThreadsCount, set)
      : set());
    if (!ok) return false;
    await tf.ready();
    return tf.getBackend() === name;
  } catch {
    return false;
  }
}

function adapterName(a: AdapterReport): string {
  if (/swiftshader/i.test(`${a.vendor} ${a.architecture} ${a.description}`)) return 'SwiftShader';
  return [a.vendor, a.architecture].filter(Boolean).join(' ') || 'an unnamed adapter';
}

/**
 * Select a backend for `pref` and make it tfjs's current backend.
 * Never throws for an unavailable backend: it falls back and says so in `notice`.
 */
export async function selectBackend(pref: BackendPref): Promise<BackendReport> {
  const report = await chooseBackend(pref);
  const wasm = wasmThreadsReport();
  if (wasm) return { ...report, wasm };
  if (report.backend !== 'webgpu') return report;
  // The fused linear's forms timed on this device the first time (core/backend/webgpu-tune.ts), then remembered
  // per adapter in IndexedDB; on a software adapter only when the page asks, and not kept.
  const software = report.adapter?.isSoftware ?? true;
  const kernels = await tuneWebGpuLinear({
    software,
    force: tuneOnSoftware,
    scale: software ? TUNE_SOFTWARE_SCALE : 1,
    ...(software || !report.adapter
      ? {}
      : { store: idbTuneStore(), adapterKey: adapterTuneKey(report.adapter) }),
  });
  return { ...report, kernels };
}

let tuneDb: UseStore | null = null;

/**
 * The kernels' timings kept by adapter in IndexedDB (a database of their own), as the CLI keeps them in a file.
 * Opened on first use, inside the tuner's own error handling (no IndexedDB: timed every time).
 */
function idbTuneStore(): TuneStore {
  const use = (): UseStore => (tuneDb ??= createStore('ppo-webgpu-kernels', 'timings'));
  return {
    get: async (key) => ((await idbGet(key, use())) as RememberedTuning | undefined) ?? null,
    set: async (key, value) => idbSet(key, value, use()),
  };
}

async function chooseBackend(pref: BackendPref): Promise<BackendReport> {
  const probe = await probeWebGpu();
  const adapter = probe.adapter;

  // Which backend to try first, and what to say if we deliberately skip WebGPU.
  let first: BackendName;
  let notice: string | null = null;
  if (pref === 'auto') {
    if (adapter && !adapter.isSoftware) {
      first = 'webgpu';
    } else {
      first = 'wasm';
      notice = adapter
        ? `WebGPU is only available through a software adapter (${adapterName(adapter)}) here, so training uses WASM. Choose WebGPU to try it anyway.`
        : `${probe.reason}; using WASM.`;
    }
  } else {
    first = pref;
  }

  if (first === 'webgpu' && !adapter) {
    // Asking tfjs anyway would only log a failed initialisation; fall back with the probe's reason.
    const used = await firstAvailable(FALLBACK_ORDER);
    return { backend: used, adapter: null, notice: `${probe.reason}; using ${LABEL[used]} instead.` };
  }

  if (await trySetBackend(first)) {
    if (first === 'webgpu' && adapter?.isSoftware) {
      notice = `WebGPU is running on a software adapter (${adapterName(adapter)}): correct but slow. WASM is faster on this machine.`;
    }
    return { backend: first, adapter, notice };
  }

  const used = await firstAvailable(FALLBACK_ORDER.filter((b) => b !== first));
  const why = `${LABEL[first]} could not start in this browser; using ${LABEL[used]} instead.`;
  return { backend: used, adapter, notice: notice ? `${notice} ${why}` : why };
}

async function firstAvailable(order: BackendName[]): Promise<BackendName> {
  for (const name of order) if (await trySetBackend(name)) return name;
  throw new Error(`No tfjs backend could start (tried ${order.join(', ')}).`);
}

// ---- the live WebGPU device: limits, loss, rebuild ---------------------------------------------------------

/** The few GPUDevice members read here. */
export interface GpuDeviceLike {
  limits: { maxBufferSize?: number; maxStorageBufferBindingSize?: number };
  lost: Promise<{ reason?: string; message?: string }>;
  destroy(): void;
}

/** The device of tfjs's WebGPU backend when that is the current backend, else null. */
export function webgpuDevice(): GpuDeviceLike | null {
  if (tf.getBackend() !== 'webgpu') return null;
  const device = (tf.backend() as unknown as { device?: GpuDeviceLike }).device;
  return device ?? null;
}

/** What the current backend can hold (./device-limits.ts checks a model against it). */
export function currentDeviceLimits(): DeviceLimits | null {
  const name = tf.getBackend() as BackendName | undefined;
  if (name === 'webgpu') {
    const limits = webgpuDevice()?.limits;
    return {
      backend: 'webgpu',
      maxBufferSize: limits?.maxBufferSize,
      maxStorageBufferBindingSize: limits?.maxStorageBufferBindingSize,
    };
  }
  if (name === 'wasm') return { backend: 'wasm', heapBytes: WASM_HEAP_BYTES };
  return null;
}

/**
 * Make tfjs forget a WebGPU backend whose device is gone, so that the next setBackend('webgpu') builds a new
 * one (new adapter, new device). tfjs 4.22 keeps a backend instance per name for good; removeBackend drops the
 * instance *and* its factory, so the factory is taken first and registered again (same priority as
 * tfjs-backend-webgpu's own registration). Kernels stay registered (they are per backend name).
 */
export function forgetWebGpuBackend(): void {
  const factory = tf.findBackendFactory('webgpu');
  if (!factory) return;
  try {
    tf.removeBackend('webgpu');
  } catch {
    // Disposing a backend whose device is lost may throw half-way: drop the engine's entries by hand.
    const engine = tf.engine() as unknown as {
      registry: Record<string, unknown>;
      registryFactory: Record<string, unknown>;
      backendName: string | null;
      backendInstance: unknown;
      pendingBackendInit: unknown;
    };
    delete engine.registry.webgpu;
    delete engine.registryFactory.webgpu;
    if (engine.backendName === 'webgpu') {
      engine.backendName = null;
      engine.backendInstance = null;
      engine.pendingBackendInit = null;
    }
  }
  tf.registerBackend('webgpu', factory, 3);
}
