/**
 * Counting what a GPU pays per op on WebGPU: compute dispatches (`GPUComputePassEncoder.dispatchWorkgroups`,
 * one per tfjs kernel that runs a program) and readbacks (`GPUBuffer.mapAsync`, one per tensor read to the
 * host). tfjs encodes a dispatch when the kernel runs, so counting the calls made while a function runs counts
 * that function's kernels. Works wherever the WebGPU classes are globals (a browser, or Node after
 * src/cli/backend-webgpu-node.ts). See docs/tfjs.md (trap 5: dispatch-bound).
 */
import * as tf from '@tensorflow/tfjs-core';
import { parseGPT2Config } from '../core/model/config';
import { GPT2 } from '../core/model/gpt2';
import { LoraAdapters } from '../core/model/lora';
import { Llama } from '../core/model/llama';
import { parseLlamaConfig } from '../core/model/llama-config';
import type { CausalLM } from '../core/model/lm';
import type { LayerKV } from '../core/kernels/definitions';

export { countDispatches, type DispatchCount } from '../core/kernels/webgpu-count';
import { countDispatches } from '../core/kernels/webgpu-count';

export interface LayerDispatches {
  /** Dispatches per transformer layer: (count at n_layer 8 − count at 2) / 6. */
  webgpuDispatchesPerLayerFwd: number;
  webgpuDispatchesPerLayerFwdBwd: number;
  /** What is left at n_layer 0 by the same line: embeddings, final norm, LM head (and the loss, backward). */
  fixedFwd: number;
  fixedFwdBwd: number;
}

/**
 * Dispatches of the project's GPT-2 forward (logits) and forward + backward (gradient of the mean log-prob of
 * the batch's tokens w.r.t. every weight), at n_layer 2 and 8 (width 64, batch 2 × 16 tokens, bytes vocabulary);
 * the difference / 6 is the per-layer cost. Needs the webgpu backend current.
 */
export async function gpt2LayerDispatches(
  opts: { width?: number; batch?: number; tokens?: number } = {},
): Promise<LayerDispatches> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`gpt2LayerDispatches needs the webgpu backend, not ${tf.getBackend()}.`);
  const width = opts.width ?? 64;
  const B = opts.batch ?? 2;
  const T = opts.tokens ?? 16;
  const at = async (nLayer: number): Promise<{ fwd: number; fwdBwd: number }> => {
    const config = parseGPT2Config({
      vocab_size: 258,
      n_positions: 64,
      n_embd: width,
      n_layer: nLayer,
      n_head: 2,
      tokenizer: 'bytes',
      bos_token_id: 256,
      eos_token_id: 256,
      pad_token_id: 257,
    });
    const m = GPT2.random(config, 3);
    const ids = tf.tensor2d(
      Array.from({ length: B * T }, (_, i) => (i * 7) % 256),
      [B, T],
      'int32',
    );
    const mask = tf.ones([B, T]) as tf.Tensor2D;
    const fwd = () => tf.tidy(() => m.logits(ids as tf.Tensor2D, mask));
    const loss = () =>
      tf.tidy(() => {
        const logits = m.logits(ids as tf.Tensor2D, mask);
        const lp = tf.logSoftmax(logits);
        const oneHot = tf.oneHot(ids as tf.Tensor2D, config.vocab_size);
        return tf.neg(tf.mean(tf.sum(tf.mul(lp, oneHot), -1))) as tf.Scalar;
      });
    const fwdBwd = () => {
      const { value, grads } = tf.variableGrads(loss, m.trainableVariables());
      tf.dispose(value);
      tf.dispose(grads);
    };
    // Warm up once: shader compilation and buffer pools are not what is counted.
    const w = fwd();
    await w.data();
    w.dispose();
    fwdBwd();
    const f = await countDispatches(fwd);
    f.result.dispose();
    const fb = await countDispatches(fwdBwd);
    m.dispose();
    tf.dispose([ids, mask]);
    return { fwd: f.dispatches, fwdBwd: fb.dispatches };
  };
  const a = await at(2);
  const b = await at(8);
  const perFwd = (b.fwd - a.fwd) / 6;
  const perFwdBwd = (b.fwdBwd - a.fwdBwd) / 6;
  return {
    webgpuDispatchesPerLayerFwd: perFwd,
    webgpuDispatchesPerLayerFwdBwd: perFwdBwd,
    fixedFwd: a.fwd - 2 * perFwd,
    fixedFwdBwd: a.fwdBwd - 2 * perFwdBwd,
  };
}

/** Dispatches of one KV-cache decode step per layer, and what is left at n_layer 0 (embeddings, final norm). */
export interface DecodeDispatches {
  /** (count at n_layer 8 − count at n_layer 2) / 6, one decode step (one token for every row). */
  perLayer: number;
  fixed: number;
}

/** The dispatches of `step(model)` (warmed once first), for a model built at n_layer 2 and 8. */
async function decodePerLayer<M extends CausalLM>(
  build: (nLayer: number) => M,
  step: (m: M) => tf.TensorContainer,
): Promise<DecodeDispatches> {
  const at = async (nLayer: number): Promise<number> => {
    const m = build(nLayer);
    try {
      // Warm up once: shader compilation and buffer pools are not what is counted.
      tf.dispose(step(m));
      const c = await countDispatches(() => tf.dispose(step(m)));
      return c.dispatches;
    } finally {
      m.dispose();
    }
  };
  const a = await at(2);
  const b = await at(8);
  const perLayer = (b - a) / 6;
  return { perLayer, fixed: a - 2 * perLayer };
}

/**
 * One decode step's inputs as model/sampling.ts's generate makes them, for B rows over S cache slots with the
 * cache's heads × head size per layer: the cache zero from the slot on, the slot one-hot, the key mask (row 1 left
 * padded by one) and the step's ids and positions; everything uploaded once (tfjs's webgpu backend runs small ops
 * on the CPU while their inputs are host data, which a real step's are not).
 */
function decodeInputs(nLayer: number, B: number, S: number, heads: number, hs: number) {
  const slot = S - 1;
  return tf.tidy(() => {
    const below = tf.reshape(tf.cast(tf.less(tf.range(0, S, 1, 'int32'), slot), 'float32'), [1, 1, S, 1]);
    const cache: LayerKV[] = Array.from({ length: nLayer }, (_, i) => ({
      k: tf.keep(
        tf.mul(tf.randomNormal([B, heads, S, hs], 0, 1, 'float32', 2 * i + 1), below) as tf.Tensor4D,
      ),
      v: tf.keep(
        tf.mul(tf.randomNormal([B, heads, S, hs], 0, 1, 'float32', 2 * i + 2), below) as tf.Tensor4D,
      ),
    }));
    const oh = tf.keep(tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([slot], 'int32'), S), [S]), 'float32'));
    const keyMask = tf.keep(
      tf.tensor2d(
        Array.from({ length: B * S }, (_, i) => (i % S === 0 && Math.floor(i / S) === 1 ? 0 : 1)),
        [B, S],
        'float32',
      ),
    ) as tf.Tensor2D;
    const ids = tf.keep(
      tf.add(
        tf.tensor1d(
          Array.from({ length: B }, (_, b) => 3 + b),
          'int32',
        ),
        tf.scalar(0, 'int32'),
      ),
    );
    const pos = tf.keep(
      tf.add(
        tf.tensor1d(
          Array.from({ length: B }, (_, b) => slot - (b === 1 ? 1 : 0)),
          'int32',
        ),
        tf.scalar(0, 'int32'),
      ),
    );
    return { cache, oh, keyMask, ids: ids as tf.Tensor1D, pos: pos as tf.Tensor1D };
  });
}

type DecodeInputs = ReturnType<typeof decodeInputs>;

function disposeDecodeInputs(x: DecodeInputs): void {
  tf.dispose([x.oh, x.keyMask, x.ids, x.pos, ...x.cache.flatMap((c) => [c.k, c.v])]);
}

/** One decode step of `m` on these inputs: its hidden state and new cache (to dispose). */
function decodeOnce(m: CausalLM, x: DecodeInputs): tf.Tensor[] {
  return tf.tidy(() => {
    const out = m.decodeStep(x.ids, x.pos, x.oh, x.keyMask, x.cache);
    return [out.hidden, ...out.cache.flatMap((c) => [c.k, c.v])];
  });
}

/**
 * Dispatches per layer of the project's GPT-2 KV-cache decode step (model/gpt2.ts decodeStep, as generate drives
 * it; width 64, 2 heads, batch 2, 16 cache slots, bytes vocabulary): (n_layer 8 − n_layer 2) / 6. With the fused
 * kernels on unless the caller switched them off; with `lora`, a LoRA view of that rank on all four Conv1Ds (PPO's
 * policy under LoRA). Needs the webgpu backend current.
 */
export async function gpt2DecodeDispatches(
  opts: { width?: number; heads?: number; batch?: number; slots?: number; lora?: number } = {},
): Promise<DecodeDispatches> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`gpt2DecodeDispatches needs the webgpu backend, not ${tf.getBackend()}.`);
  const width = opts.width ?? 64;
  const nh = opts.heads ?? 2;
  const B = opts.batch ?? 2;
  const S = opts.slots ?? 16;
  let inputs: DecodeInputs | null = null;
  try {
    return await decodePerLayer(
      (nLayer) => {
        if (inputs) disposeDecodeInputs(inputs);
        inputs = decodeInputs(nLayer, B, S, nh, width / nh);
        const config = parseGPT2Config({
          vocab_size: 258,
          n_positions: 64,
          n_embd: width,
          n_layer: nLayer,
          n_head: nh,
          tokenizer: 'bytes',
          bos_token_id: 256,
          eos_token_id: 256,
          pad_token_id: 257,
        });
        const base = GPT2.random(config, 3);
        if (!opts.lora) return base;
        // A LoRA view on all four Conv1Ds (the config default), B non-zero so the low-rank term is not 0.
        const adapters = LoraAdapters.create(config, { lora: opts.lora }, 5);
        for (const m of adapters.modules.values())
          m.b.assign(tf.tidy(() => tf.randomNormal(m.b.shape, 0, 0.02, 'float32', 9)));
        const view = base.withLora(adapters);
        return Object.assign(view, {
          dispose: () => {
            adapters.dispose();
            base.dispose();
          },
        });
      },
      (m) => decodeOnce(m, inputs!),
    );
  } finally {
    if (inputs) disposeDecodeInputs(inputs);
  }
}

/**
 * The same for the Llama family's decode step (model/llama.ts decodeStep) on a tiny model (GQA 4 query heads over
 * 2 KV heads, head_dim 16, width 48 — 64 for Qwen2 —, batch 2, 16 cache slots): Qwen3-style by default (q/k norms), or `family`
 * 'qwen2' (q/k/v biases) or 'llama'; with `lora`, a LoRA view of that rank on all seven linears.
 */
export async function llamaDecodeDispatches(
  opts: { batch?: number; slots?: number; lora?: number; family?: 'llama' | 'qwen2' | 'qwen3' } = {},
): Promise<DecodeDispatches> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`llamaDecodeDispatches needs the webgpu backend, not ${tf.getBackend()}.`);
  const B = opts.batch ?? 2;
  const S = opts.slots ?? 16;
  let inputs: DecodeInputs | null = null;
  try {
    return await decodePerLayer(
      (nLayer) => {
        if (inputs) disposeDecodeInputs(inputs);
        inputs = decodeInputs(nLayer, B, S, 2, 16);
        const config = parseLlamaConfig({
          model_type: opts.family ?? 'qwen3',
          vocab_size: 97,
          // Qwen2 wants head_dim = hidden_size / num_attention_heads.
          hidden_size: opts.family === 'qwen2' ? 64 : 48,
          intermediate_size: 80,
          num_hidden_layers: nLayer,
          num_attention_heads: 4,
          num_key_value_heads: 2,
          head_dim: 16,
          max_position_embeddings: 128,
          rms_norm_eps: 1e-6,
          rope_theta: 10000,
          tie_word_embeddings: true,
          eos_token_id: 1,
        });
        const base = Llama.random(config, 7);
        if (!opts.lora) return base;
        // A LoRA view on all seven linears (GPT-2's four targets, the default, mean all seven here), B non-zero.
        const adapters = LoraAdapters.create(config, { lora: opts.lora }, 5);
        for (const m of adapters.modules.values())
          m.b.assign(tf.tidy(() => tf.randomNormal(m.b.shape, 0, 0.02, 'float32', 9)));
        const view = base.withLora(adapters);
        return Object.assign(view, {
          dispose: () => {
            adapters.dispose();
            base.dispose();
          },
        });
      },
      (m) => decodeOnce(m, inputs!),
    );
  } finally {
    if (inputs) disposeDecodeInputs(inputs);
  }
}
