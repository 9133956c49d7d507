/**
 * GPT-2's causal self-attention on the fused q|k|v projection, as plain tfjs ops: split heads, scores
 * q·kᵀ/√hs plus an additive mask (causal and key padding, MASKED where not allowed), softmax, weighted sum of
 * the values, heads merged back. The trunk's forward goes through `causalSelfAttention`, the KV-cache decode step
 * (model/gpt2.ts) through `decodeAttention`: each is the one place that chooses between its fused WebGPU kernel
 * (kernels/webgpu-attention.ts, kernels/webgpu-decode-attention.ts) and the plain ops here, which are the kernels'
 * reference (src/core/webgpu-fused.ts checks them against each other; docs/tfjs.md, dispatch counts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { causalSelfAttentionWebGpu, webGpuAttentionApplies } from '../kernels/webgpu-attention';
import { decodeAttentionWebGpu, webGpuDecodeAttentionApplies } from '../kernels/webgpu-decode-attention';
import { MASKED, type LayerKV } from '../kernels/definitions';

/** [B·T, C] → [B, nh, T, hs] */
export function splitHeads(x: tf.Tensor2D, B: number, T: number, nh: number): tf.Tensor4D {
  const hs = x.shape[1] / nh;
  return tf.transpose(tf.reshape(x, [B, T, nh, hs]), [0, 2, 1, 3]);
}

/**
 * Attention of queries over keys/values with an additive bias.
 * q [B, nh, Tq, hs], k/v [B, nh, Tk, hs], bias broadcastable to [B, 1, Tq, Tk] → [B·Tq, C].
 */
export function attend(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, bias: tf.Tensor): tf.Tensor2D {
  const [B, nh, Tq, hs] = q.shape;
  const Tk = k.shape[2];
  const q3 = tf.reshape(q, [B * nh, Tq, hs]);
  const k3 = tf.reshape(k, [B * nh, Tk, hs]);
  const v3 = tf.reshape(v, [B * nh, Tk, hs]);
  const scores = tf.mul(tf.matMul(q3, k3, false, true), 1 / Math.sqrt(hs)); // [B·nh, Tq, Tk]
  const masked = tf.add(tf.reshape(scores, [B, nh, Tq, Tk]), bias);
  const att = tf.softmax(masked, -1);
  const y = tf.matMul(tf.reshape(att, [B * nh, Tq, Tk]), v3); // [B·nh, Tq, hs]
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
 * On WebGPU: the fused kernels of kernels/webgpu-decode-attention.ts (3 dispatches, `bias` not read; no gradient),
 * same values as the plain ops below, which are the reference (every other backend). The plain path adds the new
 * key and value into the slot, which the caller keeps at zero until then (generate's cache is zero-padded).
 */
export function decodeAttention(
  qkv: tf.Tensor2D,
  slotOneHot: tf.Tensor,
  keyMask: tf.Tensor2D,
  kv: LayerKV,
  nh: number,
  bias?: () => tf.Tensor,
): { y: tf.Tensor2D; kv: LayerKV } {
  if (webGpuDecodeAttentionApplies(qkv, slotOneHot, keyMask, kv, nh))
    return decodeAttentionWebGpu(qkv, slotOneHot, keyMask, kv, nh);
  const [B, S] = keyMask.shape;
  const oh = tf.reshape(slotOneHot, [1, 1, S, 1]);
  const [q, k, v] = tf.split(qkv, 3, 1) as tf.Tensor2D[];
  const k4 = tf.add(kv.k, tf.mul(splitHeads(k, B, 1, nh), oh)) as tf.Tensor4D; // write slot
  const v4 = tf.add(kv.v, tf.mul(splitHeads(v, B, 1, nh), oh)) as tf.Tensor4D;
  const b = bias ? bias() : keyPaddingBias(keyMask);
  return { y: attend(splitHeads(q, B, 1, nh), k4, v4, b), kv: { k: k4, v: v4 } };
}
