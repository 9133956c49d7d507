/**
 * WebGPU in Node through Dawn (the `webgpu` npm package: Dawn's Node binding with a prebuilt dawn.node), so the
 * CLI can train on a GPU wherever one exists and Vitest can test the WGSL kernels without a browser
 * (docs/formats.md §8, docs/tfjs.md).
 *
 * Dawn needs a Vulkan loader (libvulkan.so.1) and a Vulkan driver. In order, this tries:
 * 1. the system's loader and drivers as the environment gives them (a GPU vendor's driver, Mesa's lavapipe from
 *    `libvulkan1 mesa-vulkan-drivers`, or whatever LD_LIBRARY_PATH / VK_ICD_FILENAMES point at);
 * 2. Chromium's own copies (Debian's `chromium` ships libvulkan.so.1 and the SwiftShader driver in
 *    /usr/lib/chromium): its loader is loaded into the process by absolute path (RTLD_NODELETE, so that Dawn's
 *    later dlopen("libvulkan.so.1") finds it already loaded: no re-exec with LD_LIBRARY_PATH needed) and
 *    VK_ICD_FILENAMES is pointed at its SwiftShader ICD (the loader reads it when Dawn creates its instance).
 * `PPO_WEBGPU_VULKAN=system|chromium` takes one of the two only.
 * Measured on Debian 12 (2 cores, no GPU): Chromium's SwiftShader gives a 512² matmul at ~0.1–0.3 GFLOP/s and a
 * width-64 two-layer forward in ~0.65 s; Debian 12's lavapipe (Mesa 22.3, `libvulkan1 mesa-vulkan-drivers`) gives
 * no adapter at all (this Dawn requires shaderUniform*ArrayDynamicIndexing, which it lacks). So the tests here
 * run on SwiftShader, which `apt-get install chromium` (CI installs it for the end-to-end tests) brings along.
 *
 * tfjs-backend-webgpu registers its backend at import time only when `navigator.gpu` exists, so it is imported
 * here, after the globals are in place.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { UserError } from '../common/errors';
import { dawnWaitMode, installDawnSleep, type DawnWait } from './dawn-wait';
import { registerWebGpuAddNChunked } from '../core/kernels/webgpu-addn';
import { storageBuffersPerProgram } from '../core/kernels/webgpu-common';
import { useWebGpuDeviceLimits } from '../core/backend/webgpu-device';
import {
  setWebGpuHeadRows,
  setWebGpuLinearFastTiles,
  setWebGpuLinearVecRows,
} from '../core/kernels/webgpu-linear';
import {
  TUNE_SOFTWARE_SCALE,
  adapterTuneKey,
  describeKernelTuning,
  tuneWebGpuLinear,
  type RememberedTuning,
  type TuneStore,
  type WebGpuKernelTuning,
} from '../core/backend/webgpu-tune';

export interface NodeWebGpuAdapter {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** A CPU implementation of Vulkan (SwiftShader, lavapipe/llvmpipe): correct, but far slower than WASM. */
  software: boolean;
  /** Where the Vulkan loader and driver came from. */
  vulkan: 'system' | 'chromium';
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  /**
   * Storage buffers a program may bind on the device made (the adapter's, asked for by core/backend/webgpu-device.ts;
   * 8 by WebGPU's default): whether the decode's 9–10-buffer programs run there. Set by setNodeWebGpuBackend.
   */
  storageBuffersPerProgram?: number;
  /**
   * The Dawn instance options this process runs under (dawnCreateOptions: `PPO_DAWN_TOGGLES` / `PPO_DAWN_DISABLE`),
   * so that a run's record says which toggles its figures were measured with; [] for Dawn's defaults.
   */
  dawnOptions?: string[];
  /** How this process waits for Dawn's promises (src/cli/dawn-wait.ts): set by initNodeWebGpu. */
  wait?: DawnWait;
  /**
   * The fused linear's kernels as timed on this device when the backend started (core/backend/webgpu-tune.ts):
   * each form on or off and why. Set by setNodeWebGpuBackend.
   */
  kernels?: WebGpuKernelTuning;
}

type DawnModule = { create(flags: string[]): GPU; globals: Record<string, unknown> };
type GPU = { requestAdapter(o?: { powerPreference?: string }): Promise<GPUAdapterLike | null> };
interface GPUAdapterLike {
  info?: { vendor?: string; architecture?: string; device?: string; description?: string };
  isFallbackAdapter?: boolean;
  limits: { maxStorageBufferBindingSize: number; maxBufferSize: number };
}

/** Where Chromium keeps its own Vulkan loader and SwiftShader (Debian/Ubuntu/Fedora layouts). */
export const CHROMIUM_VULKAN_DIRS = ['/usr/lib/chromium', '/usr/lib64/chromium', '/usr/lib/chromium-browser'];
const RTLD_NODELETE = 0x1000; // glibc and musl; not in os.constants.dlopen

export const NO_ADAPTER_HELP =
  'WebGPU in Node (Dawn) found no adapter: it needs a Vulkan loader and a Vulkan driver. Install one of: ' +
  '`apt-get install chromium` (its libvulkan.so.1 and SwiftShader in /usr/lib/chromium are found automatically), ' +
  "`apt-get install libvulkan1 mesa-vulkan-drivers` (the system loader and Mesa's lavapipe; Debian 12's Mesa 22.3 is too old for this Dawn), " +
  "or your GPU vendor's Vulkan driver. Or point the loader yourself: " +
  'LD_LIBRARY_PATH=<dir with libvulkan.so.1> VK_ICD_FILENAMES=<driver ICD json>. ' +
  'Without a GPU, `--backend wasm` is the fast choice.';

let dawn: DawnModule | null = null;
let found: Found | null = null;

async function loadDawn(): Promise<DawnModule> {
  if (dawn) return dawn;
  try {
    dawn = (await import('webgpu')) as unknown as DawnModule;
  } catch (e) {
    throw new UserError(
      `WebGPU in Node needs the optional npm package "webgpu" (Dawn's Node binding), which did not load: ${(e as Error).message}. ` +
        'Run `npm install` (it is in optionalDependencies) on linux-x64/arm64, macOS or Windows.',
    );
  }
  return dawn;
}

function describe(a: GPUAdapterLike, vulkan: NodeWebGpuAdapter['vulkan']): NodeWebGpuAdapter {
  const i = a.info ?? {};
  const s = (x: unknown) => (typeof x === 'string' ? x : '');
  const text = `${s(i.vendor)} ${s(i.architecture)} ${s(i.device)} ${s(i.description)}`.toLowerCase();
  return {
    vendor: s(i.vendor),
    architecture: s(i.architecture),
    device: s(i.device),
    description: s(i.description),
    software: !!a.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe|software/.test(text),
    vulkan,
    maxStorageBufferBindingSize: a.limits.maxStorageBufferBindingSize,
    maxBufferSize: a.limits.maxBufferSize,
  };
}

/** Whether a system libvulkan.so.1 is visible (on Linux; elsewhere assume yes and let Dawn look). */
function systemVulkanPresent(): boolean {
  if (process.platform !== 'linux') return true;
  const dirs = [
    ...(process.env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean),
    `/usr/lib/${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu`,
    '/usr/lib64',
    '/usr/lib',
    '/lib64',
    '/usr/local/lib',
  ];
  return dirs.some((d) => fs.existsSync(path.join(d, 'libvulkan.so.1')));
}

/** Load Chromium's libvulkan.so.1 into the process (kept loaded) and use its SwiftShader ICD; null if absent. */
function preloadChromiumVulkan(): string | null {
  if (process.platform !== 'linux') return null;
  for (const dir of CHROMIUM_VULKAN_DIRS) {
    const lib = path.join(dir, 'libvulkan.so.1');
    const icd = path.join(dir, 'vk_swiftshader_icd.json');
    if (!fs.existsSync(lib) || !fs.existsSync(icd)) continue;
    try {
      // Not a Node addon, so this throws "did not self-register" — after the library is loaded for good.
      process.dlopen({ exports: {} } as NodeJS.Module, lib, os.constants.dlopen.RTLD_NOW | RTLD_NODELETE);
    } catch {
      /* expected */
    }
    process.env.VK_ICD_FILENAMES = icd;
    return dir;
  }
  return null;
}

type Found = { gpu: GPU; adapter: NodeWebGpuAdapter };

/**
 * Dawn's instance options from the environment: `PPO_DAWN_TOGGLES` turns Dawn toggles on, `PPO_DAWN_DISABLE` off
 * (comma-separated names, e.g. `PPO_DAWN_TOGGLES=disable_robustness`). Dawn hands them to every device it makes,
 * tfjs's included, for the whole process. For timing on a real GPU (docs/gpu.md, "Dawn toggles"); unset, Dawn's
 * defaults, which are what a browser runs.
 */
export function dawnCreateOptions(env: NodeJS.ProcessEnv = process.env): string[] {
  const out: string[] = [];
  for (const [key, flag] of [
    ['PPO_DAWN_TOGGLES', 'enable-dawn-features'],
    ['PPO_DAWN_DISABLE', 'disable-dawn-features'],
  ] as const) {
    const v = env[key]?.trim();
    if (!v) continue;
    if (!/^[a-z0-9_]+(,[a-z0-9_]+)*$/.test(v)) {
      throw new UserError(
        `${key} must be Dawn toggle names separated by commas (such as "disable_robustness,disable_workgroup_init"), got "${v}".`,
      );
    }
    out.push(`${flag}=${v}`);
  }
  return out;
}

async function probe(d: DawnModule, vulkan: NodeWebGpuAdapter['vulkan']): Promise<Found | null> {
  const dawnOptions = dawnCreateOptions();
  const gpu = d.create(dawnOptions);
  const a = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  return a ? { gpu, adapter: { ...describe(a, vulkan), dawnOptions } } : null;
}

/**
 * Find a WebGPU adapter through Dawn and install `navigator.gpu` and the WebGPU globals (GPUBufferUsage, …) on
 * globalThis. Idempotent. Throws a UserError naming what to install when there is none.
 */
export async function initNodeWebGpu(): Promise<NodeWebGpuAdapter> {
  if (found) return found.adapter;
  const d = await loadDawn();
  const mode = process.env.PPO_WEBGPU_VULKAN ?? '';
  if (mode && mode !== 'system' && mode !== 'chromium') {
    throw new UserError(`PPO_WEBGPU_VULKAN must be "system" or "chromium", got "${mode}".`);
  }
  const tried: string[] = [];
  let hit: Found | null = null;
  if (mode !== 'chromium' && (mode === 'system' || systemVulkanPresent())) {
    hit = await probe(d, 'system');
    tried.push(
      'the system Vulkan loader' +
        (process.env.VK_ICD_FILENAMES ? ` (VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES})` : ''),
    );
  }
  if (!hit && mode !== 'system') {
    // (Without a system loader, probing it would only print Dawn's "Couldn't load Vulkan" warning.)
    const dir = preloadChromiumVulkan();
    tried.push(
      dir ? `Chromium's Vulkan in ${dir}` : `Chromium's Vulkan (none in ${CHROMIUM_VULKAN_DIRS.join(', ')})`,
    );
    if (dir) hit = await probe(d, 'chromium');
  }
  if (!hit) throw new UserError(`${NO_ADAPTER_HELP} (Tried: ${tried.join('; ')}.)`);
  hit.adapter.wait = dawnWaitMode(hit.adapter.software);
  if (hit.adapter.wait === 'sleep') installDawnSleep();
  found = hit;
  Object.assign(globalThis, d.globals);
  const nav = (globalThis as { navigator?: object }).navigator;
  if (nav) {
    Object.defineProperty(nav, 'gpu', { value: hit.gpu, configurable: true });
  } else {
    Object.defineProperty(globalThis, 'navigator', {
      value: { gpu: hit.gpu },
      configurable: true,
      writable: true,
    });
  }
  return hit.adapter;
}

/**
 * initNodeWebGpu, then register tfjs's WebGPU backend and make it current.
 *
 * WebGPU reports an invalid pipeline or binding as an "uncaptured error" event, never a throw, and drops the
 * command buffer it was in, so every kernel batched with it silently does nothing. With `fatalErrors` (the CLI)
 * the first such error ends the process with exit code 70 and the message on stderr: wrong numbers are worse
 * than no run. Tests pass false and collect them (tests/helpers/webgpu-node.ts).
 */
export async function setNodeWebGpuBackend(opts: { fatalErrors?: boolean } = {}): Promise<NodeWebGpuAdapter> {
  const adapter = await initNodeWebGpu();
  const { WebGPUBackend } = await import('@tensorflow/tfjs-backend-webgpu');
  registerWebGpuAddNChunked();
  if (!tf.findBackendFactory('webgpu')) {
    throw new UserError(
      'tfjs-backend-webgpu did not register its backend: navigator.gpu was not in place when it was first imported.',
    );
  }
  // The same device, with the adapter's storage buffers per program (core/backend/webgpu-device.ts).
  useWebGpuDeviceLimits(WebGPUBackend as never);
  applyTfjsFlags();
  applyVecRows();
  applyFastTiles();
  applyHeadRows();
  const ok = await tf.setBackend('webgpu');
  if (!ok)
    throw new UserError(`could not initialise the webgpu backend on adapter ${adapterLabel(adapter)}.`);
  await tf.ready();
  adapter.storageBuffersPerProgram = storageBuffersPerProgram();
  // The fused linear's forms timed on this device where no setting chose them (nothing timed on software adapters).
  const tune = tuneSetting();
  adapter.kernels = await tuneWebGpuLinear({
    software: adapter.software,
    skip: tune === false,
    force: tune === true,
    // Forced on a software adapter: smaller shapes (a check that it runs; its figures are a CPU's), not kept.
    scale: adapter.software ? TUNE_SOFTWARE_SCALE : 1,
    ...(adapter.software ? {} : { store: fileTuneStore(), adapterKey: adapterTuneKey(adapter) }),
  });
  if (opts.fatalErrors ?? true) {
    const device = (tf.backend() as unknown as { device: EventTarget }).device;
    device.addEventListener('uncapturederror', (e) => {
      const msg = (e as Event & { error?: { message?: string } }).error?.message ?? String(e);
      process.stderr.write(
        `internal error: WebGPU rejected a kernel (its results would be wrong), stopping: ${msg}\n`,
      );
      process.exit(70);
    });
  }
  return adapter;
}

/**
 * tfjs environment flags from `PPO_TFJS_FLAGS` (a JSON object, e.g. '{"WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE":64}'),
 * for experiments on real hardware; a clear error when it is not a JSON object of flag values.
 */
export function applyTfjsFlags(raw = process.env.PPO_TFJS_FLAGS): Record<string, unknown> {
  if (!raw) return {};
  let flags: unknown;
  try {
    flags = JSON.parse(raw);
  } catch {
    flags = null;
  }
  if (!flags || typeof flags !== 'object' || Array.isArray(flags)) {
    throw new UserError(
      `PPO_TFJS_FLAGS must be a JSON object of tfjs flags, e.g. '{"WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE":64}'; got ${raw}.`,
    );
  }
  for (const [k, v] of Object.entries(flags)) tf.env().set(k, v as tf.Tensor['dtype'] & number);
  return flags as Record<string, unknown>;
}

/**
 * `PPO_WEBGPU_VEC_ROWS`: "1" turns the few-rows program's vector loads on (setWebGpuLinearVecRows), "0" off; unset
 * leaves the default (what timing on the device chose, core/backend/webgpu-tune.ts). For timing (docs/gpu.md).
 */
export function applyVecRows(raw = process.env.PPO_WEBGPU_VEC_ROWS): boolean | null {
  const v = raw?.trim();
  if (!v) return null;
  if (v !== '0' && v !== '1') {
    throw new UserError(`PPO_WEBGPU_VEC_ROWS must be 1 (vector loads on) or 0 (off), got "${raw}".`);
  }
  setWebGpuLinearVecRows(v === '1');
  return v === '1';
}

/**
 * `PPO_WEBGPU_LINEAR_TILES`: "fast" runs the fused linear's tiled products (a minibatch's scoring and update) on
 * matMulFast's tile kernel (setWebGpuLinearFastTiles), "classic" on the 64 × 64 tiles; unset leaves the default
 * (what timing on the device chose, core/backend/webgpu-tune.ts). For timing (docs/gpu.md).
 */
export function applyFastTiles(raw = process.env.PPO_WEBGPU_LINEAR_TILES): boolean | null {
  const v = raw?.trim();
  if (!v) return null;
  if (v !== 'fast' && v !== 'classic') {
    throw new UserError(
      `PPO_WEBGPU_LINEAR_TILES must be "fast" (the tile kernel's 128 × 128 tiles) or "classic" (64 × 64), got "${raw}".`,
    );
  }
  setWebGpuLinearFastTiles(v === 'fast');
  return v === 'fast';
}

/**
 * `PPO_WEBGPU_HEAD_ROWS`: "1" runs an f32 LM head at decode through the few-rows program (setWebGpuHeadRows), "0"
 * through tfjs's matMul; unset leaves the default (what timing on the device chose, core/backend/webgpu-tune.ts).
 */
export function applyHeadRows(raw = process.env.PPO_WEBGPU_HEAD_ROWS): boolean | null {
  const v = raw?.trim();
  if (!v) return null;
  if (v !== '0' && v !== '1') {
    throw new UserError(
      `PPO_WEBGPU_HEAD_ROWS must be 1 (the f32 LM head at decode through the few-rows program) or 0 (tfjs's matMul), got "${raw}".`,
    );
  }
  setWebGpuHeadRows(v === '1');
  return v === '1';
}

/**
 * `PPO_WEBGPU_TUNE`: "0" skips timing the fused linear's kernels when the backend starts (both forms stay off unless
 * set), "1" times them again even where a timing is kept (tuneStorePath), and even on a software adapter (at a
 * sixteenth of the shapes; the figures say nothing of a GPU); unset: timed on hardware adapters, once per adapter
 * (core/backend/webgpu-tune.ts).
 */
export function tuneSetting(raw = process.env.PPO_WEBGPU_TUNE): boolean | null {
  const v = raw?.trim();
  if (!v) return null;
  if (v !== '0' && v !== '1') {
    throw new UserError(
      `PPO_WEBGPU_TUNE must be 0 (do not time the kernels) or 1 (time them again, even on a software adapter), got "${raw}".`,
    );
  }
  return v === '1';
}

/**
 * The file where the kernels' timings are kept by adapter (core/backend/webgpu-tune.ts TuneStore):
 * `$PPO_CACHE_DIR`, else `$XDG_CACHE_HOME/ppo-playground`, else `~/.cache/ppo-playground`, then
 * `webgpu-kernels.json`. Delete it (or set PPO_WEBGPU_TUNE=1 once) to time again.
 */
export function tuneStorePath(env: NodeJS.ProcessEnv = process.env): string {
  const dir =
    env.PPO_CACHE_DIR || path.join(env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'ppo-playground');
  return path.join(dir, 'webgpu-kernels.json');
}

/** A TuneStore in one JSON file (tuneStorePath): adapter key → timing. */
export function fileTuneStore(file = tuneStorePath()): TuneStore {
  const read = (): Record<string, RememberedTuning> => {
    try {
      const v = JSON.parse(fs.readFileSync(file, 'utf8')) as unknown;
      return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, RememberedTuning>) : {};
    } catch {
      return {};
    }
  };
  return {
    get: async (key) => read()[key] ?? null,
    set: async (key, value) => {
      const all = { ...read(), [key]: value };
      fs.mkdirSync(path.dirname(file), { recursive: true });
      const tmp = `${file}.${process.pid}.tmp`;
      fs.writeFileSync(tmp, JSON.stringify(all, null, 2) + '\n');
      fs.renameSync(tmp, file);
    },
  };
}

/** The kernels' choice in words (core/backend/webgpu-tune.ts), or null where the backend has not tuned. */
export function kernelsLabel(a: NodeWebGpuAdapter): string | null {
  return a.kernels ? describeKernelTuning(a.kernels) : null;
}

export function adapterLabel(a: NodeWebGpuAdapter): string {
  const name =
    [a.vendor, a.architecture, a.device].filter(Boolean).join(' / ') || a.description || 'unknown adapter';
  const buffers = a.storageBuffersPerProgram
    ? `, ${a.storageBuffersPerProgram} storage buffers a program`
    : '';
  const dawn = a.dawnOptions?.length ? `, Dawn ${a.dawnOptions.join(' ')}` : '';
  return `${name} (Vulkan: ${a.vulkan}${a.software ? ', software adapter' : ''}${buffers}${dawn})`;
}
