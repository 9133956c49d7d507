/**
 * How many threads tfjs-backend-wasm runs its XNNPACK kernels on (matmuls, convolutions, elementwise binary ops).
 *
 * tfjs 4.22 loads its threaded SIMD build only on a cross-origin isolated page (SharedArrayBuffer; the app sends
 * COOP + COEP, vite.config.ts); elsewhere it runs one thread whatever is asked. The count must be set before the
 * WASM backend first starts (tfjs reads it once, in the backend's constructor): the worker sets the default when
 * it loads and an override from `init(pref, { wasmThreads })` (the app's `?wasmThreads=N`, the bench's page
 * parameter of the same name) before choosing a backend. docs/tfjs.md, "Cross-origin isolation and WASM threads".
 */

/**
 * At most this many: tfjs-backend-wasm clamps its count to 8 (MAX_NUM_THREADS), and its threaded build starts
 * 8 pthread workers up front (PTHREAD_POOL_SIZE).
 */
export const MAX_WASM_THREADS = 8;

/**
 * The thread count to give tfjs: `requested` when it is a positive integer, else one less than the machine's
 * logical cores (`navigator.hardwareConcurrency`; 1 when unknown), at least 1 and at most MAX_WASM_THREADS.
 * One core is left to the page's main thread (the charts) and the worker's own JavaScript (autodiff, our
 * kernels), which is most of what is not threaded: measured on a busy 2-core machine, a second XNNPACK thread
 * that has to wait for a core made the PPO update 1.5–5× slower, while on a free core a 512² matmul ran 1.57×
 * faster (docs/tfjs.md, "Cross-origin isolation and WASM threads").
 */
export function wasmThreadsFor(hardwareConcurrency: number | undefined, requested?: number | null): number {
  const want =
    requested != null && Number.isInteger(requested) && requested > 0
      ? requested
      : hardwareConcurrency != null && Number.isFinite(hardwareConcurrency) && hardwareConcurrency >= 1
        ? Math.max(1, Math.floor(hardwareConcurrency) - 1)
        : 1;
  return Math.min(want, MAX_WASM_THREADS);
}

/** `?wasmThreads=N` of a page's query string, when it is a positive integer. */
export function wasmThreadsParam(search: string): number | undefined {
  const raw = new URLSearchParams(search).get('wasmThreads');
  if (raw === null || !/^\d+$/.test(raw.trim())) return undefined;
  const n = Number(raw);
  return n > 0 ? n : undefined;
}

/**
 * Start the WASM backend (`start`, e.g. `() => tf.setBackend('wasm')`) on `threads` threads.
 *
 * tfjs-backend-wasm 4.22 gives its thread pool min(setThreadsCount's count, 8, ⌊logical cores / 2⌋), the last
 * read from navigator.hardwareConcurrency once, while its module starts (a guess at physical cores behind
 * hyper-threading): 1 thread on a 2-core machine whatever is asked. So the count is set, and the backend started
 * while navigator reports 2 × `threads` cores; the real value is back as soon as `start` settles. Where the WASM
 * backend has already started (tfjs reads both once) this changes nothing.
 */
export async function startWasmWithThreads<T>(
  threads: number,
  setThreadsCount: (n: number) => void,
  start: () => Promise<T>,
): Promise<T> {
  setThreadsCount(threads);
  const nav = (globalThis as { navigator?: object }).navigator;
  if (!nav) return start();
  const own = Object.getOwnPropertyDescriptor(nav, 'hardwareConcurrency');
  Object.defineProperty(nav, 'hardwareConcurrency', { configurable: true, get: () => 2 * threads });
  try {
    return await start();
  } finally {
    if (own) Object.defineProperty(nav, 'hardwareConcurrency', own);
    else delete (nav as { hardwareConcurrency?: number }).hardwareConcurrency;
  }
}
