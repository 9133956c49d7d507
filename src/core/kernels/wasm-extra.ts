/**
 * Kernels the tfjs WASM backend (4.22) lacks but training needs. UnsortedSegmentSum is the gradient of
 * gather — of the token/position embeddings and of the gather-based log-softmax — so without it WASM can
 * run inference but not training. This plain-loop version runs on the WASM heap directly; tested against
 * the CPU backend's kernel.
 */
import * as tf from '@tensorflow/tfjs-core';

interface WasmBackendLike {
  typedArrayFromHeap(t: tf.TensorInfo): Float32Array | Int32Array | Uint8Array;
  makeOutput(shape: number[], dtype: tf.DataType): tf.TensorInfo;
  disposeData(dataId: unknown): boolean;
}

type KernelFn = (args: { inputs: tf.NamedTensorInfoMap; backend: unknown; attrs?: tf.NamedAttrMap }) => tf.TensorInfo | tf.TensorInfo[];

/**
 * tfjs-backend-wasm 4.22's BatchMatMul is 10–20× slower when transposeA/transposeB is set (measured in
 * Node: 0.5–1 GFLOP/s against 11 for the plain product). Every matmul gradient and attention's q·kᵀ use
 * those flags, so training spent ~85% of its time there. This wrapper transposes explicitly (a cheap
 * copy) and calls the fast plain kernel.
 */
function fastTransposedMatMul(): void {
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
  tf.unregisterKernel('BatchMatMul', 'wasm');
  tf.registerKernel({
    kernelName: 'BatchMatMul',
    backendName: 'wasm',
    setupFunc: orig.setupFunc,
    disposeFunc: orig.disposeFunc,
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { a, b } = inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
      const at = attrs as unknown as { transposeA: boolean; transposeB: boolean };
      if (!at.transposeA && !at.transposeB) return origFn({ inputs, backend, attrs }) as tf.TensorInfo;
      const a2 = at.transposeA ? swapLast(a, backend) : a;
      const b2 = at.transposeB ? swapLast(b, backend) : b;
      const out = origFn({ inputs: { a: a2, b: b2 }, backend, attrs: { ...attrs, transposeA: false, transposeB: false } });
      const bk = backend as WasmBackendLike;
      if (a2 !== a) bk.disposeData(a2.dataId);
      if (b2 !== b) bk.disposeData(b2.dataId);
      return out as tf.TensorInfo;
    },
  });
}

let registered = false;

export function registerWasmExtraKernels(): void {
  if (registered) return;
  registered = true;
  // NO_FAST_MM=1 (Node) keeps tfjs's own kernel, to measure the plain path against this one.
  if (!(globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env.NO_FAST_MM) fastTransposedMatMul();
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
