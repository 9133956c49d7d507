/**
 * All of the fused WGSL kernels at once (layer norm, Conv1D with its epilogue, causal attention, token
 * log-prob and entropy, the KV-cache decode attention; for the Llama family RMSNorm, SwiGLU, and grouped-query
 * attention with the rotary embedding inside, prefill and decode): one switch for benchmarks that compare them with tfjs's
 * own ops, and the checks of each against those ops (FUSED_KERNEL_CHECKS: the Chromium page e2e/pages/kernels.ts,
 * scripts/gpu-checks.ts and the Node WebGPU tests run them). Each kernel file says what it fuses; docs/tfjs.md
 * (dispatch counts).
 *
 * Why the checks live here and not in the kernel files: a check runs an op's one dispatch point (model/ops.ts
 * layerNorm and conv1d, model/attention.ts causalSelfAttention and decodeAttention, ppo/losses.ts
 * logprobsFromLogits and entropyFromLogits) with its kernel's switch on and off, so it imports the model and the
 * losses, which import the kernels. Kept in the kernel files, that was an import circle; here the kernels stay
 * leaves (tests/import-cycles.test.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { setWebGpuLayerNormFused } from '../kernels/webgpu-layernorm';
import {
  LINEAR_SMALL_ROWS_DEFAULT,
  saveWebGpuLinearSmallRows,
  setWebGpuLinearFused,
  setWebGpuLinearSmallRows,
  webGpuLinearApplies,
} from '../kernels/webgpu-linear';
import { setWebGpuAttentionFused } from '../kernels/webgpu-attention';
import { entropyRowsWebGpu, setWebGpuLogprobFused } from '../kernels/webgpu-logprob';
import { setWebGpuDecodeAttentionFused } from '../kernels/webgpu-decode-attention';
import { setWebGpuRmsNormFused } from '../kernels/webgpu-rmsnorm';
import { setWebGpuSwigluFused } from '../kernels/webgpu-swiglu';
import { setWebGpuGqaFused } from '../kernels/webgpu-gqa';
import { gqaDecodeQkvWebGpu, setWebGpuGqaDecodeFused, type DecodeQkv } from '../kernels/webgpu-gqa-decode';
import { countDispatches } from '../kernels/webgpu-count';
import type { LayerKV } from '../kernels/definitions';
import { conv1d, layerNorm, rmsNorm, swiglu } from '../model/ops';
import {
  causalPaddingBias,
  causalSelfAttention,
  decodeAttention,
  gqaDecodeAttention,
  gqaSelfAttention,
} from '../model/attention';
import { entropyFromLogits, logprobsFromLogits } from '../ppo/losses';

/** Turn every fused WebGPU kernel on (the default) or off (tfjs's ops: the reference path). */
export function setWebGpuFusedKernels(on: boolean): void {
  setWebGpuLayerNormFused(on);
  setWebGpuLinearFused(on);
  setWebGpuAttentionFused(on);
  setWebGpuLogprobFused(on);
  setWebGpuDecodeAttentionFused(on);
  setWebGpuRmsNormFused(on);
  setWebGpuSwigluFused(on);
  setWebGpuGqaFused(on);
  setWebGpuGqaDecodeFused(on);
}

export interface FusedKernelCheck {
  maxRelValue: number;
  maxRelGrad: number;
  dispatchesFwd: number;
  dispatchesFwdBwd: number;
}

/**
 * max |a − b| / max(minScale, max |b|) over the elements: the difference relative to the reference b's scale, so
 * entries near 0 do not blow it up. Infinity when the lengths differ or a NaN appears (a NaN must not read as
 * agreement). minScale: 1e-30 (relative to the reference's scale, however small) for the attention, decode and
 * log-prob checks; 1 for the layer-norm and Conv1D checks, whose figures are read as absolute below a scale of 1.
 */
export async function relDiff(
  a: tf.Tensor | ArrayLike<number>,
  b: tf.Tensor | ArrayLike<number>,
  minScale = 1e-30,
): Promise<number> {
  const [x, y] = await Promise.all([
    a instanceof tf.Tensor ? a.data() : a,
    b instanceof tf.Tensor ? b.data() : b,
  ]);
  let d = 0;
  let scale = 0;
  for (let i = 0; i < x.length; i++) {
    d = Math.max(d, Math.abs(x[i] - y[i]));
    scale = Math.max(scale, Math.abs(y[i]));
  }
  return x.length === y.length && Number.isFinite(d) ? d / Math.max(scale, minScale) : Infinity;
}

/** A check of a kernel without a backward (generation runs without autodiff): no gradient, forward dispatches only. */
const forwardOnly = (maxRelValue: number, dispatches: number): FusedKernelCheck => ({
  maxRelValue,
  maxRelGrad: 0,
  dispatchesFwd: dispatches,
  dispatchesFwdBwd: dispatches,
});

/** Dispatches `fn` makes (kernels/webgpu-count.ts). */
async function dispatchesOf(fn: () => void | Promise<void>): Promise<number> {
  return (await countDispatches(fn)).dispatches;
}

/**
 * The fused layer norm (kernels/webgpu-layernorm.ts) against model/ops.ts's layerNorm with the switch off, on the
 * current backend: 70 rows × 48 columns, values and the gradients of x, gain and bias under random upstream weights.
 */
export async function checkLayerNormOnCurrentBackend(): Promise<FusedKernelCheck> {
  if (tf.getBackend() !== 'webgpu') throw new Error(`needs the webgpu backend, not ${tf.getBackend()}`);
  const [R, C] = [70, 48];
  const x = tf.randomNormal([R, C], 0.5, 2, 'float32', 11);
  const g = tf.randomNormal([C], 1, 0.3, 'float32', 12);
  const b = tf.randomNormal([C], 0, 0.3, 'float32', 13);
  const w = tf.randomNormal([R, C], 0, 1, 'float32', 14);
  const run = async (fused: boolean) => {
    const was = setWebGpuLayerNormFused(fused);
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
      setWebGpuLayerNormFused(was);
    }
  };
  try {
    const fused = await run(true);
    const plain = await run(false);
    const gradDiffs = await Promise.all(fused.grads.map((gr, i) => relDiff(gr, plain.grads[i], 1)));
    return {
      maxRelValue: await relDiff(fused.y, plain.y, 1),
      maxRelGrad: Math.max(...gradDiffs),
      dispatchesFwd: fused.dispatchesFwd,
      dispatchesFwdBwd: fused.dispatchesFwdBwd,
    };
  } finally {
    tf.dispose([x, g, b, w]);
  }
}

/**
 * The fused Conv1D (kernels/webgpu-linear.ts) against model/ops.ts's conv1d with the switch off, on the current
 * backend (webgpu): two tiny Conv1Ds with gelu_new and a residual, one on the 64×64 tiles (70 rows; rows and
 * columns not multiples of 64) and one on the few-rows program (5 rows, K 300, 37 columns: not a multiple of the
 * strip), values and the gradients of x, W, b and the residual under random upstream weights. Returns the worst
 * relative differences (|a − b| / max(1, max|b|) per tensor) and the dispatches of the fused op on the tiles,
 * forward and forward + backward (the backward from a given dy).
 */
export async function checkLinearOnCurrentBackend(): Promise<FusedKernelCheck> {
  const wasOn = setWebGpuLinearFused(true);
  try {
    const tiled = await checkLinearShape(70, 24, 40, 11);
    // The few-rows program on every adapter (software ones default to the tiles), then the setting as it was.
    const restore = saveWebGpuLinearSmallRows();
    let rows: FusedKernelCheck;
    try {
      setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT);
      rows = await checkLinearShape(5, 300, 37, 21);
    } finally {
      restore();
    }
    return {
      maxRelValue: Math.max(tiled.maxRelValue, rows.maxRelValue),
      maxRelGrad: Math.max(tiled.maxRelGrad, rows.maxRelGrad),
      dispatchesFwd: tiled.dispatchesFwd,
      dispatchesFwdBwd: tiled.dispatchesFwdBwd,
    };
  } finally {
    setWebGpuLinearFused(wasOn);
  }
}

/** checkLinearOnCurrentBackend for one shape x [N, K] · W [K, O] (called with the fused switch on). */
async function checkLinearShape(N: number, K: number, O: number, seed: number): Promise<FusedKernelCheck> {
  const x = tf.randomNormal([N, K], 0, 1, 'float32', seed) as tf.Tensor2D;
  const w = tf.randomNormal([K, O], 0, 0.5 / Math.sqrt(K / 24), 'float32', seed + 1) as tf.Tensor2D;
  const b = tf.randomNormal([O], 0, 0.5, 'float32', seed + 2) as tf.Tensor1D;
  const res = tf.randomNormal([N, O], 0, 1, 'float32', seed + 3) as tf.Tensor2D;
  const dy = tf.randomNormal([N, O], 0, 1, 'float32', seed + 4) as tf.Tensor2D;
  try {
    if (!webGpuLinearApplies(x, w, b, res))
      throw new Error(
        `checkLinearOnCurrentBackend needs the webgpu backend (the fused Conv1D applies there only), not ${tf.getBackend()}.`,
      );
    const op = (a: tf.Tensor, c: tf.Tensor, d: tf.Tensor, e: tf.Tensor) =>
      conv1d(a as tf.Tensor2D, c, d, null, { activation: 'gelu_new', residual: e as tf.Tensor2D });
    // conv1d with the switch as the caller set it (on: the fused kernel) or off (the plain ops).
    const withSwitch = (on: boolean, f: () => tf.Tensor[]): tf.Tensor[] => {
      const was = setWebGpuLinearFused(on);
      try {
        return f();
      } finally {
        setWebGpuLinearFused(was);
      }
    };
    const vjp = () => tf.grads(op)([x, w, b, res], dy);
    const [vf, ...gf] = withSwitch(true, () => [op(x, w, b, res), ...vjp()]);
    const [vp, ...gp] = withSwitch(false, () => [op(x, w, b, res), ...vjp()]);
    const maxRelValue = await relDiff(vf, vp, 1);
    let maxRelGrad = 0;
    for (let i = 0; i < gf.length; i++) maxRelGrad = Math.max(maxRelGrad, await relDiff(gf[i], gp[i], 1));
    tf.dispose([vf, vp, ...gf, ...gp]);
    const dispatchesFwd = await dispatchesOf(() => tf.dispose(op(x, w, b, res)));
    const dispatchesFwdBwd = await dispatchesOf(() => tf.dispose(vjp()));
    return { maxRelValue, maxRelGrad, dispatchesFwd, dispatchesFwdBwd };
  } finally {
    tf.dispose([x, w, b, res, dy]);
  }
}

/**
 * The fused attention (kernels/webgpu-attention.ts) against model/attention.ts's causalSelfAttention with the
 * switch off (the plain ops) on the current backend (which must be webgpu), on tiny random inputs
 * with padding: B 3, T 19 (not a multiple of the tiles), n_embd 48 in 4 heads (hs 12), batch rows with left
 * padding, a row of padding only and a full row. Returns the worst relative differences (max |fused − plain| /
 * max |plain|) of y and of dqkv (upstream weights random), and the fused op's dispatches forward and forward +
 * backward. For a Chromium end-to-end page; tests/webgpu-attention.test.ts calls it on Node WebGPU.
 */
export async function checkAttentionOnCurrentBackend(): Promise<FusedKernelCheck> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(
      `checkAttentionOnCurrentBackend needs the webgpu backend current, not ${tf.getBackend()}.`,
    );
  const [B, T, C, nh] = [3, 19, 48, 4];
  const real = [
    [4, T], // left padding: rows 0..3 have no allowed key
    [0, T], // no padding
    [T, T], // padding only
  ];
  const mask = Array.from({ length: B * T }, (_, k) => {
    const [b, t] = [Math.floor(k / T), k % T];
    return t >= real[b][0] && t < real[b][1] ? 1 : 0;
  });
  const qkv = tf.randomNormal([B * T, 3 * C], 0, 1, 'float32', 11) as tf.Tensor2D;
  const maskF = tf.tensor2d(mask, [B, T], 'float32');
  const bias = tf.tidy(() => causalPaddingBias(maskF));
  const w = tf.randomNormal([B * T, C], 0, 1, 'float32', 12);
  const both = (on: boolean) => {
    const was = setWebGpuAttentionFused(on);
    try {
      const y = tf.tidy(() => causalSelfAttention(qkv, maskF, bias, nh));
      const g = tf.grad((x: tf.Tensor) =>
        tf.sum(tf.mul(causalSelfAttention(x as tf.Tensor2D, maskF, bias, nh), w)),
      )(qkv);
      return [y, g];
    } finally {
      setWebGpuAttentionFused(was);
    }
  };
  try {
    const [yF, gF] = both(true);
    const [yP, gP] = both(false);
    const maxRelValue = await relDiff(yF, yP);
    const maxRelGrad = await relDiff(gF, gP);
    tf.dispose([yF, gF, yP, gP]);
    const was = setWebGpuAttentionFused(true);
    let dispatchesFwd = 0;
    let dispatchesFwdBwd = 0;
    try {
      // Shaders are compiled above: these count the op's own dispatches (the gradient is seeded with w as dy).
      dispatchesFwd = await dispatchesOf(() => tf.dispose(causalSelfAttention(qkv, maskF, bias, nh)));
      dispatchesFwdBwd = await dispatchesOf(() =>
        tf.dispose(
          tf.grads((x: tf.Tensor) => causalSelfAttention(x as tf.Tensor2D, maskF, bias, nh))([qkv], w),
        ),
      );
    } finally {
      setWebGpuAttentionFused(was);
    }
    return { maxRelValue, maxRelGrad, dispatchesFwd, dispatchesFwdBwd };
  } finally {
    tf.dispose([qkv, maskF, bias, w]);
  }
}

/**
 * The fused decode attention (kernels/webgpu-decode-attention.ts) against model/attention.ts's decodeAttention with the
 * switch off (the plain ops) on the current backend (which must be webgpu), on tiny random
 * inputs: B 3, S 19 (not a multiple of the 64-thread tiles), n_embd 48 in 4 heads (hs 12), slot 11, a key mask with
 * left padding, one without, and a row with every key masked; the cache holds random keys and values below the
 * slot and zeros from it on (as generate's does). Returns the worst relative difference (max |fused − plain| /
 * max |plain|) over y and the new keys and values, maxRelGrad 0 (no backward: generation runs without autodiff),
 * and the fused layer's dispatches (dispatchesFwdBwd = dispatchesFwd). For a Chromium end-to-end page;
 * tests/webgpu-decode-attention.test.ts calls it on Node WebGPU.
 */
export async function checkDecodeAttentionOnCurrentBackend(): Promise<FusedKernelCheck> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(
      `checkDecodeAttentionOnCurrentBackend needs the webgpu backend current, not ${tf.getBackend()}.`,
    );
  const [B, S, C, nh, slot] = [3, 19, 48, 4, 11];
  const hs = C / nh;
  const realFrom = [4, 0, S]; // row 2: every key masked
  const inputs = tf.tidy(() => {
    const below = tf.reshape(tf.cast(tf.less(tf.range(0, S, 1, 'int32'), slot), 'float32'), [1, 1, S, 1]);
    const cache = (seed: number) =>
      tf.mul(tf.randomNormal([B, nh, S, hs], 0, 1, 'float32', seed), below) as tf.Tensor4D;
    const mask = Array.from({ length: B * S }, (_, i) => {
      const [b, j] = [Math.floor(i / S), i % S];
      return j >= realFrom[b] && j <= slot ? 1 : 0;
    });
    return {
      qkv: tf.randomNormal([B, 3 * C], 0, 1, 'float32', 21) as tf.Tensor2D,
      oh: tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([slot], 'int32'), S), [S]), 'float32'),
      keyMask: tf.tensor2d(mask, [B, S], 'float32'),
      kv: { k: cache(22), v: cache(23) },
    };
  });
  const { qkv, oh, keyMask, kv } = inputs;
  const both = (on: boolean) => {
    const was = setWebGpuDecodeAttentionFused(on);
    try {
      return tf.tidy(() => decodeAttention(qkv, oh, keyMask, kv, nh));
    } finally {
      setWebGpuDecodeAttentionFused(was);
    }
  };
  try {
    const fused = both(true);
    const plain = both(false);
    const maxRelValue = Math.max(
      await relDiff(fused.y, plain.y),
      await relDiff(fused.kv.k, plain.kv.k),
      await relDiff(fused.kv.v, plain.kv.v),
    );
    tf.dispose([fused.y, fused.kv.k, fused.kv.v, plain.y, plain.kv.k, plain.kv.v]);
    const was = setWebGpuDecodeAttentionFused(true);
    let dispatchesFwd = 0;
    try {
      // Shaders are compiled above: this counts the layer's own dispatches.
      const counted = await countDispatches(() => tf.tidy(() => decodeAttention(qkv, oh, keyMask, kv, nh)));
      tf.dispose([counted.result.y, counted.result.kv.k, counted.result.kv.v]);
      dispatchesFwd = counted.dispatches;
    } finally {
      setWebGpuDecodeAttentionFused(was);
    }
    return forwardOnly(maxRelValue, dispatchesFwd);
  } finally {
    tf.dispose([qkv, oh, keyMask, kv.k, kv.v]);
  }
}

export interface KernelCheck {
  /** max |fused − plain| / max |plain| over the values. */
  maxRelValue: number;
  /** The same over the gradient w.r.t. the logits of Σ w·value, w random upstream weights. */
  maxRelGrad: number;
  /** Dispatches of the fused op alone (the per-row entropy, before its masked mean), forward and forward + backward. */
  dispatchesFwd: number;
  dispatchesFwdBwd: number;
}

/** The log-prob figures at top level (what the e2e page reads), the entropy's beside (values: the masked mean). */
export interface LogprobCheck extends KernelCheck {
  entropy: KernelCheck;
}

/**
 * The fused log-prob and entropy (kernels/webgpu-logprob.ts) against ppo/losses.ts's logprobsFromLogits and
 * entropyFromLogits with the switch off (setWebGpuLogprobFused(false): the plain ops) on the current backend, which must be webgpu: tiny random logits
 * (V = 133, not a multiple of the workgroup; a few at ±80), temperature 0.7, values and gradients of the log-probs
 * and of the masked mean entropy, and the fused ops' dispatch counts. For the Chromium e2e page and the tests.
 */
export async function checkLogprobOnCurrentBackend(): Promise<LogprobCheck> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`checkLogprobOnCurrentBackend needs the webgpu backend, not ${tf.getBackend()}`);
  const M = 6;
  const V = 133;
  const T = 0.7;
  const vals = Array.from({ length: M * V }, (_, i) => 3 * Math.sin(i * 12.9898 + 0.5) * Math.cos(i * 0.731));
  for (let r = 0; r < M; r++) vals[r * V + ((r * 37) % V)] = r % 2 ? -80 : 80;
  const tok = Array.from({ length: M }, (_, r) => (r === 0 ? 0 : r === 1 ? V - 1 : (r * 37) % V));
  const logits = tf.tensor2d(vals, [M, V]);
  const tokens = tf.tensor1d(tok, 'int32');
  const w = tf.tensor1d(Array.from({ length: M }, (_, r) => Math.cos(r * 1.7) + 0.1));
  const mask = tf.tensor1d(Array.from({ length: M }, (_, r) => (r === 3 ? 0 : 1)));
  const lp = (x: tf.Tensor) => logprobsFromLogits(x as tf.Tensor2D, tokens, T);
  const ent = (x: tf.Tensor) => entropyFromLogits(x, mask, T);
  const lpLoss = (x: tf.Tensor) => tf.sum(tf.mul(lp(x), w));
  const entLoss = (x: tf.Tensor) => tf.mul(ent(x), 1.3);
  const both = (fused: boolean) => {
    const was = setWebGpuLogprobFused(fused);
    try {
      return tf.tidy(() => [lp(logits), tf.grad(lpLoss)(logits), ent(logits), tf.grad(entLoss)(logits)]);
    } finally {
      setWebGpuLogprobFused(was);
    }
  };
  const mine = both(true);
  const ref = both(false);
  const d = await Promise.all(mine.map((t, i) => relDiff(t, ref[i])));
  const counts = async (f: () => tf.Tensor | tf.Tensor[]) => {
    const c = await countDispatches(() => tf.tidy(f));
    tf.dispose(c.result);
    return c.dispatches;
  };
  const was = setWebGpuLogprobFused(true);
  let lpFwd: number, lpFwdBwd: number, entFwd: number, entFwdBwd: number;
  try {
    // Upstream gradients handed in (w): what is counted is the op's own dispatches, not a loss's.
    const rows = (x: tf.Tensor) => entropyRowsWebGpu(x as tf.Tensor2D, T);
    lpFwd = await counts(() => lp(logits));
    lpFwdBwd = await counts(() => tf.grad(lp)(logits, w));
    entFwd = await counts(() => rows(logits));
    entFwdBwd = await counts(() => tf.grad(rows)(logits, w));
  } finally {
    setWebGpuLogprobFused(was);
  }
  tf.dispose([...mine, ...ref, logits, tokens, w, mask]);
  return {
    maxRelValue: d[0],
    maxRelGrad: d[1],
    dispatchesFwd: lpFwd,
    dispatchesFwdBwd: lpFwdBwd,
    entropy: { maxRelValue: d[2], maxRelGrad: d[3], dispatchesFwd: entFwd, dispatchesFwdBwd: entFwdBwd },
  };
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

// ---- the Llama family's kernels -----------------------------------------------------------------------------

/** Forward and forward + backward (gradients seeded with dy) of `op` with `set`'s switch on or off: values, grads. */
async function compareFusedPlain(
  set: (on: boolean) => boolean,
  op: (...xs: tf.Tensor[]) => tf.Tensor,
  xs: tf.Tensor[],
  dy: tf.Tensor,
  minScale: number,
): Promise<FusedKernelCheck> {
  const both = (on: boolean) => {
    const was = set(on);
    try {
      return tf.tidy(() => [op(...xs), ...tf.grads(op)(xs, dy)]);
    } finally {
      set(was);
    }
  };
  const fused = both(true);
  const plain = both(false);
  const maxRelValue = await relDiff(fused[0], plain[0], minScale);
  let maxRelGrad = 0;
  for (let i = 1; i < fused.length; i++)
    maxRelGrad = Math.max(maxRelGrad, await relDiff(fused[i], plain[i], minScale));
  tf.dispose([...fused, ...plain]);
  const was = set(true);
  try {
    // Shaders are compiled above: these count the op's own dispatches.
    const dispatchesFwd = await dispatchesOf(() => tf.dispose(tf.tidy(() => op(...xs))));
    const dispatchesFwdBwd = await dispatchesOf(() => tf.dispose(tf.tidy(() => tf.grads(op)(xs, dy))));
    return { maxRelValue, maxRelGrad, dispatchesFwd, dispatchesFwdBwd };
  } finally {
    set(was);
  }
}

function needWebGpu(what: string): void {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`${what} needs the webgpu backend current, not ${tf.getBackend()}.`);
}

/**
 * The fused RMSNorm (kernels/webgpu-rmsnorm.ts) against model/ops.ts's rmsNorm with the switch off, on the current
 * (webgpu) backend: x [3, 23, 40] (69 rows; 40 columns, not a multiple of the 64-thread rows), values and the
 * gradients of x and the weight under random upstream gradients; relative to max(1, scale) as the layer norm's.
 */
export async function checkRmsNormOnCurrentBackend(): Promise<FusedKernelCheck> {
  needWebGpu('checkRmsNormOnCurrentBackend');
  const x = tf.randomNormal([3, 23, 40], 0.3, 2, 'float32', 31);
  const w = tf.randomNormal([40], 1, 0.3, 'float32', 32);
  const dy = tf.randomNormal([3, 23, 40], 0, 1, 'float32', 33);
  try {
    return await compareFusedPlain(setWebGpuRmsNormFused, (a, b) => rmsNorm(a, b, 1e-6), [x, w], dy, 1);
  } finally {
    tf.dispose([x, w, dy]);
  }
}

/**
 * The fused SwiGLU (kernels/webgpu-swiglu.ts) against model/ops.ts's swiglu with the switch off, on the current
 * (webgpu) backend: gate and up [37, 53] (gate with a few entries at ±30, where σ saturates), values and the
 * gradients of gate and up under random upstream gradients, relative to max(1, scale).
 */
export async function checkSwigluOnCurrentBackend(): Promise<FusedKernelCheck> {
  needWebGpu('checkSwigluOnCurrentBackend');
  const vals = Array.from(
    { length: 37 * 53 },
    (_, i) => 3 * Math.sin(i * 12.9898 + 0.5) * Math.cos(i * 0.731),
  );
  for (let i = 0; i < vals.length; i += 97) vals[i] = i % 2 ? -30 : 30;
  const gate = tf.tensor2d(vals, [37, 53]);
  const up = tf.randomNormal([37, 53], 0, 1, 'float32', 41);
  const dy = tf.randomNormal([37, 53], 0, 1, 'float32', 42);
  try {
    return await compareFusedPlain(setWebGpuSwigluFused, (g, u) => swiglu(g, u), [gate, up], dy, 1);
  } finally {
    tf.dispose([gate, up, dy]);
  }
}

/** cos / sin rows [B·T, hs] of positions cumsum(mask) − 1 (≥ 0), as model/llama.ts gathers them (θ 10000). */
export function ropeRowsForCheck(
  mask: number[],
  B: number,
  T: number,
  hs: number,
): { cos: tf.Tensor2D; sin: tf.Tensor2D } {
  const cos = new Float32Array(B * T * hs);
  const sin = new Float32Array(B * T * hs);
  for (let b = 0; b < B; b++) {
    let seen = 0;
    for (let t = 0; t < T; t++) {
      seen += mask[b * T + t];
      const p = Math.max(seen - 1, 0);
      for (let j = 0; j < hs / 2; j++) {
        const a = Math.fround(p * Math.fround(1 / Math.pow(10000, (2 * j) / hs)));
        for (const o of [j, j + hs / 2]) {
          cos[(b * T + t) * hs + o] = Math.cos(a);
          sin[(b * T + t) * hs + o] = Math.sin(a);
        }
      }
    }
  }
  return { cos: tf.tensor2d(cos, [B * T, hs]), sin: tf.tensor2d(sin, [B * T, hs]) };
}

/**
 * The fused grouped-query attention with the rotary embedding inside (kernels/webgpu-gqa.ts) against
 * model/attention.ts's gqaSelfAttention with the switch off, on the current (webgpu) backend: B 3, T 19, 4 query
 * heads over 2 KV heads, hs 16 (and hs 128, 2 over 1, T 9, when `wide`), left padding, a row of padding only
 * and a full row; values (y, and y with the rotated keys and values the KV cache's prefill collects) and the
 * gradients of q, k and v under random upstream gradients, relative to the plain path's scale; dispatches of the
 * fused op forward and forward + backward.
 */
export async function checkGqaAttentionOnCurrentBackend(wide = false): Promise<FusedKernelCheck> {
  needWebGpu('checkGqaAttentionOnCurrentBackend');
  const [B, T, nh, nkv, hs] = wide ? [2, 9, 2, 1, 128] : [3, 19, 4, 2, 16];
  const real = wide
    ? [
        [2, T],
        [0, T],
      ]
    : [
        [4, T],
        [0, T],
        [T, T],
      ];
  const mask = Array.from({ length: B * T }, (_, k) => {
    const [b, t] = [Math.floor(k / T), k % T];
    return t >= real[b][0] && t < real[b][1] ? 1 : 0;
  });
  const maskF = tf.tensor2d(mask, [B, T], 'float32');
  const rope = ropeRowsForCheck(mask, B, T, hs);
  const bias = tf.tidy(() => causalPaddingBias(maskF));
  const q = tf.randomNormal([B * T, nh * hs], 0, 1, 'float32', 51);
  const k = tf.randomNormal([B * T, nkv * hs], 0, 1, 'float32', 52);
  const v = tf.randomNormal([B * T, nkv * hs], 0, 1, 'float32', 53);
  const dy = tf.randomNormal([B * T, nh * hs], 0, 1, 'float32', 54);
  const rows = { ...rope, both: tf.concat([rope.cos, rope.sin], 1) }; // as model/llama.ts gathers it
  const op = (a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) =>
    gqaSelfAttention(a as tf.Tensor2D, b as tf.Tensor2D, c as tf.Tensor2D, rows, maskF, bias, nh, nkv);
  // The KV cache's prefill (collect): y and the collected rotated keys and values, fused against plain.
  const prefill = (on: boolean) => {
    const was = setWebGpuGqaFused(on);
    try {
      return tf.tidy(() => {
        const kv: LayerKV[] = [];
        const y = gqaSelfAttention(
          q as tf.Tensor2D,
          k as tf.Tensor2D,
          v as tf.Tensor2D,
          rows,
          maskF,
          bias,
          nh,
          nkv,
          kv,
        );
        return [y, kv[0].k, kv[0].v];
      });
    } finally {
      setWebGpuGqaFused(was);
    }
  };
  try {
    const r = await compareFusedPlain(
      setWebGpuGqaFused,
      op as (...xs: tf.Tensor[]) => tf.Tensor,
      [q, k, v],
      dy,
      1e-30,
    );
    const [pf, pp] = [prefill(true), prefill(false)];
    for (let i = 0; i < 3; i++) r.maxRelValue = Math.max(r.maxRelValue, await relDiff(pf[i], pp[i]));
    tf.dispose([...pf, ...pp]);
    return r;
  } finally {
    tf.dispose([maskF, rope.cos, rope.sin, rows.both, bias, q, k, v, dy]);
  }
}

/**
 * The fused grouped-query decode attention with the rotary embedding inside (kernels/webgpu-gqa-decode.ts)
 * against model/attention.ts's gqaDecodeAttention with the switch off, on the current (webgpu) backend: B 3,
 * S 19, 4 query heads over 2 KV heads, hs 16 (hs 128 over S 70 when `wide`), slot 11, a key mask with left
 * padding, one without and a row with every key masked; the cache random below the slot and zero from it on.
 * maxRelValue over y and the new keys and values; maxRelGrad 0 (no backward); the fused layer's dispatches.
 */
export async function checkGqaDecodeOnCurrentBackend(wide = false): Promise<FusedKernelCheck> {
  needWebGpu('checkGqaDecodeOnCurrentBackend');
  const [B, S, nh, nkv, hs, slot] = wide ? [2, 70, 4, 1, 128, 66] : [3, 19, 4, 2, 16, 11];
  const realFrom = [4, 0, S];
  const inputs = tf.tidy(() => {
    const below = tf.reshape(tf.cast(tf.less(tf.range(0, S, 1, 'int32'), slot), 'float32'), [1, 1, S, 1]);
    const cache = (seed: number) =>
      tf.mul(tf.randomNormal([B, nkv, S, hs], 0, 1, 'float32', seed), below) as tf.Tensor4D;
    const mask = Array.from({ length: B * S }, (_, i) => {
      const [b, j] = [Math.floor(i / S), i % S];
      return j >= realFrom[b] && j <= slot ? 1 : 0;
    });
    const pos = Array.from({ length: B }, (_, b) => Math.max(slot - realFrom[b], 0));
    // Row b's cos / sin: position pos[b] (its real tokens before the slot) of positions 0 … max.
    const top = Math.max(...pos) + 1;
    const t = ropeRowsForCheck(Array(top).fill(1), 1, top, hs);
    const idx = tf.tensor1d(pos, 'int32');
    return {
      q: tf.randomNormal([B, nh * hs], 0, 1, 'float32', 61) as tf.Tensor2D,
      k: tf.randomNormal([B, nkv * hs], 0, 1, 'float32', 62) as tf.Tensor2D,
      v: tf.randomNormal([B, nkv * hs], 0, 1, 'float32', 63) as tf.Tensor2D,
      rope: {
        cos: tf.reshape(tf.gather(t.cos, idx), [B, 1, hs]),
        sin: tf.reshape(tf.gather(t.sin, idx), [B, 1, hs]),
      },
      oh: tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([slot], 'int32'), S), [S]), 'float32'),
      keyMask: tf.tensor2d(mask, [B, S], 'float32'),
      kv: { k: cache(64), v: cache(65) },
    };
  });
  const { q, k, v, rope, oh, keyMask, kv } = inputs;
  const layer = () => gqaDecodeAttention(q, k, v, rope, oh, keyMask, kv, nh);
  const both = (on: boolean) => {
    const was = setWebGpuGqaDecodeFused(on);
    try {
      return tf.tidy(layer);
    } finally {
      setWebGpuGqaDecodeFused(was);
    }
  };
  try {
    const fused = both(true);
    const plain = both(false);
    const maxRelValue = Math.max(
      await relDiff(fused.y, plain.y),
      await relDiff(fused.kv.k, plain.kv.k),
      await relDiff(fused.kv.v, plain.kv.v),
    );
    tf.dispose([fused.y, fused.kv.k, fused.kv.v, plain.y, plain.kv.k, plain.kv.v]);
    const was = setWebGpuGqaDecodeFused(true);
    try {
      const counted = await countDispatches(() => tf.tidy(layer));
      tf.dispose([counted.result.y, counted.result.kv.k, counted.result.kv.v]);
      return forwardOnly(maxRelValue, counted.dispatches);
    } finally {
      setWebGpuGqaDecodeFused(was);
    }
  } finally {
    tf.dispose([q, k, v, rope.cos, rope.sin, oh, keyMask, kv.k, kv.v]);
  }
}

/**
 * The decode attention reading q, k, v from the fused q|k|v projection with Qwen2's biases or Qwen3's q_norm /
 * k_norm (kernels/webgpu-gqa-decode.ts gqaDecodeQkvWebGpu), writing the new key and value into the cache in place
 * — by the attention's own dispatch where the device's storage buffers allow (Qwen2's binds 10, Qwen3's 9), else
 * by one dispatch before it — against the plain ops (the biases added, model/ops.ts rmsNorm on the heads, then
 * gqaDecodeAttention's plain path) on copies of the caches: y and both caches. `dispatchesFwd`: the in-place path's.
 */
export async function checkGqaDecodeQkvInPlaceOnCurrentBackend(
  kind: 'bias' | 'norm',
): Promise<FusedKernelCheck> {
  needWebGpu('checkGqaDecodeQkvInPlaceOnCurrentBackend');
  const [B, S, nh, nkv, hs, slot] = [2, 21, 4, 2, 64, 17];
  const t = tf.tidy(() => {
    const below = tf.reshape(tf.cast(tf.less(tf.range(0, S, 1, 'int32'), slot), 'float32'), [1, 1, S, 1]);
    const cache = (seed: number) =>
      tf.mul(tf.randomNormal([B, nkv, S, hs], 0, 1, 'float32', seed), below) as tf.Tensor4D;
    const mask = Array.from({ length: B * S }, (_, i) => (i % S <= slot && !(i < S && i % S < 3) ? 1 : 0));
    const rows = ropeRowsForCheck(Array(slot + 1).fill(1), 1, slot + 1, hs);
    const idx = tf.tensor1d([slot - 3, slot], 'int32');
    return {
      qkv: tf.randomNormal([B, (nh + 2 * nkv) * hs], 0, 1, 'float32', 71) as tf.Tensor2D,
      bq: tf.randomNormal([nh * hs], 0, 0.5, 'float32', 72) as tf.Tensor1D,
      bk: tf.randomNormal([nkv * hs], 0, 0.5, 'float32', 73) as tf.Tensor1D,
      bv: tf.randomNormal([nkv * hs], 0, 0.5, 'float32', 74) as tf.Tensor1D,
      nq: tf.randomNormal([hs], 1, 0.3, 'float32', 75) as tf.Tensor1D,
      nk: tf.randomNormal([hs], 1, 0.3, 'float32', 76) as tf.Tensor1D,
      cos: tf.reshape(tf.gather(rows.cos, idx), [B, 1, hs]),
      sin: tf.reshape(tf.gather(rows.sin, idx), [B, 1, hs]),
      // cos | sin [B, 2·hs], as Llama.decodeStep gathers the rows for these kernels.
      cs: tf.concat([tf.gather(rows.cos, idx), tf.gather(rows.sin, idx)], 1),
      oh: tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([slot], 'int32'), S), [S]), 'float32'),
      keyMask: tf.tensor2d(mask, [B, S], 'float32') as tf.Tensor2D,
      k: cache(77),
      v: cache(78),
    };
  });
  const src: DecodeQkv = {
    qkv: t.qkv,
    bias: kind === 'bias' ? { q: t.bq, k: t.bk, v: t.bv } : null,
    norm: kind === 'norm' ? { q: t.nq, k: t.nk, eps: 1e-6 } : null,
  };
  const plain = tf.tidy(() => {
    const cut = (lo: number, n: number, b: tf.Tensor | undefined) => {
      const x = tf.slice(t.qkv, [0, lo], [B, n]);
      return b ? tf.add(x, b) : x;
    };
    let q = cut(0, nh * hs, src.bias?.q);
    let k = cut(nh * hs, nkv * hs, src.bias?.k);
    const v = cut((nh + nkv) * hs, nkv * hs, src.bias?.v) as tf.Tensor2D;
    if (src.norm) {
      q = tf.reshape(rmsNorm(tf.reshape(q, [B, nh, hs]), src.norm.q, 1e-6), [B, nh * hs]);
      k = tf.reshape(rmsNorm(tf.reshape(k, [B, nkv, hs]), src.norm.k, 1e-6), [B, nkv * hs]);
    }
    const was = setWebGpuGqaDecodeFused(false);
    try {
      const kv = { k: tf.add(t.k, 0) as tf.Tensor4D, v: tf.add(t.v, 0) as tf.Tensor4D };
      const rope = { cos: t.cos, sin: t.sin };
      return gqaDecodeAttention(q as tf.Tensor2D, k as tf.Tensor2D, v, rope, t.oh, t.keyMask, kv, nh);
    } finally {
      setWebGpuGqaDecodeFused(was);
    }
  });
  try {
    // In place into caches of their own (refCount 1), so that the inputs above stay as they were.
    const kv = { k: tf.add(t.k, 0) as tf.Tensor4D, v: tf.add(t.v, 0) as tf.Tensor4D };
    const counted = await countDispatches(() =>
      gqaDecodeQkvWebGpu(src, { cs: t.cs }, t.oh, t.keyMask, kv, nh, { inPlace: true }),
    );
    const out = counted.result;
    const maxRelValue = Math.max(
      await relDiff(out.y, plain.y),
      await relDiff(kv.k, plain.kv.k),
      await relDiff(kv.v, plain.kv.v),
    );
    tf.dispose([out.y, out.kv.k, out.kv.v, kv.k, kv.v]);
    return forwardOnly(maxRelValue, counted.dispatches);
  } finally {
    tf.dispose([plain.y, plain.kv.k, plain.kv.v, ...Object.values(t)]);
  }
}

/**
 * The Llama family's fused kernels against the plain ops on the current (webgpu) backend, tiny random inputs.
 * Kept beside FUSED_KERNEL_CHECKS (GPT-2's five), not in it: pages and tests that list those five stay as they are.
 */
export const LLAMA_FUSED_KERNEL_CHECKS: Record<string, () => Promise<FusedKernelCheck>> = {
  RMSNorm: checkRmsNormOnCurrentBackend,
  SwiGLU: checkSwigluOnCurrentBackend,
  'GQA causal attention with RoPE (hs 16)': () => checkGqaAttentionOnCurrentBackend(false),
  'GQA causal attention with RoPE (hs 128)': () => checkGqaAttentionOnCurrentBackend(true),
  // No backward (generation runs without autodiff): maxRelGrad 0, dispatchesFwdBwd = dispatchesFwd.
  'GQA KV-cache decode attention with RoPE (hs 16)': () => checkGqaDecodeOnCurrentBackend(false),
  'GQA KV-cache decode attention with RoPE (hs 128)': () => checkGqaDecodeOnCurrentBackend(true),
  'GQA decode from q|k|v, biases, cache written in place': () =>
    checkGqaDecodeQkvInPlaceOnCurrentBackend('bias'),
  'GQA decode from q|k|v, q/k norms, cache written in place': () =>
    checkGqaDecodeQkvInPlaceOnCurrentBackend('norm'),
};
