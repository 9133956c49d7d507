/**
 * The register-blocked GEMM of gemm.wat (bytes in gemm-wasm.ts) bound to a WebAssembly.Memory — the tfjs WASM
 * heap, or any other. Four builds: relaxed SIMD (f32x4.relaxed_madd, a fused multiply-add where the hardware has
 * one) or plain SIMD (mul then add), each for a plain or a shared memory (tfjs's threaded build). Relaxed SIMD is
 * detected with WebAssembly.validate on a tiny module (RELAXED_SIMD_PROBE): Chrome 114+, Node 22+, Node 20 only
 * with --experimental-wasm-relaxed-simd (enableRelaxedSimd sets that flag at run time).
 *
 * Usage: `packA` A into packedABytes(M, K) bytes of scratch and `packB` B into packedBBytes(K, N) (or once, for a
 * frozen weight), from any strides (Aᵀ and Bᵀ are A and B with the strides swapped); then `gemm` writes C = A·B with
 * row stride ldc.
 */
import {
  GEMM_RELAXED_SHARED_WASM,
  GEMM_RELAXED_WASM,
  GEMM_SHARED_WASM,
  GEMM_WASM,
  RELAXED_SIMD_PROBE,
} from './gemm-wasm';

export interface Gemm {
  /** Whether this instance is the relaxed-SIMD build. */
  relaxed: boolean;
  /** Pack A (M×K, element [i, k] at byte a + 4·(i·rsa + k·csa)) into strips at byte dst (packedABytes(M, K)). */
  packA(a: number, rsa: number, csa: number, M: number, K: number, dst: number): void;
  /** Pack B (K×N, element [k, j] at byte b + 4·(k·rsb + j·csb)) into panels at byte dst (packedBBytes(K, N)). */
  packB(b: number, rsb: number, csb: number, K: number, N: number, dst: number): void;
  /** C = A·B from packed A at pa and packed B at pb; C[i, j] at byte c + 4·(i·ldc + j). */
  gemm(pa: number, pb: number, c: number, ldc: number, M: number, K: number, N: number): void;
  /**
   * C = A·Bᵀ read in place, for a few rows of A: A M×K (row stride lda elements), B N×K (row stride ldb), C[i, j] at
   * byte c + 4·(i·ldc + j); K a multiple of 4 (GEMM_NT_K_MULTIPLE).
   */
  gemmNT(
    a: number,
    lda: number,
    b: number,
    ldb: number,
    c: number,
    ldc: number,
    M: number,
    K: number,
    N: number,
  ): void;
}

/** gemmNT reads K in steps of one f32x4: K must be a multiple of this. */
export const GEMM_NT_K_MULTIPLE = 4;

/** Rows per packed strip of A and columns per packed panel of B: the microkernel's tile. */
export const GEMM_MR = 4;
export const GEMM_NR = 8;

/** Bytes of A (M×K) packed: ⌈M/4⌉ strips of K×4 floats. */
export function packedABytes(M: number, K: number): number {
  return 4 * K * GEMM_MR * Math.ceil(M / GEMM_MR);
}
/** Bytes of B (K×N) packed: ⌈N/8⌉ panels of K×8 floats. */
export function packedBBytes(K: number, N: number): number {
  return 4 * K * GEMM_NR * Math.ceil(N / GEMM_NR);
}

let relaxedKnown: boolean | undefined;
/** Whether this engine validates relaxed SIMD (asked once; enableRelaxedSimd resets it). */
export function relaxedSimdSupported(): boolean {
  if (relaxedKnown === undefined) {
    try {
      relaxedKnown = typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_SIMD_PROBE);
    } catch {
      relaxedKnown = false;
    }
  }
  return relaxedKnown;
}
/** Forget the cached answer of relaxedSimdSupported (after the engine's flags changed). */
export function resetRelaxedSimdProbe(): void {
  relaxedKnown = undefined;
}

function isShared(memory: WebAssembly.Memory): boolean {
  return Object.prototype.toString.call(memory.buffer) === '[object SharedArrayBuffer]';
}

const instances = new WeakMap<WebAssembly.Memory, Map<Uint8Array, Gemm>>();
const failed = new Set<Uint8Array>();

/**
 * The GEMM bound to `memory`, or null where it cannot run (no SIMD; no threads for a shared memory; relaxed asked
 * for and missing). `relaxed`: true forces the relaxed build, false the plain one, undefined the best available.
 */
export function gemmFor(
  memory: WebAssembly.Memory | undefined,
  opts: { relaxed?: boolean } = {},
): Gemm | null {
  if (!memory) return null;
  const relaxed = opts.relaxed ?? relaxedSimdSupported();
  if (relaxed && !relaxedSimdSupported()) return null;
  const shared = isShared(memory);
  const bytes = relaxed
    ? shared
      ? GEMM_RELAXED_SHARED_WASM
      : GEMM_RELAXED_WASM
    : shared
      ? GEMM_SHARED_WASM
      : GEMM_WASM;
  if (failed.has(bytes)) return null;
  let perMemory = instances.get(memory);
  const got = perMemory?.get(bytes);
  if (got) return got;
  try {
    const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } });
    const e = inst.exports as unknown as {
      pack_a: Gemm['packA'];
      pack_b: Gemm['packB'];
      gemm: Gemm['gemm'];
      gemm_nt: Gemm['gemmNT'];
    };
    const g: Gemm = { relaxed, packA: e.pack_a, packB: e.pack_b, gemm: e.gemm, gemmNT: e.gemm_nt };
    if (!perMemory) instances.set(memory, (perMemory = new Map()));
    perMemory.set(bytes, g);
    return g;
  } catch {
    failed.add(bytes);
    return null;
  }
}

/**
 * Node only (elsewhere a no-op that reports relaxedSimdSupported()): turn on relaxed SIMD in this process. Node 20's
 * V8 ships it behind --experimental-wasm-relaxed-simd (on by default from Node 22); V8 reads wasm feature flags
 * when it validates a module, so setting the flag at run time, before the GEMM is first instantiated, is enough —
 * no re-exec, no NODE_OPTIONS, child processes unaffected. node:v8 is reached through process.getBuiltinModule
 * (Node ≥ 20.16), so browser bundles never import it. Returns whether relaxed SIMD validates afterwards.
 */
export function enableRelaxedSimd(): boolean {
  if (relaxedSimdSupported()) return true;
  const proc = (
    globalThis as {
      process?: {
        getBuiltinModule?: (id: string) => { setFlagsFromString?(flags: string): void } | undefined;
      };
    }
  ).process;
  const v8 = proc?.getBuiltinModule?.('node:v8');
  if (!v8?.setFlagsFromString) return false;
  try {
    v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
  } catch {
    return false;
  }
  resetRelaxedSimdProbe();
  return relaxedSimdSupported();
}
