/**
 * All of the fused WGSL kernels at once (layer norm, Conv1D with its epilogue, causal attention, token
 * log-prob and entropy, the KV-cache decode attention): one switch for benchmarks that compare them with tfjs's
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
import { setWebGpuLayerNormFused } from './kernels/webgpu-layernorm';
import {
  LINEAR_SMALL_ROWS_DEFAULT,
  saveWebGpuLinearSmallRows,
  setWebGpuLinearFused,
  setWebGpuLinearSmallRows,
  webGpuLinearApplies,
} from './kernels/webgpu-linear';
import { setWebGpuAttentionFused } from './kernels/webgpu-attention';
import { entropyRowsWebGpu, setWebGpuLogprobFused } from './kernels/webgpu-logprob';
import { setWebGpuDecodeAttentionFused } from './kernels/webgpu-decode-attention';
import { countDispatches } from './kernels/webgpu-count';
import { conv1d, layerNorm } from './model/ops';
import { causalPaddingBias, causalSelfAttention, decodeAttention } from './model/attention';
import { entropyFromLogits, logprobsFromLogits } from './ppo/losses';

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
    return { maxRelValue, maxRelGrad: 0, dispatchesFwd, dispatchesFwdBwd: dispatchesFwd };
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
