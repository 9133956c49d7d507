/**
 * The Llama family's KV-cache decode attention on WebGPU as fused WGSL kernels: grouped-query heads over a cache of
 * the KV heads ([B, n_kv, S, hs] per layer, never repeated) with the rotary embedding applied inside, registered as
 * tfjs kernels for the webgpu backend and used by model/attention.ts's gqaDecodeAttention (in Llama.decodeStep)
 * there. Other backends, and WebGPU with the switch off, keep gqaDecodeAttention's plain ops, the reference.
 *
 * GPT-2's decode kernels (kernels/webgpu-decode-attention.ts) with three differences: q, k and v are three
 * tensors (the new token's q_proj, k_proj and v_proj outputs), q and k are rotated in the kernel (x·cos +
 * rotate_half(x)·sin at the token's cos / sin row, [B, hs]: the model's host-computed table gathered by position),
 * and query head h reads KV head h / (nh / n_kv). Per layer and generated token, 3 dispatches instead of ~30:
 * - `PerfGqaDecodeKVWrite` (cache [B, n_kv, S, hs], new [B, n_kv·hs], slot one-hot [S], cos, sin) → the cache
 *   with row `slot` of every (b, KV head) replaced by the new key, rotated (part 1), or the new value (part 2);
 * - `PerfGqaDecodeAttention` (q [B, nh·hs], K', V', keyMask [B, S], cos, sin) → y [B, nh·hs] merged heads: one
 *   workgroup of 64 threads per (b, query head), the rotated q in workgroup memory, scores (q·k)·(1/√hs) +
 *   (1 − keyMask)·MASKED as the plain path makes them, a tree max and sum, then the weighted sum of the values
 *   (threads (g, d) over keys j ≡ g mod 64/hs for hs ≤ 64; each thread all keys for columns d, d + 64 above).
 * A row with every key masked averages all S keys, as the plain path's softmax of scores all −1e9 does.
 * The prefill that fills the cache: `PerfGqaKvLayout` (k or v [B·T, n_kv·hs], cos | sin rows [B·T, 2·hs]) → the
 * layer's keys (rotated) or values as the cache holds them, [B, n_kv, T, hs], one dispatch each
 * (gqaPrefillKvWebGpu), beside the fused prefill attention (kernels/webgpu-gqa.ts).
 * No gradients: generation runs without autodiff. Limits: float32, hs even and ≤ 128, S ≤ 2048 (scores in
 * workgroup memory), B·nh ≤ 65535; otherwise the plain ops run. Tested against the plain ops on WebGPU in Node
 * (tests/webgpu-llama-kernels.test.ts); `checkGqaDecodeOnCurrentBackend` (src/core/webgpu-fused.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { MASKED, type LayerKV } from './definitions';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';

export const GQA_DECODE_KV_WRITE = 'PerfGqaDecodeKVWrite';
export const GQA_DECODE_ATTN = 'PerfGqaDecodeAttention';
export const GQA_KV_LAYOUT = 'PerfGqaKvLayout';

const WG = 64;
export const MAX_GQA_DECODE_HEAD_SIZE = 128;
export const MAX_GQA_DECODE_SLOTS = 2048;
export const MAX_GQA_DECODE_BATCH_HEADS = 65535;

/** WGSL: the rotary embedding of element d of a head row starting at X[off], at cos / sin row b. */
function ropeFn(name: string, array: string, hs: number): string {
  return `
  fn ${name}(off : i32, b : i32, d : i32) -> f32 {
    let p = select(d - ${hs / 2}, d + ${hs / 2}, d < ${hs / 2});
    let rot = select(${array}[off + p], -${array}[off + p], d < ${hs / 2});
    return ${array}[off + d] * CS[b * ${hs} + d] + rot * SN[b * ${hs} + d];
  }`;
}

class KVWriteProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'S : i32, nkv : i32,';
  private readonly hs: number;
  private readonly rotate: boolean;

  constructor(B: number, nkv: number, S: number, hs: number, rotate: boolean) {
    this.hs = hs;
    this.rotate = rotate;
    // Keys read the cos / sin rows, values do not (an input the shader never reads has no binding).
    this.variableNames = rotate ? ['X', 'NEW', 'OH', 'CS', 'SN'] : ['X', 'NEW', 'OH'];
    this.outputShape = [B, nkv, S, hs];
    this.shaderKey = `perfGqaDecodeKVWrite_hs${hs}_${rotate ? 'k' : 'v'}`;
    this.dispatch = [Math.ceil((S * hs) / WG), B * nkv, 1];
  }

  getUserCode(): string {
    const hs = this.hs;
    return `
      ${this.rotate ? ropeFn('ropeNew', 'NEW', hs) : ''}
      fn main(index : i32) {
        let S = uniforms.S;
        let nkv = uniforms.nkv;
        let bh = i32(workgroupId.y);
        let e = i32(workgroupId.x) * ${WG} + i32(localId.x);
        if (e < S * ${hs}) {
          let s = e / ${hs};
          let o = bh * S * ${hs} + e;
          // OH through f32(): a float32 one-hot cast from int32 may keep its int32 buffer on webgpu.
          if (f32(OH[s]) != 0.0) {
            let b = bh / nkv;
            let off = bh * ${hs};
            let d = e - s * ${hs};
            result[o] = ${this.rotate ? 'ropeNew(off, b, d)' : 'NEW[off + d]'};
          } else {
            result[o] = X[o];
          }
        }
      }`;
  }
}

/**
 * The KV cache's prefill: keys (rotated) or values [B·T, n_kv·hs] as the cache holds them, [B, n_kv, T, hs]; one
 * thread per element, workgroups along x and y of the dispatch. R: the rows' cos | sin [B·T, 2·hs].
 */
class KvLayoutProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly size = true;
  readonly uniforms = 'T : i32, nkv : i32,';
  private readonly hs: number;
  private readonly rotate: boolean;

  constructor(B: number, T: number, nkv: number, hs: number, rotate: boolean) {
    this.hs = hs;
    this.rotate = rotate;
    this.variableNames = rotate ? ['X', 'R'] : ['X'];
    this.outputShape = [B, nkv, T, hs];
    this.shaderKey = `perfGqaKvLayout_hs${hs}_${rotate ? 'k' : 'v'}`;
    const groups = Math.ceil((B * nkv * T * hs) / WG);
    this.dispatch = [Math.min(groups, 65535), Math.ceil(groups / 65535), 1];
  }

  getUserCode(): string {
    const hs = this.hs;
    const half = hs / 2;
    const value = this.rotate
      ? `X[src + d] * R[row * ${2 * hs} + d] + select(X[src + p], -X[src + p], d < ${half}) * R[row * ${2 * hs} + ${hs} + d]`
      : 'X[src + d]';
    return `
      fn main(index : i32) {
        if (index < uniforms.size) {
          let T = uniforms.T;
          let nkv = uniforms.nkv;
          let d = index % ${hs};
          let t = (index / ${hs}) % T;
          let bh = index / (${hs} * T);
          let b = bh / nkv;
          let h = bh % nkv;
          let row = b * T + t;
          let src = row * nkv * ${hs} + h * ${hs};
          let p = select(d - ${half}, d + ${half}, d < ${half});
          result[index] = ${value};
        }
      }`;
  }
}

function slotsCapacity(S: number): number {
  let cap = WG;
  while (cap < S) cap *= 2;
  return cap;
}

class DecodeProgram {
  readonly variableNames = ['Q', 'K', 'V', 'M', 'CS', 'SN'];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'S : i32, nh : i32, nkv : i32, scale : f32,';
  private readonly hs: number;
  private readonly cap: number;

  constructor(B: number, nh: number, S: number, hs: number) {
    this.hs = hs;
    this.cap = slotsCapacity(S);
    this.outputShape = [B, nh * hs];
    this.shaderKey = `perfGqaDecodeAttention_hs${hs}_cap${this.cap}`;
    this.dispatch = [B * nh, 1, 1];
  }

  getUserCode(): string {
    const hs = this.hs;
    const weighted =
      hs <= WG
        ? `let G = ${Math.floor(WG / hs)};
        let g = lid / D_HS;
        let d = lid - g * D_HS;
        var acc = 0.0;
        if (g < G) {
          for (var j = g; j < S; j = j + G) { acc = acc + dScores[j] * V[kvOff + j * D_HS + d]; }
        }
        dRed[lid] = acc;
        workgroupBarrier();
        if (lid < D_HS) {
          var t = 0.0;
          for (var gg = 0; gg < G; gg++) { t = t + dRed[gg * D_HS + lid]; }
          result[yOff + lid] = t / l;
        }`
        : `for (var d = lid; d < D_HS; d = d + ${WG}) {
          var acc = 0.0;
          for (var j = 0; j < S; j++) { acc = acc + dScores[j] * V[kvOff + j * D_HS + d]; }
          result[yOff + d] = acc / l;
        }`;
    return `
      const D_HS : i32 = ${hs};
      const D_MASKED : f32 = ${MASKED.toExponential()};
      var<workgroup> dq : array<f32, ${hs}>;
      var<workgroup> dScores : array<f32, ${this.cap}>;
      var<workgroup> dRed : array<f32, ${WG}>;
      ${ropeFn('ropeQ', 'Q', hs)}

      fn decReduce(v : f32, isMax : bool) -> f32 {
        dRed[localId.x] = v;
        workgroupBarrier();
        for (var s = ${WG / 2}u; s > 0u; s = s / 2u) {
          if (localId.x < s) {
            let a = dRed[localId.x];
            let b = dRed[localId.x + s];
            dRed[localId.x] = select(a + b, max(a, b), isMax);
          }
          workgroupBarrier();
        }
        let r = dRed[0];
        workgroupBarrier();
        return r;
      }

      fn main(index : i32) {
        let S = uniforms.S;
        let nh = uniforms.nh;
        let nkv = uniforms.nkv;
        let scale = uniforms.scale;
        let lid = i32(localId.x);
        let bh = i32(workgroupId.x);
        let b = bh / nh;
        let h = bh % nh;
        let hk = h / (nh / nkv);
        let kvOff = (b * nkv + hk) * S * D_HS;
        let yOff = b * nh * D_HS + h * D_HS;
        for (var d = lid; d < D_HS; d = d + ${WG}) { dq[d] = ropeQ(yOff, b, d); }
        workgroupBarrier();
        var mx = -3.0e38;
        for (var j = lid; j < S; j = j + ${WG}) {
          let off = kvOff + j * D_HS;
          var acc = 0.0;
          for (var d = 0; d < D_HS; d++) { acc = acc + dq[d] * K[off + d]; }
          let x = acc * scale + (1.0 - f32(M[b * S + j])) * D_MASKED;
          dScores[j] = x;
          mx = max(mx, x);
        }
        let m = decReduce(mx, true);
        var sum = 0.0;
        for (var j = lid; j < S; j = j + ${WG}) {
          let p = exp(dScores[j] - m);
          dScores[j] = p;
          sum = sum + p;
        }
        let l = decReduce(sum, false);
        ${weighted}
      }`;
  }
}

type KernelFn = (args: {
  inputs: tf.NamedTensorInfoMap;
  backend: unknown;
  attrs?: tf.NamedAttrMap;
}) => tf.TensorInfo | tf.TensorInfo[];

const KERNELS: Record<string, KernelFn> = {
  [GQA_KV_LAYOUT]: ({ inputs, backend, attrs }) => {
    const { x, rope } = inputs as Record<'x' | 'rope', tf.TensorInfo>;
    const [B, T, nkv] = [attrs!.B as number, attrs!.T as number, attrs!.nkv as number];
    const hs = x.shape[1] / nkv;
    const rotate = attrs!.rotate as boolean;
    const u = [
      { type: 'int32' as const, data: [T] },
      { type: 'int32' as const, data: [nkv] },
    ];
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new KvLayoutProgram(B, T, nkv, hs, rotate),
      rotate ? [x, rope] : [x],
      'float32',
      u,
    );
  },
  [GQA_DECODE_KV_WRITE]: ({ inputs, backend, attrs }) => {
    const { cache, x, slot, cos, sin } = inputs as Record<
      'cache' | 'x' | 'slot' | 'cos' | 'sin',
      tf.TensorInfo
    >;
    const [B, nkv, S, hs] = cache.shape;
    const u = [
      { type: 'int32' as const, data: [S] },
      { type: 'int32' as const, data: [nkv] },
    ];
    const rotate = attrs!.rotate as boolean;
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new KVWriteProgram(B, nkv, S, hs, rotate),
      rotate ? [cache, x, slot, cos, sin] : [cache, x, slot],
      'float32',
      u,
    );
  },
  [GQA_DECODE_ATTN]: ({ inputs, backend, attrs }) => {
    const { q, k, v, mask, cos, sin } = inputs as Record<
      'q' | 'k' | 'v' | 'mask' | 'cos' | 'sin',
      tf.TensorInfo
    >;
    const nh = attrs!.nh as number;
    const [B, nkv, S, hs] = k.shape;
    const u = [
      { type: 'int32' as const, data: [S] },
      { type: 'int32' as const, data: [nh] },
      { type: 'int32' as const, data: [nkv] },
      { type: 'float32' as const, data: [1 / Math.sqrt(hs)] },
    ];
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new DecodeProgram(B, nh, S, hs),
      [q, k, v, mask, cos, sin],
      'float32',
      u,
    );
  },
};

/** Register the two kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuGqaDecode(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/** Switch the fused path off (on by default); returns the previous setting, to put back. */
export function setWebGpuGqaDecodeFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether gqaDecodeWebGpu applies to q [B, nh·hs], k, v [B, n_kv·hs], cos / sin (B·hs values), the slot one-hot
 * (S values), keyMask [B, S] and a layer's cache [B, n_kv, S, hs]: enabled, the webgpu backend current, float32,
 * consistent shapes, hs even and ≤ 128, S ≤ 2048, B·nh within one dispatch dimension.
 */
export function webGpuGqaDecodeApplies(
  q: tf.Tensor,
  k: tf.Tensor,
  v: tf.Tensor,
  cos: tf.Tensor,
  sin: tf.Tensor,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor,
  kv: LayerKV,
  nh: number,
): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if ([q, k, v, cos, sin, keyMask, kv.k, kv.v].some((t) => t.dtype !== 'float32')) return false;
  if (q.rank !== 2 || keyMask.rank !== 2 || kv.k.rank !== 4) return false;
  const [B, nkv, S, hs] = kv.k.shape;
  if (!Number.isInteger(nh) || nh < 1 || nh % nkv !== 0 || hs % 2 !== 0) return false;
  if (!tf.util.arraysEqual(kv.v.shape, kv.k.shape) || !tf.util.arraysEqual(keyMask.shape, [B, S]))
    return false;
  if (!tf.util.arraysEqual(q.shape, [B, nh * hs])) return false;
  if (k.size !== B * nkv * hs || v.size !== B * nkv * hs) return false;
  if (cos.size !== B * hs || sin.size !== B * hs || slotOneHot.size !== S) return false;
  return hs <= MAX_GQA_DECODE_HEAD_SIZE && S <= MAX_GQA_DECODE_SLOTS && B * nh <= MAX_GQA_DECODE_BATCH_HEADS;
}

/**
 * One layer's decode attention through the fused kernels (3 dispatches, no gradient): the cache with the new key
 * (rotated) and value written at the slot, and y [B, nh·hs] = attention of the new (rotated) query over it under
 * keyMask [B, S] (which must already include the slot). Same values as model/attention.ts's plain
 * gqaDecodeAttention. Check webGpuGqaDecodeApplies first.
 */
export function gqaDecodeWebGpu(
  q: tf.Tensor2D,
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  cos: tf.Tensor,
  sin: tf.Tensor,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor2D,
  kv: LayerKV,
  nh: number,
): { y: tf.Tensor2D; kv: LayerKV } {
  registerWebGpuGqaDecode();
  const e = tf.engine();
  return tf.tidy(() => {
    const slot = tf.reshape(slotOneHot, [-1]);
    const [c, s] = [tf.reshape(cos, [-1]), tf.reshape(sin, [-1])];
    const write = (cache: tf.Tensor, x: tf.Tensor, rotate: boolean) =>
      e.runKernel(GQA_DECODE_KV_WRITE, { cache, x, slot, cos: c, sin: s }, { rotate }) as tf.Tensor4D;
    const k4 = write(kv.k, k, true);
    const v4 = write(kv.v, v, false);
    const y = e.runKernel(
      GQA_DECODE_ATTN,
      { q, k: k4, v: v4, mask: keyMask, cos: c, sin: s },
      { nh },
    ) as tf.Tensor2D;
    return { y, kv: { k: k4, v: v4 } };
  });
}

/**
 * The KV cache's prefill of one layer: k (rotated by rope = the rows' cos | sin [B·T, 2·hs]) and v, each
 * [B·T, n_kv·hs], as the cache holds them, [B, n_kv, T, hs] (2 dispatches; no gradient: generation runs without
 * autodiff). Same values as model/attention.ts's plain prefill (rotation, then split heads). Shapes as
 * webGpuGqaApplies checks them (model/attention.ts calls this only where the fused attention applies).
 */
export function gqaPrefillKvWebGpu(
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  rope: tf.Tensor,
  B: number,
  T: number,
  nkv: number,
): LayerKV {
  registerWebGpuGqaDecode();
  const e = tf.engine();
  const layout = (x: tf.Tensor, rotate: boolean) =>
    e.runKernel(GQA_KV_LAYOUT, { x, rope }, { B, T, nkv, rotate }) as tf.Tensor4D;
  return { k: layout(k, true), v: layout(v, false) };
}
