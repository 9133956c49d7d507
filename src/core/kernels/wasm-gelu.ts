/**
 * gelu_new's elementwise arithmetic on the WASM backend as two kernels of gelu.wat: the sigmoid's argument
 * k·(x + c·x³) (5 tfjs kernels, each a pass over the MLP's [rows, 4C] activations) and the gradient
 * dy·(s + x·s·(1 − s)·(k + 3ck·x²)) (9). The same float32 operations in the same order as the ops of
 * model/ops.ts geluNew, so the results are the ops' bit for bit (tests/wasm-gelu.test.ts); the sigmoid stays
 * tfjs's kernel. Used by geluNew when the backend is WASM and the engine has SIMD.
 */
import * as tf from '@tensorflow/tfjs-core';
import { GELU_K } from './definitions';
import { geluFor, heapMemory } from './wasm-simd';

export const GELU_INNER_KERNEL = 'PpoGeluInner';
export const GELU_GRAD_KERNEL = 'PpoGeluGrad';

/** The constants as tfjs's ops hold them: each number made a float32 scalar. */
const C = Math.fround(0.044715);
const K = Math.fround(GELU_K);
const K3 = Math.fround(3 * 0.044715 * GELU_K);

interface WasmBackendLike {
  wasm: { asm?: { memory?: WebAssembly.Memory }; wasmMemory?: WebAssembly.Memory };
  dataIdMap: { get(dataId: unknown): { memoryOffset: number } };
  makeOutput(shape: number[], dtype: tf.DataType): tf.TensorInfo;
}

/** Calls of each kernel (the tests read them). */
export const geluStats = { inner: 0, grad: 0 };

const at = (bk: WasmBackendLike, t: tf.TensorInfo): number => bk.dataIdMap.get(t.dataId).memoryOffset;

/** Register both kernels for 'wasm' (idempotent; needs the WASM backend package loaded). */
export function registerWasmGelu(): void {
  if (tf.getKernel(GELU_INNER_KERNEL, 'wasm')) return;
  tf.registerKernel({
    kernelName: GELU_INNER_KERNEL,
    backendName: 'wasm',
    kernelFunc: (({ inputs, backend }: { inputs: tf.NamedTensorInfoMap; backend: unknown }) => {
      const { x } = inputs as { x: tf.TensorInfo };
      const bk = backend as WasmBackendLike;
      const g = geluFor(heapMemory(bk.wasm))!;
      const out = bk.makeOutput(x.shape, 'float32');
      g.inner(at(bk, x), at(bk, out), tf.util.sizeFromShape(x.shape), C, K);
      geluStats.inner++;
      return out;
    }) as unknown as tf.KernelFunc,
  });
  tf.registerKernel({
    kernelName: GELU_GRAD_KERNEL,
    backendName: 'wasm',
    kernelFunc: (({ inputs, backend }: { inputs: tf.NamedTensorInfoMap; backend: unknown }) => {
      const { dy, x, s } = inputs as { dy: tf.TensorInfo; x: tf.TensorInfo; s: tf.TensorInfo };
      const bk = backend as WasmBackendLike;
      const g = geluFor(heapMemory(bk.wasm))!;
      const out = bk.makeOutput(x.shape, 'float32');
      g.grad(at(bk, dy), at(bk, x), at(bk, s), at(bk, out), tf.util.sizeFromShape(x.shape), K, K3);
      geluStats.grad++;
      return out;
    }) as unknown as tf.KernelFunc,
  });
}

/** Whether geluNew runs these kernels for `x`: WASM with them registered, SIMD available, float32. */
export function wasmGeluApplies(x: tf.Tensor): boolean {
  if (tf.getBackend() !== 'wasm' || x.dtype !== 'float32' || !tf.getKernel(GELU_INNER_KERNEL, 'wasm'))
    return false;
  return geluFor(heapMemory((tf.backend() as unknown as WasmBackendLike).wasm)) !== null;
}
