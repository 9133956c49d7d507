/**
 * Metric names: one source of truth for metrics.jsonl, the worker's events and the charts (docs/formats.md §3).
 */
export const REQUIRED_METRICS = [
  'step',
  'reward',
  'rewardStd',
  'kl',
  'klCoef',
  'nonScoreReward',
  'clipFrac',
  'approxKl',
  'policyLoss',
  'valueLoss',
  'valueClipFrac',
  'entropy',
  'explainedVariance',
  'ratioMean',
  'ratioMax',
  'logRatioClampFrac',
  'gradNorm',
  'advantageMean',
  'advantageStd',
  'returnMean',
  'responseLength',
  'tokensPerSecond',
  'timeGenerate',
  'timeScore',
  'timeUpdate',
] as const;

/** Extra metrics we log beyond the contract. */
export const EXTRA_METRICS = [
  'valueGradNorm',
  'eosFraction',
  'scoreMean',
  'epochsRun',
  'learningRate',
  'valueLearningRate',
  'timeStep',
  'fracRewardZeroStd',
  'clipFracLow',
  'clipFracHigh',
  'decodeReplays',
] as const;

export type MetricName = (typeof REQUIRED_METRICS)[number] | (typeof EXTRA_METRICS)[number];
/**
 * Metrics that are `null` where they do not exist (docs/formats.md §7): the value model's in critic-free runs
 * (grpo, rloo, reinforce++), and `fracRewardZeroStd` when groupSize is 1 (no groups to compare within).
 */
export const NULLABLE_METRICS = [
  'valueLoss',
  'valueClipFrac',
  'explainedVariance',
  'returnMean',
  'valueGradNorm',
  'valueLearningRate',
  'fracRewardZeroStd',
] as const;
export type NullableMetricName = (typeof NULLABLE_METRICS)[number];
/** One step's metrics: every name; NULLABLE_METRICS may be null, every other is a number. */
export type StepMetrics = Record<Exclude<MetricName, NullableMetricName>, number> &
  Record<NullableMetricName, number | null>;

/** One-line meaning of each metric (tooltips, README). */
export const METRIC_DOCS: Record<MetricName, string> = {
  step: 'training step (rollout + update), from 1',
  reward: 'mean task score of the batch (before the KL penalty)',
  rewardStd:
    'standard deviation of the task score over the batch; with groups (groupSize > 1) the mean over groups of the group’s std',
  kl: 'mean over samples of Σ_t (logp − logp_ref): the KL from the reference, nats per sample',
  klCoef: 'KL penalty coefficient β used this step',
  nonScoreReward: 'mean over samples of the summed KL penalty −β·k_t',
  clipFrac: 'fraction of tokens whose policy ratio was clipped',
  approxKl: 'mean ½(log ratio)² between the rollout policy and the updated one (per token, unclamped)',
  policyLoss: 'clipped surrogate loss (mean over minibatches)',
  valueLoss: 'clipped value loss ½·max((V−R)², (clip(V)−R)²); null without a value model',
  valueClipFrac: 'fraction of tokens whose value prediction was clipped; null without a value model',
  entropy: 'mean per-token entropy of the policy',
  explainedVariance: '1 − Var(R − V)/Var(R): how well values predict returns; null without a value model',
  ratioMean: 'mean policy ratio p_new/p_old (unclamped)',
  ratioMax: 'largest policy ratio (unclamped)',
  logRatioClampFrac: 'fraction of log ratios clamped to ±logRatioClamp',
  gradNorm:
    'global gradient norm of the policy part of the loss before the joint clip (mean over minibatches)',
  advantageMean: 'mean advantage before whitening',
  advantageStd: 'standard deviation of advantages before whitening',
  returnMean: 'mean return (the value target); null without a value model',
  responseLength: 'mean counted response length in tokens (through EOS)',
  tokensPerSecond: 'response tokens generated per second of the whole step',
  timeGenerate: 'seconds spent sampling',
  timeScore: 'seconds spent in policy/reference/value forwards and scoring',
  timeUpdate: 'seconds spent in PPO epochs',
  valueGradNorm:
    'global gradient norm of vfCoef × value loss before the joint clip (mean over minibatches); null without a value model',
  eosFraction: 'fraction of responses that emitted the stop token',
  scoreMean: 'mean score after the missing-EOS penalty',
  epochsRun: 'PPO epochs run (fewer when early-stopped on KL)',
  learningRate: 'policy learning rate in force',
  valueLearningRate: 'value learning rate in force; null without a value model',
  timeStep: 'seconds for the whole step',
  fracRewardZeroStd:
    'share of groups whose scores are all equal (no learning signal from them); null when groupSize is 1',
  clipFracLow: 'fraction of tokens with ratio < 1 − ε and a negative advantage (clipped from below)',
  clipFracHigh: 'fraction of tokens with ratio > 1 + ε and a positive advantage (clipped from above)',
  decodeReplays:
    'decode tokens this step ran as replays of the recorded first token (WebGPU with decodeReplay on; summed over generation slices); 0 elsewhere',
};

// ---------------------------------------------------------------------------------------------------------
// One step's metrics, assembled from what the step measured (step 9 of the trainer).

/** What each minibatch update measures, read back with its guard (src/core/ppo/update.ts). */
export const MINIBATCH_STATS = [
  'policyLoss',
  'clipFrac',
  'approxKl',
  'ratioMean',
  'ratioMax',
  'logRatioClampFrac',
  'entropy',
  'gradNorm',
  'clipFracLow',
  'clipFracHigh',
] as const;
/** Measured only when there is a value model. */
export const VALUE_MINIBATCH_STATS = ['valueLoss', 'valueClipFrac', 'valueGradNorm'] as const;
export type MinibatchStatName = (typeof MINIBATCH_STATS)[number];
export type ValueMinibatchStatName = (typeof VALUE_MINIBATCH_STATS)[number];
export type MinibatchStats = Record<MinibatchStatName, number> &
  Partial<Record<ValueMinibatchStatName, number>>;

const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** Everything a step's metrics come from, on the host. */
export interface StepMeasurements {
  step: number;
  /** Scores as PPO used them (a reward model's centred), before the missing-EOS penalty. */
  scores: number[];
  /** rewardStd and fracRewardZeroStd (advantages.ts `groupStats`). */
  rewardStd: number;
  fracRewardZeroStd: number | null;
  /** Whether a value model exists: without one the value metrics are null. */
  hasValueModel: boolean;
  /** After the missing-EOS penalty. */
  penalisedScores: number[];
  /** Per sample Σ_t k1, and Σ_t of the KL penalty −β·k_t. */
  k1Sum: number[];
  nonScoreSum: number[];
  klCoef: number;
  /** One entry per minibatch update run. */
  minibatches: MinibatchStats[];
  epochsRun: number;
  /** Over counted tokens of the batch (null without a value model). */
  explainedVariance: number | null;
  advantageMean: number;
  advantageStd: number;
  returnMean: number | null;
  /** Counted tokens per sample, and whether each emitted the stop token. */
  counted: number[];
  stopped: boolean[];
  learningRate: number;
  valueLearningRate: number;
  /** Decode tokens run as replays (model/decode-replay.ts); 0 when none. */
  decodeReplays?: number;
  /** Seconds. */
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
}

/** The step's metrics: minibatch statistics are means over the updates, except ratioMax (the largest). */
export function stepMetrics(m: StepMeasurements): StepMetrics {
  const col = (k: MinibatchStatName) => m.minibatches.map((s) => s[k]);
  const vcol = (k: ValueMinibatchStatName): number | null =>
    m.hasValueModel ? mean(m.minibatches.map((s) => s[k] ?? NaN)) : null;
  const timeStep = m.timeGenerate + m.timeScore + m.timeUpdate;
  return {
    step: m.step,
    reward: mean(m.scores),
    rewardStd: m.rewardStd,
    kl: mean(m.k1Sum),
    klCoef: m.klCoef,
    nonScoreReward: mean(m.nonScoreSum),
    clipFrac: mean(col('clipFrac')),
    approxKl: mean(col('approxKl')),
    policyLoss: mean(col('policyLoss')),
    valueLoss: vcol('valueLoss'),
    valueClipFrac: vcol('valueClipFrac'),
    entropy: mean(col('entropy')),
    explainedVariance: m.hasValueModel ? m.explainedVariance : null,
    ratioMean: mean(col('ratioMean')),
    ratioMax: Math.max(...col('ratioMax')),
    logRatioClampFrac: mean(col('logRatioClampFrac')),
    gradNorm: mean(col('gradNorm')),
    advantageMean: m.advantageMean,
    advantageStd: m.advantageStd,
    returnMean: m.hasValueModel ? m.returnMean : null,
    responseLength: mean(m.counted),
    tokensPerSecond: m.counted.reduce((a, b) => a + b, 0) / timeStep,
    timeGenerate: m.timeGenerate,
    timeScore: m.timeScore,
    timeUpdate: m.timeUpdate,
    valueGradNorm: vcol('valueGradNorm'),
    eosFraction: mean(m.stopped.map(Number)),
    scoreMean: mean(m.penalisedScores),
    epochsRun: m.epochsRun,
    learningRate: m.learningRate,
    valueLearningRate: m.hasValueModel ? m.valueLearningRate : null,
    timeStep,
    fracRewardZeroStd: m.fracRewardZeroStd,
    clipFracLow: mean(col('clipFracLow')),
    clipFracHigh: mean(col('clipFracHigh')),
    decodeReplays: m.decodeReplays ?? 0,
  };
}
