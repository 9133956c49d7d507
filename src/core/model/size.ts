/**
 * How big a model is and how much memory a run on it holds, from its config.json alone (before any weight is
 * read). The one place for these numbers: the worker's checks before loading (src/worker/sources.ts,
 * src/worker/device-limits.ts), the CLI's (src/cli/preflight.ts) and the memory bench (src/bench/perf/memory.ts).
 *
 * A run holds, in float32:
 *   base         the policy's weights (with LoRA: the one frozen base the policy, reference and value views share)
 *   reference    the frozen reference policy (none with LoRA: the base with adapters off is the reference)
 *   value        the value model (a trunk of its own + a scalar head; 'shared': a head only; 'none': critic-free)
 *   rewardModel  a learned reward model (a trunk + a head), when the reward is one
 *   adapters     LoRA's A and B matrices (policy, and the value model when it shares the base)
 *   adam         Adam's two moments, m and v, per trainable parameter
 *   gradients    one gradient per trainable parameter, all held at once during the joint update (ppo/update.ts)
 *   activations  the rest of the peak: the largest of the three phases' working tensors (generate: the KV cache;
 *                score: the forwards of every model over a minibatch inside one tidy; update: one forward kept
 *                for its backward, plus the gradients), from batch × (prompt + response) × width × layers, the
 *                attention scores and the logits B·T·V. With gradients counted apart, a peak in the generate or
 *                score phase (gradients not live) shows as activations = peak − gradients.
 * The activation constants count tensors as `tf.memory().numBytes` does (a reshape's view counts again, and so
 * does the copy tfjs's autodiff keeps of every input a gradient needs, even where the backend shares its buffer);
 * they are checked against measured peaks on the CPU backend (tests/size.test.ts, within 25%, for a bytes
 * vocabulary of 258 and vocabularies of 8192 and more).
 *
 * With a large vocabulary (GPT-2's 50257) two terms dominate the update's activations, and both are counted:
 *   - the logits-sized tensors, B·T·V (T: the response tokens in PPO, every position in SFT): the logits, the
 *     log-softmax's (max-shifted, exp, flattened for the gather) and, in PPO, the entropy's (softmax, product),
 *     each with autodiff's kept copy, then the backward's gradient of each, all held until the backward's tidy
 *     ends (LOGITS_UPDATE for PPO's policy loss, LOGITS_LM_LOSS for SFT's next-token loss);
 *   - wte-sized tensors, V·C: the token embedding's gather and the tied LM head's product each keep a copy of
 *     wte for the backward (WTE_TAPE_COPIES), and when wte trains (full fine-tuning, SFT) the head's and the
 *     gather's gradients of wte are both held besides their sum, the gradient (WTE_PARTIAL_GRADIENTS). Under LoRA
 *     the base is frozen: no wte gradient, but the copies are kept all the same (measured).
 * Both fitted on 1-layer models (width 16 and 64, vocabularies 2048 and 8192: the slope of the measured peak in V
 * separates B·T·V from V·C) and checked on others: full PPO reads ≈ 5% high (every gradient is counted at once;
 * the value model's come after the policy's peak), SFT within 3%.
 * LoRA's backward holds two more terms (LORA_WEIGHT_TAPE_COPIES, ACT_LORA_PER_OUT), fitted on the slope of the
 * measured peak in n_layer; LoRA PPO and GRPO read 2–12% high on small shapes, and +0.4% on GPT-2 124M's LoRA
 * PPO at batch 16 (3.81 GB against a measured 3.79; the WASM backend counts the same tensors as the CPU one).
 * On WASM these are tensor bytes, not heap: kept copies share their buffer there (kernels/wasm-identity.ts), and
 * that run's heap stopped at 2.86 GB.
 * The Llama families (llama, qwen2, qwen3) have terms of their own where GPT-2's assumptions differ (LLAMA_ACT_*:
 * q/k/v/o widths from heads × head_dim, the repeated KV heads of grouped-query attention, SwiGLU's three
 * intermediate_size-wide matrices; the KV cache at n_kv · head_dim; an untied lm_head held by every trunk copy and
 * trained by the policy only); LoRA's terms follow the family's modules (loraModules). GPT-2's numbers are as above.
 * Every row is counted in full: where rows share a prompt the trainer runs it once (model/shared-prefix.ts) and
 * holds less (tests/size.test.ts measures a GRPO step both ways, the shared one below the estimate).
 * See docs/engine.md for the step these tensors belong to and docs/tfjs.md for the backends' kernels.
 */
import type { GPT2Config, LlamaConfig, LMConfig } from './config';
import { isLlamaFamily } from './llama-config';
import { llamaParamSpecs } from './llama';
import { trunkParamSpecs, scoreHeadSpecs, type ParamSpec } from './specs';
import {
  familyLoraTargets,
  loraModules,
  loraModuleShape,
  resolveLoraTargets,
  LORA_TARGETS,
  type LoraTarget,
} from './lora';
import { UserError } from '../../common/errors';
import { isF16Matrix, type BaseDtype } from './f16-base';
import { hasValueModel, type TrainConfig } from '../../common/config';

export const FLOAT32_BYTES = 4;

type Shape = Pick<LMConfig, 'vocab_size' | 'n_positions' | 'n_embd' | 'n_layer' | 'n_head'>;

const product = (shape: number[]): number => shape.reduce((a, b) => a * b, 1);

/** A model's weight specs: the Llama families' from their full config, GPT-2's from the shape alone. */
function specsOf(c: Shape): ParamSpec[] {
  const t = (c as Partial<LMConfig>).model_type;
  return isLlamaFamily(t) ? llamaParamSpecs(c as LlamaConfig) : trunkParamSpecs(c as GPT2Config);
}

/** Parameters of an LM, a tied head counted once (GPT-2 124M: 124,439,808). */
export function paramCount(c: Shape): number {
  return specsOf(c).reduce((n, s) => n + product(s.shape), 0);
}

/** Parameters of a scalar model (value or reward model): a trunk and GPT2ForSequenceClassification's score head. */
export function scalarParamCount(c: Shape): number {
  return paramCount(c) + scoreHeadSpecs(c as LMConfig).reduce((n, s) => n + product(s.shape), 0);
}

/** The biggest single weight tensor of the model (float32). */
export function largestTensor(c: Shape): { name: string; shape: number[]; bytes: number } {
  let best = { name: '', shape: [] as number[], bytes: 0 };
  for (const s of specsOf(c)) {
    const bytes = product(s.shape) * FLOAT32_BYTES;
    if (bytes > best.bytes) best = { name: s.name, shape: s.shape, bytes };
  }
  return best;
}

/** LoRA settings as the estimate needs them: rank r and the adapted Conv1D layers. */
export interface LoraShape {
  r: number;
  targets: readonly LoraTarget[];
}

/** Parameters of one LoRA adapter set: A [r, in] and B [out, r] per adapted module. */
export function loraParamCount(c: Shape, lora: LoraShape): number {
  return loraModules(c as LMConfig, lora.targets).reduce((n, m) => n + lora.r * (m.in + m.out), 0);
}

/** The sizes of a run that its memory depends on. */
export interface RunShape {
  /** Sequences per rollout. */
  batchSize: number;
  /** Minibatches per epoch: the scoring forwards and the updates run over batchSize / miniBatches rows. */
  miniBatches: number;
  /** Prompt tokens (the longest prompt, or n_positions − responseLength when unknown). */
  promptLength: number;
  responseLength: number;
  /**
   * Samples per micro-batch, resolved (≥ 1; see resolveStepPlan): generation, scoring and the update run
   * over slices of this many. Absent: the engine before micro-batches (generation over the batch, scoring and
   * the update over a minibatch).
   */
  microBatchSize?: number;
  /**
   * Samples per generation slice (resolveStepPlan: with the automatic micro-batch, as many as the generation
   * phase alone allows); absent: microBatchSize.
   */
  generateMicroBatchSize?: number;
  /** The update's log-prob and entropy over vocabulary chunks of this many entries (0 / absent: whole). */
  vocabChunk?: number;
  /**
   * Where set (WebGPU), `vocabChunk` applies only to a micro-batch whose response logits (rows · R · V float32)
   * take more than this many bytes; a smaller one takes the whole logits through the fused kernels, as the
   * trainer decides per micro-batch (ppo/trainer.ts chunksVocabulary). Absent: `vocabChunk` applies to every one.
   */
  vocabChunkOverBytes?: number;
  /** The update recomputes each block's activations in its backward (keeps only the blocks' inputs). */
  recompute?: boolean;
  /**
   * false: the update runs through tfjs even where its minibatch is one micro-batch (config `updateReplay` false,
   * or the recordings dropped after the device ran out: ppo/trainer.ts), so no recording holds its buffers
   * between steps (RunMemoryOptions.webgpuActivations). Absent: recorded where it can be.
   */
  updateRecorded?: boolean;
}

/**
 * What a run builds. `lora` absent: full fine-tuning (every policy weight trainable, a full reference copy).
 * `valueModel`: 'separate' (PPO today: a trunk of its own), 'shared' (a head on the policy's base, with its own
 * adapters under LoRA), 'none' (critic-free algorithms).
 */
export interface RunMemoryOptions {
  lora?: LoraShape;
  valueModel: 'separate' | 'shared' | 'none';
  rewardModel: boolean;
  /**
   * 'wasm': count the WASM heap a step reaches, not tensor bytes (see WASM heap, below): the copies autodiff keeps
   * of the embedding and the weights share their buffer there (kernels/wasm-identity.ts), and XNNPACK holds a
   * packed copy of every weight matrix a matmul multiplies by (the `packed` part). Absent: tensor bytes, what
   * tf.memory().numBytes counts on every backend.
   */
  heap?: 'wasm';
  /**
   * GPT-2 blocks whose layer norms and gelu_new run as fused kernels (the WASM backend with SIMD:
   * kernels/wasm-activations.ts wasmFusedBlocksHere): their activations count ACT_PER_C_FUSED per C, not
   * ACT_PER_C. The estimate's callers on WASM set it; the automatic plan (resolveStepPlan) keeps ACT_PER_C, so
   * plans do not depend on the kernels and a WASM step holds less than its plan budgeted.
   */
  fusedBlocks?: boolean;
  /**
   * WebGPU: a decode step writes its key and value into the cache in place (kernels/webgpu-inplace.ts) and attends
   * over the KV heads without repeating them (kernels/webgpu-gqa-decode.ts), so generation holds the cache once:
   * 2 · n_kv·head_dim floats (GPT-2: 2 · C) per position per row per layer (kvCacheFloats), where the CPU's ops
   * hold the old and the new cache and the repeated heads. Measured on SwiftShader's buffers (tfjs's BufferManager,
   * a Qwen2 of 4 layers, width 512, batch 16, 128 positions): 8 KV heads held 22.3 MB more than 1, the caches'
   * difference being 29.4 MB at 2 · n_kv·d, against 206 MB at the CPU's count. The estimate's callers on WebGPU set
   * it; like fusedBlocks it changes the estimate, not the plan.
   */
  inPlaceCache?: boolean;
  /**
   * WebGPU: the update's log-prob and entropy over whole logits run as fused kernels (kernels/webgpu-logprob.ts:
   * one dispatch a row, no [tokens, V] temporaries), which hold LOGITS_UPDATE_FUSED floats per response token per
   * vocabulary entry, not the plain ops' LOGITS_UPDATE. Set with inPlaceCache; the estimate, not the plan.
   */
  fusedLogprob?: boolean;
  /**
   * WebGPU: the blocks' activations as WebGPU's kernels hold them (the WEBGPU_* constants below, fitted on tfjs's
   * buffers in use, not on tf.memory's tensor bytes: a copy autodiff keeps shares its buffer), and, where the update
   * runs as one recording per minibatch (one micro-batch: ppo/update-replay.ts), that recording holding the
   * update's working buffers from one step to the next, through generation and scoring. Set with inPlaceCache and
   * fusedLogprob by the estimate's callers on WebGPU; the estimate, not the plan.
   */
  webgpuActivations?: boolean;
  /**
   * Storage of the frozen base under LoRA (config `baseDtype`; docs/models.md, "The frozen base in f16"): "f16" holds the Llama families' large
   * matrices (embedding, untied head, every linear) at 2 bytes a value, norms and biases at 4. Ignored without LoRA
   * (full fine-tuning keeps f32) and for GPT-2 (f32 only). Absent: "f32".
   */
  baseDtype?: BaseDtype;
}

/**
 * What the estimate's callers on WebGPU add to a run's options (the worker, the CLI's preflight, the trainer): the
 * KV cache written in place, the fused log-prob, the blocks and the update's recording as WebGPU holds them.
 */
export const WEBGPU_MEMORY_OPTIONS = {
  inPlaceCache: true,
  fusedLogprob: true,
  webgpuActivations: true,
} as const satisfies Partial<RunMemoryOptions>;

/** Bytes of one copy of an LM's weights stored as `baseDtype` (f16: the isF16Matrix weights at 2 bytes a value). */
export function baseWeightBytes(c: Shape, baseDtype: BaseDtype = 'f32'): number {
  const half = baseDtype === 'f16' && isLlamaFamily((c as Partial<LMConfig>).model_type);
  return specsOf(c).reduce(
    (n, s) => n + product(s.shape) * (half && isF16Matrix(s.name) ? F16_BYTES : FLOAT32_BYTES),
    0,
  );
}

/** Bytes of a binary16 value (the packed base: two per 32-bit word). */
export const F16_BYTES = 2;

export interface MemoryParts {
  base: number;
  reference: number;
  value: number;
  rewardModel: number;
  adapters: number;
  adam: number;
  gradients: number;
  activations: number;
  /** XNNPACK's packed copies of the weight matrices (the WASM heap only; 0 otherwise). */
  packed: number;
  /**
   * The WASM heap's growth step (the heap only; 0 otherwise): tfjs-backend-wasm's emscripten runtime grows the heap
   * past what the allocator asked for, by up to 20% of the heap or 96 MiB (emscripten_resize_heap), and the heap
   * never shrinks, so its length (what the 4 GiB maximum bounds) exceeds the allocator's high-water mark by up to
   * that much (wasmHeapGrowth).
   */
  heapGrowth: number;
}

export type MemoryPhase = 'generate' | 'score' | 'update';

export interface MemoryEstimate {
  /** Bytes, the sum of the parts. */
  total: number;
  parts: MemoryParts;
  /** Parameters the optimiser updates. */
  trainableParams: number;
  /** The phase whose working tensors are the largest (what `activations` counts). */
  peakPhase: MemoryPhase;
  /**
   * "f16" when `parts.base` counts the frozen base in half precision (RunMemoryOptions.baseDtype "f16" under LoRA, a
   * Llama-family model: baseWeightBytes); absent when every weight is counted f32.
   */
  baseDtype?: 'f16';
}

// ---------------------------------------------------------------------------------------------------------
// Activations, in floats, counted as tf.memory().numBytes counts them. Per token per layer of a forward kept whole
// (inside a tidy, or on the tape for a backward): the block's tensors that scale with the width C (the layer
// norms' intermediates, the qkv projection and its split, the heads' reshapes and transposes, the MLP's 4C hidden
// and gelu's intermediates), and per head per key the attention scores, the bias, the softmax and their views.
// Fitted on the CPU backend by varying one dimension at a time (n_layer, n_embd, n_head, T) and checked on other
// shapes within 25% (tests/size.test.ts).
/** Floats per token per layer that scale with n_embd. */
export const ACT_PER_C = 42;
/**
 * ACT_PER_C where the block's layer norms and gelu_new run as fused kernels that leave no intermediates behind
 * (the WASM backend: kernels/wasm-activations.ts; RunMemoryOptions.fusedBlocks): a layer norm keeps its output and
 * x̂ where tfjs's ops left five [rows, C] tensors, gelu_new its sigmoid's argument where they left five [rows, 4C],
 * and their gradients one tensor each where the ops made several. Fitted on WASM with the shapes of
 * tests/size.test.ts (full PPO, LoRA, a learned reward model, long responses, vocabularies to 8192) against their
 * measured peaks: 1.00–1.17× them at 26 (at ACT_PER_C's 42 these read 1.27–1.33×; at 20, 0.90× at the lowest).
 */
export const ACT_PER_C_FUSED = 26;
/** Floats per token per layer per head per key position. */
export const ACT_PER_HT = 6;
/** Floats per token per n_embd outside the blocks (embeddings, positions, the final layer norm). */
export const ACT_OUTSIDE_BLOCKS = 12;
/** Floats per response token per vocabulary entry: the logits and the log-softmax of one LM while scoring. */
export const LOGITS_SCORE = 3;
/**
 * The same while updating the policy (PPO's loss): the logits, the log-softmax's and the entropy's tensors, the
 * copies autodiff keeps of them, and their gradients, all live until the backward's tidy ends. Fitted on the CPU
 * backend with vocabularies of 2048 and 8192 (the slope of the measured peak in V), checked on other shapes.
 */
export const LOGITS_UPDATE = 21;
/**
 * LOGITS_UPDATE where the log-prob and entropy run as WebGPU's fused kernels (RunMemoryOptions.fusedLogprob): the
 * logits, the log-prob's gradient, the entropy's and their sum. Measured on SwiftShader from tfjs's buffers in use
 * (src/bench/perf/gpu-buffer-peak.ts), the slope of a LoRA GRPO step's peak in V (4 096 to 16 384, 128 response
 * tokens, the update replayed): 2.8 floats without the entropy's gradient (entropyCoef 0), 4.8 with it.
 */
export const LOGITS_UPDATE_FUSED = 5;
/** Floats per token per vocabulary entry of SFT's next-token loss (the log-softmax only, no entropy): as above. */
export const LOGITS_LM_LOSS = 13;
/** Copies of the token embedding wte ([V, C]) kept for a backward through an LM: the gather's and the tied head's. */
export const WTE_TAPE_COPIES = 2;
/** wte-sized gradients held besides wte's gradient when it trains: the tied head's and the gather's, summed. */
export const WTE_PARTIAL_GRADIENTS = 2;
/**
 * The same with an untied LM head (Llama families with tie_word_embeddings false): the gather's gradient is
 * embed_tokens' own and the head's is lm_head's (both counted with the gradients), and one more [V, C] tensor is
 * held in the head's backward. Measured: an untied model's full PPO peak grows by its held weights alone.
 */
export const UNTIED_HEAD_PARTIAL_GRADIENTS = 1;
/**
 * Under LoRA the update holds more than the forwards above count: full fine-tuning's estimate counts the value
 * model's gradients, which do not exist yet at the policy's backward (its peak), and they stand in for the copy
 * autodiff keeps of every Conv1D weight the forward multiplies by; with frozen weights nothing stands in. So for
 * LoRA: that copy (the block's four Conv1D weights, 12·C² per layer; tf.memory().numBytes counts a kept copy even
 * where the backend shares its buffer), and per token per layer per output feature of each adapted Conv1D the
 * LoRA path's tensors (x·Aᵀ·s·Bᵀ, the sum with x·W + b, their kept copies and gradients). Fitted on 1- and 3-layer
 * models (width 128 and 256, 120 and 240 tokens per minibatch: the slope of the measured peak in n_layer, with
 * and without LoRA), the same on the CPU and WASM backends. Missing both, the estimate of GPT-2 124M's LoRA PPO
 * at batch 16 read 2.96 GB against a measured 3.79 GB.
 */
export const LORA_WEIGHT_TAPE_COPIES = 1;
/** Floats per token per layer per output feature of an adapted Conv1D, while updating (see above). */
export const ACT_LORA_PER_OUT = 6;
/** Forward-sized sets of tensors a backward holds: the forward's, kept on the tape, and the gradients tfjs keeps
 * until the backward ends (it runs inside one tidy). */
export const UPDATE_FORWARDS = 3;
/**
 * Floats per response token per vocabulary entry of ONE chunk while updating with the vocabulary-chunked
 * log-prob (ppo/chunked-logprob.ts): the chunk's logits and its temporaries, forward and backward.
 */
export const LOGITS_CHUNK_UPDATE = 4;
/**
 * With recomputation (model/recompute.ts) the backward holds, per token per layer, the saved block inputs (a
 * clone each, and the block's output until the next block consumes it) — floats per token per layer per n_embd.
 */
export const RECOMPUTE_KEPT_PER_C = 3;

// The Llama families (llama, qwen2, qwen3; model/llama.ts) in the same units. Their block differs from GPT-2's in
// every width: RMSNorm instead of LayerNorm, q/k/v/o projections nh·d and n_kv·d wide (d = head_dim) with the
// rotary embedding on q and k (split, negate, concat, two products and a sum each), the KV heads repeated for their
// query heads (a tile and its view, when n_kv < nh), and the SwiGLU MLP's three intermediate_size-wide matrices
// (gate, up, silu(gate)·up with the sigmoid and product between). Measured on the CPU backend: the floats a
// forward keeps under autodiff's tape per token per layer, one dimension varied at a time (C, nh·d, n_kv·d, I, nh,
// n_kv, head_dim) on the three families, fitted by least squares (every point within 35 floats per token). GPT-2's
// constants above are 0.50 of the same measurement of its block (0.50–0.51 over n_embd and n_head); on whole Llama
// steps that ratio read 25% high (the forward's share of the peak's slope in n_layer, full GRPO on a qwen3 with GQA),
// so these are 0.39 of it. Checked on whole PPO (full, LoRA) and GRPO LoRA steps, tied and untied, with and without
// GQA: 5–17% high (tests/size.test.ts); Qwen2.5-0.5B's LoRA GRPO step on WASM read 0.8% high
// (tests/qwen-0.5b.slow.test.ts).
/** Floats per token per layer per n_embd (the norms, the residual sums, o_proj's and down_proj's outputs). */
export const LLAMA_ACT_PER_C = 9;
/** Floats per token per layer per query feature, nh·head_dim (q_proj, its reshapes and rotary embedding). */
export const LLAMA_ACT_PER_Q = 9.5;
/** Floats per token per layer per key/value feature, n_kv·head_dim (k_proj, v_proj, k's rotary embedding). */
export const LLAMA_ACT_PER_KV = 11;
/** Floats per token per layer per intermediate_size feature (gate, up, sigmoid, silu, silu·up). */
export const LLAMA_ACT_PER_I = 4.5;
/** Floats per token per layer per query head per key position (the scores, bias, softmax, their views). */
export const LLAMA_ACT_PER_HT = 5.5;
/** Floats per token per layer per query feature of the repeated KV heads (grouped-query attention only). */
export const LLAMA_ACT_REPEAT_KV = 4.5;
/** Floats per token per layer per q/k/v feature of qwen2's q/k/v bias (the sum). */
export const LLAMA_ACT_QKV_BIAS = 1;
/** Floats per token per layer per q and k feature of qwen3's q_norm/k_norm. */
export const LLAMA_ACT_QK_NORM = 3;
/** Floats per token per head_dim outside the blocks: the rotary table's rows gathered by position. */
export const LLAMA_ACT_ROPE_PER_D = 12;

// On WebGPU (RunMemoryOptions.webgpuActivations) the same counts come out far smaller: the blocks run as fused
// kernels (the linear with its RMSNorm / LayerNorm prologue, LoRA's term and the residual in its epilogue;
// SwiGLU; attention; the log-prob), and a copy autodiff keeps of a tensor shares its buffer, which tfjs's buffers
// count once. Measured on Node's Dawn (SwiftShader) with scripts/webgpu-memory-fit.ts: tfjs's buffers in use at
// most in each phase of a LoRA GRPO step (r 4 on every linear layer, the whole batch as one micro-batch, the update
// and the decode recorded), less what was in use when the phase began; Llama / Qwen2 / Qwen3 of width 128–256,
// 2–4 layers, q 128–256, KV 64–128, intermediate 384–768, 320–640 tokens, vocabularies 2 048–8 192, fitted by
// least squares (every point within 3.3 %), then rounded up by about 10 %; GPT-2 from three points (width 128 and
// 256, 2 and 4 layers). The update's terms count the whole update (the forward kept for the backward and the
// backward's transients), so UPDATE_FORWARDS does not multiply them. docs/engine.md, "On WebGPU: what tfjs's
// buffers hold".
/** Floats per token per layer per feature of C, nh·head_dim and n_kv·head_dim while updating (WebGPU, Llama). */
export const WEBGPU_LLAMA_UPDATE_PER_WIDTH = 4;
/** Floats per token per layer per intermediate_size feature while updating (WebGPU, Llama; fitted 9.5). */
export const WEBGPU_LLAMA_UPDATE_PER_I = 10.5;
/** Floats per token per layer per n_embd while updating (WebGPU, GPT-2; fitted 18). */
export const WEBGPU_GPT2_UPDATE_PER_C = 20;
/** Floats per token per layer per head per key position while updating (WebGPU; fitted 2.25). */
export const WEBGPU_UPDATE_PER_HT = 2.5;
/** Floats per token per n_embd outside the blocks while updating (WebGPU; fitted 21 Llama, 31 GPT-2). */
export const WEBGPU_UPDATE_OUTSIDE_PER_C = 32;
/** With recompute: the saved block inputs, floats per token per layer per n_embd (WebGPU; measured 3.3). */
export const WEBGPU_RECOMPUTE_KEPT_PER_C = 4;
/**
 * While scoring, one block at a time (WebGPU): floats per token per feature of C (Llama; fitted 7.6), of
 * nh·head_dim + n_kv·head_dim (fitted 0.2 and 2.3), of intermediate_size (fitted 3.1), per head per key position
 * (fitted 1.5); GPT-2 per n_embd (measured 19–22); per response token per vocabulary entry, both LMs' (fitted 1.0).
 */
export const WEBGPU_LLAMA_SCORE_PER_C = 8;
export const WEBGPU_LLAMA_SCORE_PER_QKV = 3;
export const WEBGPU_LLAMA_SCORE_PER_I = 3.5;
export const WEBGPU_GPT2_SCORE_PER_C = 24;
export const WEBGPU_SCORE_PER_HT = 2;
export const WEBGPU_LOGITS_SCORE = 1.5;

/**
 * What a Llama-family block's update holds less on WebGPU for each linear layer LoRA does not adapt, against the
 * constants above (fitted with adapters on all seven): floats per token per layer, per intermediate_size feature
 * for gate_proj and up_proj (each) and for down_proj, per output feature for q/k/v/o_proj. Measured with
 * scripts/webgpu-memory-fit.ts (a Llama of width 192 with intermediate 768, a Qwen2 of width 128 with intermediate
 * 1 024 and 2 KV heads; 2 layers, 320 tokens, r 4) by leaving out one layer or a group at a time: gate_proj
 * 2.3 and 2.1·I, down_proj 1.8 and 1.7·I, the three together 6.0 and 5.8·I; the attention's k, v and o together
 * 1.8 and 2.2 per output feature, v_proj alone 2.1 and 0.2. The savings are counted below what was measured for
 * each group left out (the step's peak is not the sum of the layers' parts: one attention layer alone may save less
 * than its 1 per output feature, 0.2 for Qwen2's v_proj, a few hundredths of the block), so the estimate stays
 * above the step.
 */
export const WEBGPU_LORA_UNTARGETED_GATE_UP_PER_I = 2;
export const WEBGPU_LORA_UNTARGETED_DOWN_PER_I = 1.5;
export const WEBGPU_LORA_UNTARGETED_ATTN_PER_OUT = 1;
/**
 * The same for GPT-2, floats per token per layer per n_embd for each Conv1D LoRA leaves out. Measured on a GPT-2
 * of width 192 (2 layers, 320 tokens, r 4): c_fc 6.2, mlp.c_proj 5.2, the two 12.9; c_attn with attn.c_proj 3.8,
 * attn.c_proj alone about 0 (so nothing is subtracted for it). Counted below what was measured, as above.
 */
export const WEBGPU_GPT2_LORA_UNTARGETED_PER_C: Readonly<Record<string, number>> = {
  c_attn: 2,
  'attn.c_proj': 0,
  c_fc: 5,
  'mlp.c_proj': 4,
};

/** Floats per token per layer that an update holds less for the linear layers LoRA leaves out (WebGPU). */
function webgpuUntargetedFloats(c: Shape, lora: LoraShape | null | undefined): number {
  if (!lora || lora.r <= 0) return 0; // full fine-tuning: the constants' count (not fitted apart)
  const l = llamaOf(c);
  const targeted = new Set(resolveLoraTargets(c as LMConfig, lora.targets));
  let saved = 0;
  for (const t of familyLoraTargets(c as LMConfig)) {
    if (targeted.has(t)) continue;
    if (!l) saved += WEBGPU_GPT2_LORA_UNTARGETED_PER_C[t] * c.n_embd;
    else if (t === 'gate_proj' || t === 'up_proj')
      saved += WEBGPU_LORA_UNTARGETED_GATE_UP_PER_I * l.intermediate_size;
    else if (t === 'down_proj') saved += WEBGPU_LORA_UNTARGETED_DOWN_PER_I * l.intermediate_size;
    else saved += WEBGPU_LORA_UNTARGETED_ATTN_PER_OUT * loraModuleShape(l as LMConfig, t).out;
  }
  return saved;
}

/**
 * Floats of the blocks' side of an update over n rows of T tokens on WebGPU (`layers` kept whole: n_layer, or 1
 * block at a time with recompute, whose saved inputs `kept` adds), LoRA's terms included (fitted with r 4 on every
 * linear layer; the layers LoRA leaves out hold less: WEBGPU_LORA_UNTARGETED_*, WEBGPU_GPT2_LORA_UNTARGETED_PER_C).
 * The logits and the embedding's copies are counted apart.
 */
function webgpuUpdateFloats(
  c: Shape,
  n: number,
  T: number,
  recompute: boolean,
  lora?: LoraShape | null,
): number {
  const N = n * T;
  const l = llamaOf(c);
  const layers = recompute ? 1 : c.n_layer;
  const perLayer =
    (l
      ? WEBGPU_LLAMA_UPDATE_PER_WIDTH *
          (c.n_embd + (l.num_attention_heads + l.num_key_value_heads) * l.head_dim) +
        WEBGPU_LLAMA_UPDATE_PER_I * l.intermediate_size
      : WEBGPU_GPT2_UPDATE_PER_C * c.n_embd) - webgpuUntargetedFloats(c, lora);
  const kept = recompute ? WEBGPU_RECOMPUTE_KEPT_PER_C * c.n_layer * N * c.n_embd : 0;
  return (
    layers * N * (perLayer + WEBGPU_UPDATE_PER_HT * c.n_head * T) +
    WEBGPU_UPDATE_OUTSIDE_PER_C * N * c.n_embd +
    kept
  );
}

/** Floats of one scoring forward's blocks over n rows of T tokens on WebGPU (one block at a time). */
function webgpuScoreFloats(c: Shape, n: number, T: number): number {
  const l = llamaOf(c);
  const perToken = l
    ? WEBGPU_LLAMA_SCORE_PER_C * c.n_embd +
      WEBGPU_LLAMA_SCORE_PER_QKV * (l.num_attention_heads + l.num_key_value_heads) * l.head_dim +
      WEBGPU_LLAMA_SCORE_PER_I * l.intermediate_size
    : WEBGPU_GPT2_SCORE_PER_C * c.n_embd;
  return n * T * (perToken + WEBGPU_SCORE_PER_HT * c.n_head * T);
}

/** A Llama-family config's widths, or null for GPT-2. */
function llamaOf(c: Shape): LlamaConfig | null {
  return isLlamaFamily((c as Partial<LMConfig>).model_type) ? (c as LlamaConfig) : null;
}

/**
 * Floats of generation's KV cache over rows × T positions: keys and values of every layer, the old and the new
 * cache during a decode step (GPT-2: 2 · 2 · C per position per row per layer). The Llama families count what was
 * measured on the CPU backend (the peak's growth with the generated length, 96 to 160 tokens, 8 heads, 4 layers):
 * keys and values at n_kv · head_dim, the old cache, the new one and the new key/value spread over the slots
 * (tf.mul by the slot's one-hot is cache-sized), 6 · n_kv·d (743 floats measured against 768 counted, 8 KV heads);
 * with grouped-query attention also the repeated heads of every layer, live until the decode step's tidy ends: a
 * view of the cache (2 · n_kv·d), the tile and its view (4 · nh·d) and 2 · nh·d more in the attention over them
 * (1076 measured against 1024 counted, 8 heads over 2 KV heads). Width 128, batch 8 from 16-token prompts; from
 * shorter generations the prompt's forward holds the peak, and counting it beside the whole cache reads up to 30%
 * high (GQA, 96 tokens). Only the hand-worked sizes are a unit test (tests/size.test.ts): the measurement takes
 * minutes.
 */
function kvCacheFloats(c: Shape, rows: number, T: number, inPlace = false): number {
  const l = llamaOf(c);
  if (!l) return (inPlace ? 2 : 2 * 2) * rows * c.n_layer * T * c.n_embd;
  const kv = l.num_key_value_heads * l.head_dim;
  if (inPlace) return rows * c.n_layer * T * 2 * kv;
  const q = l.num_attention_heads * l.head_dim;
  const repeated = l.num_key_value_heads < l.num_attention_heads ? 2 * kv + 6 * q : 0;
  return rows * c.n_layer * T * (6 * kv + repeated);
}

/** Floats held by one forward over n rows of T tokens, kept whole (`fused`: RunMemoryOptions.fusedBlocks). */
function forwardFloats(c: Shape, n: number, T: number, fused = false): number {
  const N = n * T;
  const l = llamaOf(c);
  if (l) {
    const q = l.num_attention_heads * l.head_dim;
    const kv = l.num_key_value_heads * l.head_dim;
    const perLayer =
      LLAMA_ACT_PER_C * c.n_embd +
      LLAMA_ACT_PER_Q * q +
      LLAMA_ACT_PER_KV * kv +
      LLAMA_ACT_PER_I * l.intermediate_size +
      LLAMA_ACT_PER_HT * l.num_attention_heads * T +
      (l.num_key_value_heads < l.num_attention_heads ? LLAMA_ACT_REPEAT_KV * q : 0) +
      (l.qkv_bias ? LLAMA_ACT_QKV_BIAS * (q + 2 * kv) : 0) +
      (l.qk_norm ? LLAMA_ACT_QK_NORM * (q + kv) : 0);
    return c.n_layer * N * perLayer + N * (ACT_OUTSIDE_BLOCKS * c.n_embd + LLAMA_ACT_ROPE_PER_D * l.head_dim);
  }
  return (
    c.n_layer * N * ((fused ? ACT_PER_C_FUSED : ACT_PER_C) * c.n_embd + ACT_PER_HT * c.n_head * T) +
    ACT_OUTSIDE_BLOCKS * N * c.n_embd
  );
}

/** The vocabulary chunk of an update over `rows` rows (0: whole logits; RunShape.vocabChunkOverBytes). */
export function updateVocabChunk(run: RunShape, rows: number, V: number): number {
  if (!run.vocabChunk) return 0;
  const over = run.vocabChunkOverBytes;
  if (over !== undefined && rows * run.responseLength * V * FLOAT32_BYTES <= over) return 0;
  return Math.min(run.vocabChunk, V);
}

/** How a run's update chunks its vocabulary (RunShape's two fields; ppo/trainer.ts vocabChunking makes it). */
export type VocabChunking = Pick<RunShape, 'vocabChunk' | 'vocabChunkOverBytes'>;

/** Working floats of each phase (weights, optimiser state and gradients not included). */
export function phaseFloats(
  c: Shape,
  run: RunShape,
  models: {
    scorers: number;
    wteTrains?: boolean;
    lora?: LoraShape | null;
    sharedTape?: boolean;
    fusedBlocks?: boolean;
    inPlaceCache?: boolean;
    fusedLogprob?: boolean;
    /** RunMemoryOptions.webgpuActivations: the score's and the update's blocks as WebGPU holds them. */
    webgpu?: boolean;
  },
): Record<MemoryPhase, number> {
  const fused = !!models.fusedBlocks;
  const webgpu = !!models.webgpu;
  const T = run.promptLength + run.responseLength;
  const mb = Math.ceil(run.batchSize / Math.max(1, run.miniBatches));
  const V = c.vocab_size;
  // The rows each phase runs at once: with micro-batches, a micro-batch in every phase.
  const micro = run.microBatchSize;
  const genMicro = run.generateMicroBatchSize ?? micro;
  const genRows = genMicro ? Math.min(genMicro, run.batchSize) : run.batchSize;
  const rows = micro ? Math.min(micro, mb) : mb;
  // Generation: the KV cache (keys and values of every layer; the old and the new cache during a decode step)
  // and the prompt's forward that fills it, one block at a time (each block in its own tidy: model/gpt2.ts trunk).
  const generate =
    kvCacheFloats(c, genRows, T, !!models.inPlaceCache) +
    forwardFloats({ ...c, n_layer: 1 }, genRows, run.promptLength, fused) +
    2 * genRows * V;
  // Scoring: every model's forward over a slice (each block in its own tidy: one block's activations at a time,
  // model/gpt2.ts trunk), the two LMs' response logits.
  // On WebGPU the models' forwards run one after another and one model's blocks set the peak (measured).
  const score = webgpu
    ? webgpuScoreFloats(c, rows, T) + WEBGPU_LOGITS_SCORE * rows * run.responseLength * V
    : models.scorers * forwardFloats({ ...c, n_layer: 1 }, rows, T, fused) +
      LOGITS_SCORE * 2 * rows * run.responseLength * V;
  // Update: one model's forward kept for its backward (with recomputation: the blocks' inputs, and one block's
  // forward at a time), the backward's transients, the response logits (or one vocabulary chunk of them), and
  // the wte-sized tensors of the backward through the policy (full fine-tuning unless told otherwise).
  const chunk = updateVocabChunk(run, rows, V);
  const logits = chunk
    ? LOGITS_CHUNK_UPDATE * rows * run.responseLength * chunk
    : (models.fusedLogprob ? LOGITS_UPDATE_FUSED : LOGITS_UPDATE) * rows * run.responseLength * V;
  const layers = run.recompute ? 1 : c.n_layer;
  const kept = run.recompute ? RECOMPUTE_KEPT_PER_C * c.n_layer * rows * T * c.n_embd : 0;
  const wte = rows > 0 ? wteFloats(c, models.wteTrains ?? true, models.sharedTape) : 0; // no batch, no backward
  const update = webgpu
    ? webgpuUpdateFloats(c, rows, T, !!run.recompute, models.lora) + logits + wte
    : UPDATE_FORWARDS * forwardFloats({ ...c, n_layer: layers }, rows, T, fused) +
      kept +
      logits +
      wte +
      (rows > 0 && models.lora
        ? loraUpdateFloats({ ...c, n_layer: layers }, models.lora, rows * T, models.sharedTape)
        : 0);
  return { generate, score, update };
}

/** What a backward through LoRA views holds beyond the forwards, over N tokens (see LORA_WEIGHT_TAPE_COPIES). */
function loraUpdateFloats(c: Shape, lora: LoraShape, N: number, sharedTape = false): number {
  const weights = linearWeightFloats(c);
  const outs = loraModules(c as LMConfig, lora.targets).reduce((n, m) => n + m.out, 0);
  return (sharedTape ? 0 : LORA_WEIGHT_TAPE_COPIES * weights) + ACT_LORA_PER_OUT * N * outs;
}

/**
 * Floats of XNNPACK's packed weights on the WASM heap: tfjs-backend-wasm multiplies by a weight matrix through an
 * XNNPACK fully-connected operator that it builds once per weight tensor and keeps (with a packed copy of the
 * matrix) until the tensor is disposed. Every trunk that runs a forward holds its own: the base (the policy and,
 * under LoRA, the reference and a shared value model), a full reference copy, a separate value trunk, a reward
 * model of the same shape. The LM head's product runs through our own A·Bᵀ kernel (kernels/bmm-wasm.ts): not
 * packed. LoRA's A and B are small and left out.
 */
function packedWeightFloats(c: Shape, opts: RunMemoryOptions): number {
  const trunks =
    1 +
    (opts.lora && opts.lora.r > 0 ? 0 : 1) +
    (opts.valueModel === 'separate' ? 1 : 0) +
    (opts.rewardModel ? 1 : 0);
  return trunks * linearWeightFloats(c);
}

/**
 * `e` (an estimate of tensor bytes for `trunks` models of shape `c`: generation, SFT, a reward model's training)
 * as the WASM heap holds it: XNNPACK's packed weights added (the `packed` part). Its tape copies stay counted.
 */
export function withPackedWeights(e: MemoryEstimate, c: Shape, trunks = 1): MemoryEstimate {
  const packed = trunks * linearWeightFloats(c) * FLOAT32_BYTES;
  const parts = { ...e.parts, packed: e.parts.packed + packed };
  return { ...e, parts, total: sum(parts) };
}

/** Floats of the blocks' weight matrices (every projection LoRA can target: attention and MLP, all layers). */
function linearWeightFloats(c: Shape): number {
  return loraModules(c as LMConfig, LORA_TARGETS).reduce((n, m) => n + m.in * m.out, 0);
}

/** wte-sized floats a backward through an LM holds beyond the weights and the gradient (see above). */
function wteFloats(c: Shape, trains: boolean, sharedTape = false): number {
  // Untied: the gather keeps a copy of embed_tokens and the head one of lm_head, two [V, C] copies all the same.
  const partial = untiedHead(c) ? UNTIED_HEAD_PARTIAL_GRADIENTS : WTE_PARTIAL_GRADIENTS;
  return ((sharedTape ? 0 : WTE_TAPE_COPIES) + (trains ? partial : 0)) * c.vocab_size * c.n_embd;
}

/**
 * Parameters of an untied lm_head ([V, C], Llama families with tie_word_embeddings false; 0 otherwise). A scalar
 * model's trunk is a copy of an LM and holds it, but never uses it: no gradient, no Adam moments (measured).
 */
function untiedHead(c: Shape): number {
  const l = llamaOf(c);
  return l && !l.tie_word_embeddings ? c.vocab_size * c.n_embd : 0;
}

/** The memory a training run holds at its peak, broken down (bytes). */
export function estimateRunMemory(c: Shape, run: RunShape, opts: RunMemoryOptions): MemoryEstimate {
  const P = paramCount(c);
  const S = scalarParamCount(c);
  const head = S - P;
  const lora = opts.lora && opts.lora.r > 0 ? opts.lora : null;
  const adapterSet = lora ? loraParamCount(c, lora) : 0;
  const base = P;
  let reference = 0;
  let value = 0;
  let adapters = 0;
  let trainable: number;
  if (lora) {
    // One frozen base; the reference is the base with the adapters off. Only adapters (and a value head) train.
    adapters = adapterSet;
    trainable = adapterSet;
    if (opts.valueModel === 'separate') {
      value = S;
      trainable += S - untiedHead(c);
    } else if (opts.valueModel === 'shared') {
      value = head;
      adapters += adapterSet;
      trainable += adapterSet + head;
    }
  } else {
    reference = P;
    trainable = P;
    if (opts.valueModel === 'separate') {
      value = S;
      trainable += S - untiedHead(c);
    } else if (opts.valueModel === 'shared') {
      value = head;
      trainable += head;
    }
  }
  const rewardModel = opts.rewardModel ? S : 0;
  // The models that run a forward while scoring: policy, reference, value (a trunk of its own), reward model.
  const sharedTape = opts.heap === 'wasm';
  // The frozen base in f16 (packed int32 weights): its matrices reach the backward only inside the f16 kernels'
  // custom gradients (kernels/webgpu-f16.ts f16LinearNT: dx = dy · W through the closure, nothing saved; f16Gather:
  // no gradient), so autodiff keeps no copy of the embedding or of a block's weights: the tape terms that count
  // those copies (wteFloats, loraUpdateFloats) drop them, as on the WASM heap where the copies share the buffer.
  const half = !!lora && opts.baseDtype === 'f16' && isLlamaFamily((c as Partial<LMConfig>).model_type);
  const phases = phaseFloats(c, run, {
    scorers: scorersOf(opts),
    wteTrains: !lora,
    lora,
    sharedTape: sharedTape || half,
    fusedBlocks: !!opts.fusedBlocks,
    inPlaceCache: !!opts.inPlaceCache,
    fusedLogprob: !!opts.fusedLogprob,
    webgpu: !!opts.webgpuActivations,
  });
  // Gradients are live during the update only: the peak is the largest of generate, score, update + gradients.
  // Summed over micro-batches, the running sum and a micro-batch's own gradients are both live for a moment.
  const mb = Math.ceil(run.batchSize / Math.max(1, run.miniBatches));
  const accumulating = !!run.microBatchSize && run.microBatchSize < mb;
  // On WebGPU an update whose minibatch is one micro-batch runs as a recording (ppo/update-replay.ts), which keeps
  // its working buffers and its outputs (the gradients) from one step to the next (measured: all of the update's
  // peak), beside generation and scoring. A value model's update (PPO) is a recording of its own: its blocks are
  // counted beside the policy's (not measured; its frame shares scratch buffers of the same size with the policy's,
  // so it may hold less). Not where the run records nothing (RunShape.updateRecorded false).
  const records = !!opts.webgpuActivations && run.updateRecorded !== false && !accumulating && mb > 0;
  const valueHeld =
    records && opts.valueModel !== 'none'
      ? webgpuUpdateFloats(
          c,
          mb,
          run.promptLength + run.responseLength,
          !!run.recompute,
          // On the shared base the value model has adapters on the policy's layers; a separate one trains all.
          opts.valueModel === 'shared' ? lora : null,
        )
      : 0;
  const held = records ? phases.update + valueHeld + trainable : 0;
  const withGrads = {
    generate: phases.generate + held,
    score: phases.score + held,
    update: phases.update + (records ? valueHeld : 0) + (accumulating ? 2 : 1) * trainable,
  };
  const peakPhase = (Object.keys(withGrads) as MemoryPhase[]).reduce((a, b) =>
    withGrads[b] > withGrads[a] ? b : a,
  );
  const parts: MemoryParts = {
    base: lora ? baseWeightBytes(c, opts.baseDtype) : base * FLOAT32_BYTES,
    reference: reference * FLOAT32_BYTES,
    value: value * FLOAT32_BYTES,
    // A learned reward model is frozen like the base and held the same way (folder.ts loadScalar): in f16, its
    // matrices at 2 bytes a value and its head f32.
    rewardModel:
      half && rewardModel ? baseWeightBytes(c, 'f16') + head * FLOAT32_BYTES : rewardModel * FLOAT32_BYTES,
    adapters: adapters * FLOAT32_BYTES,
    adam: 2 * trainable * FLOAT32_BYTES,
    gradients: trainable * FLOAT32_BYTES,
    activations: (withGrads[peakPhase] - trainable) * FLOAT32_BYTES,
    packed: sharedTape ? packedWeightFloats(c, opts) * FLOAT32_BYTES : 0,
    heapGrowth: 0,
  };
  if (sharedTape) parts.heapGrowth = wasmHeapGrowth(sum(parts));
  return {
    total: sum(parts),
    parts,
    trainableParams: trainable,
    peakPhase,
    ...(half ? { baseDtype: 'f16' } : {}),
  };
}

const sum = (parts: MemoryParts): number => Object.values(parts).reduce((a, b) => a + b, 0);

function estimateOf(
  parts: Partial<MemoryParts>,
  trainableParams: number,
  peakPhase: MemoryPhase,
): MemoryEstimate {
  const full: MemoryParts = {
    base: 0,
    reference: 0,
    value: 0,
    rewardModel: 0,
    adapters: 0,
    adam: 0,
    gradients: 0,
    activations: 0,
    packed: 0,
    heapGrowth: 0,
    ...parts,
  };
  return { total: sum(full), parts: full, trainableParams, peakPhase };
}

/** Generating from one model (CLI `generate`): its weights, the KV cache and the prompt's forward. */
export function estimateGenerateMemory(
  c: Shape,
  gen: { batchSize: number; promptLength: number; maxNewTokens: number },
  o: Pick<RunMemoryOptions, 'inPlaceCache'> = {},
): MemoryEstimate {
  const T = Math.min(c.n_positions, gen.promptLength + gen.maxNewTokens);
  const floats =
    kvCacheFloats(c, gen.batchSize, T, !!o.inPlaceCache) +
    forwardFloats(c, gen.batchSize, Math.min(gen.promptLength, T)) +
    2 * gen.batchSize * c.vocab_size;
  return estimateOf(
    { base: paramCount(c) * FLOAT32_BYTES, activations: floats * FLOAT32_BYTES },
    0,
    'generate',
  );
}

/**
 * Training one model on sequences (SFT's next-token loss over every position, or a reward model's
 * Bradley–Terry loss over 2 · pairs sequences): its weights, Adam, gradients, and one forward kept for the
 * backward (with the logits B·T·V for an LM).
 */
export function estimateSequenceTrainingMemory(
  c: Shape,
  o: { sequences: number; seqLen: number; head: 'lm' | 'scalar' },
): MemoryEstimate {
  const P = o.head === 'lm' ? paramCount(c) : scalarParamCount(c);
  const T = Math.min(c.n_positions, o.seqLen);
  // An LM: the logits of every position, and wte's copies and partial gradients (it trains). A scalar model
  // uses wte in the gather only: one copy kept, and the gather's gradient is wte's gradient itself.
  const logits =
    o.head === 'lm'
      ? LOGITS_LM_LOSS * o.sequences * T * c.vocab_size + wteFloats(c, true)
      : c.vocab_size * c.n_embd;
  const floats = UPDATE_FORWARDS * forwardFloats(c, o.sequences, T) + logits;
  // A scalar model's untied lm_head (held, unused) takes no gradient and no Adam moments.
  const trained = o.head === 'lm' ? P : P - untiedHead(c);
  return estimateOf(
    {
      base: o.head === 'lm' ? P * FLOAT32_BYTES : 0,
      value: o.head === 'scalar' ? P * FLOAT32_BYTES : 0,
      adam: 2 * trained * FLOAT32_BYTES,
      gradients: trained * FLOAT32_BYTES,
      activations: floats * FLOAT32_BYTES,
    },
    trained,
    'update',
  );
}

/** Weights and optimiser state: everything but the activations (what no batch size can shrink). */
export function fixedBytes(e: MemoryEstimate): number {
  // The packed weights are fixed too: they are copies of the weights (no batch size shrinks them).
  return e.total - e.parts.activations;
}

const PART_LABELS: Record<keyof MemoryParts, string> = {
  base: 'policy',
  reference: 'reference',
  value: 'value',
  rewardModel: 'reward model',
  adapters: 'LoRA adapters',
  adam: 'Adam',
  gradients: 'gradients',
  activations: 'activations',
  packed: 'packed weights',
  heapGrowth: 'heap growth',
};

/** Decimal gigabytes, as the messages print them. */
export function formatGB(bytes: number, digits = 1): string {
  return `${(bytes / 1e9).toFixed(digits)} GB`;
}

/**
 * "policy 0.50, reference 0.50, value 0.50, Adam 2.00, gradients 1.00 GB" (parts that are zero left out); with LoRA
 * "base 0.50, LoRA adapters 0.01, …", or "base in f16 0.25, …" when the estimate holds the base in f16.
 */
export function formatParts(e: MemoryEstimate): string {
  const shown = (Object.keys(PART_LABELS) as (keyof MemoryParts)[])
    .filter((k) => e.parts[k] > 0)
    .map((k) => {
      // With LoRA the base is shared by the policy, the reference and a shared value model (and may be held in f16).
      const label =
        k === 'base' && e.parts.adapters > 0
          ? e.baseDtype === 'f16'
            ? 'base in f16'
            : 'base'
          : PART_LABELS[k];
      return `${label} ${(e.parts[k] / 1e9).toFixed(2)}`;
    });
  return `${shown.join(', ')} GB`;
}

/** "≈ 4.6 GB: policy 0.50, reference 0.50, value 0.50, Adam 2.00, gradients 1.00, activations 0.06 GB". */
export function formatEstimate(e: MemoryEstimate): string {
  return `≈ ${formatGB(e.total)}: ${formatParts(e)}`;
}

// ---------------------------------------------------------------------------------------------------------
// Budgets and refusals

/**
 * The most tfjs-backend-wasm 4.22's emscripten runtime grows its heap past a request (emscripten_resize_heap: to
 * the smaller of 1.2 × the heap and the request + 100663296 bytes, capped at the maximum).
 */
export const WASM_HEAP_GROWTH_BYTES = 100663296;

/**
 * The heap length beyond the allocator's high-water mark that a heap of `bytes` may show: emscripten's growth step
 * (WASM_HEAP_GROWTH_BYTES, or 20% of a smaller heap). Added to the run's heap estimate (MemoryParts.heapGrowth).
 */
export function wasmHeapGrowth(bytes: number): number {
  return Math.min(0.2 * bytes, WASM_HEAP_GROWTH_BYTES);
}

/** tfjs-backend-wasm 4.22's emscripten heap maximum (getHeapMax(): 4 GiB less one 64 KiB page). */
export const WASM_HEAP_BYTES = 4294901760;
/**
 * Share of the WASM heap a load may take (the weights and their copy on the way in; the rest: allocator slack,
 * transients).
 */
export const WASM_HEAP_SHARE = 0.75;
/**
 * Share of the WASM heap's maximum a run's heap estimate (RunMemoryOptions.heap 'wasm') may take. That estimate
 * counts what the heap reaches, not tensor bytes. On six LoRA GRPO steps (Qwen2.5-0.5B's shape at 2, 6 and 24
 * layers, SmolLM2-135M's at 4, 12 and 30; batch 4 × 16 tokens) it read 0.1–22% above the heap's measured
 * length, never below (docs/engine.md "The WASM heap estimate"; tests/qwen-0.5b.slow.test.ts checks the largest).
 * The 5% left is for the rollout, the allocator and what those shapes did not show.
 */
export const WASM_HEAP_RUN_SHARE = 0.95;

/** Share of the machine's (or the browser's reported) memory a run's estimate may take. */
export const DEVICE_MEMORY_SHARE = 0.6;

/** PPO as the engine builds it today: a separate value model, no LoRA; the reward model when it is a learned one. */
export const PPO_DEFAULTS: RunMemoryOptions = { valueModel: 'separate', rewardModel: false };

/**
 * The weights and optimiser state of training `config` (no activations: the run's sizes are not known here),
 * refused with a UserError over `budgetBytes`. The app checks this before loading, from config.json alone.
 */
export function checkTrainingMemory(
  config: Shape,
  label: string,
  budgetBytes: number,
  opts: RunMemoryOptions = PPO_DEFAULTS,
): { params: number; bytes: number } {
  const params = paramCount(config);
  const e = estimateRunMemory(
    config,
    { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 },
    opts,
  );
  const bytes = fixedBytes(e);
  if (bytes > budgetBytes) {
    throw new UserError(
      `${label} has ${(params / 1e6).toFixed(1)} M parameters; training it needs ≈ ${formatGB(bytes)} of weights, ` +
        `gradients and optimiser state (${formatParts(e)}), over the ${formatGB(budgetBytes)} budget here. Choose a smaller model ` +
        '(e.g. distilbert/distilgpt2 or tiny).',
    );
  }
  return { params, bytes };
}

/**
 * What a run of `cfg` builds, as the estimate counts it (the rules of src/core/ppo/setup.ts buildTrainer): LoRA's
 * rank and targets, the value model ('none' for critic-free algorithms; 'shared' only with LoRA), the reward
 * model. The CLI's preflight and the worker's check both use it.
 */
export function runMemoryOptions(
  cfg: Pick<TrainConfig, 'lora' | 'loraTargets' | 'valueModel' | 'algorithm'> &
    Partial<Pick<TrainConfig, 'baseDtype'>>,
  rewardModel: boolean,
): RunMemoryOptions {
  const lora = cfg.lora > 0 ? { r: cfg.lora, targets: cfg.loraTargets } : undefined;
  const valueModel = !hasValueModel(cfg)
    ? 'none'
    : lora && cfg.valueModel === 'shared'
      ? 'shared'
      : 'separate';
  // The f16 base applies under LoRA only (validate.ts refuses it without).
  return { lora, valueModel, rewardModel, ...(lora && cfg.baseDtype === 'f16' ? { baseDtype: 'f16' } : {}) };
}

/**
 * Activation bytes the automatic micro-batch (microBatchSize 0) lets its samples add to each phase: a modest
 * share of any device, so that a run stays well inside memory (a 4 GB laptop GPU, WASM's heap), while small
 * models still run a whole minibatch at once and GPT-2 runs micro-batches of 4 (faster per sample than 1: a
 * matmul over more rows). What a phase holds whatever the micro-batch (the weights, their copies on the tape)
 * is not counted against it: no micro-batch could lower it.
 */
export const AUTO_MICRO_BATCH_BYTES = 256e6;

/** How a step runs: the micro-batch, and whether the update recomputes the blocks' activations. */
export interface StepPlan {
  microBatchSize: number;
  recompute: boolean;
  /**
   * Samples per generation slice. A set microBatchSize: that. The automatic one: the largest slice whose
   * generation (KV cache, prompt forward, logits) adds at most AUTO_MICRO_BATCH_BYTES, at least the micro-batch —
   * generation holds far less per sample than the update, and decoding is bound by latency per token, so slicing
   * it costs time in proportion (measured: GPT-2 at batch 16 in slices of 4 on an H100, docs/gpu.md).
   */
  generateMicroBatchSize: number;
}

/**
 * The device a plan is made for. Absent (WASM, CPU, WebGL): the budget plan below, made for a heap that every
 * tensor shares (AUTO_MICRO_BATCH_BYTES per phase). 'webgpu': a GPU's memory, which the plan does not guess at:
 * the whole minibatch (the whole batch for generation) without recompute, as large as the device's buffer limits
 * allow, and smaller micro-batches only after the device reports running out of memory (src/core/ppo/gpu-plan.ts).
 */
export interface PlanDevice {
  backend: 'webgpu';
  /**
   * The most bytes one tensor may take: the smaller of the device's maxStorageBufferBindingSize and maxBufferSize
   * (tfjs keeps each tensor in one buffer and binds it whole). Absent: no limit known.
   */
  maxBufferBytes?: number;
}

/** `total` rows in slices of at most `k`, evened out: the size of each of the ceil(total / k) slices (≤ k). */
export function evenSlice(total: number, k: number): number {
  return Math.ceil(total / Math.ceil(total / Math.max(1, k)));
}

/**
 * Floats of the largest single tensor a phase holds at `rows` samples (what must fit one GPU buffer):
 * - generating (`'generate'`): one row of logits per sample [rows, V]; one layer's keys (or values) over every
 *   position [rows, S, n_kv·head_dim] and, with grouped-query attention, their heads repeated [rows, S, nh·head_dim];
 *   the prompt's forward: the MLP's hidden [rows·Tp, 4C or intermediate_size] and the attention scores
 *   [rows, nh, Tp, Tp];
 * - scoring and updating (`'step'`): the response logits [rows·R, V] (scoring never takes them in vocabulary
 *   chunks), the MLP's hidden [rows·T, 4C or intermediate_size] and the attention scores [rows, nh, T, T].
 * T = prompt + response tokens. The weights are another matter (checked when a model is loaded:
 * src/worker/device-limits.ts checkDeviceLimits).
 */
export function largestStepTensor(
  c: Shape,
  run: Pick<RunShape, 'promptLength' | 'responseLength'>,
  rows: number,
  phase: 'generate' | 'step',
): number {
  const l = llamaOf(c);
  const mlp = l ? l.intermediate_size : 4 * c.n_embd;
  const kv = l ? l.num_key_value_heads * l.head_dim : c.n_embd;
  const q = l ? l.num_attention_heads * l.head_dim : c.n_embd;
  const nh = c.n_head;
  const Tp = run.promptLength;
  const R = run.responseLength;
  const T = Tp + R;
  if (phase === 'generate') {
    return Math.max(rows * c.vocab_size, rows * T * Math.max(kv, q), rows * Tp * mlp, rows * nh * Tp * Tp);
  }
  return Math.max(rows * R * c.vocab_size, rows * T * mlp, rows * nh * T * T);
}

/**
 * The plan on WebGPU (PlanDevice): a set microBatchSize as it is (generation in the largest slice whose estimate
 * stays within the micro-batch's scoring or update); else the whole
 * minibatch, or the largest evened-out slice of it whose biggest tensor fits one buffer, and generation over the
 * whole batch (or its largest such slice, never below the micro-batch). recompute only when set to "blocks":
 * "auto" starts without it (src/core/ppo/gpu-plan.ts turns it on when the device runs out of memory at one sample).
 */
function deviceStepPlan(
  c: Shape,
  cfg: Pick<TrainConfig, 'microBatchSize' | 'recompute' | 'batchSize' | 'miniBatches' | 'responseLength'>,
  promptLength: number,
  device: PlanDevice,
  models: { scorers: number; wteTrains?: boolean; lora?: LoraShape | null },
  shapeExtra: VocabChunking,
): StepPlan {
  const recompute = cfg.recompute === 'blocks';
  const run = { promptLength, responseLength: cfg.responseLength };
  const limit = device.maxBufferBytes;
  const fitsOneBuffer = (rows: number, phase: 'generate' | 'step') =>
    limit === undefined || !(limit > 0) || largestStepTensor(c, run, rows, phase) * FLOAT32_BYTES <= limit;
  const B = cfg.batchSize;
  if (cfg.microBatchSize > 0) {
    const m = Math.min(cfg.microBatchSize, B);
    // Generation over the largest evened-out slice whose working floats stay within what scoring or the update
    // holds at the micro-batch: a set micro-batch bounds the step's memory, and generation (a KV cache and a
    // prompt's forward, no tape) rarely sets that bound, so slicing it as finely only made it slower (Qwen2.5-1.5B
    // at micro-batches of 4 on an H200: 4.85 of 8.87 s per step generating in slices of 4, docs/gpu.md).
    const at = (g: number) =>
      phaseFloats(
        c,
        { ...cfg, promptLength, microBatchSize: m, generateMicroBatchSize: g, recompute, ...shapeExtra },
        models,
      );
    const atM = at(m);
    const bound = Math.max(atM.score, atM.update);
    let g = m;
    for (let k = B; k > m; k--) {
      const slice = evenSlice(B, k);
      if (slice > m && at(slice).generate <= bound && fitsOneBuffer(slice, 'generate')) {
        g = slice;
        break;
      }
    }
    return { microBatchSize: m, recompute, generateMicroBatchSize: g };
  }
  const mb = Math.max(1, Math.ceil(B / Math.max(1, cfg.miniBatches)));
  let m = 1;
  for (let k = mb; k >= 1; k--) {
    if (fitsOneBuffer(k, 'step')) {
      m = evenSlice(mb, k);
      break;
    }
  }
  let g = m;
  for (let k = B; k > m; k--) {
    if (fitsOneBuffer(k, 'generate')) {
      g = Math.max(m, evenSlice(B, k));
      break;
    }
  }
  return { microBatchSize: m, recompute, generateMicroBatchSize: g };
}

/**
 * The plan of a step with `cfg`. The micro-batch: `microBatchSize` when set (at most the batch), else (0 = auto)
 * the largest whose samples add at most AUTO_MICRO_BATCH_BYTES to every phase, from the whole minibatch down to
 * 1, then evened out over as many micro-batches as that takes. recompute: 'blocks' on, 'off' off; 'auto' with a
 * set micro-batch: on when that micro-batch would add more than the budget without it; with the automatic one:
 * off when the largest micro-batch that fits without it is at least half the one that fits with it (a GPT-2-sized
 * model's update keeps every block's activations, so there it is on). All of this is the budget plan, for WASM's
 * heap (and CPU, WebGL); with `extra.device` on WebGPU the plan is the device's (deviceStepPlan above).
 */
export function resolveStepPlan(
  c: Shape,
  cfg: Pick<TrainConfig, 'microBatchSize' | 'recompute' | 'batchSize' | 'miniBatches' | 'responseLength'>,
  promptLength: number,
  models: { scorers: number; wteTrains?: boolean; lora?: LoraShape | null },
  extra: VocabChunking & { device?: PlanDevice } = {},
): StepPlan {
  const { device, ...shapeExtra } = extra;
  if (device?.backend === 'webgpu') return deviceStepPlan(c, cfg, promptLength, device, models, shapeExtra);
  const phases = (m: number, recompute: boolean) =>
    phaseFloats(c, { ...cfg, promptLength, microBatchSize: m, recompute, ...shapeExtra }, models);
  // What m samples add to each phase: the phase at m less its part that no micro-batch changes (the weights'
  // copies on autodiff's tape, …), found by extrapolating the phase at 1 and 2 samples back to 0.
  const fits = (m: number, recompute: boolean) => {
    const [p1, p2, pm] = [phases(1, recompute), phases(2, recompute), phases(m, recompute)];
    const grows = (k: MemoryPhase) => pm[k] - (2 * p1[k] - p2[k]);
    return (
      Math.max(grows('generate'), grows('score'), grows('update')) * FLOAT32_BYTES <= AUTO_MICRO_BATCH_BYTES
    );
  };
  if (cfg.microBatchSize > 0) {
    const m = Math.min(cfg.microBatchSize, cfg.batchSize);
    // 'auto': on when this micro-batch would not fit without it.
    const recompute = cfg.recompute === 'blocks' || (cfg.recompute === 'auto' && !fits(m, false));
    return { microBatchSize: m, recompute, generateMicroBatchSize: m };
  }
  /** Generation's slice: the largest that fits the budget alone, never below the micro-batch m, evened out. */
  const generateSlice = (m: number): number => {
    const B = cfg.batchSize;
    const [g1, g2] = [phases(1, false).generate, phases(2, false).generate];
    for (let n = B; n > m; n--) {
      const grows = phases(n, false).generate - (2 * g1 - g2);
      if (grows * FLOAT32_BYTES <= AUTO_MICRO_BATCH_BYTES)
        return Math.max(m, Math.ceil(B / Math.ceil(B / n)));
    }
    return m;
  };
  const plan = (microBatchSize: number, recompute: boolean): StepPlan => ({
    microBatchSize,
    recompute,
    generateMicroBatchSize: generateSlice(microBatchSize),
  });
  const mb = Math.max(1, Math.ceil(cfg.batchSize / Math.max(1, cfg.miniBatches)));
  /** The largest fitting micro-batch (0: not even one sample), evened out (8 as 4 + 4, not 6 + 2). */
  const largest = (recompute: boolean): number => {
    for (let m = mb; m >= 1; m--) if (fits(m, recompute)) return Math.ceil(mb / Math.ceil(mb / m));
    return 0;
  };
  if (cfg.recompute !== 'auto') {
    const recompute = cfg.recompute === 'blocks';
    return plan(Math.max(1, largest(recompute)), recompute);
  }
  // 'auto': without recompute when that fits a micro-batch at least half as large as recompute would allow (one
  // more forward per block costs less than halving the rows of every matmul), else with it.
  const plain = largest(false);
  const withRecompute = largest(true);
  if (plain >= 1 && 2 * plain > withRecompute) return plan(plain, false);
  return plan(Math.max(1, withRecompute), true);
}

/**
 * The smallest shape the WebGPU plan falls back to when the device runs out of memory (src/core/ppo/gpu-plan.ts
 * fallbackPlan): with the automatic micro-batch, one sample per micro-batch and per generation slice, with
 * recompute unless it is set "off"; with a set one, recompute "auto" turned on. A run on WebGPU is refused before
 * it starts only when even this would not fit (the CLI's preflight, the worker's check).
 */
export function deviceFallbackFloor(
  shape: RunShape,
  cfg: Pick<TrainConfig, 'microBatchSize' | 'recompute'>,
): RunShape {
  // The first shortage drops the update's recordings at the same plan (ppo/trainer.ts): the floor records nothing.
  if (cfg.microBatchSize === 0) {
    return {
      ...shape,
      microBatchSize: 1,
      generateMicroBatchSize: 1,
      recompute: cfg.recompute !== 'off',
      updateRecorded: false,
    };
  }
  return { ...shape, ...(cfg.recompute === 'auto' ? { recompute: true } : {}), updateRecorded: false };
}

/** The models that run a forward while scoring (policy, reference, a value trunk of its own, a reward model). */
export function scorersOf(opts: RunMemoryOptions): number {
  return 2 + (opts.valueModel === 'separate' ? 1 : 0) + (opts.rewardModel ? 1 : 0);
}

/**
 * The shape of a run of `cfg` as the trainer runs it: its micro-batch and recompute (resolveStepPlan) and the
 * update's vocabulary chunk (`vocab`: entries, 0 for whole logits, or ppo/trainer.ts vocabChunking's rule, which
 * on WebGPU chunks only a micro-batch whose logits are large). The one shape the CLI's preflight, the worker's check
 * and the trainer's plan share, so the estimate counts what the step will do. `device`: the WebGPU device the run is
 * on (resolveStepPlan's device plan); absent: the budget plan.
 */
export function runShapeOf(
  c: Shape,
  cfg: Pick<
    TrainConfig,
    'microBatchSize' | 'recompute' | 'batchSize' | 'miniBatches' | 'responseLength' | 'lora' | 'loraTargets'
  > &
    Partial<Pick<TrainConfig, 'updateReplay'>>,
  promptLength: number,
  opts: RunMemoryOptions,
  vocab: number | VocabChunking,
  device?: PlanDevice,
): RunShape {
  const lora = opts.lora && opts.lora.r > 0 ? opts.lora : null;
  const chunking: VocabChunking = typeof vocab === 'number' ? { vocabChunk: vocab } : vocab;
  const plan = resolveStepPlan(
    c,
    cfg,
    promptLength,
    { scorers: scorersOf(opts), wteTrains: !lora, lora },
    { ...chunking, ...(device ? { device } : {}) },
  );
  return {
    batchSize: cfg.batchSize,
    miniBatches: cfg.miniBatches,
    promptLength,
    responseLength: cfg.responseLength,
    microBatchSize: plan.microBatchSize,
    generateMicroBatchSize: plan.generateMicroBatchSize,
    recompute: plan.recompute,
    ...chunking,
    // `updateReplay` false: no recording holds the update's buffers (RunShape.updateRecorded).
    ...(cfg.updateReplay === false ? { updateRecorded: false } : {}),
  };
}

/**
 * What would make an over-budget run fit without touching its batch: the largest micro-batch (with recompute as
 * planned, then with recompute on) whose estimate fits `budget`, or null when even one sample does not.
 */
export function fittingMicroBatch(
  c: Shape,
  shape: RunShape,
  opts: RunMemoryOptions,
  budget: number,
): { microBatchSize: number; recompute: boolean } | null {
  const mb = Math.max(1, Math.ceil(shape.batchSize / Math.max(1, shape.miniBatches)));
  const start = Math.min(mb, shape.microBatchSize ?? mb);
  for (const recompute of shape.recompute ? [true] : [false, true]) {
    for (let m = start; m >= 1; m--) {
      if (m === start && recompute === !!shape.recompute) continue; // that is the setting refused
      // A set microBatchSize generates in slices of it too (resolveStepPlan).
      const tried = { ...shape, microBatchSize: m, generateMicroBatchSize: m, recompute };
      if (estimateRunMemory(c, tried, opts).total <= budget) {
        return { microBatchSize: m, recompute };
      }
    }
  }
  return null;
}

/**
 * "Setting microBatchSize 2 would fit it" / "Setting microBatchSize 4 and recompute "blocks" would fit it", for a
 * refusal: a sentence of its own (the config key keeps its spelling; it never starts a sentence).
 */
export function microBatchRemedy(
  fit: { microBatchSize: number; recompute: boolean },
  shape: RunShape,
): string {
  const rc = fit.recompute && !shape.recompute ? ' and recompute "blocks"' : '';
  return `Setting microBatchSize ${fit.microBatchSize}${rc} would fit it (memory then grows with the micro-batch, not the batch; the results are the same)`;
}
