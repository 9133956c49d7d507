/**
 * The Llama family's causal self-attention on WebGPU as fused WGSL kernels: grouped-query heads (no repeated
 * keys and values are ever made) with the rotary embedding applied inside, registered as tfjs kernels for the
 * webgpu backend and used by model/attention.ts's gqaSelfAttention there (other backends and WebGPU with the
 * switch off keep the plain ops of gqaSelfAttention, which stay the reference; the KV cache's prefill adds the
 * rotated keys and the values in the cache's layout, kernels/webgpu-gqa-decode.ts gqaPrefillKvWebGpu).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). The plain path is, per layer, the rotary
 * embedding of q and of k (split, neg, concat, two multiplies and an add each), three head transposes, two
 * repeat_kv tiles, q·kᵀ, the scale, the mask, softmax, att·v and the merge transpose: ~25 dispatches forward and
 * about twice that backward. Here it is 1 forward and 4 backward. The same FlashAttention-style scheme as GPT-2's
 * kernel (kernels/webgpu-attention.ts), with three differences:
 * - q [B·T, nh·hs], k and v [B·T, n_kv·hs] are three tensors (three nn.Linear outputs) read in place; query head h
 *   reads KV head h / (nh / n_kv);
 * - q and k are read BEFORE the rotary embedding and rotated as they are loaded (into registers for the thread's
 *   own row, into workgroup memory for a tile): x·cos + rotate_half(x)·sin, with rotate_half(x)[d] = −x[d + hs/2]
 *   for d < hs/2 and x[d − hs/2] above, the cos | sin rows [B·T, 2·hs] (one tensor: see INPUTS) being the model's
 *   host-computed table gathered by position (model/llama.ts ropeTable: WGSL's cos of a large angle is not accurate enough);
 * - the backward writes three tensors, so it is three programs: dq (a thread per query row, a loop over key
 *   tiles), dk and dv (a thread per key row of a KV head, a loop over the query heads of its group and their
 *   query tiles), after `PerfGqaStats` (per query row and head: the log-sum-exp of its scores, recomputed, and
 *   D = Σ dy·y). dq and dk come out in the rotated frame and are turned back by the rotation's transpose in the
 *   thread that holds the row: dx[d] = g[d]·cos[d] + g[d + hs/2]·sin[d + hs/2] (d < hs/2),
 *   g[d]·cos[d] − g[d − hs/2]·sin[d − hs/2] (above).
 * Masking is GPT-2's kernel's: key j is allowed for query i when j ≤ i and maskF[b, j] ≠ 0; a query row with no
 * allowed key (before the row's first real token) averages all T keys, as float32 rounds the plain path's s − 1e9.
 * Limits: float32, hs even and ≤ 128 (per-thread arrays of hs floats; key tiles of 16 rows up to hs 64, 8 above,
 * to stay within 16 KiB of workgroup memory), nh a multiple of n_kv, B·nh ≤ 65535; otherwise the plain ops run.
 * Tested against the plain ops, values and gradients, on WebGPU in Node (tests/webgpu-llama-kernels.test.ts);
 * `checkGqaAttentionOnCurrentBackend` (src/core/backend/webgpu-fused.ts) runs the same comparison wherever webgpu is current.
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

export const GQA_FWD = 'PerfGqaFwd';
export const GQA_STATS = 'PerfGqaStats';
export const GQA_BWD = 'PerfGqaBwd';

/** Rows (queries, or keys in dk/dv) per workgroup: one thread each. */
const BR = 64;
/** Widest head the kernels take. */
export const MAX_GQA_HEAD_SIZE = 128;
/** Workgroups along y are B·nh; WebGPU guarantees 65535 per dimension. */
export const MAX_GQA_BATCH_HEADS = 65535;

/** Rows of the other side per tile in workgroup memory: 2·BC·hs floats stay within 8 KiB. */
function tileRows(hs: number): number {
  return hs <= 64 ? 16 : 8;
}

type Kind = 'fwd' | 'stats' | 'dq' | 'dk' | 'dv';

/**
 * Shared WGSL: constants, tiles, the first real token of batch row b, the rotary embedding of one element, and the
 * key-tile loader and scores of a query row (GPT-2's kernel's, with the rotation and the KV head).
 */
function common(hs: number): string {
  const bc = tileRows(hs);
  return `${attnTilesWgsl(hs, BR, bc, `\n  const A_HALF : i32 = ${hs / 2};`)}
  ${ATTN_FIRST_REAL_WGSL}

  // The other half's index of column d, and the rotary embedding x·cos + rotate_half(x)·sin of element d of a
  // row (x = the element, p = the element at ropePartner(d)) at batch row \`row\` (b·T + t).
  fn ropePartner(d : i32) -> i32 { return select(d - A_HALF, d + A_HALF, d < A_HALF); }
  fn rope(x : f32, p : f32, row : i32, d : i32) -> f32 {
    let rot = select(p, -p, d < A_HALF);
    return x * R[row * 2 * A_HS + d] + rot * R[row * 2 * A_HS + A_HS + d];
  }
  fn ropeQ(row : i32, h : i32, d : i32) -> f32 {
    let off = row * uniforms.nh * A_HS + h * A_HS;
    return rope(Q[off + d], Q[off + ropePartner(d)], row, d);
  }
  fn ropeK(row : i32, hk : i32, d : i32) -> f32 {
    let off = row * uniforms.nkv * A_HS + hk * A_HS;
    return rope(K[off + d], K[off + ropePartner(d)], row, d);
  }

  // Rotated keys (and values) of rows j0 .. j0 + BC − 1 of KV head hk into tA (tB), their mask into tS (0 past T).
  fn attnLoadKeys(b : i32, hk : i32, j0 : i32, T : i32, withV : bool) {
    let lid = i32(localId.x);
    for (var e = lid; e < A_BC * A_HS; e = e + A_BR) {
      let jj = e / A_HS;
      let j = j0 + jj;
      let d = e - jj * A_HS;
      var kv = 0.0;
      var vv = 0.0;
      if (j < T) {
        let row = b * T + j;
        kv = ropeK(row, hk, d);
        if (withV) { vv = V[row * uniforms.nkv * A_HS + hk * A_HS + d]; }
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

  ${ATTN_TILE_SCORES_WGSL}

  // The rotation's transpose of g (the gradient w.r.t. a rotated row) at batch row \`row\`, element d.
  fn ropeBack(g : ptr<function, array<f32, A_HS>>, row : i32, d : i32) -> f32 {
    let p = ropePartner(d);
    let rot = select(-(*g)[p], (*g)[p], d < A_HALF);
    return (*g)[d] * R[row * 2 * A_HS + d] + rot * R[row * 2 * A_HS + A_HS + p];
  }`;
}

/**
 * Inputs per program. R is the rows' cos | sin, [B·T, 2·hs], one tensor: with cos and sin apart the backward
 * programs would bind 9 storage buffers, over WebGPU's default limit of 8 per shader stage.
 */
const INPUTS: Record<Kind, string[]> = {
  fwd: ['Q', 'K', 'V', 'M', 'R'],
  stats: ['Q', 'K', 'V', 'M', 'R', 'Y', 'DY'],
  dq: ['Q', 'K', 'V', 'M', 'R', 'DY', 'S'],
  dk: ['Q', 'K', 'V', 'M', 'R', 'DY', 'S'],
  dv: ['Q', 'K', 'V', 'M', 'R', 'DY', 'S'],
};

class GqaProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [BR, 1, 1];
  readonly uniforms = 'T : i32, nh : i32, nkv : i32, scale : f32,';
  private readonly kind: Kind;
  private readonly hs: number;

  constructor(kind: Kind, B: number, T: number, nh: number, nkv: number, hs: number) {
    this.kind = kind;
    this.hs = hs;
    this.variableNames = INPUTS[kind];
    const N = B * T;
    this.outputShape =
      kind === 'stats' ? [B * nh * T, 2] : kind === 'dk' || kind === 'dv' ? [N, nkv * hs] : [N, nh * hs];
    this.shaderKey = `perfGqa_${kind}_hs${hs}`;
    this.dispatch = [Math.ceil(T / BR), B * (kind === 'dk' || kind === 'dv' ? nkv : nh), 1];
  }

  getUserCode(): string {
    const byKey = this.kind === 'dk' || this.kind === 'dv';
    const head = `
      let T = uniforms.T;
      let nh = uniforms.nh;
      let nkv = uniforms.nkv;
      let grp = nh / nkv;
      let scale = uniforms.scale;
      let bh = i32(workgroupId.y);
      let heads = ${byKey ? 'nkv' : 'nh'};
      let b = bh / heads;
      let h = bh % heads;
      let r0 = i32(workgroupId.x) * A_BR;
      let r = r0 + i32(localId.x);
      let valid = r < T;
      let rc = min(r, T - 1);
      let rLast = min(r0 + A_BR - 1, T - 1);
      let first = attnFirstReal(b, T);
      let nT = (T + A_BC - 1) / A_BC;
      let invT = 1.0 / f32(T);`;
    const body =
      this.kind === 'fwd' ? FWD : this.kind === 'stats' ? STATS : this.kind === 'dq' ? DQ : dkv(this.kind);
    return `${common(this.hs)}
      fn main(index : i32) {
        ${head}
        ${body}
      }`;
  }
}

/**
 * Thread row r is query r of head h (KV head h / grp): q rotated as it is read, keys and values of the KV head
 * (webgpu-softmax-wgsl.ts writes the loops).
 */
const ROWS: AttnRows = {
  setup: `let hk = h / grp;
  let row = b * T + rc;`,
  q: 'ropeQ(row, h, d)',
  loadKeys: (withV) => `attnLoadKeys(b, hk, j0, T, ${withV})`,
  yOff: '(b * T + r) * nh * A_HS + h * A_HS',
};
const FWD = attnForwardWgsl(ROWS);
const STATS = attnStatsWgsl(ROWS);

// dq: row r is query r of head h; a1 = rotated q, a2 = dy; tiles of rotated keys (tA) and values (tB).
const DQ = `
  let hk = h / grp;
  let row = b * T + rc;
  var a1 : array<f32, A_HS>;
  var a2 : array<f32, A_HS>;
  var acc : array<f32, A_HS>;
  let dyOff = row * nh * A_HS + h * A_HS;
  for (var d = 0; d < A_HS; d++) {
    a1[d] = ropeQ(row, h, d);
    a2[d] = DY[dyOff + d];
    acc[d] = 0.0;
  }
  let lse = S[(bh * T + rc) * 2];
  let Dr = S[(bh * T + rc) * 2 + 1];
  let full = r < first;
  let needAll = first > r0;
  for (var t = 0; t < nT; t++) {
    let j0 = t * A_BC;
    let tileOn = needAll || j0 <= rLast;
    if (tileOn) { attnLoadKeys(b, hk, j0, T, true); }
    workgroupBarrier();
    if (tileOn && valid) {
      for (var jj = 0; jj < A_BC; jj++) {
        let j = j0 + jj;
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
    }
    workgroupBarrier();
  }
  if (valid) {
    let outOff = row * nh * A_HS + h * A_HS;
    for (var d = 0; d < A_HS; d++) { result[outOff + d] = ropeBack(&acc, row, d) * scale; }
  }`;

/**
 * dk, dv: row r is key r of KV head h (here h indexes KV heads); a1 = rotated k, a2 = v. For each query head of
 * the group, tiles of its rotated queries (tA), dy (tB), lse (tS) and D (tD). A query tile matters to the
 * workgroup's keys when it reaches the diagonal or holds a full query row (it starts before `first`).
 */
function dkv(kind: 'dk' | 'dv'): string {
  return `
  let row = b * T + rc;
  var a1 : array<f32, A_HS>;
  var a2 : array<f32, A_HS>;
  var acc : array<f32, A_HS>;
  let kvOff = row * nkv * A_HS + h * A_HS;
  for (var d = 0; d < A_HS; d++) {
    a1[d] = ropeK(row, h, d);
    a2[d] = V[kvOff + d];
    acc[d] = 0.0;
  }
  let keyReal = f32(M[b * T + rc]) != 0.0;
  let lid = i32(localId.x);
  for (var gi = 0; gi < grp; gi++) {
    let qh = h * grp + gi;
    let qbh = b * nh + qh;
    for (var t = 0; t < nT; t++) {
      let o0 = t * A_BC;
      let tileOn = o0 + A_BC - 1 >= r0 || o0 < first;
      if (tileOn) {
        for (var e = lid; e < A_BC * A_HS; e = e + A_BR) {
          let ii = e / A_HS;
          let i = o0 + ii;
          let d = e - ii * A_HS;
          var qv = 0.0;
          var gv = 0.0;
          if (i < T) {
            qv = ropeQ(b * T + i, qh, d);
            gv = DY[(b * T + i) * nh * A_HS + qh * A_HS + d];
          }
          tA[e] = qv;
          tB[e] = gv;
        }
        if (lid < A_BC) {
          var lv = 0.0;
          var dv = 0.0;
          if (o0 + lid < T) {
            lv = S[(qbh * T + o0 + lid) * 2];
            dv = S[(qbh * T + o0 + lid) * 2 + 1];
          }
          tS[lid] = lv;
          tD[lid] = dv;
        }
      }
      workgroupBarrier();
      if (tileOn && valid) {
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
            ${
              kind === 'dv'
                ? `for (var d = 0; d < A_HS; d++) { acc[d] = acc[d] + p * tB[ii * A_HS + d]; }`
                : `var dp = 0.0;
            for (var d = 0; d < A_HS; d++) { dp = dp + tB[ii * A_HS + d] * a2[d]; }
            let ds = p * (dp - tD[ii]);
            for (var d = 0; d < A_HS; d++) { acc[d] = acc[d] + ds * tA[ii * A_HS + d]; }`
            }
          }
        }
      }
      workgroupBarrier();
    }
  }
  if (valid) {
    for (var d = 0; d < A_HS; d++) {
      result[kvOff + d] = ${kind === 'dv' ? 'acc[d]' : 'ropeBack(&acc, row, d) * scale'};
    }
  }`;
}

type In = Record<'q' | 'k' | 'v' | 'mask' | 'rope' | 'y' | 'dy' | 'stats', tf.TensorInfo>;

function run(kind: Kind, i: In, backend: unknown, attrs: tf.NamedAttrMap | undefined): tf.TensorInfo {
  const nh = attrs!.nh as number;
  const nkv = attrs!.nkv as number;
  const [B, T] = i.mask.shape;
  const hs = i.q.shape[1] / nh;
  const u = [
    { type: 'int32' as const, data: [T] },
    { type: 'int32' as const, data: [nh] },
    { type: 'int32' as const, data: [nkv] },
    { type: 'float32' as const, data: [1 / Math.sqrt(hs)] },
  ];
  const base = [i.q, i.k, i.v, i.mask, i.rope];
  const inputs = kind === 'fwd' ? base : kind === 'stats' ? [...base, i.y, i.dy] : [...base, i.dy, i.stats];
  return (backend as WebGpuBackendLike).runWebGPUProgram(
    new GqaProgram(kind, B, T, nh, nkv, hs),
    inputs,
    'float32',
    u,
  );
}

const KERNELS: Record<string, KernelFn> = {
  [GQA_FWD]: ({ inputs, backend, attrs }) => run('fwd', inputs as In, backend, attrs),
  [GQA_STATS]: ({ inputs, backend, attrs }) => run('stats', inputs as In, backend, attrs),
  [GQA_BWD]: ({ inputs, backend, attrs }) =>
    run((['dq', 'dk', 'dv'] as const)[attrs!.part as number], inputs as In, backend, attrs),
};

/** Register the three kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuGqa(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the checks (src/core/backend/webgpu-fused.ts) compare against the plain
 * ops. Returns the previous setting, to put back.
 */
export function setWebGpuGqaFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether gqaAttentionWebGpu applies to q [B·T, nh·hs], k, v [B·T, n_kv·hs], the rows' cos [B·T, hs] (or
 * [B·T, 1, hs]; sin is alike) and maskF [B, T]:
 * enabled, the webgpu backend current, float32, consistent shapes, hs even and ≤ 128, nh a multiple of n_kv, and
 * B·nh within one dispatch dimension.
 */
export function webGpuGqaApplies(
  q: tf.Tensor,
  k: tf.Tensor,
  v: tf.Tensor,
  cos: tf.Tensor,
  maskF: tf.Tensor,
  nh: number,
  nkv: number,
): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if ([q, k, v, cos, maskF].some((t) => t.dtype !== 'float32')) return false;
  if (maskF.rank !== 2 || q.rank !== 2) return false;
  if (!Number.isInteger(nh) || !Number.isInteger(nkv) || nkv < 1 || nh % nkv !== 0) return false;
  const [B, T] = maskF.shape as [number, number];
  const N = B * T;
  const hs = (q.shape[1] as number) / nh;
  if (T === 0 || !Number.isInteger(hs) || hs % 2 !== 0 || hs > MAX_GQA_HEAD_SIZE) return false;
  const kvShape = [N, nkv * hs];
  if (!tf.util.arraysEqual(q.shape, [N, nh * hs])) return false;
  if (!tf.util.arraysEqual(k.shape, kvShape) || !tf.util.arraysEqual(v.shape, kvShape)) return false;
  if (cos.size !== N * hs) return false;
  return B * nh <= MAX_GQA_BATCH_HEADS && Math.ceil(T / BR) <= 65535;
}

/**
 * Causal self-attention with grouped-query heads and the rotary embedding applied inside: q [B·T, nh·hs] and k
 * [B·T, n_kv·hs] before the rotation, v [B·T, n_kv·hs], rope = each row's cos | sin [B·T, 2·hs] (by position), maskF
 * [B, T] → y [B·T, nh·hs] (merged heads), with its gradient w.r.t. q, k and v: 1 dispatch forward, 4 backward.
 * Same values as model/attention.ts's plain gqaSelfAttention. Check webGpuGqaApplies first.
 */
export function gqaAttentionWebGpu(
  q: tf.Tensor2D,
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  rope: tf.Tensor,
  maskF: tf.Tensor2D,
  nh: number,
  nkv: number,
): tf.Tensor2D {
  registerWebGpuGqa();
  if (rope.size !== (2 * q.size) / nh || rope.dtype !== 'float32')
    throw new Error(
      `gqaAttentionWebGpu: rope must be the rows' cos | sin, float32 [${q.shape[0]}, ${(2 * q.shape[1]) / nh}], not ${rope.dtype} [${rope.shape}].`,
    );
  const attrs = { nh, nkv };
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [qi, ki, vi] = args as tf.Tensor[];
    const save = args[3] as tf.GradSaveFunc;
    const base = { q: qi, k: ki, v: vi, mask: maskF, rope };
    const y = tf.engine().runKernel(GQA_FWD, base, attrs) as tf.Tensor;
    // maskF and rope are not inputs (no gradient) but the backward reads them: saved, so they outlive the forward.
    save([qi, ki, vi, maskF, rope, y]);
    return {
      value: y,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [qs, ks, vs, ms, rs, ys] = saved;
        const e = tf.engine();
        const ins = { q: qs, k: ks, v: vs, mask: ms, rope: rs };
        const stats = e.runKernel(GQA_STATS, { ...ins, y: ys, dy }, attrs) as tf.Tensor;
        return [0, 1, 2].map(
          (part) => e.runKernel(GQA_BWD, { ...ins, dy, stats }, { ...attrs, part }) as tf.Tensor,
        );
      },
    };
  }) as (q: tf.Tensor, k: tf.Tensor, v: tf.Tensor) => tf.Tensor;
  return f(q, k, v) as tf.Tensor2D;
}
