/**
 * The PPO maths on plain arrays: one row per sample, one column per response token. Rows may be ragged
 * (unpadded lists) as long as each row of `values` and `mask` have the same length. A mask entry > 0 counts
 * the token (through EOS); 0 is padding. Each function mirrors a TRL helper and is tested against a plain
 * loop or hand-worked numbers.
 */
import type { KlEstimator } from '../../common/config';

/** A batch of rows: number[][] or Float32Array[] alike. */
export type Rows = ReadonlyArray<ArrayLike<number>>;

function checkShapes(name: string, a: Rows, mask: Rows): void {
  if (a.length !== mask.length) {
    throw new Error(`${name}: ${a.length} rows of values but ${mask.length} rows of mask`);
  }
  for (let i = 0; i < a.length; i++) {
    if (a[i].length !== mask[i].length) {
      throw new Error(`${name}: row ${i} has ${a[i].length} values but ${mask[i].length} mask entries`);
    }
  }
}

function sumAndCount(values: Rows, mask: Rows): { sum: number; count: number } {
  let sum = 0;
  let count = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    const m = mask[i];
    for (let t = 0; t < v.length; t++) {
      if (m[t] === 0) continue;
      sum += v[t] * m[t];
      count += m[t];
    }
  }
  return { sum, count };
}

/**
 * Σ mask·values / Σ mask over the whole batch (TRL `masked_mean` without an axis). 0 when nothing counts.
 */
export function maskedMean(values: Rows, mask: Rows): number {
  checkShapes('maskedMean', values, mask);
  const { sum, count } = sumAndCount(values, mask);
  return count === 0 ? 0 : sum / count;
}

/**
 * Unbiased masked variance over the whole batch, as TRL's `masked_var(unbiased=True)`: the masked mean of
 * squared deviations times the Bessel correction n/(n−1), n = Σ mask. 0 when fewer than two entries count
 * (TRL raises for n = 0 and divides by zero for n = 1).
 */
export function maskedVar(values: Rows, mask: Rows): number {
  checkShapes('maskedVar', values, mask);
  const { sum, count } = sumAndCount(values, mask);
  if (count <= 1) return 0;
  const mean = sum / count;
  let sq = 0;
  for (let i = 0; i < values.length; i++) {
    for (let t = 0; t < values[i].length; t++) {
      const m = mask[i][t];
      if (m !== 0) sq += m * (values[i][t] - mean) ** 2;
    }
  }
  return (sq / count) * (count / (count - 1));
}

/**
 * TRL `masked_whiten`: (x − mean)/sqrt(var + 1e-8) with mean and unbiased var over ALL counted entries of the
 * batch (never per row or per minibatch). With `shiftMean = false` the mean is added back (only the scale
 * changes; TRL whitens rewards that way). Masked-out positions are 0 in the result.
 */
export function maskedWhiten(values: Rows, mask: Rows, shiftMean = true): number[][] {
  checkShapes('maskedWhiten', values, mask);
  const mean = maskedMean(values, mask);
  const scale = 1 / Math.sqrt(maskedVar(values, mask) + 1e-8);
  return values.map((row, i) =>
    Array.from(row, (v, t) => {
      if (mask[i][t] === 0) return 0;
      const w = (v - mean) * scale;
      return shiftMean ? w : w + mean;
    }),
  );
}

/**
 * Generalised advantage estimation, backwards over the counted tokens of each row:
 *   δ_t = r_t + γ·V_{t+1} − V_t,   A_t = δ_t + γ·λ·A_{t+1},
 * with V and A taken as 0 after the last counted token (the episode ends there: bootstrap 0). Masked-out
 * positions are skipped by the recursion and get advantage 0 and return 0; elsewhere returns = A + V
 * (the value target, before any whitening of A).
 */
export function gae(
  rewards: Rows,
  values: Rows,
  mask: Rows,
  gamma: number,
  lam: number,
): { advantages: number[][]; returns: number[][] } {
  checkShapes('gae (rewards)', rewards, mask);
  checkShapes('gae (values)', values, mask);
  const advantages: number[][] = [];
  const returns: number[][] = [];
  for (let i = 0; i < rewards.length; i++) {
    const T = rewards[i].length;
    const adv = new Array<number>(T).fill(0);
    const ret = new Array<number>(T).fill(0);
    let nextValue = 0;
    let nextAdv = 0;
    for (let t = T - 1; t >= 0; t--) {
      if (mask[i][t] === 0) continue;
      const v = values[i][t];
      const delta = rewards[i][t] + gamma * nextValue - v;
      nextAdv = delta + gamma * lam * nextAdv;
      nextValue = v;
      adv[t] = nextAdv;
      ret[t] = nextAdv + v;
    }
    advantages.push(adv);
    returns.push(ret);
  }
  return { advantages, returns };
}

/**
 * One per-token KL estimate from the policy's and the reference's log-probability of the sampled token
 * (Schulman's estimators of KL(π‖π_ref) under samples from π):
 *   k1 = logp − ref,   k2 = ½(logp − ref)²,   k3 = (exp(ref − logp) − 1) − (ref − logp).
 * k1 is unbiased but can be negative per token; k2 and k3 are ≥ 0.
 */
export function klEstimate(logp: number, ref: number, estimator: KlEstimator): number {
  const d = logp - ref;
  switch (estimator) {
    case 'k1':
      return d;
    case 'k2':
      return 0.5 * d * d;
    case 'k3':
      return Math.expm1(-d) + d;
  }
}

export interface PerTokenRewards {
  /** r_t = −klCoef·k_t, plus the score at the last counted token; 0 at masked-out positions. */
  rewards: number[][];
  /** k_t from the chosen estimator at counted tokens; 0 elsewhere. */
  kl: number[][];
  /** The KL-penalty part of the reward, −klCoef·k_t (TRL's non_score_reward). */
  nonScore: number[][];
  /** Per sample: Σ_t k1 = Σ (logp − ref), whatever the estimator (the `kl` metric of docs/formats.md §3). */
  k1Sum: number[];
  /** Per sample: Σ_t nonScore (the `nonScoreReward` metric is its mean). */
  nonScoreSum: number[];
}

/**
 * The per-token reward of step 5 of docs/engine.md: r_t = −klCoef·k_t, with the sample's score added at its
 * last counted token. Throws if a row has no counted token (its score would be lost).
 */
export function perTokenRewards(
  scores: ArrayLike<number>,
  logprobs: Rows,
  refLogprobs: Rows,
  mask: Rows,
  klCoef: number,
  estimator: KlEstimator,
): PerTokenRewards {
  checkShapes('perTokenRewards (logprobs)', logprobs, mask);
  checkShapes('perTokenRewards (refLogprobs)', refLogprobs, mask);
  if (scores.length !== mask.length) {
    throw new Error(`perTokenRewards: ${scores.length} scores for ${mask.length} samples`);
  }
  const out: PerTokenRewards = { rewards: [], kl: [], nonScore: [], k1Sum: [], nonScoreSum: [] };
  for (let i = 0; i < mask.length; i++) {
    const T = mask[i].length;
    const kl = new Array<number>(T).fill(0);
    const nonScore = new Array<number>(T).fill(0);
    let last = -1;
    let k1Sum = 0;
    let nonScoreSum = 0;
    for (let t = 0; t < T; t++) {
      if (mask[i][t] === 0) continue;
      last = t;
      kl[t] = klEstimate(logprobs[i][t], refLogprobs[i][t], estimator);
      nonScore[t] = -klCoef * kl[t];
      k1Sum += logprobs[i][t] - refLogprobs[i][t];
      nonScoreSum += nonScore[t];
    }
    if (last < 0) throw new Error(`perTokenRewards: sample ${i} has no counted response token`);
    const rewards = nonScore.slice();
    rewards[last] += scores[i];
    out.rewards.push(rewards);
    out.kl.push(kl);
    out.nonScore.push(nonScore);
    out.k1Sum.push(k1Sum);
    out.nonScoreSum.push(nonScoreSum);
  }
  return out;
}

/**
 * 1 − Var(returns − values) / Var(returns) over counted tokens: 1 = the value model predicts the returns,
 * 0 = no better than their mean, < 0 = worse. NaN when the returns do not vary (as CleanRL).
 */
export function explainedVariance(values: Rows, returns: Rows, mask: Rows): number {
  checkShapes('explainedVariance (values)', values, mask);
  checkShapes('explainedVariance (returns)', returns, mask);
  const varY = maskedVar(returns, mask);
  if (varY === 0) return NaN;
  const residual = returns.map((row, i) => Array.from(row, (r, t) => r - values[i][t]));
  return 1 - maskedVar(residual, mask) / varY;
}
