/**
 * Bradley–Terry reward-model training (`cli train-reward`), as in InstructGPT and TRL's RewardTrainer.
 *
 * A reward model is a ScalarModel (GPT2ForSequenceClassification, one label) whose scalar is read at the last
 * real token of prompt ++ response ++ EOS. For a pair, P(chosen ≻ rejected) = σ(r_c − r_r), so the loss is
 * −log σ(r_c − r_r) = softplus(−(r_c − r_r)), averaged over the batch (softplus is the stable form: no
 * log(0) when the margin is very negative).
 *
 * Reward scale. Bradley–Terry only fixes reward *differences*, so a trained model's scores can sit anywhere
 * (e.g. all around +40) with any spread, and PPO then sees a reward that swamps the KL penalty. After training
 * we score the training responses, and divide the head by their std (`score.weight /= std`), so the saved
 * model's scores have std 1 on the training distribution. HF's GPT2ForSequenceClassification head has no
 * bias, so the mean cannot be folded in: it is recorded (with the raw mean/std and the scale applied) in
 * `reward_stats.json` beside the model. PPO subtracts that `mean` from the model's scores (config key
 * `rewardModelCenter`, on by default; lm-human-preferences likewise normalises its reward model to mean 0), so
 * scores are centred on the training responses; `readRewardMean` reads it.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { ScalarModel } from '../model/heads';
import type { ModelFiles } from '../model/folder';
import type { Tokenizer } from '../tokenizer/types';
import { leftPad } from '../model/sampling';
import { clippedStep } from '../optim/optim';
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';
import type { PreferencePair } from './preferences';

/** The optional file beside reward_model.safetensors that records the reward scale (see the module comment). */
export const REWARD_STATS_FILE = 'reward_stats.json';

/** The reward model file inside a reward folder made by `train-reward`. */
export const REWARD_FILE = 'reward_model.safetensors';

/**
 * The `mean` recorded in a reward folder's reward_stats.json, or null when the folder has no such file (a reward
 * model from elsewhere: PPO then uses its scores as they are and says so). A file that is there but unreadable,
 * or whose `mean` is not a finite number, is an error naming the file.
 */
export async function readRewardMean(files: ModelFiles): Promise<number | null> {
  const bytes = await files.read(REWARD_STATS_FILE);
  if (!bytes) return null;
  const where = `${files.label}/${REWARD_STATS_FILE}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(bytes));
  } catch (e) {
    throw new UserError(
      `${where} is not valid JSON (${(e as Error).message}); rewrite it with train-reward or delete it.`,
    );
  }
  const mean = (parsed as { mean?: unknown } | null)?.mean;
  if (typeof mean !== 'number' || !Number.isFinite(mean)) {
    throw new UserError(
      `${where}: "mean" must be a finite number (the mean score of the training responses), got ${JSON.stringify(mean) ?? 'nothing'}.`,
    );
  }
  return mean;
}

export interface RewardTrainOptions {
  steps: number;
  /** Pairs per step (each pair is two sequences, so the forward batch is 2 · batchSize). */
  batchSize: number;
  learningRate: number;
  /** Global gradient-norm clip; 0 = off. */
  maxGradNorm: number;
  seed: number;
  /** Evaluate on the held-out pairs every this many steps (and always at the end). */
  evalEvery: number;
  /** Report training metrics every this many steps (one batched readback). Default 10. */
  logEvery?: number;
  /** Scale the head so scores have std 1 on the training responses (default true). */
  normalise?: boolean;
  /**
   * Keep wte/wpe fixed (default false: train everything, as HF does). Their gradient (UnsortedSegmentSum)
   * dominates a step on the tfjs CPU backend and is slow on WebGPU; blocks + head adapt well without it.
   */
  freezeEmbeddings?: boolean;
}

export interface PairMetrics {
  /** Fraction of pairs with r_chosen > r_rejected (ties count as wrong). */
  accuracy: number;
  /** Mean Bradley–Terry loss softplus(−(r_c − r_r)). */
  loss: number;
  /** Mean r_c − r_r. */
  meanMargin: number;
}

/** One progress report: means over the steps since the previous report. */
export interface RewardLog {
  step: number;
  loss: number;
  accuracy: number;
  margin: number;
  gradNorm: number;
  learningRate: number;
  pairsPerSecond: number;
  /** Present on evaluation steps. */
  heldOut?: PairMetrics;
}

export interface RewardStats {
  /** Mean and std of the saved model's scores over the training responses (chosen and rejected). */
  mean: number;
  std: number;
  /** The same before the head was scaled. */
  rawMean: number;
  rawStd: number;
  /** The factor score.weight was multiplied by (1 when not normalised). */
  scale: number;
  /** How many sequences the statistics are over. */
  sequences: number;
}

export interface RewardTrainResult {
  steps: number;
  /** Mean training loss over the last report window. */
  loss: number;
  /** On the training pairs (up to STATS_MAX_PAIRS of them) and the held-out pairs, after training, before scaling. */
  train: PairMetrics;
  heldOut: PairMetrics;
  stats: RewardStats;
  /** How many sequences were cut to fit n_positions. */
  truncated: number;
}

/** Score at most this many training pairs for the final train metrics and the reward statistics. */
export const STATS_MAX_PAIRS = 1024;
const EVAL_CHUNK_PAIRS = 16;

/**
 * The two sequences of a pair: encode(prompt) ++ encode(response) ++ [EOS]. When that is longer than
 * n_positions, the start is kept (the prompt first), the response is cut and EOS stays last, so the scalar is
 * always read at EOS — where PPO reads it for a response that stopped.
 */
export function pairSequences(
  tok: Tokenizer,
  pair: PreferencePair,
  nPositions: number,
): { chosen: number[]; rejected: number[]; truncated: number } {
  const prompt = tok.encode(pair.prompt);
  let truncated = 0;
  const seq = (response: string): number[] => {
    const body = [...prompt, ...tok.encode(response)];
    if (body.length + 1 > nPositions) {
      truncated++;
      body.length = nPositions - 1;
    }
    body.push(tok.eosId);
    return body;
  };
  return { chosen: seq(pair.chosen), rejected: seq(pair.rejected), truncated };
}

/** Pad length for a batch: a multiple of 8, capped at n_positions, so shapes repeat (WebGPU's buffer pool). */
function padLength(n: number, cap: number): number {
  return Math.min(cap, Math.ceil(n / 8) * 8);
}

/** Left-pad sequences to T (≥ their longest): ids and mask tensors [N, T]. */
function paddedBatch(seqs: number[][], padId: number, T: number): { ids: tf.Tensor2D; mask: tf.Tensor2D } {
  const { ids, mask, Tp } = leftPad(seqs, padId);
  const N = seqs.length;
  let outIds = ids;
  let outMask = mask;
  if (T > Tp) {
    outIds = new Int32Array(N * T).fill(padId);
    outMask = new Int32Array(N * T);
    for (let i = 0; i < N; i++) {
      outIds.set(ids.subarray(i * Tp, (i + 1) * Tp), i * T + (T - Tp));
      outMask.set(mask.subarray(i * Tp, (i + 1) * Tp), i * T + (T - Tp));
    }
  }
  return { ids: tf.tensor2d(outIds, [N, T], 'int32'), mask: tf.tensor2d(outMask, [N, T], 'int32') };
}

/** Encode a batch of pairs as 2·b sequences [chosen…, rejected…] on tensors. */
function encodePairs(
  model: ScalarModel,
  tok: Tokenizer,
  pairs: PreferencePair[],
): { ids: tf.Tensor2D; mask: tf.Tensor2D; truncated: number } {
  const nPos = model.config.n_positions;
  const chosen: number[][] = [];
  const rejected: number[][] = [];
  let truncated = 0;
  for (const p of pairs) {
    const s = pairSequences(tok, p, nPos);
    chosen.push(s.chosen);
    rejected.push(s.rejected);
    truncated += s.truncated;
  }
  const seqs = [...chosen, ...rejected];
  const T = padLength(Math.max(...seqs.map((s) => s.length)), nPos);
  return { ...paddedBatch(seqs, tok.padId, T), truncated };
}

/** Mean Bradley–Terry loss over pairs: mean(softplus(−(r_c − r_r))). */
export function bradleyTerryLoss(chosen: tf.Tensor1D, rejected: tf.Tensor1D): tf.Scalar {
  return tf.tidy(() => tf.mean(tf.softplus(tf.neg(tf.sub(chosen, rejected)))) as tf.Scalar);
}

/** The same for one pair in plain numbers (stable softplus): log(1 + e^−(rc − rr)). */
export function bradleyTerryLossValue(rc: number, rr: number): number {
  const x = -(rc - rr);
  return Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x)));
}

/** Scores of every pair's chosen and rejected sequence, in chunks of `chunk` pairs. */
export async function scorePairs(
  model: ScalarModel,
  tok: Tokenizer,
  pairs: PreferencePair[],
  chunk = EVAL_CHUNK_PAIRS,
): Promise<{ chosen: Float32Array; rejected: Float32Array }> {
  const chosen = new Float32Array(pairs.length);
  const rejected = new Float32Array(pairs.length);
  for (let s = 0; s < pairs.length; s += chunk) {
    const part = pairs.slice(s, s + chunk);
    const b = part.length;
    const { ids, mask } = encodePairs(model, tok, part);
    const r = tf.tidy(() => model.lastTokenValues(ids, mask));
    ids.dispose();
    mask.dispose();
    const data = await r.data();
    r.dispose();
    chosen.set(data.subarray(0, b), s);
    rejected.set(data.subarray(b, 2 * b), s);
  }
  return { chosen, rejected };
}

export function pairMetrics(chosen: ArrayLike<number>, rejected: ArrayLike<number>): PairMetrics {
  const n = chosen.length;
  if (n === 0) return { accuracy: NaN, loss: NaN, meanMargin: NaN };
  let right = 0;
  let loss = 0;
  let margin = 0;
  for (let i = 0; i < n; i++) {
    if (chosen[i] > rejected[i]) right++;
    loss += bradleyTerryLossValue(chosen[i], rejected[i]);
    margin += chosen[i] - rejected[i];
  }
  return { accuracy: right / n, loss: loss / n, meanMargin: margin / n };
}

/** Accuracy, mean loss and mean margin of `model` on `pairs`. */
export async function evaluate(
  model: ScalarModel,
  tok: Tokenizer,
  pairs: PreferencePair[],
): Promise<PairMetrics> {
  const { chosen, rejected } = await scorePairs(model, tok, pairs);
  return pairMetrics(chosen, rejected);
}

function meanStd(xs: ArrayLike<number>[]): { mean: number; std: number; n: number } {
  let n = 0;
  let sum = 0;
  for (const a of xs) for (let i = 0; i < a.length; i++, n++) sum += a[i];
  const mean = sum / n;
  let sq = 0;
  for (const a of xs) for (let i = 0; i < a.length; i++) sq += (a[i] - mean) ** 2;
  return { mean, std: Math.sqrt(sq / n), n };
}

/**
 * Divide the head by `std` of the given raw scores so the model's scores have std 1 there (see the module
 * comment). A (near-)constant model is left as it is (scale 1).
 */
export function normaliseScale(
  model: ScalarModel,
  scores: ArrayLike<number>[],
  normalise = true,
): RewardStats {
  const { mean, std, n } = meanStd(scores);
  const scale = normalise && std > 1e-6 ? 1 / std : 1;
  if (scale !== 1) {
    const scaled = tf.tidy(() => tf.mul(model.score, scale));
    model.score.assign(scaled);
    scaled.dispose();
  }
  return { mean: mean * scale, std: std * scale, rawMean: mean, rawStd: std, scale, sequences: n };
}

function checkOptions(o: RewardTrainOptions, nTrain: number): void {
  const bad = (k: string, want: string, v: unknown) =>
    new UserError(`train-reward: "${k}" must be ${want}, got ${v}.`);
  if (!Number.isInteger(o.steps) || o.steps < 1) throw bad('steps', 'an integer ≥ 1', o.steps);
  if (!Number.isInteger(o.batchSize) || o.batchSize < 1)
    throw bad('batchSize', 'an integer ≥ 1', o.batchSize);
  if (!(o.learningRate > 0 && o.learningRate <= 1))
    throw bad('learningRate', 'a number in (0, 1]', o.learningRate);
  if (!(o.maxGradNorm >= 0) || !Number.isFinite(o.maxGradNorm))
    throw bad('maxGradNorm', 'a number ≥ 0 (0 = off)', o.maxGradNorm);
  if (!Number.isInteger(o.evalEvery) || o.evalEvery < 1)
    throw bad('evalEvery', 'an integer ≥ 1', o.evalEvery);
  if (nTrain === 0) throw new UserError('train-reward: no training pairs.');
}

/**
 * Train `model` in place on `pairs` with Adam and the Bradley–Terry loss, evaluating on `heldOut`; then scale
 * its head (unless `normalise: false`) and return the final metrics and reward statistics.
 * Batches walk a seeded shuffle of the pairs, reshuffled each epoch.
 */
export async function trainRewardModel(
  model: ScalarModel,
  tok: Tokenizer,
  pairs: PreferencePair[],
  heldOut: PreferencePair[],
  opts: RewardTrainOptions,
  onLog: (log: RewardLog) => void = () => {},
): Promise<RewardTrainResult> {
  checkOptions(opts, pairs.length);
  const logEvery = Math.max(1, opts.logEvery ?? 10);
  const b = Math.min(opts.batchSize, pairs.length);
  const rng = new Rng(opts.seed);
  const optimizer = tf.train.adam(opts.learningRate);
  const vars = model
    .trainableVariables()
    .filter((v) => !(opts.freezeEmbeddings && /\/(wte|wpe)\.weight$/.test(v.name)));
  let order = rng.permutation(pairs.length);
  let cursor = 0;
  let truncated = 0;
  let lastLoss = NaN;
  let lastHeldOut: PairMetrics | undefined;
  let pending: tf.Tensor1D[] = [];
  let t0 = performance.now();
  try {
    for (let step = 1; step <= opts.steps; step++) {
      // 1. The next b pairs of the shuffled order (reshuffle at the end of an epoch).
      if (cursor + b > order.length) {
        order = rng.permutation(pairs.length);
        cursor = 0;
      }
      const batch = order.slice(cursor, cursor + b).map((i) => pairs[i]);
      cursor += b;
      // 2. 2·b sequences [chosen…, rejected…], left-padded; the scalar at each one's last real token.
      const enc = encodePairs(model, tok, batch);
      truncated += enc.truncated;
      // 3. Loss softplus(−(r_c − r_r)), a clipped Adam step; accuracy and margin ride along for the log.
      const r = clippedStep(
        optimizer,
        vars,
        () => {
          const scores = model.lastTokenValues(enc.ids, enc.mask); // [2b]
          const rc = tf.slice(scores, [0], [b]) as tf.Tensor1D;
          const rr = tf.slice(scores, [b], [b]) as tf.Tensor1D;
          const diff = tf.sub(rc, rr);
          return [
            bradleyTerryLoss(rc, rr),
            tf.mean(tf.cast(tf.greater(diff, 0), 'float32')) as tf.Scalar,
            tf.mean(diff) as tf.Scalar,
          ];
        },
        opts.maxGradNorm,
      );
      enc.ids.dispose();
      enc.mask.dispose();
      pending.push(tf.tidy(() => tf.concat([r.scalars, tf.reshape(r.gradNorm, [1])]) as tf.Tensor1D));
      r.scalars.dispose();
      r.gradNorm.dispose();

      // 4. Report: one readback per window; held-out evaluation every evalEvery steps and at the end.
      const isEval = step % opts.evalEvery === 0 || step === opts.steps;
      if (step % logEvery === 0 || isEval) {
        const all = tf.stack(pending);
        const vals = await all.data();
        all.dispose();
        tf.dispose(pending);
        const n = pending.length;
        pending = [];
        const meanCol = (c: number) => {
          let s = 0;
          for (let i = 0; i < n; i++) s += vals[i * 4 + c];
          return s / n;
        };
        lastLoss = meanCol(0);
        const secs = (performance.now() - t0) / 1000;
        const log: RewardLog = {
          step,
          loss: lastLoss,
          accuracy: meanCol(1),
          margin: meanCol(2),
          gradNorm: meanCol(3),
          learningRate: opts.learningRate,
          pairsPerSecond: (n * b) / secs,
        };
        if (isEval && heldOut.length) log.heldOut = lastHeldOut = await evaluate(model, tok, heldOut);
        onLog(log);
        t0 = performance.now();
      }
    }
  } finally {
    tf.dispose(pending);
    optimizer.dispose();
  }

  // 5. Final metrics, then the reward scale from the training responses' scores.
  const statPairs = pairs.slice(0, STATS_MAX_PAIRS);
  const trainScores = await scorePairs(model, tok, statPairs);
  const train = pairMetrics(trainScores.chosen, trainScores.rejected);
  const held = lastHeldOut ?? pairMetrics([], []); // the last step always evaluates
  const stats = normaliseScale(model, [trainScores.chosen, trainScores.rejected], opts.normalise ?? true);
  return { steps: opts.steps, loss: lastLoss, train, heldOut: held, stats, truncated };
}
