/**
 * The KV-cache decode step's attention on WebGPU as fused WGSL kernels, registered as tfjs kernels for the webgpu
 * backend and used by model/attention.ts's `decodeAttention` (in GPT2.decodeStep) there. Other backends, and WebGPU with
 * the switch off, keep the plain ops of `decodeAttention`, which stay the reference.
 *
 * Why: generation is most of a GPU step, and every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). The plain
 * decode attention of one layer is a split of q|k|v, head transposes, the slot writes (multiply by the slot's
 * one-hot, add to the cache) for keys and values, q·kᵀ, the scale, the additive key mask, softmax, att·v and the
 * merge transpose: about 17 dispatches per layer and generated token (plus 2 per token for the mask's bias), more
 * than recomputing the whole sequence with the fused full-forward kernels costs. Here it is 3 per layer, 0 per step:
 * - `PerfDecodeKVWrite` (cache [B, nh, S, hs], qkv [B, 3C], slot one-hot [S]) → the new cache, twice per layer
 *   (part 1 = keys, part 2 = values; a tfjs WebGPU program has one output, and LayerKV keeps keys and values as
 *   two tensors): the cache copied with row `slot` of every (b, head) replaced by that head's k (or v), read
 *   straight from the projection's columns (k at C + h·hs, v at 2C + h·hs). One thread per element, workgroups
 *   of 64 along x over the (b, head)'s S·hs block, (b, head) along y: coalesced reads and writes. The slot is
 *   where the one-hot is non-zero, so no uniform changes between steps (the shader and its uniforms are the same
 *   every step). The plain path adds k·onehot into the cache; generate's cache is zero at the slot (padding), so
 *   replacing and adding give the same values there.
 * - `PerfDecodeAttention` (qkv [B, 3C], K', V' [B, nh, S, hs], keyMask [B, S]) → y [B, C] in the merged-heads
 *   layout: one workgroup of 64 threads per (b, head). q (from the projection's q columns) goes to workgroup
 *   memory; each thread scores keys j = lid, lid + 64, … as the plain path does, x_j = (q·k_j)·(1/√hs) +
 *   (1 − keyMask[b, j])·MASKED, into workgroup memory; a tree reduction gives the max, then p_j = exp(x_j − max)
 *   and a second reduction the sum; then thread (g, d) sums p_j·V'[j, d] over the keys j ≡ g (mod 64 / hs)
 *   (consecutive threads read consecutive d of a row: coalesced), the partial sums are added and divided by the
 *   sum. Same float32 semantics as the plain path: the bias is the plain path's (MASKED = −1e9 added where the key
 *   mask is 0), so a masked key weighs exactly 0 next to any allowed key, and a row with every key masked averages
 *   all S keys (its scores all round to −1e9), as softmax does in the plain path.
 * No gradients: generation runs without autodiff (no tf.customGrad here), hence `maxRelGrad` = 0 in the check.
 * Limits: float32, hs ≤ 64, S ≤ 2048 (the scores live in workgroup memory, sized by S rounded up to a power of two
 * from 64, so a handful of shader variants at most), B·nh ≤ 65535 workgroups along one dimension; otherwise the
 * plain ops run. Tested against the plain ops and a float64 loop on WebGPU in Node
 * (tests/webgpu-decode-attention.test.ts), with a tiny GPT-2's generation fused vs plain vs recomputed;
 * `checkDecodeAttentionOnCurrentBackend` (src/core/backend/webgpu-fused.ts) runs the kernel comparison wherever the webgpu backend is current.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { MASKED, type LayerKV } from './definitions';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';
import { decodeSoftmaxDeclsWgsl, decodeSoftmaxWgsl } from './webgpu-softmax-wgsl';
import {
  kvWriteInAttentionOn,
  kvWriteInPlaceApplies,
  runProgramInPlace,
  runProgramReadWrite,
} from './webgpu-inplace';

export const DECODE_KV_WRITE = 'PerfDecodeKVWrite';
export const DECODE_ATTN = 'PerfDecodeAttention';

/** Threads per workgroup (both kernels). */
const WG = 64;
/** Widest head the attention kernel takes (one thread per column of a head in the weighted sum). */
export const MAX_DECODE_HEAD_SIZE = WG;
/** Most cache slots: the scores of one (b, head) live in workgroup memory (2048 floats = 8 KB). */
export const MAX_DECODE_SLOTS = 2048;
/** (b, head) pairs are workgroups along one dimension; WebGPU guarantees 65535 per dimension. */
export const MAX_DECODE_BATCH_HEADS = 65535;

/** The cache with row `slot` of every (b, head) replaced by that head's k (part 1) or v (part 2) from qkv. */
class KVWriteProgram {
  readonly variableNames = ['X', 'QKV', 'OH'];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'S : i32, C : i32, nh : i32, part : i32,';
  private readonly hs: number;

  constructor(B: number, nh: number, S: number, hs: number) {
    this.hs = hs;
    this.outputShape = [B, nh, S, hs];
    this.shaderKey = `perfDecodeKVWrite_hs${hs}`;
    this.dispatch = [Math.ceil((S * hs) / WG), B * nh, 1];
  }

  getUserCode(): string {
    return `
      fn main(index : i32) {
        let S = uniforms.S;
        let C = uniforms.C;
        let nh = uniforms.nh;
        let hs = ${this.hs};
        let bh = i32(workgroupId.y);
        let e = i32(workgroupId.x) * ${WG} + i32(localId.x);
        if (e < S * hs) {
          let s = e / hs;
          let o = bh * S * hs + e;
          // OH through f32(): a float32 one-hot cast from int32 may keep its int32 buffer on webgpu.
          if (f32(OH[s]) != 0.0) {
            let b = bh / nh;
            let h = bh % nh;
            result[o] = QKV[b * 3 * C + uniforms.part * C + h * hs + (e - s * hs)];
          } else {
            result[o] = X[o];
          }
        }
      }`;
  }
}

/** The value cache's binding in KVPairInPlaceProgram, declared read_write (kernels/webgpu-inplace.ts). */
const KV_IN_PLACE_V = 'VCacheInPlace';

/**
 * Both slot writes of a layer in one dispatch, in place: the key cache is the output (an existing tensor) and the
 * value cache (VCacheInPlace) is bound read_write; only the slot's rows are written, with KVWriteProgram's values.
 */
class KVPairInPlaceProgram {
  readonly variableNames = [KV_IN_PLACE_V, 'QKV', 'OH'];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'S : i32, C : i32, nh : i32,';
  private readonly hs: number;

  constructor(B: number, nh: number, S: number, hs: number) {
    this.hs = hs;
    this.outputShape = [B, nh, S, hs];
    this.shaderKey = `perfDecodeKVPairInPlace_hs${hs}`;
    this.dispatch = [Math.ceil((S * hs) / WG), B * nh, 1];
  }

  getUserCode(): string {
    return `
      fn main(index : i32) {
        let S = uniforms.S;
        let C = uniforms.C;
        let nh = uniforms.nh;
        let hs = ${this.hs};
        let bh = i32(workgroupId.y);
        let e = i32(workgroupId.x) * ${WG} + i32(localId.x);
        if (e < S * hs) {
          let s = e / hs;
          // OH through f32(): a float32 one-hot cast from int32 may keep its int32 buffer on webgpu.
          if (f32(OH[s]) != 0.0) {
            let o = bh * S * hs + e;
            let b = bh / nh;
            let h = bh % nh;
            let at = b * 3 * C + h * hs + (e - s * hs);
            result[o] = QKV[at + C];
            ${KV_IN_PLACE_V}[o] = QKV[at + 2 * C];
          }
        }
      }`;
  }
}

/** Scores capacity for S slots: S rounded up to a power of two, at least one per thread. */
function slotsCapacity(S: number): number {
  let cap = WG;
  while (cap < S) cap *= 2;
  return cap;
}

/**
 * Attention of the new query (qkv's q columns) over the updated cache under the key mask → y [B, C]. `fresh`: the
 * cache is not updated yet, and this dispatch does it — the new key and value (qkv's k and v columns) stand in for
 * the slot's rows wherever the one-hot OH is non-zero, and each (b, head)'s workgroup writes them there (K and V
 * bound read_write: runProgramReadWrite). Same values as KVPairInPlaceProgram then this program.
 */
class DecodeAttentionProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'S : i32, C : i32, nh : i32, scale : f32,';
  private readonly hs: number;
  private readonly cap: number;
  private readonly fresh: boolean;

  constructor(B: number, nh: number, S: number, hs: number, fresh = false) {
    this.hs = hs;
    this.cap = slotsCapacity(S);
    this.fresh = fresh;
    this.variableNames = fresh ? ['QKV', 'K', 'V', 'M', 'OH'] : ['QKV', 'K', 'V', 'M'];
    this.outputShape = [B, nh * hs];
    this.shaderKey = `perfDecodeAttention_hs${hs}_cap${this.cap}${fresh ? '_w' : ''}`;
    this.dispatch = [B * nh, 1, 1];
  }

  getUserCode(): string {
    // The softmax over the slots and the weighted sum of the values: webgpu-softmax-wgsl.ts (shared with the
    // Llama family's decode kernel).
    const at = 'b * 3 * C + h * D_HS + d';
    return `${decodeSoftmaxDeclsWgsl(this.hs, this.cap, WG, MASKED, this.fresh)}

      fn main(index : i32) {
        let S = uniforms.S;
        let C = uniforms.C;
        let nh = uniforms.nh;
        let scale = uniforms.scale;
        let lid = i32(localId.x);
        let bh = i32(workgroupId.x);
        let b = bh / nh;
        let h = bh % nh;
        let kvOff = bh * S * D_HS;
        let yOff = b * C + h * D_HS;
        for (var d = lid; d < D_HS; d = d + ${WG}) {
          dq[d] = QKV[${at}];${
            this.fresh
              ? `
          dk[d] = QKV[${at} + C];
          dv[d] = QKV[${at} + 2 * C];`
              : ''
          }
        }
        workgroupBarrier();
        ${decodeSoftmaxWgsl(this.hs, WG, this.fresh ? { writer: 'true' } : null)}
      }`;
  }
}

const KERNELS: Record<string, KernelFn> = {
  [DECODE_KV_WRITE]: ({ inputs, backend, attrs }) => {
    const { cache, qkv, slot } = inputs as Record<'cache' | 'qkv' | 'slot', tf.TensorInfo>;
    const nh = attrs!.nh as number;
    const part = attrs!.part as number;
    const [B, , S, hs] = cache.shape;
    const u = [
      { type: 'int32' as const, data: [S] },
      { type: 'int32' as const, data: [qkv.shape[1] / 3] },
      { type: 'int32' as const, data: [nh] },
      { type: 'int32' as const, data: [part] },
    ];
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new KVWriteProgram(B, nh, S, hs),
      [cache, qkv, slot],
      'float32',
      u,
    );
  },
  [DECODE_ATTN]: ({ inputs, backend, attrs }) => {
    const { qkv, k, v, mask } = inputs as Record<'qkv' | 'k' | 'v' | 'mask', tf.TensorInfo>;
    const nh = attrs!.nh as number;
    const [B, , S, hs] = k.shape;
    const u = [
      { type: 'int32' as const, data: [S] },
      { type: 'int32' as const, data: [qkv.shape[1] / 3] },
      { type: 'int32' as const, data: [nh] },
      { type: 'float32' as const, data: [1 / Math.sqrt(hs)] },
    ];
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new DecodeAttentionProgram(B, nh, S, hs),
      [qkv, k, v, mask],
      'float32',
      u,
    );
  },
};

/** Register the two kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuDecodeAttention(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the bench counts dispatches with and without it, the checks
 * (src/core/backend/webgpu-fused.ts) compare against the plain ops. Returns the previous setting, to put back.
 */
export function setWebGpuDecodeAttentionFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether decodeAttentionWebGpu applies to qkv [B, 3C], slot one-hot (S values), keyMask [B, S] and a layer's
 * cache k, v [B, nh, S, hs]: enabled, the webgpu backend current, float32, consistent shapes, hs ≤ 64, S ≤ 2048 and
 * B·nh within one dispatch dimension.
 */
export function webGpuDecodeAttentionApplies(
  qkv: tf.Tensor,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor,
  kv: LayerKV,
  nh: number,
): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if ([qkv, keyMask, kv.k, kv.v].some((t) => t.dtype !== 'float32')) return false;
  if (qkv.rank !== 2 || keyMask.rank !== 2 || kv.k.rank !== 4) return false;
  const [B, W] = qkv.shape as [number, number];
  const [Bm, S] = keyMask.shape as [number, number];
  const C = W / 3;
  if (!Number.isInteger(nh) || nh < 1 || W % 3 !== 0 || C % nh !== 0 || B !== Bm || S < 1) return false;
  const hs = C / nh;
  const want = [B, nh, S, hs];
  if (!tf.util.arraysEqual(kv.k.shape, want) || !tf.util.arraysEqual(kv.v.shape, want)) return false;
  if (slotOneHot.size !== S) return false;
  return hs <= MAX_DECODE_HEAD_SIZE && S <= MAX_DECODE_SLOTS && B * nh <= MAX_DECODE_BATCH_HEADS;
}

/**
 * One layer's decode attention through the fused kernels (3 dispatches, no gradient): the cache with the new key
 * and value written at the slot (where slotOneHot is non-zero), and y [B, C] = attention of the new query over it
 * under keyMask [B, S] (which must already include the slot). Same values as model/attention.ts's plain decodeAttention.
 * Check webGpuDecodeAttentionApplies first. `inPlace` (GPT2.decodeStep, whose cache argument is spent): where
 * kvWriteInPlaceApplies (kernels/webgpu-inplace.ts), the slot writes go into `kv`'s own tensors and the returned
 * caches are `kv`'s cloned (sharing their data): by the attention's own dispatch (1 in all) where
 * kvWriteInAttentionOn, else by one dispatch for both before it (KVPairInPlaceProgram: 2 in all).
 */
export function decodeAttentionWebGpu(
  qkv: tf.Tensor2D,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor2D,
  kv: LayerKV,
  nh: number,
  opts: { inPlace?: boolean } = {},
): { y: tf.Tensor2D; kv: LayerKV } {
  registerWebGpuDecodeAttention();
  const e = tf.engine();
  const inPlace = !!opts.inPlace && kvWriteInPlaceApplies(kv);
  return tf.tidy(() => {
    const slot = tf.reshape(slotOneHot, [-1]);
    const [B, , S, hs] = kv.k.shape;
    const C = qkv.shape[1] / 3;
    if (inPlace && kvWriteInAttentionOn()) {
      // One dispatch: the attention writes the slot's key and value itself (6 storage buffers).
      const y = runProgramReadWrite(
        new DecodeAttentionProgram(B, nh, S, hs, true),
        [qkv, kv.k, kv.v, keyMask, slot],
        [
          { type: 'int32', data: [S] },
          { type: 'int32', data: [C] },
          { type: 'int32', data: [nh] },
          { type: 'float32', data: [1 / Math.sqrt(hs)] },
        ],
        ['K', 'V'],
      ) as tf.Tensor2D;
      return { y, kv: { k: tf.clone(kv.k), v: tf.clone(kv.v) } };
    }
    let k: tf.Tensor4D;
    let v: tf.Tensor4D;
    if (inPlace) {
      const u = [
        { type: 'int32' as const, data: [S] },
        { type: 'int32' as const, data: [C] },
        { type: 'int32' as const, data: [nh] },
      ];
      runProgramInPlace(new KVPairInPlaceProgram(B, nh, S, hs), kv.k, [kv.v, qkv, slot], u, [KV_IN_PLACE_V]);
      [k, v] = [kv.k, kv.v];
    } else {
      k = e.runKernel(DECODE_KV_WRITE, { cache: kv.k, qkv, slot }, { nh, part: 1 }) as tf.Tensor4D;
      v = e.runKernel(DECODE_KV_WRITE, { cache: kv.v, qkv, slot }, { nh, part: 2 }) as tf.Tensor4D;
    }
    const y = e.runKernel(DECODE_ATTN, { qkv, k, v, mask: keyMask }, { nh }) as tf.Tensor2D;
    return { y, kv: inPlace ? { k: tf.clone(k), v: tf.clone(v) } : { k, v } };
  });
}
