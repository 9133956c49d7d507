/**
 * A SIMD batched matmul over the tfjs WASM backend's own heap (bmm.wat, assembled into bmm-wasm.ts).
 *
 * Why: tfjs-backend-wasm 4.22 sends every product with a batch > 1 to a scalar triple loop
 * (batch_mat_mul_impl.cc slow_batch_matmul, ~1 GFLOP/s here), and attention's q·kᵀ and att·v — forward and
 * backward — are batched over batch × heads. Our module imports the backend's WebAssembly.Memory, so it reads
 * and writes tensors in place: no copies. It is instantiated lazily per memory (the heap's Memory object stays
 * the same when it grows) and is unavailable where the memory is shared (the threaded build) or the engine
 * lacks SIMD; callers then keep tfjs's kernel.
 */
import { BMM_WASM } from './bmm-wasm';

type Bmm = (a: number, b: number, c: number, nb: number, M: number, K: number, N: number, sa: number, sb: number) => void;

/** Products run on this kernel (tests use it to see that the fast path really ran). */
export const bmmStats = { calls: 0 };

let cached: { memory: WebAssembly.Memory; bmm: Bmm } | null = null;
let unavailable = false;

/** The kernel bound to `memory`, or null where it cannot run. */
export function bmmFor(memory: WebAssembly.Memory | undefined): Bmm | null {
  if (!memory || unavailable) return null;
  if (cached?.memory === memory) return cached.bmm;
  const buf = memory.buffer as unknown as { constructor: { name: string } };
  if (buf.constructor.name === 'SharedArrayBuffer') return null;
  try {
    const inst = new WebAssembly.Instance(new WebAssembly.Module(BMM_WASM), { env: { memory } });
    cached = { memory, bmm: inst.exports.bmm as Bmm };
    return cached.bmm;
  } catch {
    unavailable = true; // no SIMD in this engine
    return null;
  }
}
