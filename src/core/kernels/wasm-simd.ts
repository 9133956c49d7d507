/**
 * SIMD kernels over the tfjs WASM backend's own heap: the batched matmul of bmm.wat (bmm-wasm.ts), the fused
 * Adam update of adam.wat (adam-wasm.ts), the arithmetic around gelu_new's and SwiGLU's sigmoids (gelu.wat, swiglu.wat) and layer norm (layernorm.wat).
 *
 * Why the matmul: tfjs-backend-wasm 4.22 sends every product with a batch > 1 to a scalar triple loop
 * (batch_mat_mul_impl.cc slow_batch_matmul, ~1 GFLOP/s here), and attention's q·kᵀ and att·v — forward and
 * backward — are batched over batch × heads. Why Adam: a JS loop over the heap costs 10–40 ns per element here.
 * Each module imports the backend's WebAssembly.Memory, so it reads and writes tensors in place: no copies. They
 * are instantiated lazily per memory (the heap's Memory object stays the same when it grows). tfjs's threaded
 * build (a cross-origin isolated page) has a shared memory, which only a module declaring its import `shared`
 * may import: each kernel also ships as that variant (scripts/build-wasm-kernels.ts), the same code, picked by
 * the memory's buffer type. The kernels run on the calling thread (the worker), between tfjs's kernels, while
 * XNNPACK's threads are idle. Unavailable where the engine lacks SIMD; callers then keep their other path.
 */
import type { DataType, TensorInfo } from '@tensorflow/tfjs-core';
import { BMM_SHARED_WASM, BMM_WASM } from './bmm-wasm';
import { ADAM_SHARED_WASM, ADAM_WASM } from './adam-wasm';
import { GELU_SHARED_WASM, GELU_WASM } from './gelu-wasm';
import { SWIGLU_SHARED_WASM, SWIGLU_WASM } from './swiglu-wasm';
import { LAYERNORM_SHARED_WASM, LAYERNORM_WASM } from './layernorm-wasm';

export type Bmm = (
  a: number,
  b: number,
  c: number,
  nb: number,
  M: number,
  K: number,
  N: number,
  sa: number,
  sb: number,
) => void;
export type Adam = (
  w: number,
  m: number,
  v: number,
  g: number,
  ow: number,
  om: number,
  ov: number,
  n: number,
  lr: number,
  b1: number,
  b2: number,
  bc1: number,
  bc2: number,
  eps: number,
  gs: number,
) => void;

/** gelu.wat's two functions (byte offsets of float32 arrays of n elements; the constants as float32). */
export interface Gelu {
  inner(x: number, out: number, n: number, c: number, k: number): void;
  grad(dy: number, x: number, s: number, out: number, n: number, k: number, k3: number): void;
}

/** swiglu.wat's two functions (byte offsets of float32 arrays of n elements). */
export interface Swiglu {
  fwd(g: number, s: number, u: number, out: number, n: number): void;
  bwd(dy: number, g: number, u: number, s: number, dg: number, du: number, n: number): void;
}

/** layernorm.wat's two functions (byte offsets; x, y, x̂, dy, dx [R, C], g, b, dg, db [C], r [R]). */
export interface LayerNormWasm {
  fwd(
    x: number,
    g: number,
    b: number,
    y: number,
    xh: number,
    r: number,
    R: number,
    C: number,
    eps: number,
  ): void;
  bwd(
    dy: number,
    xh: number,
    r: number,
    g: number,
    dx: number,
    dg: number,
    db: number,
    R: number,
    C: number,
  ): void;
}

/** Products run on the matmul kernel (tests use it to see that the fast path really ran). */
export const bmmStats = { calls: 0 };

/** A kernel's two builds: for a plain memory, and for a shared one (tfjs's threaded build). */
interface KernelBytes {
  plain: Uint8Array;
  shared: Uint8Array;
}
const BMM: KernelBytes = { plain: BMM_WASM, shared: BMM_SHARED_WASM };
const ADAM: KernelBytes = { plain: ADAM_WASM, shared: ADAM_SHARED_WASM };
const GELU: KernelBytes = { plain: GELU_WASM, shared: GELU_SHARED_WASM };
const SWIGLU: KernelBytes = { plain: SWIGLU_WASM, shared: SWIGLU_SHARED_WASM };
const LAYERNORM: KernelBytes = { plain: LAYERNORM_WASM, shared: LAYERNORM_SHARED_WASM };

/** What the project's WASM kernels use of tfjs-backend-wasm's backend object (not in tfjs's public types). */
export interface WasmBackendLike {
  wasm: {
    asm?: { memory?: WebAssembly.Memory };
    wasmMemory?: WebAssembly.Memory;
    HEAPU8: Uint8Array;
    /** tfjs-backend-wasm's own functions; getThreadsCount: the threads its XNNPACK kernels run on. */
    tfjs?: { getThreadsCount?: () => number };
  };
  dataIdMap: { get(dataId: unknown): { memoryOffset: number }; has(dataId: unknown): boolean };
  typedArrayFromHeap(t: TensorInfo): Float32Array | Int32Array | Uint8Array;
  makeOutput(shape: number[], dtype: DataType): TensorInfo;
  disposeData(dataId: unknown): boolean;
}

/** Byte offset of a tensor's data on the backend's heap (where the WebAssembly kernels read and write it). */
export function heapOffset(bk: WasmBackendLike, t: TensorInfo): number {
  return bk.dataIdMap.get(t.dataId).memoryOffset;
}

/** Whether `memory` is shared (its buffer a SharedArrayBuffer, from any realm). */
export function isSharedMemory(memory: WebAssembly.Memory): boolean {
  return Object.prototype.toString.call(memory.buffer) === '[object SharedArrayBuffer]';
}

/**
 * The heap of a tfjs WASM backend module (`backend.wasm`): the single-threaded builds export their memory
 * (`asm.memory`); the threaded build imports a shared one, which Emscripten keeps as `wasmMemory`.
 */
export function heapMemory(
  wasm: { asm?: { memory?: WebAssembly.Memory }; wasmMemory?: WebAssembly.Memory } | undefined,
): WebAssembly.Memory | undefined {
  return wasm?.asm?.memory ?? wasm?.wasmMemory;
}

const instances = new WeakMap<WebAssembly.Memory, Map<Uint8Array, Record<string, unknown>>>();
/** Builds this engine cannot instantiate (no SIMD, or no threads for the shared one). */
const failed = new Set<Uint8Array>();

function exportOf<T>(kernel: KernelBytes, name: string, memory: WebAssembly.Memory | undefined): T | null {
  if (!memory) return null;
  const bytes = isSharedMemory(memory) ? kernel.shared : kernel.plain;
  if (failed.has(bytes)) return null;
  let perMemory = instances.get(memory);
  const got = perMemory?.get(bytes);
  if (got) return got[name] as T;
  try {
    const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } });
    if (!perMemory) instances.set(memory, (perMemory = new Map()));
    perMemory.set(bytes, inst.exports);
    return inst.exports[name] as T;
  } catch {
    failed.add(bytes);
    return null;
  }
}

/** The batched matmul bound to `memory` (plain or shared), or null where it cannot run. */
export function bmmFor(memory: WebAssembly.Memory | undefined): Bmm | null {
  return exportOf<Bmm>(BMM, 'bmm', memory);
}

/** The Adam update bound to `memory` (plain or shared), or null where it cannot run. */
export function adamFor(memory: WebAssembly.Memory | undefined): Adam | null {
  return exportOf<Adam>(ADAM, 'adam', memory);
}

/** gelu.wat's functions bound to `memory` (plain or shared), or null where they cannot run. */
export function geluFor(memory: WebAssembly.Memory | undefined): Gelu | null {
  const inner = exportOf<Gelu['inner']>(GELU, 'gelu_inner', memory);
  const grad = exportOf<Gelu['grad']>(GELU, 'gelu_grad', memory);
  return inner && grad ? { inner, grad } : null;
}

/** swiglu.wat's functions bound to `memory` (plain or shared), or null where they cannot run. */
export function swigluFor(memory: WebAssembly.Memory | undefined): Swiglu | null {
  const fwd = exportOf<Swiglu['fwd']>(SWIGLU, 'swiglu_fwd', memory);
  const bwd = exportOf<Swiglu['bwd']>(SWIGLU, 'swiglu_bwd', memory);
  return fwd && bwd ? { fwd, bwd } : null;
}

/** layernorm.wat's functions bound to `memory` (plain or shared), or null where they cannot run. */
export function layerNormFor(memory: WebAssembly.Memory | undefined): LayerNormWasm | null {
  const fwd = exportOf<LayerNormWasm['fwd']>(LAYERNORM, 'ln_fwd', memory);
  const bwd = exportOf<LayerNormWasm['bwd']>(LAYERNORM, 'ln_bwd', memory);
  return fwd && bwd ? { fwd, bwd } : null;
}
