/**
 * Kernels the tfjs WASM backend (4.22) lacks but training needs. UnsortedSegmentSum is the gradient of
 * gather — of the token/position embeddings and of the gather-based log-softmax — so without it WASM can
 * run inference but not training. This plain-loop version runs on the WASM heap directly; tested against
 * the CPU backend's kernel.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { bmmFor, bmmStats, heapMemory, heapOffset, type WasmBackendLike } from './wasm-simd';
import {
  enableRelaxedSimd,
  GEMM_NT_K_MULTIPLE,
  gemmFor,
  packedABytes,
  packedBBytes,
  type Gemm,
} from './gemm-wasm-api';
import { registerWasmSharedIdentity } from './wasm-identity';
import { registerWasmWriteSlot } from './wasm-kv';
import { registerWasmActivations } from './wasm-activations';

/**
 * tfjs-backend-wasm 4.22's BatchMatMul runs XNNPACK only for a plain product with batch 1 on both sides;
 * anything with transposeA/transposeB or a batch > 1 goes to a scalar triple loop (0.5–1 GFLOP/s here against
 * ~14 for XNNPACK). Every matmul gradient uses the transpose flags and attention's products are batched over
 * batch × heads, so training spent most of its time in that loop. This wrapper:
 *  - transposes a flagged operand explicitly (a cheap copy), so the product is plain;
 *  - runs batched products (rank 3, batches equal or one side 1) on the SIMD kernel of wasm-simd.ts, in place
 *    on the heap;
 *  - leaves batch-1 products to XNNPACK, and one-row q·kᵀ (decoding) to tfjs's loop, which reads it in order.
 * Tested against the CPU backend's kernel (tests/perf-wasm-kernels.test.ts, tests/wasm-bmm.test.ts).
 */
/** Products computed as (B·Aᵀ)ᵀ (see fastMatMul), counted for the tests. */
export const swappedStats = { calls: 0 };

/**
 * The register-blocked GEMM of gemm.wat (relaxed-SIMD FMA where the engine has it, plain SIMD otherwise) for 2-D
 * products (batch 1 on both sides), in place of XNNPACK and of the explicit transposes: Aᵀ and Bᵀ are read
 * through their strides while packing. A is packed into scratch per call (O(M·K), small beside the product). B is
 * packed per call too, except a B read untransposed that comes back: from its second product on, its packed panels
 * are kept (one copy, as XNNPACK keeps its own packed copy of a weight it has seen) until the tensor's data is
 * freed. Bᵀ is never kept: a weight's dy·Wᵀ would otherwise hold a second packed copy of every weight. A·Bᵀ with
 * fewer than 64 rows while generating (the LM head's h·wteᵀ when decoding) runs on gemm_nt, reading B in place
 * (GEMM_NT_MAX_ROWS); otherwise with few rows, or a Bᵀ too large to pack per call, on XNNPACK's (B·Aᵀ)ᵀ route. On by default from registerWasmExtraKernels (measured at the default plan, bench --vs-trl: a GPT-2 124M
 * LoRA GRPO step 1.97× TRL's time against 2.47× on XNNPACK; docs/vs-trl.md); `setWasmGemm(false)`, or WASM_GEMM=0 in
 * Node (read when the kernels are registered), keeps XNNPACK, as does a backend on GEMM_MIN_XNNPACK_THREADS threads or
 * more (XNNPACK's matmul is threaded, gemm.wat is not). Where the engine has no SIMD, gemmFor returns null
 * and XNNPACK runs the product. `gemmStats` counts products, kept packings and their reuses (the tests read it).
 */
export const gemmStats = { calls: 0, packedKept: 0, packedReused: 0 };
/**
 * gemm.wat runs on one thread. tfjs-backend-wasm's threaded build (a cross-origin isolated page; the app's worker
 * takes the logical cores less one, src/worker/wasm-threads.ts) runs XNNPACK's matmul on all of its threads, so
 * from this many threads on products stay on XNNPACK. One XNNPACK thread runs 27–31 GFLOP/s here and two on free
 * cores took a 512² matmul 1.57× faster (docs/tfjs.md), about gemm.wat's 42–45 on one; three or more can only
 * pass it. Every Node process runs one thread (tfjs-backend-wasm has no threads in Node).
 */
export const GEMM_MIN_XNNPACK_THREADS = 3;
/** The threads tfjs-backend-wasm's kernels run on (its own count; 1 where it does not say). */
function wasmThreads(bk: WasmBackendLike): number {
  return bk.wasm.tfjs?.getThreadsCount?.() ?? 1;
}
/** Rows of A from which A·Bᵀ with a larger B runs on gemm.wat (B packed per call) rather than the swap. */
export const GEMM_BT_MIN_ROWS = 64;
/** The most bytes a per-call packing of Bᵀ may take for that route. */
export const GEMM_BT_MAX_PACKED_BYTES = 64 * 1024 * 1024;
/**
 * Rows of A up to which A·Bᵀ runs on gemm.wat's gemm_nt while generating (inside `whileGenerating`): A and B read
 * in place, each row of B streamed once per pair of rows of A, K a multiple of 4. Decoding's products with a weight
 * stored [out, in] (Llama's and Qwen's projections, the tied LM head over wte) and the prompt's forward through
 * them. Measured here (one thread, `npx tsx scripts/bench-gemm-nt.ts`, against the (B·Aᵀ)ᵀ route it replaces): at
 * 1 row 2.1–5.0× its speed (a Qwen2.5-0.5B MLP product 3.47 → 1.03 ms), at 4 rows 1.3–2.4×, at 12–63 rows
 * 1.2–1.5×; at exactly 8 rows XNNPACK's 8-wide tile fits and the swap was 4–8% faster on two of three shapes
 * (GPT-2's LM head 23.2 against 25.1 ms).
 *
 * Only while generating: gemm_nt sums each element in four lanes where gemm.wat sums in k order, so a training
 * product at a micro-batch's rows (under 64) would round unlike the whole minibatch's (gemm.wat from 64 rows): with
 * it in training the weights after a step at micro-batches of 4 moved 1.2–1.3e-5 from the whole minibatch's, past
 * issue #20's 1e-5 (tests/microbatch-step.slow.test.ts). Generation's own products are all under 64 rows at every
 * slice size of a test's batch, so a sliced generation rounds as the whole batch's does (the same tokens and
 * log-probs); limiting gemm_nt to 8 rows instead made 4-row slices round unlike a 16-row batch (5 failures there).
 */
export const GEMM_NT_MAX_ROWS = GEMM_BT_MIN_ROWS - 1;
/** Nesting depth of whileGenerating scopes (generation is one at a time; a counter keeps nesting safe). */
let generating = 0;
/**
 * Run `f` (a generation: prefill and decode steps, awaited) with A·Bᵀ under GEMM_NT_MAX_ROWS rows on gemm_nt.
 * Other backends ignore it.
 */
export async function whileGenerating<T>(f: () => Promise<T>): Promise<T> {
  generating++;
  try {
    return await f();
  } finally {
    generating--;
  }
}
let gemmNtMaxRows = GEMM_NT_MAX_ROWS;
/** Products gemm_nt computed (the tests read it). */
export const gemmNtStats = { calls: 0 };
/** Route A·Bᵀ with at most `rows` rows of A to gemm_nt (0: never), for tests and benches; returns the previous. */
export function setGemmNtMaxRows(rows: number): number {
  const was = gemmNtMaxRows;
  gemmNtMaxRows = rows;
  return was;
}
let gemmOn = false;
/** What setWasmGemm asked for (null: nothing yet; registerWasmExtraKernels then turns the route on). */
let gemmAsked: boolean | null = null;
/**
 * Route 2-D float32 products to gemm.wat (true) or keep XNNPACK (false). Turning it on enables relaxed SIMD in Node.
 * An explicit choice stands: registering the kernels later does not change it.
 */
export function setWasmGemm(on: boolean): void {
  gemmAsked = on;
  gemmOn = on;
  if (on) enableRelaxedSimd();
}
export function wasmGemmEnabled(): boolean {
  return gemmOn;
}

interface PackCache {
  /** B's dataId → its packed panels (a heap buffer of ours). */
  kept: WeakMap<object, tf.TensorInfo>;
  /** B's dataIds seen once (kept from their second product). */
  seen: WeakSet<object>;
}
const packCaches = new WeakMap<object, PackCache>();

/** The backend's cache of packed B, created with a hook that frees an entry when its tensor's data is freed. */
function packCacheOf(bk: WasmBackendLike): PackCache {
  let c = packCaches.get(bk);
  if (c) return c;
  const cache: PackCache = { kept: new WeakMap(), seen: new WeakSet() };
  c = cache;
  packCaches.set(bk, cache);
  const dispose = bk.disposeData.bind(bk) as (dataId: unknown, force?: boolean) => boolean;
  (bk as { disposeData: (dataId: unknown, force?: boolean) => boolean }).disposeData = (dataId, force) => {
    const r = dispose(dataId, force);
    const packed = cache.kept.get(dataId as object);
    if (packed && !bk.dataIdMap.has(dataId)) {
      cache.kept.delete(dataId as object);
      dispose(packed.dataId, true);
    }
    return r;
  };
  return c;
}

function gemmProduct(
  g: Gemm,
  bk: WasmBackendLike,
  a: tf.TensorInfo,
  b: tf.TensorInfo,
  ta: boolean,
  tb: boolean,
): tf.TensorInfo {
  const ra = a.shape.length;
  const rb = b.shape.length;
  const M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  const K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  const lead = (ra >= rb ? a.shape : b.shape).slice(0, -2);
  const out = bk.makeOutput([...lead, M, N], 'float32');
  if (M === 0 || N === 0) return out;
  const off = (t: tf.TensorInfo): number => heapOffset(bk, t);
  const temps: tf.TensorInfo[] = [];
  let pb: number;
  const cache = tb ? null : packCacheOf(bk);
  const key = b.dataId as object;
  const kept = cache?.kept.get(key);
  if (kept) {
    pb = off(kept);
    gemmStats.packedReused++;
  } else {
    const keep = cache !== null && cache.seen.has(key);
    const packed = bk.makeOutput([packedBBytes(K, N) / 4], 'float32');
    g.packB(off(b), tb ? 1 : N, tb ? K : 1, K, N, off(packed));
    pb = off(packed);
    if (keep) {
      cache.kept.set(key, packed);
      gemmStats.packedKept++;
    } else {
      cache?.seen.add(key);
      temps.push(packed);
    }
  }
  const pa = bk.makeOutput([packedABytes(M, K) / 4], 'float32');
  temps.push(pa);
  g.packA(off(a), ta ? 1 : K, ta ? M : 1, M, K, off(pa));
  g.gemm(off(pa), pb, off(out), N, M, K, N);
  for (const t of temps) bk.disposeData(t.dataId);
  gemmStats.calls++;
  return out;
}

/**
 * Rows of each product (M) from which a batched product (attention's q·kᵀ, probs·v and their gradients, batch ×
 * heads matrices) runs on gemm.wat, one product per batch element: the operands packed through their strides (no
 * transposed copy), the 4 × 8 tile. Its plain-SIMD build (f32x4.mul then f32x4.add, each sum in k order): bit for
 * bit what bmm.wat computed, so attention rounds as it did and no run's numbers move, only its speed (the relaxed
 * build's FMA moved the micro-batch test's weights past its 1e-5, tests/microbatch-step.slow.test.ts). Faster than
 * bmm.wat on the tiny model's and GPT-2's attention shapes (`npx tsx scripts/bench-wasm-gemm.ts --batched`,
 * docs/performance.md). Fewer rows (a decode step's single query row) keep bmm.wat and tfjs's loop, which do not
 * waste three quarters of a 4-row strip.
 */
export const GEMM_BATCHED_MIN_ROWS = 4;
/** Batched products gemm.wat computed (the tests read it). */
export const gemmBatchedStats = { calls: 0 };
let gemmBatchedMinRows = GEMM_BATCHED_MIN_ROWS;
/** Route batched products of at least `rows` rows to gemm.wat (Infinity: never), for tests and benches; returns the previous. */
export function setGemmBatchedMinRows(rows: number): number {
  const was = gemmBatchedMinRows;
  gemmBatchedMinRows = rows;
  return was;
}

/**
 * C[q] = A[q]·B[q] (either operand transposed, either broadcast over the batch when its batch is 1) on gemm.wat's
 * plain-SIMD build: per batch element A and B packed into one scratch each (a broadcast operand once), then the tile
 * loop. Each element of C is the float32 sum over k in increasing order, one multiply and one add a step: bmm.wat's
 * and a plain loop's value.
 */
function gemmBatchedProduct(
  g: Gemm,
  bk: WasmBackendLike,
  a: tf.TensorInfo,
  b: tf.TensorInfo,
  ta: boolean,
  tb: boolean,
): tf.TensorInfo {
  const [batchA, ra, ca] = a.shape;
  const [batchB, rb, cb] = b.shape;
  const M = ta ? ca : ra;
  const K = ta ? ra : ca;
  const N = tb ? rb : cb;
  const nb = Math.max(batchA, batchB);
  const out = bk.makeOutput([nb, M, N], 'float32');
  if (M === 0 || N === 0 || nb === 0) return out;
  const pa = bk.makeOutput([packedABytes(M, K) / 4], 'float32');
  const pb = bk.makeOutput([packedBBytes(K, N) / 4], 'float32');
  const off = (t: tf.TensorInfo): number => heapOffset(bk, t);
  const [oa, ob, oc, opa, opb] = [off(a), off(b), off(out), off(pa), off(pb)];
  for (let q = 0; q < nb; q++) {
    if (q === 0 || batchA > 1) g.packA(oa + 4 * q * M * K, ta ? 1 : K, ta ? M : 1, M, K, opa);
    if (q === 0 || batchB > 1) g.packB(ob + 4 * q * K * N, tb ? 1 : N, tb ? K : 1, K, N, opb);
    g.gemm(opa, opb, oc + 4 * q * M * N, N, M, K, N);
  }
  bk.disposeData(pa.dataId);
  bk.disposeData(pb.dataId);
  gemmBatchedStats.calls++;
  return out;
}

/** A·Bᵀ on gemm_nt (see GEMM_NT_MAX_ROWS): A [.., M, K] and B [.., N, K] read where they lie. */
function gemmNtProduct(g: Gemm, bk: WasmBackendLike, a: tf.TensorInfo, b: tf.TensorInfo): tf.TensorInfo {
  const ra = a.shape.length;
  const rb = b.shape.length;
  const M = a.shape[ra - 2];
  const K = a.shape[ra - 1];
  const N = b.shape[rb - 2];
  const lead = (ra >= rb ? a.shape : b.shape).slice(0, -2);
  const out = bk.makeOutput([...lead, M, N], 'float32');
  if (M === 0 || N === 0) return out;
  const off = (t: tf.TensorInfo): number => heapOffset(bk, t);
  g.gemmNT(off(a), K, off(b), K, off(out), N, M, K, N);
  gemmNtStats.calls++;
  return out;
}

/**
 * Put `kernelFunc` in place of tfjs-backend-wasm's kernel `name` (`orig`, read before), keeping its setup and
 * dispose functions: the shape of every override below that falls back to tfjs's own kernel for what it leaves.
 */
function replaceWasmKernel(
  name: string,
  orig: tf.KernelConfig,
  kernelFunc: tf.KernelConfig['kernelFunc'],
): void {
  tf.unregisterKernel(name, 'wasm');
  tf.registerKernel({
    kernelName: name,
    backendName: 'wasm',
    setupFunc: orig.setupFunc,
    disposeFunc: orig.disposeFunc,
    kernelFunc,
  });
}

function fastMatMul(): void {
  const orig = tf.getKernel('BatchMatMul', 'wasm');
  const transpose = tf.getKernel('Transpose', 'wasm');
  if (!orig || !transpose) return;
  const origFn = orig.kernelFunc as unknown as KernelFn;
  const transposeFn = transpose.kernelFunc as unknown as KernelFn;
  const swapLast = (x: tf.TensorInfo, backend: unknown): tf.TensorInfo => {
    const r = x.shape.length;
    const perm = Array.from({ length: r }, (_, i) => i);
    [perm[r - 2], perm[r - 1]] = [perm[r - 1], perm[r - 2]];
    return transposeFn({ inputs: { x }, backend, attrs: { perm } }) as tf.TensorInfo;
  };
  replaceWasmKernel('BatchMatMul', orig, ({ inputs, backend, attrs }) => {
    const { a, b } = inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
    const at = attrs as unknown as { transposeA: boolean; transposeB: boolean };
    const bk = backend as WasmBackendLike;
    const batchA = a.shape.slice(0, -2).reduce((x, y) => x * y, 1);
    const batchB = b.shape.slice(0, -2).reduce((x, y) => x * y, 1);
    const bmm =
      (batchA > 1 || batchB > 1) &&
      a.shape.length === 3 &&
      b.shape.length === 3 &&
      (batchA === batchB || batchA === 1 || batchB === 1) &&
      a.dtype === 'float32' &&
      b.dtype === 'float32'
        ? bmmFor(heapMemory(bk.wasm))
        : null;
    // A·Bᵀ with a large B and few rows of A goes to XNNPACK through the swap below, unless there are rows
    // enough (GEMM_BT_MIN_ROWS) to pay for packing Bᵀ on every call and Bᵀ packs into at most
    // GEMM_BT_MAX_PACKED_BYTES: a gradient's dy·Wᵀ at a micro-batch's rows runs 40.7–42.8 GFLOP/s on gemm.wat
    // against 26.8 through the swap (docs/performance.md); the LM head's x·wteᵀ (154 MB packed) keeps the swap.
    const swapCase = (): boolean => {
      const M = a.shape[a.shape.length - 2];
      const K = a.shape[a.shape.length - 1];
      const N = b.shape[b.shape.length - 2];
      if (!(at.transposeB && !at.transposeA && M * K + M * N < N * K)) return false;
      return M < GEMM_BT_MIN_ROWS || packedBBytes(K, N) > GEMM_BT_MAX_PACKED_BYTES;
    };
    const gemmHere = gemmOn && wasmThreads(bk) < GEMM_MIN_XNNPACK_THREADS;
    if (
      gemmHere &&
      batchA === 1 &&
      batchB === 1 &&
      at.transposeB &&
      !at.transposeA &&
      a.dtype === 'float32' &&
      b.dtype === 'float32'
    ) {
      const M = a.shape[a.shape.length - 2];
      const K = a.shape[a.shape.length - 1];
      if (generating > 0 && M <= gemmNtMaxRows && K % GEMM_NT_K_MULTIPLE === 0) {
        const g = gemmFor(heapMemory(bk.wasm));
        if (g) return gemmNtProduct(g, bk, a, b);
      }
    }
    if (
      gemmHere &&
      batchA === 1 &&
      batchB === 1 &&
      a.dtype === 'float32' &&
      b.dtype === 'float32' &&
      !swapCase()
    ) {
      const g = gemmFor(heapMemory(bk.wasm));
      if (g) return gemmProduct(g, bk, a, b, at.transposeA, at.transposeB);
    }
    if (gemmHere && bmm && (at.transposeA ? a.shape[2] : a.shape[1]) >= gemmBatchedMinRows) {
      const g = gemmFor(heapMemory(bk.wasm), { relaxed: false });
      if (g) return gemmBatchedProduct(g, bk, a, b, at.transposeA, at.transposeB);
    }
    if (!at.transposeA && !at.transposeB && !bmm) return origFn({ inputs, backend, attrs }) as tf.TensorInfo;
    // One-token decoding (q·kᵀ with one query row): tfjs's loop with transposeB is a run of contiguous dot
    // products, cheaper than copying the whole key cache into its transpose.
    if (bmm && at.transposeB && !at.transposeA && a.shape[1] < 4)
      return origFn({ inputs, backend, attrs }) as tf.TensorInfo;
    // A·Bᵀ with a large B and few rows of A (the LM head over wte [V, C]; a gradient's dy·Wᵀ): compute (B·Aᵀ)ᵀ
    // instead, which transposes A and the product (small) rather than B, and gives XNNPACK B as its input rather
    // than as its kernel. Its kernel (the operand it packs into a copy of its own, kept while that tensor lives)
    // is then the small Aᵀ, not a fresh transpose of wte (154 MB, and as much again packed, on every decode step).
    if (!bmm && at.transposeB && !at.transposeA && a.dtype === 'float32' && b.dtype === 'float32') {
      const M = a.shape[a.shape.length - 2];
      const K = a.shape[a.shape.length - 1];
      const N = b.shape[b.shape.length - 2];
      if (M * K + M * N < N * K) {
        swappedStats.calls++;
        const at2 = swapLast(a, backend);
        const prod = origFn({
          inputs: { a: b, b: at2 },
          backend,
          attrs: { ...attrs, transposeA: false, transposeB: false },
        }) as tf.TensorInfo;
        bk.disposeData(at2.dataId);
        const out = swapLast(prod, backend);
        bk.disposeData(prod.dataId);
        return out;
      }
    }
    const a2 = at.transposeA ? swapLast(a, backend) : a;
    const b2 = at.transposeB ? swapLast(b, backend) : b;
    let out: tf.TensorInfo;
    if (bmm) {
      const [M, K] = a2.shape.slice(1);
      const N = b2.shape[2];
      const nb = Math.max(batchA, batchB);
      out = bk.makeOutput([nb, M, N], 'float32');
      const off = (t: tf.TensorInfo): number => heapOffset(bk, t);
      bmm(off(a2), off(b2), off(out), nb, M, K, N, batchA > 1 ? M * K : 0, batchB > 1 ? K * N : 0);
      bmmStats.calls++;
    } else {
      out = origFn({
        inputs: { a: a2, b: b2 },
        backend,
        attrs: { ...attrs, transposeA: false, transposeB: false },
      }) as tf.TensorInfo;
    }
    if (a2 !== a) bk.disposeData(a2.dataId);
    if (b2 !== b) bk.disposeData(b2.dataId);
    return out as tf.TensorInfo;
  });
}

/**
 * GatherV2 along axis 0 (embedding lookups, and the flat gathers of src/core/model/gather.ts and the logprob
 * gather): tfjs-backend-wasm 4.22 computes every element's source through generic stride arithmetic (1.5–3.6 ms
 * for 384 rows of 160 floats here); this copies whole rows with TypedArray.set. Indices are checked as tfjs
 * checks them (the same message). Other axes and batchDims keep tfjs's kernel. Tested against the CPU backend
 * (tests/wasm-bmm.test.ts).
 */
export const gatherStats = { calls: 0 };

function fastGather(): void {
  const orig = tf.getKernel('GatherV2', 'wasm');
  if (!orig) return;
  const origFn = orig.kernelFunc as unknown as KernelFn;
  replaceWasmKernel('GatherV2', orig, ({ inputs, backend, attrs }) => {
    const { x, indices } = inputs as { x: tf.TensorInfo; indices: tf.TensorInfo };
    const { axis, batchDims } = attrs as unknown as { axis: number; batchDims: number };
    const ax = axis < 0 ? axis + x.shape.length : axis;
    if (
      ax !== 0 ||
      (batchDims ?? 0) !== 0 ||
      (x.dtype !== 'float32' && x.dtype !== 'int32') ||
      x.shape.length === 0
    ) {
      return origFn({ inputs, backend, attrs });
    }
    const bk = backend as WasmBackendLike;
    const dim = x.shape[0];
    const row = x.shape.slice(1).reduce((a, b) => a * b, 1);
    const out = bk.makeOutput([...indices.shape, ...x.shape.slice(1)], x.dtype);
    // Views after the allocation (it may grow the heap).
    const idx = bk.typedArrayFromHeap(indices);
    const src = bk.typedArrayFromHeap(x);
    const dst = bk.typedArrayFromHeap(out);
    for (let i = 0; i < idx.length; i++) {
      const k = idx[i];
      if (!(k >= 0 && k <= dim - 1)) {
        bk.disposeData(out.dataId);
        throw new Error(`GatherV2: the index value ${k} is not in [0, ${dim - 1}]`);
      }
      if (row === 1) dst[i] = src[k];
      else dst.set(src.subarray(k * row, (k + 1) * row), i * row);
    }
    gatherStats.calls++;
    return out;
  });
}

/**
 * Slice and SplitV without copying the whole input. tfjs-backend-wasm 4.22's Slice starts with
 * `backend.readSync(x)`, which copies ALL of x out of the heap into a fresh ArrayBuffer (HEAPU8.slice) before it
 * copies the slice, and its SplitV calls that Slice once per piece: splitting attention's [rows, 3C] qkv costs
 * three full copies and three fresh buffers (1.5 ms per split of [384, 480] here, against ~0.05 ms for the
 * bytes the pieces hold; the garbage also brings V8's GC sooner). This copies the slice's contiguous runs
 * heap-to-heap with copyWithin. Strings keep tfjs's kernels. Tested against the CPU backend
 * (tests/wasm-slice.test.ts).
 */
export const sliceStats = { calls: 0 };

function sliceOnHeap(bk: WasmBackendLike, x: tf.TensorInfo, begin: number[], size: number[]): tf.TensorInfo {
  const out = bk.makeOutput(size, x.dtype);
  const n = size.reduce((a, b) => a * b, 1);
  if (n === 0) return out;
  const bpe = x.dtype === 'bool' ? 1 : 4;
  // Merge trailing dimensions taken whole into one contiguous run.
  const rank = x.shape.length;
  let inner = rank - 1;
  let run = size[rank - 1] ?? 1;
  while (inner > 0 && size[inner] === x.shape[inner]) {
    inner--;
    run *= size[inner];
  }
  // After makeOutput: it may grow the heap (and replace HEAPU8).
  const heap = bk.wasm.HEAPU8;
  const xOff = bk.dataIdMap.get(x.dataId).memoryOffset;
  const oOff = bk.dataIdMap.get(out.dataId).memoryOffset;
  const strides = new Array<number>(rank).fill(1);
  for (let d = rank - 2; d >= 0; d--) strides[d] = strides[d + 1] * x.shape[d + 1];
  // Dimensions 0..inner-1 are iterated (an odometer); dimension `inner` starts each run.
  const idx = new Array<number>(Math.max(inner, 0)).fill(0);
  const runs = n / run;
  for (let r = 0; r < runs; r++) {
    let src = begin[inner] * strides[inner];
    for (let d = 0; d < inner; d++) src += (begin[d] + idx[d]) * strides[d];
    const s = xOff + src * bpe;
    heap.copyWithin(oOff + r * run * bpe, s, s + run * bpe);
    for (let d = inner - 1; d >= 0; d--) {
      if (++idx[d] < size[d]) break;
      idx[d] = 0;
    }
  }
  sliceStats.calls++;
  return out;
}

function fastSlice(): void {
  const orig = tf.getKernel('Slice', 'wasm');
  const origSplit = tf.getKernel('SplitV', 'wasm');
  if (!orig || !origSplit) return;
  const origFn = orig.kernelFunc as unknown as KernelFn;
  const origSplitFn = origSplit.kernelFunc as unknown as KernelFn;
  tf.unregisterKernel('Slice', 'wasm');
  tf.registerKernel({
    kernelName: 'Slice',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { x } = inputs as { x: tf.TensorInfo };
      if (x.dtype === 'string' || x.dtype === 'complex64' || x.shape.length === 0)
        return origFn({ inputs, backend, attrs }) as tf.TensorInfo;
      const a = attrs as unknown as { begin: number | number[]; size: number | number[] };
      const [begin, size] = tf.slice_util.parseSliceParams(x as tf.Tensor, a.begin, a.size);
      return sliceOnHeap(backend as WasmBackendLike, x, begin, size);
    },
  });
  tf.unregisterKernel('SplitV', 'wasm');
  tf.registerKernel({
    kernelName: 'SplitV',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { x } = inputs as { x: tf.TensorInfo };
      if (x.dtype === 'string' || x.dtype === 'complex64') return origSplitFn({ inputs, backend, attrs });
      const a = attrs as unknown as { numOrSizeSplits: number | number[]; axis: number | number[] };
      const axis = tf.util.parseAxisParam(a.axis, x.shape)[0];
      const sizes = tf.backend_util.prepareSplitSize(x as tf.Tensor, a.numOrSizeSplits, axis);
      const begin = new Array<number>(x.shape.length).fill(0);
      return sizes.map((s) => {
        const size = x.shape.slice();
        size[axis] = s;
        const out = sliceOnHeap(backend as WasmBackendLike, x, begin.slice(), size);
        begin[axis] += s;
        return out;
      });
    },
  });
}

/**
 * Sum over the leading axes (a bias's gradient: [rows, C] summed over the rows; layer norm's gain and bias
 * gradients). tfjs-backend-wasm 4.22 transposes the input first so that the reduced axes are innermost (a full
 * copy through its generic transpose: 0.8 ms for [384, 640] here), then sums. This computes the same sums as
 * ones[1, rows] · X[rows, C] on the SIMD matmul kernel (bmm.wat: each output the sum over the rows in increasing
 * order, as tfjs's loop adds them), in place on the heap. Other axes, dtypes, or no SIMD kernel keep tfjs's.
 * Tested against the CPU backend (tests/wasm-slice.test.ts).
 */
export const sumStats = { calls: 0 };

function fastSum(): void {
  const orig = tf.getKernel('Sum', 'wasm');
  if (!orig) return;
  const origFn = orig.kernelFunc as unknown as KernelFn;
  replaceWasmKernel('Sum', orig, ({ inputs, backend, attrs }) => {
    const { x } = inputs as { x: tf.TensorInfo };
    const { axis, keepDims } = attrs as unknown as { axis: number | number[]; keepDims: boolean };
    const rank = x.shape.length;
    const axes = tf.util.parseAxisParam(axis, x.shape).sort((a, b) => a - b);
    const k = axes.length;
    const bk = backend as WasmBackendLike;
    const leading = k > 0 && k < rank && axes.every((a, i) => a === i);
    const bmm = leading && x.dtype === 'float32' ? bmmFor(heapMemory(bk.wasm)) : null;
    const rows = x.shape.slice(0, k).reduce((a, b) => a * b, 1);
    const inner = x.shape.slice(k);
    const cols = inner.reduce((a, b) => a * b, 1);
    if (!bmm || rows === 0 || cols === 0) return origFn({ inputs, backend, attrs }) as tf.TensorInfo;
    const ones = bk.makeOutput([rows], 'float32');
    const out = bk.makeOutput(keepDims ? [...x.shape.slice(0, k).map(() => 1), ...inner] : inner, 'float32');
    (bk.typedArrayFromHeap(ones) as Float32Array).fill(1);
    const off = (t: tf.TensorInfo): number => heapOffset(bk, t);
    bmm(off(ones), off(x), off(out), 1, 1, rows, cols, 0, 0);
    bk.disposeData(ones.dataId);
    sumStats.calls++;
    return out;
  });
}

/**
 * Equal with one operand broadcast along the last axis ([..., C] against [..., 1], either way round), or of two
 * tensors of one shape. tfjs-backend-wasm 4.22 runs a broadcast comparison through a generic per-element index
 * path: the mask of tfjs's Max gradient (x == max over the last axis, [rows, vocabulary] against [rows, 1]) took
 * 9 ms for [192, 258] here, where a plain loop takes a fraction of a millisecond. The same booleans (IEEE
 * equality: NaN equals nothing, +0 equals −0). Other shapes and dtypes keep tfjs's. Tested against the CPU
 * backend's kernel (tests/wasm-equal.test.ts).
 */
export const equalStats = { calls: 0 };

function fastEqual(): void {
  const orig = tf.getKernel('Equal', 'wasm');
  if (!orig) return;
  const origFn = orig.kernelFunc as unknown as KernelFn;
  replaceWasmKernel('Equal', orig, ({ inputs, backend, attrs }) => {
    const { a, b } = inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
    const r = a.shape.length;
    const lead = (t: tf.TensorInfo) => t.shape.slice(0, -1);
    const rowsMatch = r > 0 && b.shape.length === r && tf.util.arraysEqual(lead(a), lead(b));
    const same = tf.util.arraysEqual(a.shape, b.shape);
    const aWide = rowsMatch && b.shape[r - 1] === 1;
    const bWide = rowsMatch && a.shape[r - 1] === 1;
    if (a.dtype !== 'float32' || b.dtype !== 'float32' || !(same || aWide || bWide))
      return origFn({ inputs, backend, attrs }) as tf.TensorInfo;
    const bk = backend as WasmBackendLike;
    const wide = same || aWide ? a : b;
    const narrow = wide === a ? b : a;
    const out = bk.makeOutput(wide.shape, 'bool');
    const o = bk.typedArrayFromHeap(out) as Uint8Array;
    const x = bk.typedArrayFromHeap(wide) as Float32Array;
    const y = bk.typedArrayFromHeap(narrow) as Float32Array;
    if (same) {
      for (let i = 0; i < x.length; i++) o[i] = x[i] === y[i] ? 1 : 0;
    } else {
      const C = wide.shape[r - 1];
      for (let row = 0; row < y.length; row++) {
        const v = y[row];
        const base = row * C;
        for (let j = 0; j < C; j++) o[base + j] = x[base + j] === v ? 1 : 0;
      }
    }
    equalStats.calls++;
    return out;
  });
}

let registered = false;

export function registerWasmExtraKernels(): void {
  if (registered) return;
  registered = true;
  // NO_FAST_MM=1 / NO_FAST_SLICE=1 / NO_FAST_SUM=1 / NO_FAST_EQUAL=1 / NO_FAST_ACT=1 (Node) keep tfjs's own kernels, to measure the plain path against these.
  // The gemm.wat route for 2-D products is on by default; WASM_GEMM=0 keeps XNNPACK, as does an earlier
  // setWasmGemm(false).
  const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
  if (!env.NO_FAST_MM) fastMatMul();
  if (gemmAsked === null) {
    gemmOn = env.WASM_GEMM !== '0';
    if (gemmOn) enableRelaxedSimd();
  }
  fastGather();
  if (!env.NO_FAST_SLICE) fastSlice();
  if (!env.NO_FAST_SUM) fastSum();
  if (!env.NO_FAST_EQUAL) fastEqual();
  // tfjs's autodiff clones every tensor a gradient keeps; share the buffer as the other backends do.
  registerWasmSharedIdentity();
  registerWasmWriteSlot();
  if (!env.NO_FAST_ACT) registerWasmActivations();
  tf.registerKernel({
    kernelName: 'UnsortedSegmentSum',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { x, segmentIds } = inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
      const { numSegments } = attrs as unknown as { numSegments: number };
      const b = backend as unknown as WasmBackendLike;
      const rowSize = x.shape.slice(segmentIds.shape.length).reduce((a, c) => a * c, 1);
      const outShape = [numSegments, ...x.shape.slice(segmentIds.shape.length)];
      const out = b.makeOutput(outShape, x.dtype);
      const dst = b.typedArrayFromHeap(out);
      dst.fill(0);
      const src = b.typedArrayFromHeap(x);
      const ids = b.typedArrayFromHeap(segmentIds);
      for (let i = 0; i < ids.length; i++) {
        const seg = ids[i];
        if (seg < 0 || seg >= numSegments) continue;
        const so = i * rowSize;
        const dOff = seg * rowSize;
        for (let j = 0; j < rowSize; j++) dst[dOff + j] += src[so + j];
      }
      return out;
    },
  });
}
