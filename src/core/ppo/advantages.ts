/**
 * The critic-free algorithms' maths on plain arrays (docs/formats.md §7, docs/engine.md "Critic-free
 * algorithms"): GRPO's group-relative advantages, RLOO's leave-one-out baseline, REINFORCE++'s whitened
 * discounted returns, the group statistics (`rewardStd`, `fracRewardZeroStd`) and the three loss aggregations as a
 * plain-loop reference. Samples are in groups of G consecutive rows (sample i belongs to group ⌊i / G⌋: the
 * trainer repeats each prompt G times in one batch). Tested against hand-worked numbers in
 * tests/algorithms.test.ts.
 */
import type { KlEstimator, LossAggregation, ScaleRewards } from '../../common/config';
import { gae, maskedWhiten, perTokenRewards, type PerTokenRewards, type Rows } from './math';

/** Added to a standard deviation before dividing by it (TRL GRPOTrainer's 1e-4). */
export const GRPO_STD_EPS = 1e-4;

/** The group id of each of `n` samples in groups of `G` consecutive samples. */
export function groupIds(n: number, G: number): number[] {
  checkGroups(n, G, 'groupIds');
  return Array.from({ length: n }, (_, i) => Math.floor(i / G));
}

function checkGroups(n: number, G: number, where: string): void {
  if (!Number.isInteger(G) || G < 1 || n % G !== 0) {
    throw new Error(`${where}: ${n} samples cannot be split into groups of ${G}`);
  }
}

const mean = (xs: ArrayLike<number>): number => {
  let s = 0;
  for (let i = 0; i < xs.length; i++) s += xs[i];
  return xs.length ? s / xs.length : 0;
};

/** Unbiased standard deviation (n − 1); 0 for fewer than two values. */
export function stdUnbiased(xs: ArrayLike<number>): number {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  let sq = 0;
  for (let i = 0; i < xs.length; i++) sq += (xs[i] - m) ** 2;
  return Math.sqrt(sq / (xs.length - 1));
}

function groupsOf(xs: ArrayLike<number>, G: number): number[][] {
  const out: number[][] = [];
  for (let s = 0; s < xs.length; s += G) out.push(Array.from({ length: G }, (_, k) => xs[s + k]));
  return out;
}

export interface GroupStats {
  /** Mean over groups of the group's unbiased std; with G = 1 the batch's population std (PPO's rewardStd). */
  rewardStd: number;
  /** Share of groups whose scores are all equal; null when G = 1 (no groups to compare within). */
  fracRewardZeroStd: number | null;
}

/** `rewardStd` and `fracRewardZeroStd` of docs/formats.md §7 from per-sample scores in groups of G. */
export function groupStats(scores: ArrayLike<number>, G: number): GroupStats {
  checkGroups(scores.length, G, 'groupStats');
  if (G === 1) {
    const m = mean(scores);
    let sq = 0;
    for (let i = 0; i < scores.length; i++) sq += (scores[i] - m) ** 2;
    return { rewardStd: Math.sqrt(scores.length ? sq / scores.length : 0), fracRewardZeroStd: null };
  }
  const groups = groupsOf(scores, G);
  const stds = groups.map(stdUnbiased);
  const zero = groups.filter((g) => g.every((x) => x === g[0])).length;
  return { rewardStd: mean(stds), fracRewardZeroStd: zero / groups.length };
}

/**
 * GRPO (TRL GRPOTrainer): A_i = s_i − mean_g(s), divided by std_g(s) + 1e-4 ("group"), by the batch's
 * std(s) + 1e-4 ("batch") or not at all ("none", Dr. GRPO); stds unbiased. One advantage per sample. A group whose
 * scores are all equal gets A = 0 (0 / 1e-4), never NaN.
 */
export function grpoAdvantages(scores: ArrayLike<number>, G: number, scale: ScaleRewards): number[] {
  checkGroups(scores.length, G, 'grpoAdvantages');
  const groups = groupsOf(scores, G);
  const batchStd = stdUnbiased(scores);
  const out: number[] = [];
  for (const g of groups) {
    const m = mean(g);
    const div =
      scale === 'group' ? stdUnbiased(g) + GRPO_STD_EPS : scale === 'batch' ? batchStd + GRPO_STD_EPS : 1;
    for (const s of g) out.push((s - m) / div);
  }
  return out;
}

export interface RlooResult {
  /** r_i = s_i − klCoef·Σ_t k_t (the sequence-level KL-penalised reward). */
  sequenceRewards: number[];
  /** A_i = r_i − mean of r_j over the other G − 1 samples of i's group; whitened over the batch with normalize. */
  advantages: number[];
  /** The per-token rewards (−klCoef·k_t, plus s_i at the last counted token: they sum to r_i) and KL sums. */
  perToken: PerTokenRewards;
}

/**
 * RLOO (Ahmadian et al. 2024, TRL RLOOTrainer): r_i = s_i − klCoef·Σ_t k_t with k the `estimator` (k1 by default,
 * docs/formats.md §7), A_i = r_i − (Σ_{j≠i in the group} r_j) / (G − 1); `normalize` whitens A over the batch's
 * samples ((A − mean) / √(var + 1e-8), unbiased var, as maskedWhiten). G must be ≥ 2.
 */
export function rlooAdvantages(
  scores: ArrayLike<number>,
  logprobs: Rows,
  refLogprobs: Rows,
  mask: Rows,
  klCoef: number,
  estimator: KlEstimator,
  G: number,
  normalize: boolean,
): RlooResult {
  checkGroups(scores.length, G, 'rlooAdvantages');
  if (G < 2)
    throw new Error(`rlooAdvantages: the leave-one-out baseline needs groups of 2 or more, got ${G}`);
  const perToken = perTokenRewards(scores, logprobs, refLogprobs, mask, klCoef, estimator);
  const r = perToken.nonScoreSum.map((ns, i) => scores[i] + ns);
  const adv: number[] = [];
  for (const g of groupsOf(r, G)) {
    const sum = g.reduce((a, b) => a + b, 0);
    for (const ri of g) adv.push(ri - (sum - ri) / (G - 1));
  }
  const advantages = normalize ? maskedWhiten([adv], [adv.map(() => 1)])[0] : adv;
  return { sequenceRewards: r, advantages, perToken };
}

export interface ReinforcePPResult {
  /** G_t = Σ_{k≥t} γ^{k−t} r_k over counted tokens (0 at padding). */
  returns: number[][];
  /** The returns whitened over all counted tokens of the batch. */
  advantages: number[][];
  /** r_t = −klCoef·k_t, plus s_i at the last counted token. */
  perToken: PerTokenRewards;
}

/**
 * REINFORCE++ (OpenRLHF): per-token r_t = −klCoef·k_t (k the `estimator`, k1 by default) plus s_i at the last
 * counted token; G_t = Σ_{k≥t} γ^{k−t} r_k over counted tokens (GAE with V = 0 and λ = 1 is exactly that sum);
 * advantages = G whitened over all counted tokens of the batch (maskedWhiten).
 */
export function reinforcePlusPlus(
  scores: ArrayLike<number>,
  logprobs: Rows,
  refLogprobs: Rows,
  mask: Rows,
  klCoef: number,
  estimator: KlEstimator,
  gamma: number,
): ReinforcePPResult {
  const perToken = perTokenRewards(scores, logprobs, refLogprobs, mask, klCoef, estimator);
  const zeros = mask.map((m) => new Array<number>(m.length).fill(0));
  const { advantages: returns } = gae(perToken.rewards, zeros, mask, gamma, 1);
  return { returns, advantages: maskedWhiten(returns, mask, true), perToken };
}

/** One advantage per sample, put at every counted token of its row (0 at padding). */
export function broadcastToTokens(perSample: ArrayLike<number>, mask: Rows): number[][] {
  if (perSample.length !== mask.length) {
    throw new Error(`broadcastToTokens: ${perSample.length} values for ${mask.length} samples`);
  }
  return mask.map((m, i) => Array.from(m, (x) => (x === 0 ? 0 : perSample[i])));
}

/**
 * The loss aggregations of docs/formats.md §7 over a minibatch of per-token losses, as a plain loop (the
 * reference the tensor version in losses.ts is tested against):
 *   token-mean:   Σ_i Σ_t L·m / Σ_i Σ_t m
 *   seq-mean:     mean_i (Σ_t L·m / Σ_t m)
 *   seq-sum-norm: Σ_i Σ_t L·m / (n · responseLength)   (Dr. GRPO)
 */
export function aggregateLoss(
  perToken: Rows,
  mask: Rows,
  kind: LossAggregation,
  responseLength: number,
): number {
  let total = 0;
  let count = 0;
  let seqSum = 0;
  for (let i = 0; i < perToken.length; i++) {
    let rowSum = 0;
    let rowCount = 0;
    for (let t = 0; t < perToken[i].length; t++) {
      if (mask[i][t] === 0) continue;
      rowSum += perToken[i][t] * mask[i][t];
      rowCount += mask[i][t];
    }
    total += rowSum;
    count += rowCount;
    seqSum += rowCount > 0 ? rowSum / rowCount : 0;
  }
  const n = perToken.length;
  switch (kind) {
    case 'token-mean':
      return count > 0 ? total / count : 0;
    case 'seq-mean':
      return n > 0 ? seqSum / n : 0;
    case 'seq-sum-norm':
      return n > 0 ? total / (n * responseLength) : 0;
  }
}
