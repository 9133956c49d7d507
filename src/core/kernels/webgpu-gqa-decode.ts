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
 * From the fused q|k|v projection (Llama.decodeBlock): `PerfGqaDecodeQkvKVWrite` and `PerfGqaDecodeQkvAttention`
 * are the same two programs reading the new token's heads from one [B, (nh + 2·n_kv)·hs] tensor, adding the
 * projections' biases (Qwen2) and applying q_norm / k_norm (Qwen3) before the rotation (gqaDecodeQkvWebGpu):
 * still 3 dispatches, where the unfused decode spent 3 more on the q/k norms and q|k|v apart. In the decode step
 * (`inPlace`, the cache spent): 2 — both slot writes in place as one (KVPairInPlaceProgram), then the attention —
 * or 1, the attention writing the slot itself (DecodeProgram's `fresh`) where the device offers the 7–10 storage
 * buffers it binds (freshAttentionBuffers; docs/tfjs.md, "Storage buffers per program").
 * No gradients: generation runs without autodiff. Limits: float32, hs even and ≤ 128, S ≤ 2048 (scores in
 * workgroup memory), B·nh ≤ 65535; otherwise the plain ops run. Tested against the plain ops on WebGPU in Node
 * (tests/webgpu-llama-kernels.test.ts); `checkGqaDecodeOnCurrentBackend` (src/core/backend/webgpu-fused.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { MASKED, type LayerKV } from './definitions';
import { type WebGpuBackendLike, registerWebGpuKernels, storageBuffersPerProgram } from './webgpu-common';
import { decodeSoftmaxDeclsWgsl, decodeSoftmaxWgsl } from './webgpu-softmax-wgsl';
import {
  kvWriteInAttentionOn,
  kvWriteInPlaceApplies,
  runProgramInPlace,
  runProgramReadWrite,
} from './webgpu-inplace';

export const GQA_DECODE_KV_WRITE = 'PerfGqaDecodeKVWrite';
export const GQA_DECODE_ATTN = 'PerfGqaDecodeAttention';
export const GQA_KV_LAYOUT = 'PerfGqaKvLayout';
export const GQA_DECODE_QKV_WRITE = 'PerfGqaDecodeQkvKVWrite';
export const GQA_DECODE_QKV_ATTN = 'PerfGqaDecodeQkvAttention';

const WG = 64;
/** The value cache's binding in KVPairInPlaceProgram: declared read_write (runProgramInPlace). */
const KV_IN_PLACE_V = 'VCacheInPlace';
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

/**
 * Where the decode kernels read the new token's heads from when they come straight out of the fused q|k|v projection
 * (model/llama.ts decodeStep): row b's head h at X[b·stride + off + h·hs …], plus a bias (Qwen2's q/k/v_proj biases:
 * the projection leaves them out, its program having no binding to spare) and a per-head RMSNorm (Qwen3's q_norm /
 * k_norm), in the unfused path's order: (x + bias), then RMSNorm, then the rotary embedding.
 */
interface HeadSource {
  bias: boolean;
  norm: boolean;
}

/** The WGSL names one head source is read through (the query's by default; the fresh key's and value's apart). */
interface HeadNames {
  /** Suffix of the functions' names (headRaw{fn}, headRstd{fn}, headVal{fn}, headRope{fn}). */
  fn: string;
  /** The heads' first column in a row of the array (a WGSL expression). */
  off: string;
  bias: string;
  norm: string;
}
const Q_NAMES: HeadNames = { fn: '', off: 'uniforms.off', bias: 'BI', norm: 'NW' };
/** The fresh key's and value's (DecodeProgram's `fresh`): headRopeK, headRawV. */
const K_NAMES: HeadNames = { fn: 'K', off: 'uniforms.offK', bias: 'BK', norm: 'NK' };
const V_NAMES: HeadNames = { fn: 'V', off: 'uniforms.offV', bias: 'BV', norm: '' };

/**
 * WGSL reading head elements from a HeadSource: `headRaw(b, h, d)` (biased), `headRstd(b, h)` (the RMSNorm's
 * 1/√(mean(x²) + ε) in PerfRmsNormFwd's order: 64 lanes each summing its strided elements, then a tree of pairs —
 * here one thread does all 64 lanes' work, the head being short), and `headVal(b, h, d, r)` (normalised).
 * Needs uniforms stride, off, eps and bindings X, [BI], [NW] — or the `names` given (DecodeProgram's fresh key
 * and value: offK / BK / NK, offV / BV).
 */
function headSourceFns(
  src: HeadSource,
  array: string,
  hs: number,
  rope: boolean,
  names: HeadNames = Q_NAMES,
): string {
  const { fn, off, bias, norm } = names;
  const raw = `${array}[b * uniforms.stride + ${off} + h * ${hs} + d]${src.bias ? ` + ${bias}[h * ${hs} + d]` : ''}`;
  return `
  fn headRaw${fn}(b : i32, h : i32, d : i32) -> f32 { return ${raw}; }
  fn headRstd${fn}(b : i32, h : i32) -> f32 {
    ${
      src.norm
        ? `var lanes : array<f32, ${WG}>;
    for (var l = 0; l < ${WG}; l++) {
      var q = 0.0;
      for (var j = l; j < ${hs}; j = j + ${WG}) { let x = headRaw${fn}(b, h, j); q = q + x * x; }
      lanes[l] = q;
    }
    for (var s = ${WG / 2}; s > 0; s = s / 2) {
      for (var l = 0; l < s; l++) { lanes[l] = lanes[l] + lanes[l + s]; }
    }
    return inverseSqrt(lanes[0] / f32(${hs}) + uniforms.eps);`
        : 'return 1.0;'
    }
  }
  fn headVal${fn}(b : i32, h : i32, d : i32, r : f32) -> f32 {
    return ${src.norm ? `(headRaw${fn}(b, h, d) * r) * ${norm}[d]` : `headRaw${fn}(b, h, d)`};
  }
  ${
    rope
      ? `fn headRope${fn}(b : i32, h : i32, d : i32, r : f32) -> f32 {
    let p = select(d - ${hs / 2}, d + ${hs / 2}, d < ${hs / 2});
    let xp = headVal${fn}(b, h, p, r);
    let rot = select(xp, -xp, d < ${hs / 2});
    return headVal${fn}(b, h, d, r) * CSN[b * ${2 * hs} + d] + rot * CSN[b * ${2 * hs} + ${hs} + d];
  }`
      : ''
  }`;
}

const srcKey = (src: HeadSource | null): string =>
  src ? `_qkv${src.bias ? 'b' : ''}${src.norm ? 'n' : ''}` : '';

const srcNames = (src: HeadSource | null): string[] =>
  src ? [...(src.bias ? ['BI'] : []), ...(src.norm ? ['NW'] : [])] : [];

class KVWriteProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms: string;
  private readonly hs: number;
  private readonly rotate: boolean;
  private readonly src: HeadSource | null;

  constructor(B: number, nkv: number, S: number, hs: number, rotate: boolean, src: HeadSource | null = null) {
    this.hs = hs;
    this.rotate = rotate;
    this.src = src;
    // Keys read the cos / sin rows (from q|k|v: one binding, cos | sin), values do not (an input the shader never
    // reads has no binding).
    this.variableNames = [
      ...(rotate ? ['X', 'NEW', 'OH', ...(src ? ['CSN'] : ['CS', 'SN'])] : ['X', 'NEW', 'OH']),
      ...srcNames(src),
    ];
    this.uniforms = src ? 'S : i32, nkv : i32, stride : i32, off : i32, eps : f32,' : 'S : i32, nkv : i32,';
    this.outputShape = [B, nkv, S, hs];
    this.shaderKey = `perfGqaDecodeKVWrite_hs${hs}_${rotate ? 'k' : 'v'}${srcKey(src)}`;
    this.dispatch = [Math.ceil((S * hs) / WG), B * nkv, 1];
  }

  getUserCode(): string {
    const hs = this.hs;
    const src = this.src;
    const value = src
      ? this.rotate
        ? 'headRope(b, bh % nkv, d, headRstd(b, bh % nkv))'
        : 'headVal(b, bh % nkv, d, headRstd(b, bh % nkv))'
      : this.rotate
        ? 'ropeNew(off, b, d)'
        : 'NEW[off + d]';
    return `
      ${src ? headSourceFns(src, 'NEW', hs, this.rotate) : this.rotate ? ropeFn('ropeNew', 'NEW', hs) : ''}
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
            result[o] = ${value};
          } else {
            result[o] = X[o];
          }
        }
      }`;
  }
}

/**
 * Both slot writes of a layer in ONE dispatch, in place: the key cache is the program's output, given as the tensor
 * it already is (runWebGPUProgram's `output`), and the value cache (VCacheInPlace) is bound read_write
 * (kernels/webgpu-inplace.ts runProgramInPlace rewrites tfjs's declaration of it); only the slot's rows are
 * written, every other element is left as it is. The new key and value are KVWriteProgram's (the same functions:
 * bias, k_norm, rotation for the key; bias for the value), at the key's columns `off` and the value's `offV` of the
 * q|k|v row. BI / BV: the key's and the value's biases.
 */
class KVPairInPlaceProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'S : i32, nkv : i32, stride : i32, off : i32, eps : f32, offV : i32,';
  private readonly hs: number;
  private readonly src: HeadSource;

  constructor(B: number, nkv: number, S: number, hs: number, src: HeadSource) {
    this.hs = hs;
    this.src = src;
    this.variableNames = [
      KV_IN_PLACE_V,
      'NEW',
      'OH',
      'CSN',
      ...(src.bias ? ['BI', 'BV'] : []),
      ...(src.norm ? ['NW'] : []),
    ];
    this.outputShape = [B, nkv, S, hs];
    this.shaderKey = `perfGqaDecodeKVPairInPlace_hs${hs}${srcKey(src)}`;
    this.dispatch = [Math.ceil((S * hs) / WG), B * nkv, 1];
  }

  getUserCode(): string {
    const hs = this.hs;
    const vBias = this.src.bias ? ` + BV[h * ${hs} + d]` : '';
    return `
      ${headSourceFns(this.src, 'NEW', hs, true)}
      fn valueOf(b : i32, h : i32, d : i32) -> f32 {
        return NEW[b * uniforms.stride + uniforms.offV + h * ${hs} + d]${vBias};
      }
      fn main(index : i32) {
        let S = uniforms.S;
        let nkv = uniforms.nkv;
        let bh = i32(workgroupId.y);
        let e = i32(workgroupId.x) * ${WG} + i32(localId.x);
        if (e < S * ${hs}) {
          let s = e / ${hs};
          // OH through f32(): a float32 one-hot cast from int32 may keep its int32 buffer on webgpu.
          if (f32(OH[s]) != 0.0) {
            let o = bh * S * ${hs} + e;
            let b = bh / nkv;
            let h = bh % nkv;
            let d = e - s * ${hs};
            result[o] = headRope(b, h, d, headRstd(b, h));
            ${KV_IN_PLACE_V}[o] = valueOf(b, h, d);
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

/**
 * Attention of the new query over the cache → y [B, nh·hs] (one workgroup of 64 threads per (b, query head)).
 * `fresh` (with a HeadSource only): the cache is not updated yet and this dispatch does it — the new key (biased,
 * k_norm'd, rotated, as KVPairInPlaceProgram makes it) and value (biased) of the workgroup's KV head stand in for
 * the slot's rows wherever the one-hot OH is non-zero, and the first query head of each KV head's group writes them
 * there (K and V bound read_write: runProgramReadWrite). Same values as KVPairInPlaceProgram then this program.
 */
class DecodeProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms: string;
  private readonly hs: number;
  private readonly cap: number;
  private readonly src: HeadSource | null;
  private readonly fresh: boolean;

  constructor(B: number, nh: number, S: number, hs: number, src: HeadSource | null = null, fresh = false) {
    if (fresh && !src) throw new Error('DecodeProgram: the fresh key and value come from a q|k|v source.');
    this.hs = hs;
    this.cap = slotsCapacity(S);
    this.src = src;
    this.fresh = fresh;
    this.variableNames = [
      'Q',
      'K',
      'V',
      'M',
      ...(src ? ['CSN'] : ['CS', 'SN']),
      ...(fresh ? ['OH'] : []),
      ...(fresh ? freshNames(src!) : srcNames(src)),
    ];
    this.uniforms =
      'S : i32, nh : i32, nkv : i32, scale : f32,' +
      (src ? ' stride : i32, off : i32, eps : f32,' : '') +
      (fresh ? ' offK : i32, offV : i32,' : '');
    this.outputShape = [B, nh * hs];
    this.shaderKey = `perfGqaDecodeAttention_hs${hs}_cap${this.cap}${srcKey(src)}${fresh ? '_w' : ''}`;
    this.dispatch = [B * nh, 1, 1];
  }

  getUserCode(): string {
    const hs = this.hs;
    const src = this.src;
    const fresh = this.fresh && src;
    // The softmax over the slots and the weighted sum of the values: webgpu-softmax-wgsl.ts (shared with GPT-2's
    // decode kernel).
    return `${decodeSoftmaxDeclsWgsl(hs, this.cap, WG, MASKED, this.fresh)}
      ${src ? headSourceFns(src, 'Q', hs, true) : ropeFn('ropeQ', 'Q', hs)}
      ${fresh ? headSourceFns(src, 'Q', hs, true, K_NAMES) : ''}
      ${fresh ? headSourceFns({ bias: src.bias, norm: false }, 'Q', hs, false, V_NAMES) : ''}

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
        ${
          src
            ? `let qr = headRstd(b, h);
        for (var d = lid; d < D_HS; d = d + ${WG}) { dq[d] = headRope(b, h, d, qr); }`
            : `for (var d = lid; d < D_HS; d = d + ${WG}) { dq[d] = ropeQ(yOff, b, d); }`
        }${
          fresh
            ? `
        let kr = headRstdK(b, hk);
        for (var d = lid; d < D_HS; d = d + ${WG}) {
          dk[d] = headRopeK(b, hk, d, kr);
          dv[d] = headRawV(b, hk, d);
        }`
            : ''
        }
        workgroupBarrier();
        ${decodeSoftmaxWgsl(hs, WG, fresh ? { writer: `h % (nh / nkv) == 0` } : null)}
      }`;
  }
}

/** The fresh-write attention's parameter bindings: the q, k and v biases, or the q and k norms' weights. */
const freshNames = (src: HeadSource): string[] => [
  ...(src.bias ? ['BI', 'BK', 'BV'] : []),
  ...(src.norm ? ['NW', 'NK'] : []),
];

/** Storage buffers of the fresh-write attention, its output included (Llama 7, Qwen3 9, Qwen2 10). */
export const freshAttentionBuffers = (src: HeadSource): number => 7 + freshNames(src).length;

/** The uniforms of a HeadSource read: the row stride, the heads' first column, the norm's ε. */
const srcUniforms = (attrs: tf.NamedAttrMap) => [
  { type: 'int32' as const, data: [attrs.stride as number] },
  { type: 'int32' as const, data: [attrs.off as number] },
  { type: 'float32' as const, data: [attrs.eps as number] },
];

const KERNELS: Record<string, KernelFn> = {
  [GQA_DECODE_QKV_WRITE]: ({ inputs, backend, attrs }) => {
    const { cache, x, slot, cs, bias, norm } = inputs as Record<string, tf.TensorInfo | undefined>;
    const [B, nkv, S, hs] = cache!.shape;
    const rotate = attrs!.rotate as boolean;
    const src = { bias: !!bias, norm: !!norm };
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new KVWriteProgram(B, nkv, S, hs, rotate, src),
      [cache!, x!, slot!, ...(rotate ? [cs!] : []), ...(bias ? [bias] : []), ...(norm ? [norm] : [])],
      'float32',
      [
        { type: 'int32' as const, data: [S] },
        { type: 'int32' as const, data: [nkv] },
        ...srcUniforms(attrs!),
      ],
    );
  },
  [GQA_DECODE_QKV_ATTN]: ({ inputs, backend, attrs }) => {
    const { q, k, v, mask, cs, bias, norm } = inputs as Record<string, tf.TensorInfo | undefined>;
    const nh = attrs!.nh as number;
    const [B, nkv, S, hs] = k!.shape;
    const src = { bias: !!bias, norm: !!norm };
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new DecodeProgram(B, nh, S, hs, src),
      [q!, k!, v!, mask!, cs!, ...(bias ? [bias] : []), ...(norm ? [norm] : [])],
      'float32',
      [
        { type: 'int32' as const, data: [S] },
        { type: 'int32' as const, data: [nh] },
        { type: 'int32' as const, data: [nkv] },
        { type: 'float32' as const, data: [1 / Math.sqrt(hs)] },
        ...srcUniforms(attrs!),
      ],
    );
  },
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

/**
 * The new token's q, k and v as the fused q|k|v projection gives them (model/llama.ts decodeStep,
 * kernels/webgpu-linear.ts linearNtDecodeWebGpu over q_proj | k_proj | v_proj): one tensor [B, (nh + 2·n_kv)·hs],
 * q in its first nh·hs columns, then k, then v, without the projections' biases; each part's bias (Qwen2) and
 * the q / k per-head RMSNorms (Qwen3: q_norm, k_norm) are applied where the heads are read.
 */
export interface DecodeQkv {
  qkv: tf.Tensor2D;
  bias?: { q: tf.Tensor1D; k: tf.Tensor1D; v: tf.Tensor1D } | null;
  norm?: { q: tf.Tensor1D; k: tf.Tensor1D; eps: number } | null;
}

/**
 * The rotary rows of a decode step's tokens: cos | sin [B, 2·hs] as one tensor (model/llama.ts gathers them so from
 * its cos | sin table: one gather, one binding), or cos and sin [B, hs] apart (joined by one concat).
 */
export type DecodeRope = { cs: tf.Tensor } | { cos: tf.Tensor; sin: tf.Tensor };

/** The rows' sizes agree with B rows of hs, and float32. */
function ropeFits(rope: DecodeRope, B: number, hs: number): boolean {
  if ('cs' in rope) return rope.cs.dtype === 'float32' && rope.cs.size === 2 * B * hs;
  const ok = (t: tf.Tensor) => t.dtype === 'float32' && t.size === B * hs;
  return ok(rope.cos) && ok(rope.sin);
}

/**
 * Whether gqaDecodeQkvWebGpu applies: what webGpuGqaDecodeApplies asks of the shapes, the qkv tensor
 * [B, (nh + 2·n_kv)·hs], the rotary rows (DecodeRope), the biases [nh·hs], [n_kv·hs], [n_kv·hs] and the norms'
 * weights [hs], float32; not a bias and a norm on q together (no model of the family has both, and no test covers
 * the kernels with both: the 1-dispatch form would bind 12 storage buffers, its 2-dispatch form 8).
 */
export function webGpuGqaDecodeQkvApplies(
  src: DecodeQkv,
  rope: DecodeRope,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor,
  kv: LayerKV,
  nh: number,
): boolean {
  const { qkv, bias, norm } = src;
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if ([qkv, keyMask, kv.k, kv.v].some((t) => t.dtype !== 'float32')) return false;
  if (qkv.rank !== 2 || keyMask.rank !== 2 || kv.k.rank !== 4) return false;
  const [B, nkv, S, hs] = kv.k.shape;
  if (!Number.isInteger(nh) || nh < 1 || nh % nkv !== 0 || hs % 2 !== 0) return false;
  if (!tf.util.arraysEqual(kv.v.shape, kv.k.shape) || !tf.util.arraysEqual(keyMask.shape, [B, S]))
    return false;
  if (!tf.util.arraysEqual(qkv.shape, [B, (nh + 2 * nkv) * hs])) return false;
  if (!ropeFits(rope, B, hs) || slotOneHot.size !== S) return false;
  if (hs > MAX_GQA_DECODE_HEAD_SIZE || S > MAX_GQA_DECODE_SLOTS || B * nh > MAX_GQA_DECODE_BATCH_HEADS)
    return false;
  const is = (t: tf.Tensor, n: number) => t.dtype === 'float32' && t.rank === 1 && t.shape[0] === n;
  if (bias && !(is(bias.q, nh * hs) && is(bias.k, nkv * hs) && is(bias.v, nkv * hs))) return false;
  if (norm && !(is(norm.q, hs) && is(norm.k, hs))) return false;
  return !(bias && norm);
}

/**
 * One layer's decode attention reading the new token's heads from the fused q|k|v projection (3 dispatches, no
 * gradient: the key cache with the new key written at the slot — biased, k_norm'd, rotated —, the value cache with
 * the new value, and the attention of the new query — biased, q_norm'd, rotated — over them). Same values as
 * adding the biases, model/ops.ts rmsNorm on q and k, then gqaDecodeWebGpu. Check webGpuGqaDecodeQkvApplies first.
 *
 * `inPlace` (Llama.decodeStep, which takes the cache it is given as spent): where kvWriteInPlaceApplies
 * (kernels/webgpu-inplace.ts), the new key and value go into `kv`'s own buffers, the slot's rows only, instead of
 * two programs that copy both whole caches — by the attention's own dispatch (1 in all: DecodeProgram's `fresh`)
 * where kvWriteInAttentionOn and the device offers its freshAttentionBuffers, else by ONE dispatch before it
 * (KVPairInPlaceProgram: 2 in all) — and the returned caches are `kv`'s tensors cloned (sharing their data), so
 * that a replayed decode carries them without a copy.
 */
export function gqaDecodeQkvWebGpu(
  src: DecodeQkv,
  rope: DecodeRope,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor2D,
  kv: LayerKV,
  nh: number,
  opts: { inPlace?: boolean } = {},
): { y: tf.Tensor2D; kv: LayerKV } {
  registerWebGpuGqaDecode();
  const e = tf.engine();
  const [B, nkv, S, hs] = kv.k.shape;
  const stride = (nh + 2 * nkv) * hs;
  const eps = src.norm?.eps ?? 0;
  const inPlace = !!opts.inPlace && kvWriteInPlaceApplies(kv);
  const head = { bias: !!src.bias, norm: !!src.norm };
  return tf.tidy(() => {
    const slot = tf.reshape(slotOneHot, [-1]);
    const cs = tf.reshape(
      'cs' in rope ? rope.cs : tf.concat([tf.reshape(rope.cos, [B, hs]), tf.reshape(rope.sin, [B, hs])], 1),
      [-1],
    );
    const x = src.qkv;
    if (inPlace && kvWriteInAttentionOn() && freshAttentionBuffers(head) <= storageBuffersPerProgram()) {
      // One dispatch: the attention writes the slot's key and value itself (7–10 storage buffers).
      const params = [
        ...(src.bias ? [src.bias.q, src.bias.k, src.bias.v] : []),
        ...(src.norm ? [src.norm.q, src.norm.k] : []),
      ];
      const y = runProgramReadWrite(
        new DecodeProgram(B, nh, S, hs, head, true),
        [x, kv.k, kv.v, keyMask, cs, slot, ...params],
        [
          { type: 'int32', data: [S] },
          { type: 'int32', data: [nh] },
          { type: 'int32', data: [nkv] },
          { type: 'float32', data: [1 / Math.sqrt(hs)] },
          { type: 'int32', data: [stride] },
          { type: 'int32', data: [0] },
          { type: 'float32', data: [eps] },
          { type: 'int32', data: [nh * hs] },
          { type: 'int32', data: [(nh + nkv) * hs] },
        ],
        ['K', 'V'],
      ) as tf.Tensor2D;
      return { y, kv: { k: tf.clone(kv.k), v: tf.clone(kv.v) } };
    }
    const write = (cache: tf.Tensor, off: number, rotate: boolean, bias?: tf.Tensor, norm?: tf.Tensor) =>
      e.runKernel(
        GQA_DECODE_QKV_WRITE,
        { cache, x, slot, cs, ...(bias ? { bias } : {}), ...(norm ? { norm } : {}) },
        { rotate, stride, off, eps },
      ) as tf.Tensor4D;
    let k4: tf.Tensor4D;
    let v4: tf.Tensor4D;
    if (inPlace) {
      const bias = src.bias ? [src.bias.k, src.bias.v] : [];
      runProgramInPlace(
        new KVPairInPlaceProgram(B, nkv, S, hs, { bias: !!src.bias, norm: !!src.norm }),
        kv.k,
        [kv.v, x, slot, cs, ...bias, ...(src.norm ? [src.norm.k] : [])],
        [
          { type: 'int32', data: [S] },
          { type: 'int32', data: [nkv] },
          { type: 'int32', data: [stride] },
          { type: 'int32', data: [nh * hs] },
          { type: 'float32', data: [eps] },
          { type: 'int32', data: [(nh + nkv) * hs] },
        ],
        [KV_IN_PLACE_V],
      );
      k4 = kv.k;
      v4 = kv.v;
    } else {
      k4 = write(kv.k, nh * hs, true, src.bias?.k, src.norm?.k);
      v4 = write(kv.v, (nh + nkv) * hs, false, src.bias?.v);
    }
    const qb = src.bias?.q;
    const qn = src.norm?.q;
    const y = e.runKernel(
      GQA_DECODE_QKV_ATTN,
      {
        q: x,
        k: k4,
        v: v4,
        mask: keyMask,
        cs,
        ...(qb ? { bias: qb } : {}),
        ...(qn ? { norm: qn } : {}),
      },
      { nh, stride, off: 0, eps },
    ) as tf.Tensor2D;
    return { y, kv: inPlace ? { k: tf.clone(k4), v: tf.clone(v4) } : { k: k4, v: v4 } };
  });
}
