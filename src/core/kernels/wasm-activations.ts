/**
 * The elementwise arithmetic around the MLP activations' sigmoids, and layer norm, on the WASM backend, as kernels
 * over the tfjs heap (each a single pass over the [rows, width] activations where tfjs's ops make one pass per op):
 * - gelu_new (gelu.wat): the sigmoid's argument k·(x + c·x³) (5 tfjs kernels) and the gradient
 *   dy·(s + x·s·(1 − s)·(k + 3ck·x²)) (9), the ops of model/ops.ts geluNew;
 * - SwiGLU (swiglu.wat): (g·s)·u forward (2) and, backward, dg = (dy·u)·s + ((dy·u)·g)·(s·(1 − s)) and
 *   du = dy·(g·s) — autodiff's own ops for swigluPlain, in its order (7).
 * - layer norm (layernorm.wat): tf.moments and the rest of model/ops.ts layerNorm's forward (~10 tfjs kernels) in
 *   one kernel that also gives x̂ and r, and its hand-written gradient with dg and db (~13) in another.
 * The same float32 operations in the same order, so the results are the ops' bit for bit (tests/wasm-gelu.test.ts,
 * tests/wasm-swiglu.test.ts, tests/wasm-layernorm.test.ts); the sigmoids stay tfjs's kernel. Used by model/ops.ts
 * when the backend is WASM and the engine has SIMD.
 */
import * as tf from '@tensorflow/tfjs-core';
import { GELU_K } from './definitions';
import type { KernelFn } from './kernel-fn';
import {
  geluFor,
  heapMemory,
  heapOffset as at,
  layerNormFor,
  swigluFor,
  type WasmBackendLike,
} from './wasm-simd';

export const GELU_INNER_KERNEL = 'PpoGeluInner';
export const GELU_GRAD_KERNEL = 'PpoGeluGrad';
export const SWIGLU_FWD_KERNEL = 'PpoSwigluFwd';
export const SWIGLU_BWD_KERNEL = 'PpoSwigluBwd';
export const LAYERNORM_FWD_KERNEL = 'PpoLayerNormFwd';
export const LAYERNORM_BWD_KERNEL = 'PpoLayerNormBwd';

/** gelu_new's constants as tfjs's ops hold them: each number made a float32 scalar. */
const C = Math.fround(0.044715);
const K = Math.fround(GELU_K);
const K3 = Math.fround(3 * 0.044715 * GELU_K);

/** Calls of each kernel (the tests read them). */
export const activationStats = {
  geluInner: 0,
  geluGrad: 0,
  swigluFwd: 0,
  swigluBwd: 0,
  layerNormFwd: 0,
  layerNormBwd: 0,
};

const memoryOf = (backend: unknown) => heapMemory((backend as WasmBackendLike).wasm);

/** Register a kernel for 'wasm' whose function gets the backend narrowed and the inputs by name. */
function register(
  name: string,
  fn: (
    bk: WasmBackendLike,
    inputs: Record<string, tf.TensorInfo>,
    attrs: Record<string, number>,
  ) => tf.TensorInfo | tf.TensorInfo[],
): void {
  tf.registerKernel({
    kernelName: name,
    backendName: 'wasm',
    kernelFunc: (({ inputs, backend, attrs }: Parameters<KernelFn>[0]) =>
      fn(
        backend as WasmBackendLike,
        inputs as Record<string, tf.TensorInfo>,
        (attrs ?? {}) as Record<string, number>,
      )) as unknown as tf.KernelFunc,
  });
}

/** Register the four kernels for 'wasm' (idempotent; needs the WASM backend package loaded). */
export function registerWasmActivations(): void {
  if (tf.getKernel(GELU_INNER_KERNEL, 'wasm')) return;
  register(GELU_INNER_KERNEL, (bk, { x }) => {
    const out = bk.makeOutput(x.shape, 'float32');
    geluFor(memoryOf(bk))!.inner(at(bk, x), at(bk, out), tf.util.sizeFromShape(x.shape), C, K);
    activationStats.geluInner++;
    return out;
  });
  register(GELU_GRAD_KERNEL, (bk, { dy, x, s }) => {
    const out = bk.makeOutput(x.shape, 'float32');
    geluFor(memoryOf(bk))!.grad(
      at(bk, dy),
      at(bk, x),
      at(bk, s),
      at(bk, out),
      tf.util.sizeFromShape(x.shape),
      K,
      K3,
    );
    activationStats.geluGrad++;
    return out;
  });
  register(SWIGLU_FWD_KERNEL, (bk, { g, s, u }) => {
    const out = bk.makeOutput(g.shape, 'float32');
    swigluFor(memoryOf(bk))!.fwd(
      at(bk, g),
      at(bk, s),
      at(bk, u),
      at(bk, out),
      tf.util.sizeFromShape(g.shape),
    );
    activationStats.swigluFwd++;
    return out;
  });
  register(SWIGLU_BWD_KERNEL, (bk, { dy, g, u, s }) => {
    const dg = bk.makeOutput(g.shape, 'float32');
    const du = bk.makeOutput(g.shape, 'float32');
    const n = tf.util.sizeFromShape(g.shape);
    swigluFor(memoryOf(bk))!.bwd(at(bk, dy), at(bk, g), at(bk, u), at(bk, s), at(bk, dg), at(bk, du), n);
    activationStats.swigluBwd++;
    return [dg, du];
  });
  register(LAYERNORM_FWD_KERNEL, (bk, { x, g, b }, { eps }) => {
    const C = x.shape[x.shape.length - 1];
    const R = tf.util.sizeFromShape(x.shape) / C;
    const y = bk.makeOutput(x.shape, 'float32');
    const xh = bk.makeOutput(x.shape, 'float32');
    const r = bk.makeOutput([...x.shape.slice(0, -1), 1], 'float32');
    // eps as tfjs's add(variance, eps) holds it: a float32 scalar (the f32 parameter rounds it the same way).
    layerNormFor(memoryOf(bk))!.fwd(
      at(bk, x),
      at(bk, g),
      at(bk, b),
      at(bk, y),
      at(bk, xh),
      at(bk, r),
      R,
      C,
      eps,
    );
    activationStats.layerNormFwd++;
    return [y, xh, r];
  });
  register(LAYERNORM_BWD_KERNEL, (bk, { dy, xh, r, g }) => {
    const C = xh.shape[xh.shape.length - 1];
    const R = tf.util.sizeFromShape(xh.shape) / C;
    const dx = bk.makeOutput(xh.shape, 'float32');
    const dg = bk.makeOutput([C], 'float32');
    const db = bk.makeOutput([C], 'float32');
    layerNormFor(memoryOf(bk))!.bwd(
      at(bk, dy),
      at(bk, xh),
      at(bk, r),
      at(bk, g),
      at(bk, dx),
      at(bk, dg),
      at(bk, db),
      R,
      C,
    );
    activationStats.layerNormBwd++;
    return [dx, dg, db];
  });
}

/** The WASM backend with these kernels registered and SIMD to run them. */
function wasmActivationsHere(): boolean {
  if (tf.getBackend() !== 'wasm' || !tf.getKernel(GELU_INNER_KERNEL, 'wasm')) return false;
  const memory = memoryOf(tf.backend());
  return geluFor(memory) !== null && swigluFor(memory) !== null;
}

/**
 * Whether layerNorm runs the layer-norm kernels: float32 x of rank ≥ 1 with C > 0 values a row, and g and b of
 * shape [C] (float32), on WASM with them registered.
 */
export function wasmLayerNormApplies(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor): boolean {
  const C = x.shape[x.shape.length - 1];
  return (
    x.rank >= 1 &&
    C > 0 &&
    x.dtype === 'float32' &&
    g.dtype === 'float32' &&
    b.dtype === 'float32' &&
    tf.util.arraysEqual(g.shape, [C]) &&
    tf.util.arraysEqual(b.shape, [C]) &&
    !!tf.getKernel(LAYERNORM_FWD_KERNEL, 'wasm') &&
    wasmActivationsHere() &&
    layerNormFor(memoryOf(tf.backend())) !== null
  );
}

/**
 * Whether a GPT-2 block's layer norms and gelu_new run as the fused kernels here (the memory estimate's
 * RunMemoryOptions.fusedBlocks: model/size.ts).
 */
export function wasmFusedBlocksHere(): boolean {
  return (
    !!tf.getKernel(LAYERNORM_FWD_KERNEL, 'wasm') &&
    !!tf.getKernel(GELU_INNER_KERNEL, 'wasm') &&
    wasmActivationsHere() &&
    layerNormFor(memoryOf(tf.backend())) !== null
  );
}

/** Whether geluNew runs the gelu kernels for `x`: WASM with them registered, SIMD available, float32. */
export function wasmGeluApplies(x: tf.Tensor): boolean {
  return x.dtype === 'float32' && !!tf.getKernel(GELU_GRAD_KERNEL, 'wasm') && wasmActivationsHere();
}

/** Whether swiglu runs the SwiGLU kernels: float32 gate and up of one shape, on WASM with SIMD. */
export function wasmSwigluApplies(gate: tf.Tensor, up: tf.Tensor): boolean {
  return (
    gate.dtype === 'float32' &&
    up.dtype === 'float32' &&
    tf.util.arraysEqual(gate.shape, up.shape) &&
    !!tf.getKernel(SWIGLU_FWD_KERNEL, 'wasm') &&
    wasmActivationsHere()
  );
}

/**
 * swigluPlain's value and autodiff's gradient, as the two SwiGLU kernels around tfjs's sigmoid (the same bits).
 * Call only where wasmSwigluApplies.
 */
export const swigluWasm = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
  const [g, u] = args as tf.Tensor[];
  const save = args[2] as tf.GradSaveFunc;
  const s = tf.sigmoid(g);
  save([g, u, s]);
  return {
    value: tf.engine().runKernel(SWIGLU_FWD_KERNEL, { g, s, u }, {}) as tf.Tensor,
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [gs, us, ss] = saved;
      return tf.engine().runKernel(SWIGLU_BWD_KERNEL, { dy, g: gs, u: us, s: ss }, {}) as tf.Tensor[];
    },
  };
}) as (gate: tf.Tensor, up: tf.Tensor) => tf.Tensor;
