/**
 * What a fused WebGPU kernel and the plain tfjs composition it stands in for must agree on, defined once here so
 * that both sides read the same value: the model (model/ops.ts, model/attention.ts, model/gpt2.ts) imports it from
 * this file, and the kernels, which import nothing of the model (tests/import-cycles.test.ts), do too.
 */
import type * as tf from '@tensorflow/tfjs-core';

/**
 * gelu_new's constant in its sigmoid form x·σ(GELU_K·(x + 0.044715x³)): 2·√(2/π), from
 * 0.5·(1 + tanh(u)) = σ(2u). Used by model/ops.ts's geluNew and by the Conv1D kernel's WGSL epilogue.
 */
export const GELU_K = 2 * Math.sqrt(2 / Math.PI);

/**
 * Large negative bias for masked attention scores (finite, so fully-masked pad rows stay finite). The plain
 * attention adds it where a key is not allowed; the decode-attention kernel writes the same number into its WGSL.
 */
export const MASKED = -1e9;

/** One layer's keys and values, each [B, nh, S, hs]: the KV cache, and what the prefill collects. */
export type LayerKV = {
  k: tf.Tensor4D;
  v: tf.Tensor4D;
};
