/**
 * What the engine needs from a causal language model, whatever its family (docs/models.md): GPT2 (model/gpt2.ts)
 * and Llama (model/llama.ts, also Qwen2 and Qwen3) both provide it. The trainer, sampling, the scalar heads, LoRA
 * views, checkpoints and the worker see only this interface; model/causal-lm.ts builds the family's class from a
 * config's `model_type`. Also here: the options and vocabulary-chunk layout both families share.
 */
import type { BaseDtype } from '../../common/config/fields';
import type * as tf from '@tensorflow/tfjs-core';
import type { LMConfig } from './config';
import type { LayerKV } from '../kernels/definitions';
import type { LoraAdapters } from './lora';
import type { LazyTensor } from './safetensors';
import type { ParamSpec } from './specs';
import type { TrunkShare } from './shared-prefix';
import { UserError } from '../../common/errors';

/** Model options that change the in-memory layout only (never the names or values in files). */
/**
 * A model's id (`label_n`), which names its variables (`policy_0/h.0.attn.c_attn.weight`, …). One counter for
 * every model family: tfjs refuses a second variable of a name while the first lives, and GPT-2 and Llama models
 * counting apart could both make `value_9` in one process (a test file's model still alive when the next file
 * in the same worker made one of the other family: tests/llama-trainer.test.ts failed so once).
 */
let modelCounter = 0;
export function nextModelId(label: string): string {
  return `${label}_${modelCounter++}`;
}

export interface GPT2Options {
  /**
   * The most bytes one kernel may bind as a storage buffer (WebGPU's `maxStorageBufferBindingSize`):
   * `wte` is then held as vocabulary chunks of at most this size. Absent: `wte` is one tensor.
   */
  maxBindingBytes?: number;
  /**
   * How the frozen base's large matrices are stored (config `baseDtype`; docs/models.md, "The frozen base in f16"): "f16" packs them two
   * halves per 32-bit word on WebGPU (Llama / Qwen families, non-trainable models only). Absent: "f32".
   */
  baseDtype?: BaseDtype;
}

/**
 * Rows of `wte` per vocabulary chunk for a binding limit (all of them when it fits, or there is no limit).
 * Throws a UserError when not even one row (n_embd float32 values) fits.
 */
export function embeddingChunkRows(
  config: Pick<LMConfig, 'vocab_size' | 'n_embd'>,
  maxBindingBytes?: number,
): number {
  const V = config.vocab_size;
  if (maxBindingBytes === undefined || maxBindingBytes <= 0) return V;
  const rowBytes = config.n_embd * 4;
  const rows = Math.floor(maxBindingBytes / rowBytes);
  if (rows < 1) {
    throw new UserError(
      `the token embedding's rows are ${rowBytes} bytes (n_embd ${config.n_embd} × float32), more than the ` +
        `${maxBindingBytes}-byte limit for one buffer binding; a limit of at least ${rowBytes} bytes is needed.`,
    );
  }
  return Math.min(rows, V);
}

/**
 * How `wte` is laid out under a binding limit: rows per chunk, the number of chunks, and the bytes of the
 * largest chunk (what a device check compares against the limit in place of wte's 154 MB for GPT-2).
 */
export function embeddingChunks(
  config: Pick<LMConfig, 'vocab_size' | 'n_embd'>,
  maxBindingBytes?: number,
): { rows: number; count: number; largestBytes: number } {
  const rows = embeddingChunkRows(config, maxBindingBytes);
  return { rows, count: Math.ceil(config.vocab_size / rows), largestBytes: rows * config.n_embd * 4 };
}

/** How the trunk runs a training forward. */
export interface TrunkOptions {
  /**
   * Recompute each block's activations in the backward instead of keeping them (model/recompute.ts): a
   * backward through the trunk then holds the blocks' inputs and one block's tensors at a time. Only where
   * gradients are recorded (a forward outside tf.grads is unchanged); not with a KV cache.
   */
  recompute?: boolean;
  /**
   * Rows that share their query run its positions once (model/shared-prefix.ts): the trunk then returns the compact
   * rows [N', C] (`compact`'s order) instead of [B·T, C]. Not with a KV cache.
   */
  share?: TrunkShare;
}

export interface CausalLM {
  readonly config: LMConfig;
  /** Parameters by the family's HF name (GPT-2 without `transformer.`, Llama without `model.`). */
  readonly params: Map<string, tf.Variable>;
  readonly specs: ParamSpec[];
  readonly id: string;
  /** Rows per chunk of the vocabulary matrices (vocab_size when each is one tensor). */
  readonly wteChunkRows: number;
  /** Itself, or for a LoRA view the shared base (the reference). */
  readonly base: CausalLM;
  readonly lora: LoraAdapters | null;
  /**
   * Hidden states after the final norm, [B·T, C] (with `opts.share`, the compact rows); positions cumsum(mask) − 1;
   * `collectKV` gets each layer's K, V.
   */
  trunk(ids: tf.Tensor2D, mask: tf.Tensor2D, collectKV?: LayerKV[], opts?: TrunkOptions): tf.Tensor2D;
  lmHead(hidden: tf.Tensor2D): tf.Tensor2D;
  lmHeadBlocks(): tf.Tensor2D[];
  logits(ids: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor3D;
  /**
   * One KV-cache token: the hidden state [B, C] and the new cache. `cache` is spent: an implementation may write
   * the new slot into its tensors in place (GPT-2 and Llama on WebGPU, where a cache tensor holds its data alone;
   * kernels/webgpu-inplace.ts) and return
   * tensors sharing their data, so a caller disposes the old cache and keeps the new, never reads the old again.
   */
  decodeStep(
    ids: tf.Tensor1D,
    positions: tf.Tensor1D,
    slotOneHot: tf.Tensor,
    keyMask: tf.Tensor2D,
    cache: LayerKV[],
  ): { hidden: tf.Tensor2D; cache: LayerKV[] };
  withLora(adapters: LoraAdapters | null, label?: string): CausalLM;
  clone(trainable: boolean, label?: string): CausalLM;
  blockVariables(i: number): tf.Variable[];
  trainableVariables(): tf.Variable[];
  toArrays(): Promise<Map<string, Float32Array>>;
  lazyArrays(): LazyTensor[];
  dispose(): void;
}
