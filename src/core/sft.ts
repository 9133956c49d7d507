/**
 * Supervised next-token training on a text corpus (`cli sft`): how the built-in tiny model is pretrained.
 * Each line of the corpus is a document followed by EOS; batches are windows of seqLen + 1 tokens that start
 * at a random line start, so the model sees sentence beginnings at position 0 as prompts will be.
 */
import * as tf from '@tensorflow/tfjs-core';
import { FusedAdamOptimizer } from './fused-adam';
import type { CausalLM } from './model/causal-lm';
import type { Tokenizer } from './tokenizer/types';
import { logprobsFromLogits } from './ppo/losses';
import { clippedStep } from './optim';
import { Rng } from './rng';
import { UserError } from './errors';

export interface SftOptions {
  steps: number;
  batchSize: number;
  seqLen: number;
  learningRate: number;
  /** Linear warm-up steps, then cosine decay to 10%. */
  warmup: number;
  maxGradNorm: number;
  seed: number;
}

export interface TokenStream {
  tokens: Int32Array;
  lineStarts: number[];
}

export function tokenizeCorpus(text: string, tok: Tokenizer): TokenStream {
  const lines = text.split('\n').filter((l) => l.trim().length > 0);
  if (lines.length === 0) throw new UserError('sft: the corpus has no non-empty lines.');
  const out: number[] = [];
  const lineStarts: number[] = [];
  for (const line of lines) {
    lineStarts.push(out.length);
    for (const t of tok.encode(line)) out.push(t);
    out.push(tok.eosId);
  }
  return { tokens: Int32Array.from(out), lineStarts };
}

export function lrAt(step: number, o: SftOptions): number {
  if (step < o.warmup) return (o.learningRate * (step + 1)) / o.warmup;
  const p = (step - o.warmup) / Math.max(1, o.steps - o.warmup);
  return o.learningRate * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * Math.min(1, p))));
}

/** Mean next-token cross-entropy of `model` on ids [B, T+1] (inputs ids[:, :T], targets ids[:, 1:]). */
export function lmLoss(model: CausalLM, windows: tf.Tensor2D): tf.Scalar {
  const [B, T1] = windows.shape;
  const T = T1 - 1;
  const inputs = tf.slice(windows, [0, 0], [B, T]);
  const targets = tf.reshape(tf.slice(windows, [0, 1], [B, T]), [B * T]) as tf.Tensor1D;
  const logits = model.lmHead(model.trunk(inputs as tf.Tensor2D, tf.onesLike(inputs) as tf.Tensor2D));
  return tf.neg(tf.mean(logprobsFromLogits(logits, targets))) as tf.Scalar;
}

export async function trainSft(
  model: CausalLM,
  stream: TokenStream,
  o: SftOptions,
  onLog: (step: number, loss: number, lr: number, tokensPerSecond: number) => void,
  logEvery = 25,
): Promise<number> {
  const starts = stream.lineStarts.filter((s) => s + o.seqLen + 1 <= stream.tokens.length);
  if (starts.length === 0)
    throw new UserError(`sft: the corpus is shorter than seqLen + 1 (${o.seqLen + 1}) tokens.`);
  const rng = new Rng(o.seed);
  const opt = new FusedAdamOptimizer(o.learningRate, 0.9, 0.95, 1e-8);
  const vars = model.trainableVariables();
  let last = NaN;
  let t0 = performance.now();
  let pending: tf.Tensor[] = [];
  for (let step = 0; step < o.steps; step++) {
    const lr = lrAt(step, o);
    (opt as unknown as { learningRate: number }).learningRate = lr;
    const buf = new Int32Array(o.batchSize * (o.seqLen + 1));
    for (let b = 0; b < o.batchSize; b++) {
      const s = starts[rng.int(starts.length)];
      buf.set(stream.tokens.subarray(s, s + o.seqLen + 1), b * (o.seqLen + 1));
    }
    const windows = tf.tensor2d(buf, [o.batchSize, o.seqLen + 1], 'int32');
    const r = clippedStep(opt, vars, () => [lmLoss(model, windows)], o.maxGradNorm);
    windows.dispose();
    r.gradNorm.dispose();
    pending.push(r.scalars);
    if ((step + 1) % logEvery === 0 || step === o.steps - 1) {
      const vals = await Promise.all(pending.map((p) => p.data()));
      tf.dispose(pending);
      pending = [];
      last = vals.reduce((s, v) => s + v[0], 0) / vals.length;
      const secs = (performance.now() - t0) / 1000;
      onLog(step + 1, last, lr, (vals.length * o.batchSize * o.seqLen) / secs);
      t0 = performance.now();
    }
  }
  tf.dispose(pending);
  opt.dispose();
  return last;
}
