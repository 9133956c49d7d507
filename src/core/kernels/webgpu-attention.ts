/**
 * GPT-2's causal self-attention on WebGPU as fused WGSL kernels, registered as tfjs kernels for the webgpu backend
 * and used by model/attention.ts's causalSelfAttention there (other backends, and the KV cache's prefill, keep the
 * plain ops of model/attention.ts, which stay the reference).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). Attention through ops is a split of q|k|v,
 * three head transposes, q·kᵀ, the scale, the additive mask, softmax, att·v and the merge transpose: a dozen
 * dispatches forward and about twice that backward, per layer. Here it is 1 forward and 2 backward:
 * - forward `PerfAttentionFwd` (qkv [B·T, 3C], maskF [B, T]) → y [B·T, C]: FlashAttention-style. One workgroup
 *   of 64 threads per (64 query rows, batch row, head), one thread per query row holding q and its output row in
 *   registers; keys and values stream through workgroup memory in tiles of 16 rows, with an online softmax (the
 *   running max and sum rescaled once per tile). q, k, v are read straight from the fused projection's columns
 *   (q at h·hs, k at C + h·hs, v at 2C + h·hs) and y is written in the merged-heads layout: no split, no transpose.
 * - backward `PerfAttentionStats` (qkv, maskF, y, dy) → [B·nh·T, 2]: per query row and head the log-sum-exp of
 *   its scores (recomputed: the forward writes y only, so a forward without a gradient — rollouts, scoring —
 *   pays one dispatch) and D = Σ dy·y (= Σ_j p_ij·dp_ij);
 *   `PerfAttentionBwd` (qkv, maskF, dy, stats) → dqkv [B·T, 3C] in one dispatch of three workgroup roles
 *   (dispatch z): dq (a thread per query row, a loop over key tiles), dk and dv (a thread per key row, a loop over
 *   query tiles), each writing its own column block of dqkv. With p_ij = exp(s_ij − lse_i), dp_ij = dy_i·v_j and
 *   ds_ij = p_ij (dp_ij − D_i): dq_i = Σ_j ds_ij k_j / √hs, dk_j = Σ_i ds_ij q_i / √hs, dv_j = Σ_i p_ij dy_i.
 * The mask is the plain path's, computed in the kernel from maskF (the `bias` tensor is not read): key j is allowed
 * for query i when j ≤ i and maskF[b, j] ≠ 0; the others get MASKED = −1e9 added, so their weight is exactly 0 in
 * float32. A query row with NO allowed key (left padding before the first real token, or a row of padding only)
 * gets scores s − 1e9 in the plain path, which all round to −1e9 in float32 (for |s| < 32): a uniform average over
 * ALL T keys, future ones included. The kernels do the same for such rows (p_ij = 1/T for every j, in values and
 * in gradients), so every row, padded or not, equals the plain path to float32 rounding.
 * Cost per (query, allowed key): 2·hs multiply-adds forward, ~hs for the stats, ~8·hs backward; tiles past the
 * diagonal are skipped unless the tile holds a fully masked row. Registers: 2·hs floats forward, up to 3·hs
 * backward (hs ≤ 64 here: GPT-2's heads are 64 wide); workgroup memory 2·16·hs floats (8 KiB at hs 64).
 * Limits: float32, hs ≤ 64, B·nh ≤ 65535 workgroups along y; otherwise the plain ops run.
 * Tested against the plain ops, values and gradients, on WebGPU in Node (tests/webgpu-attention.test.ts);
 * `checkAttentionOnCurrentBackend` (src/core/backend/webgpu-fused.ts) runs the same comparison wherever the webgpu backend is current (Chromium).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';
import {
  ATTN_FIRST_REAL_WGSL,
  ATTN_TILE_SCORES_WGSL,
  attnForwardWgsl,
  attnStatsWgsl,
  attnTilesWgsl,
  type AttnRows,
} from './webgpu-softmax-wgsl';

export const ATTN_FWD = 'PerfAttentionFwd';
export const ATTN_STATS = 'PerfAttentionStats';
export const ATTN_BWD = 'PerfAttentionBwd';

/** Rows (queries, or keys in the dk/dv roles) per workgroup: one thread each. */
const BR = 64;
/** Rows of the other side per tile in workgroup memory. */
const BC = 16;
/** Widest head the kernels take (per-thread arrays of hs floats). */
export const MAX_HEAD_SIZE = 64;
/** Workgroups along y are B·nh; WebGPU guarantees 65535 per dimension. */
export const MAX_BATCH_HEADS = 65535;

type Kind = 'fwd' | 'stats' | 'bwd';

/**
 * The kernels' WGSL besides main: constants, workgroup tiles, the first real token of batch row b (every thread
 * gets it) and the scores of a key tile (webgpu-softmax-wgsl.ts, shared with the Llama kernels), and the tile
 * loaders. Tiles hold BC rows × HS columns: keys/values (tA/tB) with the key mask (tS), or queries/upstream
 * gradients (tA/tB) with their lse and D (tS/tD).
 */
function common(hs: number): string {
  return `${attnTilesWgsl(hs, BR, BC)}
  ${ATTN_FIRST_REAL_WGSL}

  // Keys (and values) of rows j0 .. j0 + BC − 1 into tA (tB), their mask into tS (0 past T).
  fn attnLoadKeys(b : i32, h : i32, j0 : i32, T : i32, C : i32, withV : bool) {
    let lid = i32(localId.x);
    for (var e = lid; e < A_BC * A_HS; e = e + A_BR) {
      let jj = e / A_HS;
      let j = j0 + jj;
      var kv = 0.0;
      var vv = 0.0;
      if (j < T) {
        let off = (b * T + j) * 3 * C + h * A_HS + (e - jj * A_HS);
        kv = QKV[off + C];
        if (withV) { vv = QKV[off + 2 * C]; }
      }
      tA[e] = kv;
      tB[e] = vv;
    }
    if (lid < A_BC) {
      var mv = 0.0;
      if (j0 + lid < T) { mv = f32(M[b * T + j0 + lid]); }
      tS[lid] = mv;
    }
  }
  ${ATTN_TILE_SCORES_WGSL}`;
}

/** One program per kind (the shape of a tfjs WebGPUProgram; the backend adds bindings and uniforms). */
class AttentionProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [BR, 1, 1];
  readonly uniforms = 'T : i32, C : i32, nh : i32, scale : f32,';
  private readonly kind: Kind;
  private readonly hs: number;

  constructor(kind: Kind, B: number, T: number, C: number, nh: number) {
    this.kind = kind;
    this.hs = C / nh;
    this.variableNames =
      kind === 'fwd' ? ['QKV', 'M'] : kind === 'stats' ? ['QKV', 'M', 'Y', 'DY'] : ['QKV', 'M', 'DY', 'S'];
    this.outputShape = kind === 'fwd' ? [B * T, C] : kind === 'stats' ? [B * nh * T, 2] : [B * T, 3 * C];
    this.shaderKey = `perfAttention_${kind}_hs${this.hs}`;
    this.dispatch = [Math.ceil(T / BR), B * nh, kind === 'bwd' ? 3 : 1];
  }

  getUserCode(): string {
    const head = `
      let T = uniforms.T;
      let C = uniforms.C;
      let nh = uniforms.nh;
      let scale = uniforms.scale;
      let bh = i32(workgroupId.y);
      let b = bh / nh;
      let h = bh % nh;
      let r0 = i32(workgroupId.x) * A_BR;
      let r = r0 + i32(localId.x);
      let valid = r < T;
      let rc = min(r, T - 1);
      let rLast = min(r0 + A_BR - 1, T - 1);
      let first = attnFirstReal(b, T);
      let nT = (T + A_BC - 1) / A_BC;
      let invT = 1.0 / f32(T);`;
    return `${common(this.hs)}
      fn main(index : i32) {
        ${head}
        ${this.kind === 'fwd' ? FWD : this.kind === 'stats' ? STATS : BWD}
      }`;
  }
}

/**
 * The thread's row r is a query of head h: q from the projection's q columns, keys and values from its k and v
 * columns, y in the merged-heads layout (webgpu-softmax-wgsl.ts writes the loops).
 */
const ROWS: AttnRows = {
  setup: 'let qOff = (b * T + rc) * 3 * C + h * A_HS;',
  q: 'QKV[qOff + d]',
  loadKeys: (withV) => `attnLoadKeys(b, h, j0, T, C, ${withV})`,
  yOff: '(b * T + r) * C + h * A_HS',
};
const FWD = attnForwardWgsl(ROWS);
const STATS = attnStatsWgsl(ROWS);

// Role 0 (dq): row r is a query, a1 = q, a2 = dy; tiles of keys (tA) and values (tB).
// Roles 1 (dk) and 2 (dv): row r is a key, a1 = k, a2 = v; tiles of queries (tA), dy (tB), lse (tS) and D (tD).
// A query tile matters to a key row when it reaches the diagonal (its last row ≥ the workgroup's first key) or
// holds a full query row (it starts before `first`).
const BWD = `
  let role = i32(workgroupId.z);
  let C3 = 3 * C;
  var a1 : array<f32, A_HS>;
  var a2 : array<f32, A_HS>;
  var acc : array<f32, A_HS>;
  let rowOff = (b * T + rc) * C3 + h * A_HS;
  var lse = 0.0;
  var Dr = 0.0;
  var keyReal = false;
  if (role == 0) {
    let dyOff = (b * T + rc) * C + h * A_HS;
    for (var d = 0; d < A_HS; d++) {
      a1[d] = QKV[rowOff + d];
      a2[d] = DY[dyOff + d];
      acc[d] = 0.0;
    }
    lse = S[(bh * T + rc) * 2];
    Dr = S[(bh * T + rc) * 2 + 1];
  } else {
    for (var d = 0; d < A_HS; d++) {
      a1[d] = QKV[rowOff + C + d];
      a2[d] = QKV[rowOff + 2 * C + d];
      acc[d] = 0.0;
    }
    keyReal = f32(M[b * T + rc]) != 0.0;
  }
  let full = r < first;
  let needAll = first > r0;
  for (var t = 0; t < nT; t++) {
    let o0 = t * A_BC;
    var tileOn = needAll || o0 <= rLast;
    if (role != 0) { tileOn = o0 + A_BC - 1 >= r0 || o0 < first; }
    if (tileOn) {
      if (role == 0) {
        attnLoadKeys(b, h, o0, T, C, true);
      } else {
        let lid = i32(localId.x);
        for (var e = lid; e < A_BC * A_HS; e = e + A_BR) {
          let ii = e / A_HS;
          let i = o0 + ii;
          var qv = 0.0;
          var gv = 0.0;
          if (i < T) {
            let d = e - ii * A_HS;
            qv = QKV[(b * T + i) * C3 + h * A_HS + d];
            gv = DY[(b * T + i) * C + h * A_HS + d];
          }
          tA[e] = qv;
          tB[e] = gv;
        }
        if (lid < A_BC) {
          var lv = 0.0;
          var dv = 0.0;
          if (o0 + lid < T) {
            lv = S[(bh * T + o0 + lid) * 2];
            dv = S[(bh * T + o0 + lid) * 2 + 1];
          }
          tS[lid] = lv;
          tD[lid] = dv;
        }
      }
    }
    workgroupBarrier();
    if (tileOn && valid) {
      if (role == 0) {
        for (var jj = 0; jj < A_BC; jj++) {
          let j = o0 + jj;
          var p = 0.0;
          if (full) {
            if (j < T) { p = invT; }
          } else if (j <= r && tS[jj] != 0.0) {
            var sc = 0.0;
            for (var d = 0; d < A_HS; d++) { sc = sc + a1[d] * tA[jj * A_HS + d]; }
            p = exp(sc * scale - lse);
          }
          if (p != 0.0) {
            var dp = 0.0;
            for (var d = 0; d < A_HS; d++) { dp = dp + a2[d] * tB[jj * A_HS + d]; }
            let ds = p * (dp - Dr);
            for (var d = 0; d < A_HS; d++) { acc[d] = acc[d] + ds * tA[jj * A_HS + d]; }
          }
        }
      } else {
        for (var ii = 0; ii < A_BC; ii++) {
          let i = o0 + ii;
          var p = 0.0;
          if (i < first) {
            if (i < T) { p = invT; }
          } else if (keyReal && r <= i && i < T) {
            var sc = 0.0;
            for (var d = 0; d < A_HS; d++) { sc = sc + tA[ii * A_HS + d] * a1[d]; }
            p = exp(sc * scale - tS[ii]);
          }
          if (p != 0.0) {
            if (role == 2) {
              for (var d = 0; d < A_HS; d++) { acc[d] = acc[d] + p * tB[ii * A_HS + d]; }
            } else {
              var dp = 0.0;
              for (var d = 0; d < A_HS; d++) { dp = dp + tB[ii * A_HS + d] * a2[d]; }
              let ds = p * (dp - tD[ii]);
              for (var d = 0; d < A_HS; d++) { acc[d] = acc[d] + ds * tA[ii * A_HS + d]; }
            }
          }
        }
      }
    }
    workgroupBarrier();
  }
  if (valid) {
    let outOff = (b * T + r) * C3 + role * C + h * A_HS;
    let f = select(scale, 1.0, role == 2);
    for (var d = 0; d < A_HS; d++) { result[outOff + d] = acc[d] * f; }
  }`;

function run(
  kind: Kind,
  inputs: tf.TensorInfo[],
  mask: tf.TensorInfo,
  qkv: tf.TensorInfo,
  backend: unknown,
  attrs: tf.NamedAttrMap | undefined,
): tf.TensorInfo {
  const nh = attrs!.nh as number;
  const [B, T] = mask.shape;
  const C = qkv.shape[1] / 3;
  const u = [
    { type: 'int32' as const, data: [T] },
    { type: 'int32' as const, data: [C] },
    { type: 'int32' as const, data: [nh] },
    { type: 'float32' as const, data: [1 / Math.sqrt(C / nh)] },
  ];
  return (backend as WebGpuBackendLike).runWebGPUProgram(
    new AttentionProgram(kind, B, T, C, nh),
    inputs,
    'float32',
    u,
  );
}

type In = Record<'qkv' | 'mask' | 'y' | 'dy' | 'stats', tf.TensorInfo>;

const KERNELS: Record<string, KernelFn> = {
  [ATTN_FWD]: ({ inputs, backend, attrs }) => {
    const { qkv, mask } = inputs as In;
    return run('fwd', [qkv, mask], mask, qkv, backend, attrs);
  },
  [ATTN_STATS]: ({ inputs, backend, attrs }) => {
    const { qkv, mask, y, dy } = inputs as In;
    return run('stats', [qkv, mask, y, dy], mask, qkv, backend, attrs);
  },
  [ATTN_BWD]: ({ inputs, backend, attrs }) => {
    const { qkv, mask, dy, stats } = inputs as In;
    return run('bwd', [qkv, mask, dy, stats], mask, qkv, backend, attrs);
  },
};

/** Register the three kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuAttention(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the bench counts dispatches with and without it, the checks
 * (src/core/backend/webgpu-fused.ts) compare against the plain ops. Returns the previous setting, to put back.
 */
export function setWebGpuAttentionFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether causalSelfAttentionWebGpu applies to qkv [B·T, 3C], maskF [B, T] with nh heads: enabled, the webgpu
 * backend current, float32, heads of at most MAX_HEAD_SIZE and B·nh within one dispatch dimension.
 */
export function webGpuAttentionApplies(qkv: tf.Tensor, maskF: tf.Tensor, nh: number): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if (qkv.dtype !== 'float32' || maskF.dtype !== 'float32') return false;
  if (qkv.rank !== 2 || maskF.rank !== 2) return false;
  const [N, W] = qkv.shape as [number, number];
  const [B, T] = maskF.shape as [number, number];
  const C = W / 3;
  if (W % 3 !== 0 || N !== B * T || T === 0 || !Number.isInteger(nh) || nh < 1 || C % nh !== 0) return false;
  return C / nh <= MAX_HEAD_SIZE && B * nh <= MAX_BATCH_HEADS && Math.ceil(T / BR) <= 65535;
}

/**
 * Causal self-attention of qkv [B·T, 3C] (q | k | v) under maskF [B, T] (1 real token, 0 padding) with nh heads,
 * through the fused kernels, with its gradient w.r.t. qkv: 1 dispatch forward, 2 backward. Same values as
 * model/attention.ts's plain path with bias = causalPaddingBias(maskF). Check webGpuAttentionApplies first.
 */
export function causalSelfAttentionWebGpu(qkv: tf.Tensor2D, maskF: tf.Tensor2D, nh: number): tf.Tensor2D {
  registerWebGpuAttention();
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const x = args[0] as tf.Tensor;
    const save = args[1] as tf.GradSaveFunc;
    const y = tf.engine().runKernel(ATTN_FWD, { qkv: x, mask: maskF }, { nh }) as tf.Tensor;
    // maskF is not an input (it has no gradient) but the backward reads it: saved, so it outlives the forward.
    save([x, maskF, y]);
    return {
      value: y,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [xs, ms, ys] = saved;
        const stats = tf
          .engine()
          .runKernel(ATTN_STATS, { qkv: xs, mask: ms, y: ys, dy }, { nh }) as tf.Tensor;
        return tf.engine().runKernel(ATTN_BWD, { qkv: xs, mask: ms, dy, stats }, { nh }) as tf.Tensor;
      },
    };
  }) as (x: tf.Tensor) => tf.Tensor;
  return f(qkv) as tf.Tensor2D;
}
