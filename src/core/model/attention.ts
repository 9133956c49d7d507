/**
 * GPT-2's causal self-attention on the fused q|k|v projection, as plain tfjs ops: split heads, scores
 * q·kᵀ/√hs plus an additive mask (causal and key padding, MASKED where not allowed), softmax, weighted sum of
 * the values, heads merged back. The trunk's forward goes through `causalSelfAttention`, the KV-cache decode step
 * (model/gpt2.ts) through `decodeAttention`: each is the one place that chooses between its fused WebGPU kernel
 * (kernels/webgpu-attention.ts, kernels/webgpu-decode-attention.ts) and the plain ops here, which are the kernels'
 * reference (src/core/backend/webgpu-fused.ts checks them against each other; docs/tfjs.md, dispatch counts).
 * The Llama family's grouped-query attention with the rotary embedding has its two such places here too:
 * `gqaSelfAttention` (kernels/webgpu-gqa.ts) and `gqaDecodeAttention` (kernels/webgpu-gqa-decode.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { causalSelfAttentionWebGpu, webGpuAttentionApplies } from '../kernels/webgpu-attention';
import { decodeAttentionWebGpu, webGpuDecodeAttentionApplies } from '../kernels/webgpu-decode-attention';
import { gqaAttentionWebGpu, webGpuGqaApplies } from '../kernels/webgpu-gqa';
import { gqaDecodeWebGpu, gqaPrefillKvWebGpu, webGpuGqaDecodeApplies } from '../kernels/webgpu-gqa-decode';
import { MASKED, type LayerKV } from '../kernels/definitions';
import { WRITE_SLOT_KERNEL, wasmWriteSlotApplies } from '../kernels/wasm-kv';

/** [B·T, C] → [B, nh, T, hs] */
export function splitHeads(x: tf.Tensor2D, B: number, T: number, nh: number): tf.Tensor4D {
  const hs = x.shape[1] / nh;
  return tf.transpose(tf.reshape(x, [B, T, nh, hs]), [0, 2, 1, 3]);
}

/**
 * A decode step's cache write: cache [B, n, S, d] with this token's x [B, n·d] (n heads of d) added into the slot
 * (slotOneHot: S values, 1 at the slot; the caller keeps the slot at zero until then). On WASM one kernel that
 * copies the cache and adds x into the slot's rows (kernels/wasm-kv.ts: the same values); elsewhere the plain ops.
 */
export function writeSlot(cache: tf.Tensor4D, x: tf.Tensor2D, slotOneHot: tf.Tensor): tf.Tensor4D {
  if (wasmWriteSlotApplies(cache, x, slotOneHot))
    return tf.engine().runKernel(WRITE_SLOT_KERNEL, { cache, x, slot: slotOneHot }, {}) as tf.Tensor4D;
  const [B, n, S] = cache.shape;
  return tf.add(cache, tf.mul(splitHeads(x, B, 1, n), tf.reshape(slotOneHot, [1, 1, S, 1]))) as tf.Tensor4D;
}

/**
 * Attention of queries over keys/values with an additive bias.
 * q [B, nh, Tq, hs], k/v [B, nh / g, Tk, hs], bias broadcastable to [B, 1, Tq, Tk] → [B·Tq, C]. With g > 1
 * (grouped-query attention) query head h attends with KV head h / g: each KV head's g query heads are the rows of
 * one product over its keys and values (q's heads are contiguous per group: [B, nh, Tq, hs] is [B, nh / g, g·Tq, hs]),
 * the same dot products as over keys repeated g times (transformers' repeat_kv) without making that copy — a
 * decode step used to tile the whole cache g times per layer (SmolLM2-135M on WASM: a quarter of its time).
 */
export function attend(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, bias: tf.Tensor, g = 1): tf.Tensor2D {
  const [B, nh, Tq, hs] = q.shape;
  const Tk = k.shape[2];
  const groups = B * (nh / g);
  const q3 = tf.reshape(q, [groups, g * Tq, hs]);
  const k3 = tf.reshape(k, [groups, Tk, hs]);
  const v3 = tf.reshape(v, [groups, Tk, hs]);
  const scores = tf.mul(tf.matMul(q3, k3, false, true), 1 / Math.sqrt(hs)); // [B·nh/g, g·Tq, Tk]
  const masked = tf.add(tf.reshape(scores, [B, nh, Tq, Tk]), bias);
  const att = tf.softmax(masked, -1);
  const y = tf.matMul(tf.reshape(att, [groups, g * Tq, Tk]), v3); // [B·nh/g, g·Tq, hs]
  return tf.reshape(tf.transpose(tf.reshape(y, [B, nh, Tq, hs]), [0, 2, 1, 3]), [B * Tq, nh * hs]);
}

/** The causal + key-padding mask of a [B, T] batch as one additive bias [B, 1, T, T] (0 allowed, MASKED not). */
export function causalPaddingBias(maskF: tf.Tensor2D): tf.Tensor4D {
  const [B, T] = maskF.shape;
  const causal = tf.linalg.bandPart(tf.ones([T, T]), -1, 0); // lower triangle incl. diagonal
  const allowed = tf.mul(tf.reshape(causal, [1, 1, T, T]), tf.reshape(maskF, [B, 1, 1, T]));
  return tf.mul(tf.sub(1, allowed), MASKED) as tf.Tensor4D;
}

/** A key mask [B, S] (1 = attend) as the additive bias [B, 1, 1, S] of one query per row (0 allowed, MASKED not). */
export function keyPaddingBias(keyMask: tf.Tensor2D): tf.Tensor4D {
  const [B, S] = keyMask.shape;
  return tf.reshape(tf.mul(tf.sub(1, keyMask), MASKED), [B, 1, 1, S]);
}

/**
 * Causal self-attention of a [B, T] batch: qkv [B·T, 3C] (GPT-2's c_attn output, q | k | v along the last
 * axis), maskF [B, T] float (1 real token, 0 padding), bias = causalPaddingBias(maskF) → [B·T, C]. `bias` may be
 * a function that makes it: the fused WebGPU kernel builds the mask itself and never calls it.
 * With `collect`, the layer's keys and values are pushed into it (the KV cache's prefill).
 * On WebGPU without `collect`: the fused kernels of kernels/webgpu-attention.ts (1 dispatch forward, 2 backward;
 * the mask is made in the kernel from maskF, `bias` is not read), same values and gradients as the ops below.
 */
export function causalSelfAttention(
  qkv: tf.Tensor2D,
  maskF: tf.Tensor2D,
  bias: tf.Tensor4D | (() => tf.Tensor4D),
  nh: number,
  collect?: LayerKV[],
): tf.Tensor2D {
  if (!collect && webGpuAttentionApplies(qkv, maskF, nh)) return causalSelfAttentionWebGpu(qkv, maskF, nh);
  if (typeof bias === 'function') bias = bias();
  const [B, T] = maskF.shape;
  const [q, k, v] = tf.split(qkv, 3, 1) as tf.Tensor2D[];
  const q4 = splitHeads(q, B, T, nh);
  const k4 = splitHeads(k, B, T, nh);
  const v4 = splitHeads(v, B, T, nh);
  if (collect) collect.push({ k: k4, v: v4 });
  return attend(q4, k4, v4, bias);
}

/**
 * One layer's attention in the KV-cache decode step: qkv [B, 3C] (this token's c_attn output, q | k | v), the new
 * key and value written into the cache at the slot (slotOneHot: S values, 1 at the slot), then the new query's
 * attention over the cache under keyMask [B, S] (1 = attend; must already include the slot) → y [B, C] and the new
 * cache (the caller disposes the old one). `bias` gives keyPaddingBias(keyMask) for the plain ops; a decode step
 * makes it once for all layers, on first use.
 * On WebGPU: the fused kernels of kernels/webgpu-decode-attention.ts (3 dispatches, `bias` not read; no gradient;
 * 2 with `inPlace`, the slot writes going into `kv`'s own tensors where they hold their data alone, which spends
 * `kv`), same values as the plain ops below, which are the reference (every other backend). The plain path adds the new
 * key and value into the slot, which the caller keeps at zero until then (generate's cache is zero-padded).
 */
export function decodeAttention(
  qkv: tf.Tensor2D,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor2D,
  kv: LayerKV,
  nh: number,
  bias?: () => tf.Tensor,
  opts: { inPlace?: boolean } = {},
): { y: tf.Tensor2D; kv: LayerKV } {
  if (webGpuDecodeAttentionApplies(qkv, slotOneHot, keyMask, kv, nh))
    return decodeAttentionWebGpu(qkv, slotOneHot, keyMask, kv, nh, opts);
  const B = keyMask.shape[0];
  const [q, k, v] = tf.split(qkv, 3, 1) as tf.Tensor2D[];
  const k4 = writeSlot(kv.k, k, slotOneHot);
  const v4 = writeSlot(kv.v, v, slotOneHot);
  const b = bias ? bias() : keyPaddingBias(keyMask);
  return { y: attend(splitHeads(q, B, 1, nh), k4, v4, b), kv: { k: k4, v: v4 } };
}

// ---- the Llama family: rotary embedding and grouped-query attention --------------------------------------------

/**
 * Rows' rotary cos and sin: [N, 1, d] (or [N, d]) for the N rows of a batch (model/llama.ts ropeTable), and
 * optionally both as one [N, 2·d] tensor, cos | sin, which the fused WebGPU attention reads (made from cos and sin,
 * one concat, when absent).
 */
export interface RopeRows {
  cos: tf.Tensor;
  sin: tf.Tensor;
  both?: tf.Tensor;
}

/** rope.both, or cos | sin [N, 2·d] made from the rows. */
function ropeBoth(rope: RopeRows, N: number, d: number): tf.Tensor {
  return rope.both ?? tf.concat([tf.reshape(rope.cos, [N, d]), tf.reshape(rope.sin, [N, d])], 1);
}

/**
 * Rotary embedding of x [N, heads, d] at rows' cos/sin [N, 1, d]: x·cos + rotate_half(x)·sin, where
 * rotate_half(x) = [−x₂, x₁] for the halves x₁ = x[…, :d/2], x₂ = x[…, d/2:] (transformers' apply_rotary_pos_emb).
 */
export function applyRope(x: tf.Tensor3D, cos: tf.Tensor, sin: tf.Tensor): tf.Tensor3D {
  const d = x.shape[2];
  const [x1, x2] = tf.split(x, [d / 2, d / 2], 2);
  const rotated = tf.concat([tf.neg(x2), x1], 2);
  return tf.add(tf.mul(x, cos), tf.mul(rotated, sin)) as tf.Tensor3D;
}

/** q [N, nh·d] and k [N, n_kv·d] rotated by the rows' cos/sin [N, 1, d], in the same layouts. */
function rotateQk(q: tf.Tensor2D, k: tf.Tensor2D, rope: RopeRows, nh: number, nkv: number) {
  const N = q.shape[0];
  const d = q.shape[1] / nh;
  const cos = tf.reshape(rope.cos, [N, 1, d]);
  const sin = tf.reshape(rope.sin, [N, 1, d]);
  return {
    q: tf.reshape(applyRope(tf.reshape(q, [N, nh, d]), cos, sin), [N, nh * d]) as tf.Tensor2D,
    k: tf.reshape(applyRope(tf.reshape(k, [N, nkv, d]), cos, sin), [N, nkv * d]) as tf.Tensor2D,
  };
}

/**
 * The Llama family's causal self-attention of a [B, T] batch: q [B·T, nh·d] and k [B·T, n_kv·d] BEFORE the rotary
 * embedding, v [B·T, n_kv·d], the rows' cos/sin (rope), maskF [B, T] (1 real token, 0 padding), bias (or a
 * function that makes it) = causalPaddingBias(maskF) → [B·T, nh·d]. Query head h attends with KV head
 * h / (nh / n_kv). With `collect`, the layer's rotated keys and values [B, n_kv, T, d] are pushed into it (the KV
 * cache's prefill).
 * On WebGPU: the fused kernels of kernels/webgpu-gqa.ts (rotation inside, no repeat_kv copies; 1 dispatch
 * forward, 4 backward; `bias` is not read), same values and gradients as the ops below (the reference); with
 * `collect`, 2 more (kernels/webgpu-gqa-decode.ts gqaPrefillKvWebGpu: the rotated keys and the values in the
 * cache's layout).
 */
export function gqaSelfAttention(
  q: tf.Tensor2D,
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  rope: RopeRows,
  maskF: tf.Tensor2D,
  bias: tf.Tensor4D | (() => tf.Tensor4D),
  nh: number,
  nkv: number,
  collect?: LayerKV[],
): tf.Tensor2D {
  if (webGpuGqaApplies(q, k, v, rope.cos, maskF, nh, nkv)) {
    const both = ropeBoth(rope, q.shape[0], q.shape[1] / nh);
    if (collect) collect.push(gqaPrefillKvWebGpu(k, v, both, maskF.shape[0], maskF.shape[1], nkv));
    return gqaAttentionWebGpu(q, k, v, both, maskF, nh, nkv);
  }
  if (typeof bias === 'function') bias = bias();
  const [B, T] = maskF.shape;
  const r = rotateQk(q, k, rope, nh, nkv);
  const k4 = splitHeads(r.k, B, T, nkv);
  const v4 = splitHeads(v, B, T, nkv);
  if (collect) collect.push({ k: k4, v: v4 });
  return attend(splitHeads(r.q, B, T, nh), k4, v4, bias, nh / nkv);
}

/**
 * One Llama-family layer's attention in the KV-cache decode step: q [B, nh·d], k, v [B, n_kv·d] of the new token
 * (q and k before the rotary embedding; rope: its rows' cos/sin), the new key (rotated) and value written into
 * the cache [B, n_kv, S, d] at the slot (slotOneHot: S values, 1 at the slot), then the new query's attention over
 * the cache under keyMask [B, S] (1 = attend; must include the slot), query head h with KV head h / (nh / n_kv)
 * → y [B, nh·d] and the new cache (the caller disposes the old one). `bias` gives keyPaddingBias(keyMask) for the
 * plain ops. On WebGPU: the fused kernels of kernels/webgpu-gqa-decode.ts (3 dispatches, `bias` not read; no
 * gradient), same values as the plain ops below, which add the new key and value into the slot (the caller keeps
 * it at zero until then).
 */
export function gqaDecodeAttention(
  q: tf.Tensor2D,
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  rope: RopeRows,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor2D,
  kv: LayerKV,
  nh: number,
  bias?: () => tf.Tensor,
): { y: tf.Tensor2D; kv: LayerKV } {
  if (webGpuGqaDecodeApplies(q, k, v, rope.cos, rope.sin, slotOneHot, keyMask, kv, nh))
    return gqaDecodeWebGpu(q, k, v, rope.cos, rope.sin, slotOneHot, keyMask, kv, nh);
  const nkv = kv.k.shape[1];
  const B = keyMask.shape[0];
  const r = rotateQk(q, k, rope, nh, nkv);
  const k4 = writeSlot(kv.k, r.k, slotOneHot);
  const v4 = writeSlot(kv.v, v, slotOneHot);
  const b = bias ? bias() : keyPaddingBias(keyMask);
  return { y: attend(splitHeads(r.q, B, 1, nh), k4, v4, b, nh / nkv), kv: { k: k4, v: v4 } };
}
