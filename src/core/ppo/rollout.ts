/**
 * The rollout buffer of one PPO step: everything sampled and computed before the update, as plain arrays
 * ([batch][responseLength] rows, padded; `mask` says which tokens count), plus the dump of docs/formats.md §4.
 */
import type { KlEstimator } from '../config';

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
  /** V(state before token t). */
  values: number[][];
  /** Per-token rewards (after whitening when whitenRewards). */
  rewards: number[][];
  /** After whitening when whitenAdvantages. */
  advantages: number[][];
  returns: number[][];
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
  values: number[][];
  rewards: number[][];
  advantages: number[][];
  returns: number[][];
  scores: number[];
}

function cut<T>(rows: T[][], mask: number[][]): T[][] {
  return rows.map((row, i) =>
    row.slice(
      0,
      mask[i].reduce((a, b) => a + b, 0),
    ),
  );
}

/** docs/formats.md §4: one entry per sample, lists unpadded (cut at the last counted token). */
export function rolloutDump(
  r: Rollout,
  step: number,
  p: {
    temperature: number;
    gamma: number;
    lam: number;
    klCoef: number;
    klEstimator: KlEstimator;
    whitenAdvantages: boolean;
  },
): RolloutDump {
  return {
    step,
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
    values: cut(r.values, r.mask),
    rewards: cut(r.rewards, r.mask),
    advantages: cut(r.advantages, r.mask),
    returns: cut(r.returns, r.mask),
    scores: r.penalisedScores,
  };
}
