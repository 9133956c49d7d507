/**
 * All of the fused WGSL kernels at once (layer norm, Conv1D with its epilogue, causal attention, token
 * log-prob and entropy, the KV-cache decode attention): one switch for benchmarks that compare them with tfjs's own ops, and the list of
 * their checks against those ops. Each kernel file says what it fuses; docs/tfjs.md (dispatch counts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { setWebGpuLayerNormFused } from './webgpu-layernorm';
import { layerNorm } from '../model/ops';
import { countDispatches } from './webgpu-count';
import { checkLinearOnCurrentBackend, setWebGpuLinearFused } from './webgpu-linear';
import { checkAttentionOnCurrentBackend, setWebGpuAttentionFused } from './webgpu-attention';
import { checkLogprobOnCurrentBackend, setWebGpuLogprobFused } from './webgpu-logprob';
import {
  checkDecodeAttentionOnCurrentBackend,
  setWebGpuDecodeAttentionFused,
} from './webgpu-decode-attention';

/** Turn every fused WebGPU kernel on (the default) or off (tfjs's ops: the reference path). */
export function setWebGpuFusedKernels(on: boolean): void {
  setWebGpuLayerNormFused(on);
  setWebGpuLinearFused(on);
  setWebGpuAttentionFused(on);
  setWebGpuLogprobFused(on);
  setWebGpuDecodeAttentionFused(on);
}

export interface FusedKernelCheck {
  maxRelValue: number;
  maxRelGrad: number;
  dispatchesFwd: number;
  dispatchesFwdBwd: number;
}

/** max |a − b| / max(1, max |b|): the difference relative to the reference's scale. */
function relToScale(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  let m = 1;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / m;
}

/**
 * The fused layer norm (webgpu-layernorm.ts) against tfjs's ops on the current backend: 70 rows × 48 columns,
 * values and the gradients of x, gain and bias under random upstream weights.
 */
export async function checkLayerNormOnCurrentBackend(): Promise<FusedKernelCheck> {
  if (tf.getBackend() !== 'webgpu') throw new Error(`needs the webgpu backend, not ${tf.getBackend()}`);
  const [R, C] = [70, 48];
  const x = tf.randomNormal([R, C], 0.5, 2, 'float32', 11);
  const g = tf.randomNormal([C], 1, 0.3, 'float32', 12);
  const b = tf.randomNormal([C], 0, 0.3, 'float32', 13);
  const w = tf.randomNormal([R, C], 0, 1, 'float32', 14);
  const run = async (fused: boolean) => {
    setWebGpuLayerNormFused(fused);
    try {
      const f = () => tf.sum(tf.mul(layerNorm(x, g, b, 1e-5), w)) as tf.Scalar;
      const fwd = await countDispatches(async () => {
        const y = layerNorm(x, g, b, 1e-5);
        const v = await y.data();
        y.dispose();
        return v;
      });
      const both = await countDispatches(async () => {
        const grads = tf.grads((xi: tf.Tensor, gi: tf.Tensor, bi: tf.Tensor) => {
          void [xi, gi, bi];
          return f();
        })([x, g, b]);
        const data = await Promise.all(grads.map((t) => t.data()));
        tf.dispose(grads);
        return data;
      });
      return {
        y: fwd.result,
        grads: both.result,
        dispatchesFwd: fwd.dispatches,
        dispatchesFwdBwd: both.dispatches,
      };
    } finally {
      setWebGpuLayerNormFused(true);
    }
  };
  try {
    const fused = await run(true);
    const plain = await run(false);
    return {
      maxRelValue: relToScale(fused.y, plain.y),
      maxRelGrad: Math.max(...fused.grads.map((gr, i) => relToScale(gr, plain.grads[i]))),
      dispatchesFwd: fused.dispatchesFwd,
      dispatchesFwdBwd: fused.dispatchesFwdBwd,
    };
  } finally {
    tf.dispose([x, g, b, w]);
  }
}

/** Each fused kernel against the plain ops on the current (webgpu) backend, tiny random inputs. */
export const FUSED_KERNEL_CHECKS: Record<string, () => Promise<FusedKernelCheck>> = {
  'layer norm': checkLayerNormOnCurrentBackend,
  'Conv1D + bias + LoRA + gelu_new + residual': checkLinearOnCurrentBackend,
  'causal self-attention': checkAttentionOnCurrentBackend,
  'token log-prob (and entropy)': checkLogprobOnCurrentBackend,
  // No backward (generation runs without autodiff): maxRelGrad 0, dispatchesFwdBwd = dispatchesFwd.
  'KV-cache decode attention': checkDecodeAttentionOnCurrentBackend,
};
