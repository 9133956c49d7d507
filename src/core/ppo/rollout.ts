/**
 * The rollout buffer of one PPO step: everything sampled and computed before the update, as plain arrays
 * ([batch][responseLength] rows, padded; `mask` says which tokens count), plus the dump of docs/formats.md §4.
 */
import type { Algorithm, KlEstimator, ScaleRewards } from '../../common/config';

export interface Rollout {
  /** Query ids per sample, unpadded. */
  queries: number[][];
  /** Response ids per sample, padded to R with the PAD id. */
  responses: number[][];
  /** 1 for tokens that count (through the stop token), 0 after. */
  mask: number[][];
  /** log softmax(policy logits / T) of each response token, from the weights that sampled it. */
  logprobs: number[][];
  refLogprobs: number[][];
  /** V(state before token t); null without a value model (critic-free algorithms). */
  values: number[][] | null;
  /**
   * Per-token rewards: ppo −β·k_t + score at the last counted token (after whitening when whitenRewards); rloo and
   * reinforce++ the same without whitening; grpo the score at the last counted token only (its KL is a loss term).
   */
  rewards: number[][];
  /** What the clipped surrogate used: after whitening when whitenAdvantages (ppo); see docs/formats.md §7. */
  advantages: number[][];
  /** The value target A + V (ppo); null for critic-free algorithms. */
  returns: number[][] | null;
  /** The group id of each sample (a group = one prompt, sampled groupSize times). */
  groups: number[];
  /** The task score per sample (raw, before the missing-EOS penalty). */
  scores: number[];
  /** Score actually used in the reward (after the missing-EOS penalty). */
  penalisedScores: number[];
  /** Decoded prompt and response text (for display). */
  promptTexts: string[];
  responseTexts: string[];
  /** Per-token k (the chosen estimator) for display. */
  kl: number[][];
}

export interface RolloutDump {
  step: number;
  algorithm: Algorithm;
  groupSize: number;
  scaleRewards: ScaleRewards;
  normalizeAdvantages: boolean;
  temperature: number;
  gamma: number;
  lam: number;
  klCoef: number;
  klEstimator: KlEstimator;
  whitenAdvantages: boolean;
  queries: number[][];
  responses: number[][];
  responseMask: number[][];
  logprobs: number[][];
  refLogprobs: number[][];
  values: number[][] | null;
  rewards: number[][];
  advantages: number[][];
  returns: number[][] | null;
  scores: number[];
  groups: number[];
}

function cut<T>(rows: T[][], mask: number[][]): T[][] {
  return rows.map((row, i) =>
    row.slice(
      0,
      mask[i].reduce((a, b) => a + b, 0),
    ),
  );
}

/**
 * docs/formats.md §4 and §7: one entry per sample, lists unpadded (cut at the last counted token). `groupSize` is
 * the resolved G (`derived(cfg).groupSize`); pass the config's own 0 and it is taken from `groups`.
 */
export function rolloutDump(
  r: Rollout,
  step: number,
  p: {
    algorithm?: Algorithm;
    groupSize?: number;
    scaleRewards?: ScaleRewards;
    normalizeAdvantages?: boolean;
    temperature: number;
    gamma: number;
    lam: number;
    klCoef: number;
    klEstimator: KlEstimator;
    whitenAdvantages: boolean;
  },
): RolloutDump {
  const G = r.groups.length / new Set(r.groups).size;
  return {
    step,
    algorithm: p.algorithm ?? 'ppo',
    groupSize: p.groupSize || G,
    scaleRewards: p.scaleRewards ?? 'group',
    normalizeAdvantages: p.normalizeAdvantages ?? false,
    temperature: p.temperature,
    gamma: p.gamma,
    lam: p.lam,
    klCoef: p.klCoef,
    klEstimator: p.klEstimator,
    whitenAdvantages: p.whitenAdvantages,
    queries: r.queries,
    responses: cut(r.responses, r.mask),
    responseMask: cut(r.mask, r.mask),
    logprobs: cut(r.logprobs, r.mask),
    refLogprobs: cut(r.refLogprobs, r.mask),
    values: r.values ? cut(r.values, r.mask) : null,
    rewards: cut(r.rewards, r.mask),
    advantages: cut(r.advantages, r.mask),
    returns: r.returns ? cut(r.returns, r.mask) : null,
    scores: r.penalisedScores,
    groups: r.groups,
  };
}
