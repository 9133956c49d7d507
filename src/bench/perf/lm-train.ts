/**
 * Supervised next-token training throughput: our GPT-2 (sft.ts `lmLoss` + optim.ts `clippedStep` with Adam, as
 * `trainSft` runs it) against @genai-fi/nanogpt's own training step on the same layer count, width, heads,
 * context and batch, on whatever backend is current. Random token windows: speed does not depend on the data.
 *
 * nanogpt is a devDependency used only here; the caller loads it (the browser page and the Node CLI reach its
 * files differently) and hands in the two classes we need, so core never imports it.
 */
import * as tf from '@tensorflow/tfjs-core';
import { parseGPT2Config, type GPT2Config } from '../../core/model/config';
import { GPT2 } from '../../core/model/gpt2';
import { lmLoss } from '../../core/sft/sft';
import { clippedStep } from '../../core/optim/optim';
import { FusedAdamOptimizer } from '../../core/optim/fused-adam';
import { lmTrainStepFlops } from './flops';

export interface LmShape {
  n_layer: number;
  n_embd: number;
  n_head: number;
  vocab_size: number;
  /** Context: tokens per training window. */
  T: number;
  B: number;
}

export interface LmTrainBench {
  impl: string;
  backend: string;
  shape: LmShape;
  params: number;
  steps: number;
  seconds: number;
  tokensPerSecond: number;
  /** Our model FLOPs per step (flops.ts) ÷ time: the same yardstick for both implementations. */
  gflopsPerSecond: number;
  firstLoss: number;
  lastLoss: number;
}

/** The two nanogpt classes the benchmark drives (its BasicTrainer.trainStep is the step its own loop runs). */
export interface NanoGptPeer {
  NanoGPTV1: new (config: Record<string, unknown>) => { getNumParams(): number; dispose(): void };
  BasicTrainer: new (
    model: unknown,
    tokenizer: unknown,
    optConfig?: Record<string, unknown>,
  ) => { dispose(): void };
}

function randomTokens(B: number, T: number, V: number, seed: number): Int32Array {
  let s = seed >>> 0;
  const out = new Int32Array(B * T);
  for (let i = 0; i < out.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s % V;
  }
  return out;
}

function toConfig(s: LmShape): GPT2Config {
  return parseGPT2Config(
    {
      vocab_size: s.vocab_size,
      n_positions: Math.max(s.T, 8),
      n_embd: s.n_embd,
      n_layer: s.n_layer,
      n_head: s.n_head,
      tokenizer: s.vocab_size === 258 ? 'bytes' : 'gpt2-bpe',
      bos_token_id: 0,
      eos_token_id: 0,
    },
    'lm bench shape',
  );
}

async function timeSteps(
  step: () => tf.Scalar,
  o: { steps: number; warmup: number },
): Promise<{ seconds: number; first: number; last: number }> {
  let first = NaN;
  for (let i = 0; i < o.warmup; i++) {
    const l = step();
    const v = (await l.data())[0];
    if (i === 0) first = v;
    l.dispose();
  }
  const losses: tf.Scalar[] = [];
  const t0 = performance.now();
  for (let i = 0; i < o.steps; i++) losses.push(step());
  // One readback at the end, as a training loop that logs every few steps does; WebGPU's queue is in order.
  const last = (await losses[losses.length - 1].data())[0];
  const seconds = (performance.now() - t0) / 1000;
  tf.dispose(losses);
  return { seconds, first, last };
}

/**
 * Our GPT-2 trained as `trainSft` trains it (the fused Adam, β2 0.95, global-norm clipping 1); `tfjsAdam` swaps in
 * tf.train.adam (the same update in ~14 kernels per variable).
 */
export async function benchOurLmTraining(
  s: LmShape,
  o: { steps: number; warmup?: number; tfjsAdam?: boolean },
): Promise<LmTrainBench> {
  const config = toConfig(s);
  const model = GPT2.random(config, 5, true, 'lmbench');
  const opt = o.tfjsAdam
    ? tf.train.adam(3e-4, 0.9, 0.95, 1e-8)
    : new FusedAdamOptimizer(3e-4, 0.9, 0.95, 1e-8);
  const windows = tf.tensor2d(randomTokens(s.B, s.T + 1, s.vocab_size, 7), [s.B, s.T + 1], 'int32');
  const vars = model.trainableVariables();
  try {
    const step = (): tf.Scalar => {
      const r = clippedStep(opt, vars, () => [lmLoss(model, windows)], 1);
      r.gradNorm.dispose();
      const loss = tf.tidy(() => tf.reshape(tf.slice(r.scalars, 0, 1), []) as tf.Scalar);
      r.scalars.dispose();
      return loss;
    };
    const t = await timeSteps(step, { steps: o.steps, warmup: o.warmup ?? 1 });
    return result(
      o.tfjsAdam ? 'ours, tf.train.adam' : 'ours',
      s,
      vars.reduce((a, v) => a + v.size, 0),
      o.steps,
      t,
    );
  } finally {
    windows.dispose();
    opt.dispose();
    model.dispose();
  }
}

/**
 * nanogpt's NanoGPTV1 with learned positions (useRope false, like GPT-2), GELU MLP ×4, tied embedding; its
 * BasicTrainer's step (forward with training: true, its sparse cross-entropy with a custom gradient, its AdamW
 * with packed moments and global-norm clipping 1). No dropout, no mixed precision, no checkpointing.
 */
export async function benchNanoGptTraining(
  peer: NanoGptPeer,
  s: LmShape,
  o: { steps: number; warmup?: number },
): Promise<LmTrainBench> {
  const model = new peer.NanoGPTV1({
    modelType: 'GenAI_NanoGPT_v1',
    vocabSize: s.vocab_size,
    blockSize: s.T,
    nLayer: s.n_layer,
    nHead: s.n_head,
    nEmbed: s.n_embd,
    mlpFactor: 4,
    useRope: false,
  });
  const trainer = new peer.BasicTrainer(model, null, { clipNorm: 1, warmupSteps: 0 }) as unknown as {
    trainStep(state: object, batch: { xs: tf.Tensor; ys: tf.Tensor }): tf.Scalar;
    dispose(): void;
  };
  const all = randomTokens(s.B, s.T + 1, s.vocab_size, 7);
  const xsA = new Int32Array(s.B * s.T);
  const ysA = new Int32Array(s.B * s.T);
  for (let b = 0; b < s.B; b++) {
    xsA.set(all.subarray(b * (s.T + 1), b * (s.T + 1) + s.T), b * s.T);
    ysA.set(all.subarray(b * (s.T + 1) + 1, (b + 1) * (s.T + 1)), b * s.T);
  }
  const xs = tf.tensor2d(xsA, [s.B, s.T], 'int32');
  const ys = tf.tensor2d(ysA, [s.B, s.T], 'int32');
  try {
    const t = await timeSteps(() => trainer.trainStep({}, { xs, ys }), {
      steps: o.steps,
      warmup: o.warmup ?? 1,
    });
    return result('nanogpt', s, model.getNumParams(), o.steps, t);
  } finally {
    xs.dispose();
    ys.dispose();
    trainer.dispose();
    model.dispose();
  }
}

function result(
  impl: string,
  s: LmShape,
  params: number,
  steps: number,
  t: { seconds: number; first: number; last: number },
): LmTrainBench {
  const flops =
    lmTrainStepFlops({ n_layer: s.n_layer, n_embd: s.n_embd, vocab_size: s.vocab_size }, s.B, s.T) * steps;
  return {
    impl,
    backend: tf.getBackend(),
    shape: s,
    params,
    steps,
    seconds: t.seconds,
    tokensPerSecond: (steps * s.B * s.T) / t.seconds,
    gflopsPerSecond: flops / t.seconds / 1e9,
    firstLoss: t.first,
    lastLoss: t.last,
  };
}
