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
] as const;

export type MetricName = (typeof REQUIRED_METRICS)[number] | (typeof EXTRA_METRICS)[number];
export type StepMetrics = Record<MetricName, number>;

/** One-line meaning of each metric (tooltips, README). */
export const METRIC_DOCS: Record<MetricName, string> = {
  step: 'PPO step, from 1',
  reward: 'mean task score of the batch (before the KL penalty)',
  rewardStd: 'standard deviation of the task score over the batch',
  kl: 'mean over samples of Σ_t (logp − logp_ref): the KL from the reference, nats per sample',
  klCoef: 'KL penalty coefficient β used this step',
  nonScoreReward: 'mean over samples of the summed KL penalty −β·k_t',
  clipFrac: 'fraction of tokens whose policy ratio was clipped',
  approxKl: 'mean ½(log ratio)² between the rollout policy and the updated one (per token, unclamped)',
  policyLoss: 'clipped surrogate loss (mean over minibatches)',
  valueLoss: 'clipped value loss ½·max((V−R)², (clip(V)−R)²)',
  valueClipFrac: 'fraction of tokens whose value prediction was clipped',
  entropy: 'mean per-token entropy of the policy',
  explainedVariance: '1 − Var(R − V)/Var(R): how well values predict returns',
  ratioMean: 'mean policy ratio p_new/p_old (unclamped)',
  ratioMax: 'largest policy ratio (unclamped)',
  logRatioClampFrac: 'fraction of log ratios clamped to ±logRatioClamp',
  gradNorm:
    'global gradient norm of the policy part of the loss before the joint clip (mean over minibatches)',
  advantageMean: 'mean advantage before whitening',
  advantageStd: 'standard deviation of advantages before whitening',
  returnMean: 'mean return',
  responseLength: 'mean counted response length in tokens (through EOS)',
  tokensPerSecond: 'response tokens generated per second of the whole step',
  timeGenerate: 'seconds spent sampling',
  timeScore: 'seconds spent in policy/reference/value forwards and scoring',
  timeUpdate: 'seconds spent in PPO epochs',
  valueGradNorm: 'global gradient norm of vfCoef × value loss before the joint clip (mean over minibatches)',
  eosFraction: 'fraction of responses that emitted the stop token',
  scoreMean: 'mean score after the missing-EOS penalty',
  epochsRun: 'PPO epochs run (fewer when early-stopped on KL)',
  learningRate: 'policy learning rate in force',
  valueLearningRate: 'value learning rate in force',
  timeStep: 'seconds for the whole step',
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
  'valueLoss',
  'valueClipFrac',
  'valueGradNorm',
] as const;
export type MinibatchStatName = (typeof MINIBATCH_STATS)[number];
export type MinibatchStats = Record<MinibatchStatName, number>;

const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const std = (xs: number[]): number => {
  const m = mean(xs);
  return Math.sqrt(mean(xs.map((x) => (x - m) ** 2)));
};

/** Everything a step's metrics come from, on the host. */
export interface StepMeasurements {
  step: number;
  /** Scores as PPO used them (a reward model's centred), before the missing-EOS penalty. */
  scores: number[];
  /** After the missing-EOS penalty. */
  penalisedScores: number[];
  /** Per sample Σ_t k1, and Σ_t of the KL penalty −β·k_t. */
  k1Sum: number[];
  nonScoreSum: number[];
  klCoef: number;
  /** One entry per minibatch update run. */
  minibatches: MinibatchStats[];
  epochsRun: number;
  /** Over counted tokens of the batch. */
  explainedVariance: number;
  advantageMean: number;
  advantageStd: number;
  returnMean: number;
  /** Counted tokens per sample, and whether each emitted the stop token. */
  counted: number[];
  stopped: boolean[];
  learningRate: number;
  valueLearningRate: number;
  /** Seconds. */
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
}

/** The step's metrics: minibatch statistics are means over the updates, except ratioMax (the largest). */
export function stepMetrics(m: StepMeasurements): StepMetrics {
  const col = (k: MinibatchStatName) => m.minibatches.map((s) => s[k]);
  const timeStep = m.timeGenerate + m.timeScore + m.timeUpdate;
  return {
    step: m.step,
    reward: mean(m.scores),
    rewardStd: std(m.scores),
    kl: mean(m.k1Sum),
    klCoef: m.klCoef,
    nonScoreReward: mean(m.nonScoreSum),
    clipFrac: mean(col('clipFrac')),
    approxKl: mean(col('approxKl')),
    policyLoss: mean(col('policyLoss')),
    valueLoss: mean(col('valueLoss')),
    valueClipFrac: mean(col('valueClipFrac')),
    entropy: mean(col('entropy')),
    explainedVariance: m.explainedVariance,
    ratioMean: mean(col('ratioMean')),
    ratioMax: Math.max(...col('ratioMax')),
    logRatioClampFrac: mean(col('logRatioClampFrac')),
    gradNorm: mean(col('gradNorm')),
    advantageMean: m.advantageMean,
    advantageStd: m.advantageStd,
    returnMean: m.returnMean,
    responseLength: mean(m.counted),
    tokensPerSecond: m.counted.reduce((a, b) => a + b, 0) / timeStep,
    timeGenerate: m.timeGenerate,
    timeScore: m.timeScore,
    timeUpdate: m.timeUpdate,
    valueGradNorm: mean(col('valueGradNorm')),
    eosFraction: mean(m.stopped.map(Number)),
    scoreMean: mean(m.penalisedScores),
    epochsRun: m.epochsRun,
    learningRate: m.learningRate,
    valueLearningRate: m.valueLearningRate,
    timeStep,
  };
}
