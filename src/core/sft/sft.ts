/**
 * Supervised next-token training on a text corpus (`cli sft`): how the built-in tiny model is pretrained.
 * Each line of the corpus is a document followed by EOS; batches are windows of seqLen + 1 tokens that start
 * at a random line start, so the model sees sentence beginnings at position 0 as prompts will be.
 */
import * as tf from '@tensorflow/tfjs-core';
import { FusedAdamOptimizer } from '../optim/fused-adam';
import type { CausalLM } from '../model/causal-lm';
import type { Tokenizer } from '../tokenizer/types';
import { logprobsFromLogits } from '../ppo/losses';
import { clippedStep } from '../optim/optim';
import { jointGuardedStep } from '../ppo/update';
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';
import { encodePrompt } from '../tokenizer';
import { loadLM, type ModelFiles, type ModelLoadOptions } from '../model/folder';

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
    opt.setLearningRate(lr);
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

// ---- SFT on prompt / completion pairs (the playground's supervised warm start; docs/sft.md) -------------------

/** One example of an SFT JSONL file, tokenised: the loss is on the completion's tokens only (EOS appended). */
export interface SftExample {
  /** 1-based line of the JSONL file. */
  line: number;
  prompt: number[];
  /** Completion ids, EOS last. */
  completion: number[];
}

/**
 * The examples of an SFT JSONL text: each non-empty line `{"prompt", "completion"}` (plain text, as the model
 * continues it), or `{"messages": [{"role": "user", "content"}, {"role": "assistant", "content"}]}` (one turn, the
 * prompt in the model's chat template, as the RL runs format it with `chatTemplate`; a model without a template
 * refuses it). The completion ends with EOS. Every problem names its line (up to 10 listed).
 */
export function readSftExamples(
  text: string,
  tok: Tokenizer,
  nPositions: number,
  source: string,
): SftExample[] {
  const problems: string[] = [];
  const out: SftExample[] = [];
  const lines = text.replace(/^\uFEFF/, '').split('\n');
  lines.forEach((raw, i) => {
    const line = i + 1;
    const l = raw.replace(/\r$/, '').trim();
    if (l === '') return;
    let obj: unknown;
    try {
      obj = JSON.parse(l);
    } catch (e) {
      problems.push(`line ${line}: not valid JSON (${(e as Error).message})`);
      return;
    }
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
      problems.push(`line ${line}: expected an object {"prompt", "completion"} or {"messages"}`);
      return;
    }
    const o = obj as Record<string, unknown>;
    let prompt: number[];
    let completion: string;
    if ('messages' in o) {
      const m = o.messages;
      const turn =
        Array.isArray(m) &&
        m.length === 2 &&
        m.every((x) => x && typeof x === 'object' && typeof (x as { content: unknown }).content === 'string')
          ? (m as { role: unknown; content: string }[])
          : null;
      if (!turn || turn[0].role !== 'user' || turn[1].role !== 'assistant') {
        problems.push(
          `line ${line}: "messages" must be one turn, [{"role": "user", "content": "…"}, {"role": "assistant", "content": "…"}]`,
        );
        return;
      }
      if (!tok.chatPrompt) {
        problems.push(
          `line ${line}: "messages" needs a model with a chat template, and this one has none; use {"prompt", "completion"}`,
        );
        return;
      }
      if (turn[0].content === '' || turn[1].content === '') {
        problems.push(`line ${line}: a message's "content" is empty`);
        return;
      }
      prompt = encodePrompt(tok, turn[0].content, true);
      completion = turn[1].content;
    } else {
      const missing = (['prompt', 'completion'] as const).filter((k) => typeof o[k] !== 'string');
      if (missing.length) {
        problems.push(
          `line ${line}: ${missing.map((k) => `"${k}"`).join(' and ')} missing or not a string (expected {"prompt", "completion"} or {"messages"})`,
        );
        return;
      }
      if (o.prompt === '' || o.completion === '') {
        problems.push(`line ${line}: ${o.prompt === '' ? '"prompt"' : '"completion"'} is empty`);
        return;
      }
      prompt = tok.encode(o.prompt as string);
      completion = o.completion as string;
    }
    const ids = [...tok.encode(completion), tok.eosId];
    if (prompt.length + ids.length > nPositions) {
      problems.push(
        `line ${line}: prompt + completion + EOS is ${prompt.length + ids.length} tokens, more than the model's ${nPositions} positions`,
      );
      return;
    }
    out.push({ line, prompt, completion: ids });
  });
  if (problems.length) {
    const more = problems.length > 10 ? `, and ${problems.length - 10} more` : '';
    throw new UserError(
      `${source}: ${problems.length} bad line${problems.length === 1 ? '' : 's'}: ${problems.slice(0, 10).join('; ')}${more}.`,
    );
  }
  if (out.length === 0)
    throw new UserError(
      `${source}: no examples; each line is {"prompt": "…", "completion": "…"} or {"messages": […]}.`,
    );
  return out;
}

/**
 * One batch: prompts left-padded to Tq, completions right-padded to R (as DPO's batchOf). `mask` [n, R] is 1 on
 * completion tokens.
 */
export function sftBatchOf(examples: SftExample[], padId: number) {
  const Tq = Math.max(...examples.map((e) => e.prompt.length));
  const R = Math.max(...examples.map((e) => e.completion.length));
  const n = examples.length;
  const T = Tq + R;
  const ids = new Int32Array(n * T).fill(padId);
  const attn = new Int32Array(n * T);
  const tokens = new Int32Array(n * R).fill(padId);
  const mask = new Float32Array(n * R);
  examples.forEach((e, k) => {
    const off = k * T + Tq - e.prompt.length;
    ids.set(e.prompt, off);
    attn.fill(1, off, off + e.prompt.length);
    ids.set(e.completion, k * T + Tq);
    attn.fill(1, k * T + Tq, k * T + Tq + e.completion.length);
    tokens.set(e.completion, k * R);
    mask.fill(1, k * R, k * R + e.completion.length);
  });
  return { ids, attn, tokens, mask, n, T, Tq, R };
}

/**
 * The SFT loss of a batch: minus the log-probabilities of its completion tokens summed, over `denominator` (default:
 * the batch's completion tokens, i.e. the mean over every counted token — TRL SFTTrainer's completion-only loss). A
 * micro-batch passes the whole step's token count, so the micro-batches' losses sum to the step's mean.
 */
export function completionNll(
  model: CausalLM,
  b: ReturnType<typeof sftBatchOf>,
  denominator?: number,
): tf.Scalar {
  return tf.tidy(() => {
    const ids = tf.tensor2d(b.ids, [b.n, b.T], 'int32');
    const attn = tf.tensor2d(b.attn, [b.n, b.T], 'int32');
    const C = model.config.n_embd;
    const hidden = tf.reshape(model.trunk(ids, attn), [b.n, b.T, C]);
    const h = tf.reshape(tf.slice(hidden, [0, b.Tq - 1, 0], [b.n, b.R, C]), [b.n * b.R, C]) as tf.Tensor2D;
    const lp = logprobsFromLogits(model.lmHead(h), tf.tensor1d(b.tokens, 'int32'), 1);
    const mask = tf.tensor1d(b.mask);
    const denom = denominator === undefined ? tf.sum(mask) : tf.scalar(denominator);
    return tf.neg(tf.div(tf.sum(tf.mul(lp, mask)), denom)) as tf.Scalar;
  });
}

export interface SftRunOptions {
  steps: number;
  /** Examples per step. */
  batchSize: number;
  /** Constant (no schedule: a warm start of a few steps). */
  learningRate: number;
  maxGradNorm: number;
  seed: number;
  /**
   * Examples per micro-batch (0 or absent: the whole batch at once): the step's gradients are summed over them, so
   * the update does not depend on it (only the memory does).
   */
  microBatchSize?: number;
}

/** One SFT step's metrics: `loss` the step's mean completion-token NLL (before its update). */
export interface SftStepMetrics {
  step: number;
  loss: number;
  gradNorm: number;
  timeStep: number;
}

/**
 * Refuses more examples per step than the file has: such a step would hold some examples twice (the shuffle
 * wraps around within it), which is never what was meant. The app's SFT card says the same before it sends the
 * job; this is the engine's own check, for every caller.
 */
export function checkSftBatch(batchSize: number, examples: number, source: string): void {
  if (batchSize > examples) {
    throw new UserError(
      `examples per step (batchSize) is ${batchSize}, but ${source} has ${examples} example${examples === 1 ? '' : 's'}: ` +
        `choose at most ${examples}, or add examples.`,
    );
  }
}

/**
 * Supervised fine-tuning on prompt / completion examples (the playground's warm start): every weight trained
 * (no LoRA), Adam at a constant rate, `batchSize` examples per step from a seeded shuffle (reshuffled each pass).
 * The worker drives it through src/core/run/supervised-session.ts; its policy then becomes the policy and the
 * reference of the run that continues from it.
 */
export class SftTrainer {
  step = 0;
  readonly history: SftStepMetrics[] = [];
  private readonly opt: FusedAdamOptimizer;
  private readonly rng: Rng;
  private order: number[] = [];
  private cursor = 0;

  private constructor(
    readonly options: SftRunOptions,
    readonly policy: CausalLM,
    readonly tokenizer: Tokenizer,
    readonly examples: SftExample[],
  ) {
    this.opt = new FusedAdamOptimizer(options.learningRate);
    this.rng = new Rng(options.seed);
  }

  /** Load the starting model from `files` and read the examples of `text` (errors name the line). */
  static async build(
    files: ModelFiles,
    data: { text: string; source: string },
    options: SftRunOptions,
    /** The backend's load options (the worker's `maxBindingBytes` on WebGPU). */
    load: ModelLoadOptions = {},
  ): Promise<SftTrainer> {
    const lm = await loadLM(files, { ...load, trainable: true, label: 'policy' });
    try {
      const examples = readSftExamples(data.text, lm.tokenizer, lm.model.config.n_positions, data.source);
      checkSftBatch(options.batchSize, examples.length, data.source);
      return new SftTrainer(options, lm.model, lm.tokenizer, examples);
    } catch (e) {
      lm.model.dispose();
      throw e;
    }
  }

  private nextBatch(): SftExample[] {
    const out: SftExample[] = [];
    while (out.length < this.options.batchSize) {
      if (this.cursor >= this.order.length) {
        this.order = this.rng.permutation(this.examples.length);
        this.cursor = 0;
      }
      out.push(this.examples[this.order[this.cursor++]]);
    }
    return out;
  }

  /**
   * One step: the batch's completion-token mean NLL, gradients summed over its micro-batches, clipped, one Adam
   * step (ppo/update.ts jointGuardedStep, as DPO). A non-finite loss or gradient applies nothing and stops the run.
   */
  async trainStep(): Promise<SftStepMetrics> {
    const t0 = performance.now();
    const batch = this.nextBatch();
    const mb = this.options.microBatchSize || batch.length;
    const tokens = batch.reduce((s, e) => s + e.completion.length, 0);
    const res = await jointGuardedStep(
      [
        {
          optimizer: this.opt,
          vars: this.policy.trainableVariables(),
          objective: (k) => ({
            loss: completionNll(
              this.policy,
              sftBatchOf(batch.slice(k * mb, (k + 1) * mb), this.tokenizer.padId),
              tokens,
            ),
            stats: {},
          }),
        },
      ],
      this.options.maxGradNorm,
      { microBatches: Math.ceil(batch.length / mb) },
    );
    const loss = res.losses[0];
    const gradNorm = res.gradNorms[0];
    if (!res.applied)
      throw new UserError(
        `SFT step ${this.step + 1}: the loss or gradient is not finite (NaN/Inf); nothing was applied. Lower the learning rate.`,
      );
    this.step++;
    const m: SftStepMetrics = { step: this.step, loss, gradNorm, timeStep: (performance.now() - t0) / 1000 };
    this.history.push(m);
    return m;
  }

  dispose(): void {
    this.opt.dispose();
    this.policy.dispose();
  }
}
