/**
 * Faster CPU-backend kernels for the two ops that make `--backend cpu` training crawl (tfjs-backend-cpu 4.22):
 *
 * - UnsortedSegmentSum (the gradient of gather: of the embeddings and of the gather-based log-softmax) runs
 *   4 kernels per SEGMENT (equal, cast, multiply, sum over all of x): O(numSegments · x.size). The log-softmax
 *   gather has numSegments = rows·vocab (132k for the tiny LM bench, 900k for a GPT-2 PPO minibatch), so one
 *   gradient is hundreds of thousands of kernel calls. Here: one pass over x, O(x.size).
 * - BatchMatMul walks B down its columns in the inner loop (stride N), and does the transposes by index
 *   arithmetic. Here: a loop order per transpose case that streams rows (i-k-j for A·B, row dot products for
 *   A·Bᵀ — the tied LM head — and k-i-j for Aᵀ·B), so only Aᵀ·Bᵀ copies an operand.
 *
 * Same results up to float32 summation order. Registered explicitly (the bench's CPU memory runs); the CLI's
 * exact-reference CPU backend keeps tfjs's kernels unless the host chooses these. Tested against tfjs's kernels in
 * tests/perf-cpu-kernels.test.ts.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from '../../core/kernels/kernel-fn';

interface CpuBackendLike {
  data: { get(id: unknown): { values: Float32Array | Int32Array } };
  makeTensorInfo(shape: number[], dtype: tf.DataType, values?: Float32Array | Int32Array): tf.TensorInfo;
}

const values = (b: CpuBackendLike, t: tf.TensorInfo) => b.data.get(t.dataId).values;

const segmentSum: KernelFn = ({ inputs, backend, attrs }) => {
  const b = backend as CpuBackendLike;
  const { x, segmentIds } = inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
  const { numSegments } = attrs as unknown as { numSegments: number };
  const inner = x.shape.slice(segmentIds.shape.length);
  const rowSize = inner.reduce((a, c) => a * c, 1);
  const src = values(b, x);
  const ids = values(b, segmentIds);
  const out =
    x.dtype === 'int32' ? new Int32Array(numSegments * rowSize) : new Float32Array(numSegments * rowSize);
  for (let i = 0; i < ids.length; i++) {
    const seg = ids[i];
    if (seg < 0 || seg >= numSegments) continue;
    const so = i * rowSize;
    const d = seg * rowSize;
    for (let j = 0; j < rowSize; j++) out[d + j] += src[so + j];
  }
  return b.makeTensorInfo([numSegments, ...inner], x.dtype, out);
};

/** [rows, cols] → [cols, rows] for each of `batch` matrices. */
function transposeLast(
  src: Float32Array | Int32Array,
  batch: number,
  rows: number,
  cols: number,
): Float32Array {
  const out = new Float32Array(batch * rows * cols);
  for (let bi = 0; bi < batch; bi++) {
    const o = bi * rows * cols;
    for (let r = 0; r < rows; r++)
      for (let c = 0; c < cols; c++) out[o + c * rows + r] = src[o + r * cols + c];
  }
  return out;
}

const batchMatMul: KernelFn = ({ inputs, backend, attrs }) => {
  const b = backend as CpuBackendLike;
  const { a, b: bT } = inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
  const { transposeA, transposeB } = attrs as unknown as { transposeA: boolean; transposeB: boolean };
  if (a.dtype !== 'float32' || bT.dtype !== 'float32')
    return (saved.get('BatchMatMul')!.kernelFunc as KernelFn)({ inputs, backend, attrs });
  const ra = a.shape.length;
  const rb = bT.shape.length;
  const M = transposeA ? a.shape[ra - 1] : a.shape[ra - 2];
  const K = transposeA ? a.shape[ra - 2] : a.shape[ra - 1];
  const Kb = transposeB ? bT.shape[rb - 1] : bT.shape[rb - 2];
  const N = transposeB ? bT.shape[rb - 2] : bT.shape[rb - 1];
  if (K !== Kb)
    throw new Error(`matMul: inner shapes ${K} and ${Kb} of [${a.shape}] and [${bT.shape}] do not match`);
  const outerA = a.shape.slice(0, -2);
  const outerB = bT.shape.slice(0, -2);
  const batchA = outerA.reduce((x, y) => x * y, 1);
  const batchB = outerB.reduce((x, y) => x * y, 1);
  const outer = tf.backend_util.assertAndGetBroadcastShape(outerA, outerB);
  const batch = Math.max(batchA, batchB);
  // Loop orders that read every operand along its rows, so no transposed copy is needed except for Aᵀ·Bᵀ.
  const A = values(b, a);
  const Bv = transposeA && transposeB ? transposeLast(values(b, bT), batchB, N, K) : values(b, bT);
  const tB = transposeB && !transposeA;
  const out = new Float32Array(batch * M * N);
  for (let bi = 0; bi < batch; bi++) {
    const ao = (bi % batchA) * M * K;
    const bo = (bi % batchB) * K * N;
    const oo = bi * M * N;
    if (!transposeA && !tB) {
      // C[i,:] += A[i,k] · B[k,:]
      for (let i = 0; i < M; i++) {
        const orow = oo + i * N;
        const arow = ao + i * K;
        for (let k = 0; k < K; k++) {
          const av = A[arow + k];
          if (av === 0) continue;
          const brow = bo + k * N;
          for (let j = 0; j < N; j++) out[orow + j] += av * Bv[brow + j];
        }
      }
    } else if (tB) {
      // C[i,j] = A[i,:] · B[j,:]  (B stored [N, K])
      for (let i = 0; i < M; i++) {
        const arow = ao + i * K;
        const orow = oo + i * N;
        for (let j = 0; j < N; j++) {
          const brow = bo + j * K;
          let s = 0;
          for (let k = 0; k < K; k++) s += A[arow + k] * Bv[brow + k];
          out[orow + j] = s;
        }
      }
    } else {
      // Aᵀ·B (A stored [K, M]): C[i,:] += A[k,i] · B[k,:]
      for (let k = 0; k < K; k++) {
        const brow = bo + k * N;
        for (let i = 0; i < M; i++) {
          const av = A[ao + k * M + i];
          if (av === 0) continue;
          const orow = oo + i * N;
          for (let j = 0; j < N; j++) out[orow + j] += av * Bv[brow + j];
        }
      }
    }
  }
  return b.makeTensorInfo([...outer, M, N], 'float32', out);
};

interface WasmBackendLike {
  write(values: Float32Array, shape: number[], dtype: tf.DataType): object;
  readSync(dataId: object): Float32Array;
  disposeData(dataId: object, force?: boolean): boolean;
}

/**
 * BatchMatMul run by the WASM backend's kernel (XNNPACK, SIMD) on copies of the CPU tensors: for CPU-backend
 * runs whose tensors do not fit WASM's 4 GiB heap (GPT-2's four-model PPO) but whose products do. Needs the WASM
 * backend initialised (tf.setBackend('wasm') once); falls back to the JS kernel otherwise.
 */
const batchMatMulOnWasm: KernelFn = (args) => {
  const { a, b: bT } = args.inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
  const wasm = (tf.engine() as unknown as { registry: Record<string, WasmBackendLike | undefined> }).registry
    .wasm;
  const kernel = tf.getKernel('BatchMatMul', 'wasm');
  if (!wasm || !kernel || a.dtype !== 'float32' || bT.dtype !== 'float32') return batchMatMul(args);
  const cpu = args.backend as CpuBackendLike;
  const aId = wasm.write(values(cpu, a) as Float32Array, a.shape, 'float32');
  const bId = wasm.write(values(cpu, bT) as Float32Array, bT.shape, 'float32');
  try {
    const out = (kernel.kernelFunc as KernelFn)({
      inputs: {
        a: { dataId: aId, shape: a.shape, dtype: 'float32' },
        b: { dataId: bId, shape: bT.shape, dtype: 'float32' },
      } as unknown as tf.NamedTensorInfoMap,
      backend: wasm,
      attrs: args.attrs,
    }) as tf.TensorInfo;
    const vals = wasm.readSync(out.dataId);
    wasm.disposeData(out.dataId, true);
    return cpu.makeTensorInfo(out.shape, 'float32', vals);
  } finally {
    wasm.disposeData(aId, true);
    wasm.disposeData(bId, true);
  }
};

const FAST: Record<string, KernelFn> = { UnsortedSegmentSum: segmentSum, BatchMatMul: batchMatMul };
const saved = new Map<string, tf.KernelConfig>();

/**
 * Swap in the faster CPU kernels (idempotent). `matmulOnWasm`: products go to the WASM backend's kernel (it must
 * be initialised) — only for runs that care about tensor bytes, not about CPU-backend arithmetic.
 */
export function registerFastCpuKernels(o: { matmulOnWasm?: boolean } = {}): void {
  for (const [name, f] of Object.entries(FAST)) {
    const fn = name === 'BatchMatMul' && o.matmulOnWasm ? batchMatMulOnWasm : f;
    if (saved.has(name)) continue;
    const orig = tf.getKernel(name, 'cpu');
    if (!orig) continue; // the CPU backend is not loaded
    saved.set(name, orig);
    tf.unregisterKernel(name, 'cpu');
    tf.registerKernel({ kernelName: name, backendName: 'cpu', kernelFunc: fn as tf.KernelFunc });
  }
}

/** Put tfjs's own CPU kernels back. */
export function unregisterFastCpuKernels(): void {
  for (const [name, orig] of saved) {
    tf.unregisterKernel(name, 'cpu');
    tf.registerKernel(orig);
  }
  saved.clear();
}
