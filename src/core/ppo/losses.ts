/**
 * PPO losses over tensors (step 7 of docs/engine.md). Each function runs in its own `tf.tidy`, so only
 * the returned tensors outlive it, inside or outside an outer tidy / `tf.variableGrads`. Shapes: N samples,
 * R response tokens, V vocabulary; `mask` is 1 for tokens that count and 0 for padding.
 * Gradients need tfjs's gradient registry filled by the host (src/cli/backend-node.ts, tests/helpers/backend.ts,
 * the worker's backend setup): tfjs-core alone registers none.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LossAggregation } from '../../common/config';
import { entropyRowsWebGpu, logprobsWebGpu, webGpuLogprobApplies } from '../kernels/webgpu-logprob';

/**
 * The whole minibatch's counts, for a micro-batch that computes its SHARE of a minibatch's means (ppo/update.ts
 * sums the shares): every mean divides by the minibatch's counted tokens or sequences, never by the micro-batch's
 * own, so the sum over micro-batches is the minibatch's mean whatever the micro-batch size. (Dividing by the
 * micro-batch's count and averaging the micro-batches weighs their tokens unequally: the bug Hugging Face's
 * Trainer had with gradient accumulation until late 2024.) Absent: the tensors are the whole minibatch.
 */
export interface Denominators {
  /** Counted (mask = 1) tokens of the minibatch. */
  tokens: number;
  /** Sequences of the minibatch. */
  rows: number;
}

/** Σ x·mask / Σ mask over every element (or / `tokens`, the minibatch's count: Denominators); 0 when nothing counts. */
export function maskedMeanT(x: tf.Tensor, mask: tf.Tensor, tokens?: number): tf.Scalar {
  return tf.tidy(() => {
    const m = tf.cast(mask, 'float32');
    const count = tokens === undefined ? tf.sum(m) : tf.scalar(tokens);
    return tf.div(tf.sum(tf.mul(x, m)), tf.maximum(count, 1e-12)) as tf.Scalar;
  });
}

/**
 * A minibatch's per-token losses [n, R] as one number (docs/formats.md §7; plain-loop reference:
 * `aggregateLoss` in advantages.ts): token-mean Σ L·m / Σ m; seq-mean the mean over rows of Σ_t L·m / Σ_t m;
 * seq-sum-norm Σ L·m / (n · responseLength) (Dr. GRPO).
 */
export function aggregateLossT(
  perToken: tf.Tensor,
  mask: tf.Tensor,
  kind: LossAggregation,
  responseLength: number,
  denominators?: Denominators,
): tf.Scalar {
  return tf.tidy(() => {
    const m = tf.cast(mask, 'float32');
    const lm = tf.mul(perToken, m);
    const n = denominators?.rows ?? perToken.shape[0];
    switch (kind) {
      case 'token-mean':
        return maskedMeanT(perToken, m, denominators?.tokens);
      case 'seq-mean': {
        const rowMeans = tf.div(tf.sum(lm, 1), tf.maximum(tf.sum(m, 1), 1));
        return (denominators ? tf.div(tf.sum(rowMeans), n) : tf.mean(rowMeans)) as tf.Scalar;
      }
      case 'seq-sum-norm':
        return tf.div(tf.sum(lm), n * responseLength) as tf.Scalar;
    }
  });
}

/**
 * GRPO's per-token KL (k3, with the ratio p_ref / p): exp(ref − logp) − (ref − logp) − 1, ≥ 0, differentiable in
 * logp (TRL GRPOTrainer's per_token_kl).
 */
export function k3PerToken(logp: tf.Tensor, refLogp: tf.Tensor): tf.Tensor {
  return tf.tidy(() => {
    const d = tf.sub(refLogp, logp);
    return tf.sub(tf.sub(tf.exp(d), d), 1);
  });
}

/** How the clipped surrogate's per-token losses are aggregated (docs/formats.md §7). */
export interface PolicyLossOptions {
  /** Default token-mean. */
  aggregation?: LossAggregation;
  /** R, for seq-sum-norm (default: the tensors' second dimension). */
  responseLength?: number;
  /** A micro-batch's share of its minibatch (see Denominators); absent: the tensors are the minibatch. */
  denominators?: Denominators;
  /**
   * `"token"` (default): one ratio per token, the per-token losses aggregated by `aggregation` (PPO, GRPO,
   * REINFORCE++). `"sequence"`: TRL RLOOTrainer's loss (docs/formats.md §7): one ratio per sequence,
   * exp(Σ_t logp − Σ_t logp_old) over counted tokens, clipped, and the per-sequence loss averaged over the
   * minibatch's sequences (`aggregation` does not apply). See sequencePolicyLoss.
   */
  ratioLevel?: RatioLevel;
}

/** Whether the surrogate's ratio is per token or per sequence (PolicyLossOptions.ratioLevel). */
export type RatioLevel = 'token' | 'sequence';

/** The ratio level an algorithm's loss uses: per sequence for RLOO (TRL RLOOTrainer), per token otherwise. */
export function ratioLevelOf(algorithm: string): RatioLevel {
  return algorithm === 'rloo' ? 'sequence' : 'token';
}

/**
 * GRPO's KL loss term before its coefficient: k3 against the reference per token, aggregated as the surrogate is
 * (aggregation is linear, so agg(pg + β·k3) = agg(pg) + β·agg(k3), TRL's per_token_loss + beta·per_token_kl).
 */
export function klTermLoss(
  logpNew: tf.Tensor,
  refLogp: tf.Tensor,
  mask: tf.Tensor,
  kind: LossAggregation,
  responseLength: number,
  denominators?: Denominators,
): tf.Scalar {
  return tf.tidy(() =>
    aggregateLossT(k3PerToken(logpNew, refLogp), mask, kind, responseLength, denominators),
  );
}

/**
 * TRL GRPOTrainer's clip statistics over counted tokens: `low` = share with ratio < 1 − ε and A < 0 (clipped from
 * below), `high` = share with ratio > 1 + ε and A > 0. The ratio is exp(logp − logp_old), unclamped, padding
 * zeroed as in policyLoss.
 */
export function clipFractions(
  logpNew: tf.Tensor,
  logpOld: tf.Tensor,
  advantages: tf.Tensor,
  mask: tf.Tensor,
  clipRange: number,
  denominators?: Denominators,
  level: RatioLevel = 'token',
): { low: tf.Scalar; high: tf.Scalar } {
  if (level === 'sequence')
    return sequenceClipFractions(logpNew, logpOld, advantages, mask, clipRange, denominators);
  return tf.tidy(() => {
    const m = tf.cast(mask, 'float32');
    const lr = tf.sub(logpNew, logpOld);
    const ratio = tf.exp(tf.where(tf.greater(m, 0), lr, tf.zerosLike(lr)));
    const zero = tf.zerosLike(advantages);
    const frac = (b: tf.Tensor) => maskedMeanT(tf.cast(b, 'float32'), m, denominators?.tokens);
    return {
      low: frac(tf.logicalAnd(tf.less(ratio, 1 - clipRange), tf.less(advantages, zero))),
      high: frac(tf.logicalAnd(tf.greater(ratio, 1 + clipRange), tf.greater(advantages, zero))),
    };
  });
}

export type PolicyLossResult = {
  /** max(−A·ratio, −A·clip(ratio, 1−ε, 1+ε)) per counted token, aggregated (token mean by default). */
  loss: tf.Scalar;
  /** Fraction of counted tokens where the clipped branch is the larger loss (TRL `pg_losses2 > pg_losses`). */
  clipFrac: tf.Scalar;
  /** masked mean of ½·logratio², an estimate of KL(π_old‖π), from the unclamped log ratio. */
  approxKl: tf.Scalar;
  /** masked mean of exp(logratio), unclamped. */
  ratioMean: tf.Scalar;
  /** Largest exp(logratio) over counted tokens, unclamped (0 when none counts). */
  ratioMax: tf.Scalar;
  /** Fraction of counted tokens whose |logratio| hit `logRatioClamp`. */
  logRatioClampFrac: tf.Scalar;
};

/**
 * The clipped surrogate. `logRatioClamp` bounds log(π/π_old) before `exp` in the LOSS so a wild token cannot
 * overflow to Infinity; clamped tokens get no gradient through the ratio. The statistics (approxKl, ratioMean,
 * ratioMax) read the unclamped log ratio, so they do not under-report exactly when the clamp fires; padding is
 * zeroed first, so a wild padded token cannot turn a masked mean into Inf·0 = NaN.
 */
export function policyLoss(
  logpNew: tf.Tensor,
  logpOld: tf.Tensor,
  advantages: tf.Tensor,
  mask: tf.Tensor,
  clipRange: number,
  logRatioClamp: number,
  opts: PolicyLossOptions = {},
): PolicyLossResult {
  if (opts.ratioLevel === 'sequence') {
    return sequencePolicyLoss(
      logpNew,
      logpOld,
      advantages,
      mask,
      clipRange,
      logRatioClamp,
      opts.denominators,
    );
  }
  return tf.tidy(() => {
    const m = tf.cast(mask, 'float32');
    const rawLogRatio = tf.sub(logpNew, logpOld);
    const logRatio = tf.clipByValue(rawLogRatio, -logRatioClamp, logRatioClamp);
    const ratio = tf.exp(logRatio);
    const negA = tf.neg(advantages);
    const pgLosses = tf.mul(negA, ratio);
    const pgLosses2 = tf.mul(negA, tf.clipByValue(ratio, 1 - clipRange, 1 + clipRange));
    const counted = tf.greater(m, 0);
    // Statistics: unclamped, padding zeroed (exp(0) = 1 there, masked out below).
    const statLogRatio = tf.where(counted, rawLogRatio, tf.zerosLike(rawLogRatio));
    const statRatio = tf.exp(statLogRatio);
    const loss = aggregateLossT(
      tf.maximum(pgLosses, pgLosses2),
      m,
      opts.aggregation ?? 'token-mean',
      opts.responseLength ?? (logpNew.shape[1] as number),
      opts.denominators,
    );
    const tokens = opts.denominators?.tokens;
    return {
      loss,
      clipFrac: maskedMeanT(tf.cast(tf.greater(pgLosses2, pgLosses), 'float32'), m, tokens),
      approxKl: maskedMeanT(tf.mul(0.5, tf.square(statLogRatio)), m, tokens),
      ratioMean: maskedMeanT(statRatio, m, tokens),
      // A maximum, not a share: micro-batches combine it by max (ppo/update.ts maxStats).
      ratioMax: tf.max(tf.where(counted, statRatio, tf.zerosLike(statRatio))) as tf.Scalar,
      logRatioClampFrac: maskedMeanT(
        tf.cast(tf.greater(tf.abs(rawLogRatio), logRatioClamp), 'float32'),
        m,
        tokens,
      ),
    };
  });
}

/**
 * Per row: the summed log ratio Σ_t (logp − logp_old)·m over counted tokens (padding zeroed first, so a wild
 * padded token cannot give Inf·0 = NaN) and the row's advantage (the mean of A over its counted tokens: the
 * critic-free algorithms put the same A_i at every counted token; 0 for a row with no counted token).
 */
function sequenceTerms(logpNew: tf.Tensor, logpOld: tf.Tensor, advantages: tf.Tensor, mask: tf.Tensor) {
  const m = tf.cast(mask, 'float32');
  const counted = tf.greater(m, 0);
  const lr = tf.sub(logpNew, logpOld);
  const rowLogRatio = tf.sum(tf.mul(tf.where(counted, lr, tf.zerosLike(lr)), m), 1);
  const rowA = tf.div(
    tf.sum(tf.mul(tf.where(counted, advantages, tf.zerosLike(advantages)), m), 1),
    tf.maximum(tf.sum(m, 1), 1),
  );
  return { rowLogRatio, rowA };
}

/** Σ over rows / the minibatch's sequence count (Denominators.rows), or the mean over rows when absent. */
function rowMean(x: tf.Tensor, denominators?: Denominators): tf.Scalar {
  return (denominators ? tf.div(tf.sum(x), denominators.rows) : tf.mean(x)) as tf.Scalar;
}

/**
 * TRL RLOOTrainer's loss (trl 1.13 rloo_trainer.py `_compute_loss`; docs/formats.md §7): per sequence i,
 * ρ_i = exp(Σ_t logp − Σ_t logp_old) over counted tokens, L_i = max(−A_i·ρ_i, −A_i·clip(ρ_i, 1−ε, 1+ε)), and the
 * loss is the mean of L_i over the minibatch's sequences (Σ over the micro-batch's rows / Denominators.rows with
 * micro-batches, so the shares sum to the minibatch's mean). `logRatioClamp` bounds the SUMMED log ratio before
 * `exp` in the loss (no gradient past it). The statistics are per sequence, as TRL's: clipFrac the share of
 * sequences whose clipped branch is the larger loss, approxKl the mean of ½·(Σ_t log ratio)², ratioMean/ratioMax
 * over the sequence ratios (unclamped), logRatioClampFrac the share of sequences whose summed log ratio hit the
 * clamp.
 */
export function sequencePolicyLoss(
  logpNew: tf.Tensor,
  logpOld: tf.Tensor,
  advantages: tf.Tensor,
  mask: tf.Tensor,
  clipRange: number,
  logRatioClamp: number,
  denominators?: Denominators,
): PolicyLossResult {
  return tf.tidy(() => {
    const { rowLogRatio, rowA } = sequenceTerms(logpNew, logpOld, advantages, mask);
    const ratio = tf.exp(tf.clipByValue(rowLogRatio, -logRatioClamp, logRatioClamp));
    const negA = tf.neg(rowA);
    const l1 = tf.mul(negA, ratio);
    const l2 = tf.mul(negA, tf.clipByValue(ratio, 1 - clipRange, 1 + clipRange));
    const statRatio = tf.exp(rowLogRatio);
    return {
      loss: rowMean(tf.maximum(l1, l2), denominators),
      clipFrac: rowMean(tf.cast(tf.greater(l2, l1), 'float32'), denominators),
      approxKl: rowMean(tf.mul(0.5, tf.square(rowLogRatio)), denominators),
      ratioMean: rowMean(statRatio, denominators),
      ratioMax: tf.max(statRatio) as tf.Scalar,
      logRatioClampFrac: rowMean(
        tf.cast(tf.greater(tf.abs(rowLogRatio), logRatioClamp), 'float32'),
        denominators,
      ),
    };
  });
}

/** TRL RLOOTrainer's clip statistics, per sequence: ρ_i < 1 − ε with A_i < 0 (low), ρ_i > 1 + ε with A_i > 0 (high). */
export function sequenceClipFractions(
  logpNew: tf.Tensor,
  logpOld: tf.Tensor,
  advantages: tf.Tensor,
  mask: tf.Tensor,
  clipRange: number,
  denominators?: Denominators,
): { low: tf.Scalar; high: tf.Scalar } {
  return tf.tidy(() => {
    const { rowLogRatio, rowA } = sequenceTerms(logpNew, logpOld, advantages, mask);
    const ratio = tf.exp(rowLogRatio);
    const zero = tf.zerosLike(rowA);
    const frac = (b: tf.Tensor) => rowMean(tf.cast(b, 'float32'), denominators);
    return {
      low: frac(tf.logicalAnd(tf.less(ratio, 1 - clipRange), tf.less(rowA, zero))),
      high: frac(tf.logicalAnd(tf.greater(ratio, 1 + clipRange), tf.greater(rowA, zero))),
    };
  });
}

export type ValueLossResult = {
  /** ½·masked mean of max((V − R)², (clip(V, V_old − ε, V_old + ε) − R)²). */
  loss: tf.Scalar;
  /** Fraction of counted tokens where the clipped prediction gives the larger loss. */
  clipFrac: tf.Scalar;
};

/**
 * Clipped value loss: the PREDICTION is clipped around the value from the rollout, never the target.
 */
export function valueLoss(
  vPred: tf.Tensor,
  vOld: tf.Tensor,
  returns: tf.Tensor,
  mask: tf.Tensor,
  clipRangeValue: number,
  denominators?: Denominators,
): ValueLossResult {
  return tf.tidy(() => {
    const m = tf.cast(mask, 'float32');
    const vClipped = tf.add(vOld, tf.clipByValue(tf.sub(vPred, vOld), -clipRangeValue, clipRangeValue));
    const l1 = tf.square(tf.sub(vPred, returns));
    const l2 = tf.square(tf.sub(vClipped, returns));
    return {
      loss: tf.mul(0.5, maskedMeanT(tf.maximum(l1, l2), m, denominators?.tokens)) as tf.Scalar,
      // A token counts as clipped where its prediction lies outside [V_old − ε, V_old + ε] and the clipped loss is
      // the larger: TRL's vf_losses2 > vf_losses1 with torch.clamp, which leaves a prediction inside the range bit
      // for bit itself. V_old + clip(V − V_old) above rounds to a neighbour of V for about 1 in 40 predictions
      // inside the range, and comparing l2 > l1 alone counted half of those as clipped although nothing was. (The
      // loss keeps that form: one rounding either way, and changing it moved every PPO run's trajectory.)
      clipFrac: maskedMeanT(
        tf.cast(
          tf.logicalAnd(
            tf.logicalOr(
              tf.less(vPred, tf.sub(vOld, clipRangeValue)),
              tf.greater(vPred, tf.add(vOld, clipRangeValue)),
            ),
            tf.greater(l2, l1),
          ),
          'float32',
        ),
        m,
        denominators?.tokens,
      ),
    };
  });
}

/**
 * Masked mean entropy of softmax(logits / temperature) over the last axis: logits [N, R, V] with mask [N, R],
 * or [M, V] with mask [M]. H = logsumexp(z) − Σ softmax(z)·z. On WebGPU the per-row entropy is one fused kernel,
 * forward and backward (kernels/webgpu-logprob.ts); elsewhere entropyFromLogitsPlain. `tokens`: the
 * minibatch's counted tokens when these logits are one micro-batch of it (Denominators).
 */
export function entropyFromLogits(
  logits: tf.Tensor,
  mask: tf.Tensor,
  temperature = 1,
  tokens?: number,
): tf.Scalar {
  if (!webGpuLogprobApplies(logits)) return entropyFromLogitsPlain(logits, mask, temperature, tokens);
  return tf.tidy(() => {
    const V = logits.shape[logits.rank - 1];
    const rows = entropyRowsWebGpu(tf.reshape(logits, [-1, V]) as tf.Tensor2D, temperature);
    return maskedMeanT(tf.reshape(rows, logits.shape.slice(0, -1)), mask, tokens);
  });
}

/** entropyFromLogits as tfjs ops (every backend but WebGPU, and the fused kernel's reference). */
export function entropyFromLogitsPlain(
  logits: tf.Tensor,
  mask: tf.Tensor,
  temperature = 1,
  tokens?: number,
): tf.Scalar {
  return tf.tidy(() => {
    const z = temperature === 1 ? logits : tf.div(logits, temperature);
    const axis = z.rank - 1;
    const entropy = tf.sub(tf.logSumExp(z, axis), tf.sum(tf.mul(tf.softmax(z, axis), z), axis));
    return maskedMeanT(entropy, mask, tokens);
  });
}

/**
 * log softmax(logits / temperature) at the chosen token of each row: logits [M, V], tokens [M] → [M]. On WebGPU
 * one fused kernel reads the tokens and the logits' rows directly, 1 dispatch forward and 1 backward
 * (kernels/webgpu-logprob.ts); elsewhere logprobsFromLogitsPlain.
 */
export function logprobsFromLogits(
  logits2d: tf.Tensor2D,
  tokens: tf.Tensor1D | ArrayLike<number>,
  temperature = 1,
): tf.Tensor1D {
  if (!(temperature > 0)) throw new Error(`logprobsFromLogits: temperature must be > 0, got ${temperature}`);
  if (!webGpuLogprobApplies(logits2d) || logits2d.rank !== 2)
    return logprobsFromLogitsPlain(logits2d, tokens, temperature);
  return tf.tidy(() => {
    const tok = tokensTensor(tokens, logits2d.shape[0]);
    return logprobsWebGpu(logits2d, tok, temperature);
  });
}

function tokensTensor(tokens: tf.Tensor1D | ArrayLike<number>, M: number): tf.Tensor1D {
  const tok =
    tokens instanceof tf.Tensor
      ? tokens.dtype === 'int32'
        ? tokens
        : tf.cast(tokens, 'int32')
      : tf.tensor1d(Array.from(tokens), 'int32');
  if (tok.shape[0] !== M)
    throw new Error(`logprobsFromLogits: ${tok.shape[0]} tokens for ${M} rows of logits`);
  return tok;
}

/**
 * logprobsFromLogits as tfjs ops (every backend but WebGPU, and the fused kernel's reference). Gathers M entries
 * of the flattened logits (index row·V + token) instead of building an [M, V] one-hot, which matters for a 50k
 * vocabulary (its gradient is a sparse scatter, not a dense product).
 */
export function logprobsFromLogitsPlain(
  logits2d: tf.Tensor2D,
  tokens: tf.Tensor1D | ArrayLike<number>,
  temperature = 1,
): tf.Tensor1D {
  if (!(temperature > 0)) throw new Error(`logprobsFromLogits: temperature must be > 0, got ${temperature}`);
  return tf.tidy(() => {
    const [M, V] = logits2d.shape;
    const tok = tokensTensor(tokens, M);
    const z = temperature === 1 ? logits2d : tf.div(logits2d, temperature);
    const lse = tf.logSumExp(z, 1); // [M]
    const flatIndex = tf.add(tf.mul(tf.range(0, M, 1, 'int32'), tf.scalar(V, 'int32')), tok); // [M] int32
    const chosen = tf.gather(tf.reshape(z, [M * V]), flatIndex); // [M]
    return tf.sub(chosen, lse) as tf.Tensor1D;
  });
}
