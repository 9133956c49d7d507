/**
 * SIMD kernels over the tfjs WASM backend's own heap: the batched matmul of bmm.wat (bmm-wasm.ts) and the fused
 * Adam update of adam.wat (adam-wasm.ts).
 *
 * Why the matmul: tfjs-backend-wasm 4.22 sends every product with a batch > 1 to a scalar triple loop
 * (batch_mat_mul_impl.cc slow_batch_matmul, ~1 GFLOP/s here), and attention's q·kᵀ and att·v — forward and
 * backward — are batched over batch × heads. Why Adam: a JS loop over the heap costs 10–40 ns per element here.
 * Each module imports the backend's WebAssembly.Memory, so it reads and writes tensors in place: no copies. They
 * are instantiated lazily per memory (the heap's Memory object stays the same when it grows) and are unavailable
 * where the memory is shared (the threaded build) or the engine lacks SIMD; callers then keep their other path.
 */
import { BMM_WASM } from './bmm-wasm';
import { ADAM_WASM } from './adam-wasm';

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

/** Products run on the matmul kernel (tests use it to see that the fast path really ran). */
export const bmmStats = { calls: 0 };

const instances = new Map<Uint8Array, { memory: WebAssembly.Memory; exports: Record<string, unknown> }>();
let unavailable = false;

function exportOf<T>(bytes: Uint8Array, name: string, memory: WebAssembly.Memory | undefined): T | null {
  if (!memory || unavailable) return null;
  const got = instances.get(bytes);
  if (got?.memory === memory) return got.exports[name] as T;
  const buf = memory.buffer as unknown as { constructor: { name: string } };
  if (buf.constructor.name === 'SharedArrayBuffer') return null;
  try {
    const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } });
    instances.set(bytes, { memory, exports: inst.exports });
    return inst.exports[name] as T;
  } catch {
    unavailable = true; // no SIMD in this engine
    return null;
  }
}

/** The batched matmul bound to `memory`, or null where it cannot run. */
export function bmmFor(memory: WebAssembly.Memory | undefined): Bmm | null {
  return exportOf<Bmm>(BMM_WASM, 'bmm', memory);
}

/** The Adam update bound to `memory`, or null where it cannot run. */
export function adamFor(memory: WebAssembly.Memory | undefined): Adam | null {
  return exportOf<Adam>(ADAM_WASM, 'adam', memory);
}
