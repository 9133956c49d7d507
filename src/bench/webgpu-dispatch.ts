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
