/**
 * The GPT-2 forward's building-block ops, shared by the trunk, the KV-cache decode step and the scalar models:
 * layer norm and gelu_new with hand-written gradients (fewer kernels than autodiff's, which matters where every
 * kernel is a dispatch; docs/tfjs.md), their plain compositions (the references the tests compare against), and
 * the Conv1D linear layer with an optional LoRA term (docs/formats.md §6).
 */
import * as tf from '@tensorflow/tfjs-core';
import { layerNormWebGpu, webGpuLayerNormApplies } from '../kernels/webgpu-layernorm';
import { linearWebGpu, webGpuLinearApplies } from '../kernels/webgpu-linear';
import { rmsNormWebGpu, webGpuRmsNormApplies } from '../kernels/webgpu-rmsnorm';
import { swigluWebGpu, webGpuSwigluApplies } from '../kernels/webgpu-swiglu';
import { GELU_K } from '../kernels/definitions';
import {
  GELU_GRAD_KERNEL,
  GELU_INNER_KERNEL,
  LAYERNORM_BWD_KERNEL,
  LAYERNORM_FWD_KERNEL,
  swigluWasm,
  wasmGeluApplies,
  wasmLayerNormApplies,
  wasmSwigluApplies,
} from '../kernels/wasm-activations';
import { f16LinearNT, isPackedF16 } from '../kernels/webgpu-f16';

/** Layer norm over the last axis, as autodiff composes it (the reference for `layerNorm`'s gradient). */
export function layerNormPlain(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor, eps: number): tf.Tensor {
  const { mean, variance } = tf.moments(x, -1, true);
  return tf.add(tf.mul(tf.mul(tf.sub(x, mean), tf.rsqrt(tf.add(variance, eps))), g), b);
}

const layerNormByEps = new Map<number, (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => tf.Tensor>();

/**
 * Layer norm over the last axis with its gradient written out (about half the kernels of autodiff's): with
 * x̂ = (x − μ)·r, r = 1/√(σ² + ε),
 *   dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)),  dx̂ = dy·g,  dg = Σ_rows dy·x̂,  db = Σ_rows dy.
 * Same values as layerNormPlain; gradients tested against it (tests/fused-ops.test.ts). On WebGPU: fused WGSL
 * kernels instead, 1 dispatch forward and 4 backward (kernels/webgpu-layernorm.ts, tests/webgpu-node.test.ts).
 */
export function layerNorm(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor, eps: number): tf.Tensor {
  if (webGpuLayerNormApplies(x)) return layerNormWebGpu(x, g, b, eps);
  let f = layerNormByEps.get(eps);
  if (!f) {
    f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const [xi, gi, bi] = args as tf.Tensor[];
      const save = args[3] as tf.GradSaveFunc;
      if (wasmLayerNormApplies(xi, gi, bi)) {
        // WASM: the forward and the gradient below as one kernel each (kernels/layernorm.wat: the same bits).
        const [y, xh, r] = tf
          .engine()
          .runKernel(LAYERNORM_FWD_KERNEL, { x: xi, g: gi, b: bi }, { eps }) as tf.Tensor[];
        save([xh, r, gi]);
        return {
          value: y,
          gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
            const [xh2, rs, gs] = saved;
            return tf
              .engine()
              .runKernel(LAYERNORM_BWD_KERNEL, { dy, xh: xh2, r: rs, g: gs }, {}) as tf.Tensor[];
          },
        };
      }
      const { mean, variance } = tf.moments(xi, -1, true);
      const r = tf.rsqrt(tf.add(variance, eps));
      const xhat = tf.mul(tf.sub(xi, mean), r);
      save([xhat, r, gi]);
      return {
        value: tf.add(tf.mul(xhat, gi), bi),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [xh, rs, gs] = saved;
          const C = xh.shape[xh.shape.length - 1];
          const dxhat = tf.mul(dy, gs);
          const dx = tf.mul(
            rs,
            tf.sub(tf.sub(dxhat, tf.mean(dxhat, -1, true)), tf.mul(xh, tf.mean(tf.mul(dxhat, xh), -1, true))),
          );
          const dg = tf.sum(tf.reshape(tf.mul(dy, xh), [-1, C]), 0);
          const db = tf.sum(tf.reshape(dy, [-1, C]), 0);
          return [dx, dg, db];
        },
      };
    }) as (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => tf.Tensor;
    layerNormByEps.set(eps, f);
  }
  return f(x, g, b);
}

/**
 * gelu_new: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))), computed as the identical x·σ(2·√(2/π)(x + 0.044715x³)).
 * The sigmoid form takes fewer ops than tanh and pow (pow's gradient goes through log; both were hot in the
 * WASM profile), and sidesteps WGSL's tanh returning NaN for large inputs (docs/tfjs.md trap 7).
 */
export function geluNewPlain(x: tf.Tensor): tf.Tensor {
  const x3 = tf.mul(tf.mul(x, x), x);
  const inner = tf.mul(GELU_K, tf.add(x, tf.mul(0.044715, x3)));
  return tf.mul(x, tf.sigmoid(inner));
}

/**
 * geluNewPlain with its gradient written out: y = x·s, s = σ(k(x + 0.044715x³)), so
 *   dy/dx = s + x·s·(1 − s)·k·(1 + 3·0.044715·x²)
 * (9 kernels instead of autodiff's ~15; on WASM one kernel each way around tfjs's sigmoid, kernels/wasm-activations.ts).
 * Tested against geluNewPlain's autodiff (tests/fused-ops.test.ts).
 */
export const geluNew = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
  const x = args[0] as tf.Tensor;
  const save = args[1] as tf.GradSaveFunc;
  // On WASM the arithmetic around the sigmoid is one kernel each way (kernels/wasm-activations.ts: the same bits).
  const wasm = wasmGeluApplies(x);
  const inner = wasm
    ? (tf.engine().runKernel(GELU_INNER_KERNEL, { x }, {}) as tf.Tensor)
    : tf.mul(GELU_K, tf.add(x, tf.mul(0.044715, tf.mul(tf.mul(x, x), x))));
  const s = tf.sigmoid(inner);
  save([x, s]);
  return {
    value: tf.mul(x, s),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xs, ss] = saved;
      if (wasm && dy.dtype === 'float32')
        return tf.engine().runKernel(GELU_GRAD_KERNEL, { dy, x: xs, s: ss }, {}) as tf.Tensor;
      const slope = tf.add(GELU_K, tf.mul(3 * 0.044715 * GELU_K, tf.mul(xs, xs)));
      return tf.mul(dy, tf.add(ss, tf.mul(tf.mul(xs, tf.mul(ss, tf.sub(1, ss))), slope)));
    },
  };
}) as (x: tf.Tensor) => tf.Tensor;

/** A LoRA pair in PEFT's layout: A [r, in], B [out, r], and scaling = lora_alpha / r. */
export interface LowRank {
  a: tf.Tensor2D;
  b: tf.Tensor2D;
  scaling: number;
}

/** What follows a Conv1D's matmul + bias in GPT-2's block: gelu_new (mlp.c_fc), a residual add (the projections). */
export interface Conv1dEpilogue {
  activation?: 'gelu_new';
  /** [N, out], added after the activation. */
  residual?: tf.Tensor2D;
}

/**
 * GPT-2's Conv1D: x [N, in] · W [in, out] + bias, plus, with a LoRA pair, PEFT's
 * ((x · Aᵀ) · scaling) · Bᵀ, never forming W + (B·A)ᵀ·scaling (the merged weight) in the forward: the extra
 * cost is two thin matmuls through [N, r], and the backward gives A and B their gradients without a
 * [in, out] weight gradient. Then the epilogue: gelu_new(y) and/or residual + y. Without a pair and epilogue
 * it is exactly `x·W + b` (the same kernels). On WebGPU: one fused dispatch forward for matmul, bias, LoRA term,
 * gelu_new and residual (after the pair's two thin matmuls), 3 or 4 backward (kernels/webgpu-linear.ts,
 * tests/webgpu-linear.test.ts).
 */
export function conv1d(
  x: tf.Tensor2D,
  w: tf.Tensor,
  bias: tf.Tensor,
  lowRank?: LowRank | null,
  epilogue?: Conv1dEpilogue,
): tf.Tensor2D {
  if (webGpuLinearApplies(x, w, bias, epilogue?.residual)) {
    const extra = lowRank
      ? {
          t: tf.matMul(tf.matMul(x, lowRank.a, false, true), lowRank.b, false, true) as tf.Tensor2D,
          scale: lowRank.scaling,
        }
      : null;
    return linearWebGpu(x, w as tf.Tensor2D, bias as tf.Tensor1D, {
      gelu: epilogue?.activation === 'gelu_new',
      residual: epilogue?.residual,
      extra,
    });
  }
  let y = tf.add(tf.matMul(x, w as tf.Tensor2D), bias) as tf.Tensor2D;
  if (lowRank) {
    const down = tf.mul(tf.matMul(x, lowRank.a, false, true), lowRank.scaling); // [N, r]
    y = tf.add(y, tf.matMul(down as tf.Tensor2D, lowRank.b, false, true)) as tf.Tensor2D;
  }
  if (epilogue?.activation === 'gelu_new') y = geluNew(y) as tf.Tensor2D;
  if (epilogue?.residual) y = tf.add(epilogue.residual, y) as tf.Tensor2D;
  return y;
}

/** W + (B·A)ᵀ·scaling: the merged Conv1D weight [in, out] (for export, never the training path). */
export function mergedConv1dWeight(w: tf.Tensor, lowRank: LowRank): tf.Tensor2D {
  return tf.tidy(
    () => tf.add(w, tf.mul(tf.transpose(tf.matMul(lowRank.b, lowRank.a)), lowRank.scaling)) as tf.Tensor2D,
  );
}

/**
 * nn.Linear as Hugging Face's Llama/Qwen models hold it: x [N, in] · Wᵀ with W [out, in] (+ bias [out]), plus, with
 * a LoRA pair, PEFT's ((x · Aᵀ) · scaling) · Bᵀ (`fan_in_fan_out: false`; the same low-rank term as conv1d's,
 * since PEFT's A [r, in] and B [out, r] do not depend on how W is laid out). The weight stays in the file's
 * layout: no transposed copy is made at load or at export.
 */
export function linear(
  x: tf.Tensor2D,
  w: tf.Tensor,
  bias: tf.Tensor | null,
  lowRank?: LowRank | null,
): tf.Tensor2D {
  // A packed-f16 frozen weight (baseDtype "f16", docs/models.md, "The frozen base in f16"): its own kernel, the bias in its store.
  const packed = isPackedF16(w);
  let y: tf.Tensor2D = packed ? f16LinearNT(x, w, bias) : tf.matMul(x, w as tf.Tensor2D, false, true);
  if (bias && !packed) y = tf.add(y, bias);
  if (lowRank) {
    const down = tf.mul(tf.matMul(x, lowRank.a, false, true), lowRank.scaling); // [N, r]
    y = tf.add(y, tf.matMul(down as tf.Tensor2D, lowRank.b, false, true));
  }
  return y;
}

/** W + B·A·scaling: the merged nn.Linear weight [out, in] (for export, never the training path). */
export function mergedLinearWeight(w: tf.Tensor, lowRank: LowRank): tf.Tensor2D {
  return tf.tidy(() => tf.add(w, tf.mul(tf.matMul(lowRank.b, lowRank.a), lowRank.scaling)) as tf.Tensor2D);
}

/** RMSNorm as plain tfjs ops with autodiff's gradient: every backend but WebGPU, and the fused kernel's reference. */
export function rmsNormPlain(x: tf.Tensor, w: tf.Tensor, eps: number): tf.Tensor {
  const ms = tf.mean(tf.square(x), -1, true);
  return tf.mul(tf.mul(x, tf.rsqrt(tf.add(ms, eps))), w);
}

/**
 * RMSNorm over the last axis as transformers' LlamaRMSNorm computes it: x · 1/√(mean(x²) + ε) · weight. On WebGPU:
 * the fused kernels of kernels/webgpu-rmsnorm.ts (1 dispatch forward, 3 backward); elsewhere rmsNormPlain.
 */
export function rmsNorm(x: tf.Tensor, w: tf.Tensor, eps: number): tf.Tensor {
  if (webGpuRmsNormApplies(x, w)) return rmsNormWebGpu(x, w, eps);
  return rmsNormPlain(x, w, eps);
}

/** SiLU(gate) · up as plain tfjs ops with autodiff's gradient (every backend but WebGPU; the fused kernel's reference). */
export function swigluPlain(gate: tf.Tensor, up: tf.Tensor): tf.Tensor {
  return tf.mul(tf.mul(gate, tf.sigmoid(gate)), up);
}

/**
 * SiLU(gate) · up: the SwiGLU MLP's elementwise middle. On WebGPU: the fused kernels of kernels/webgpu-swiglu.ts
 * (1 dispatch forward, 2 backward); elsewhere swigluPlain.
 */
export function swiglu(gate: tf.Tensor, up: tf.Tensor): tf.Tensor {
  if (webGpuSwigluApplies(gate, up)) return swigluWebGpu(gate, up);
  // WASM: one kernel each way around tfjs's sigmoid, the plain ops' values and autodiff's gradients to the bit.
  if (wasmSwigluApplies(gate, up)) return swigluWasm(gate, up);
  return swigluPlain(gate, up);
}
