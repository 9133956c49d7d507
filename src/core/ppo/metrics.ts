/**
 * Metric names: one source of truth for metrics.jsonl, the worker's events and the charts (contracts.md §3).
 */
export const REQUIRED_METRICS = [
  'step', 'reward', 'rewardStd', 'kl', 'klCoef', 'nonScoreReward', 'clipFrac', 'approxKl', 'policyLoss',
  'valueLoss', 'valueClipFrac', 'entropy', 'explainedVariance', 'ratioMean', 'ratioMax', 'logRatioClampFrac',
  'gradNorm', 'advantageMean', 'advantageStd', 'returnMean', 'responseLength', 'tokensPerSecond',
  'timeGenerate', 'timeScore', 'timeUpdate',
] as const;

/** Extra metrics we log beyond the contract. */
export const EXTRA_METRICS = [
  'valueGradNorm', 'eosFraction', 'scoreMean', 'epochsRun', 'learningRate', 'valueLearningRate', 'timeStep',
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
  approxKl: 'mean ½(log ratio)² between the rollout policy and the updated one (per token)',
  policyLoss: 'clipped surrogate loss (mean over minibatches)',
  valueLoss: 'clipped value loss ½·max((V−R)², (clip(V)−R)²)',
  valueClipFrac: 'fraction of tokens whose value prediction was clipped',
  entropy: 'mean per-token entropy of the policy',
  explainedVariance: '1 − Var(R − V)/Var(R): how well values predict returns',
  ratioMean: 'mean policy ratio p_new/p_old',
  ratioMax: 'largest policy ratio',
  logRatioClampFrac: 'fraction of log ratios clamped to ±logRatioClamp',
  gradNorm: 'policy global gradient norm before clipping (mean over minibatches)',
  advantageMean: 'mean advantage before whitening',
  advantageStd: 'standard deviation of advantages before whitening',
  returnMean: 'mean return',
  responseLength: 'mean counted response length in tokens (through EOS)',
  tokensPerSecond: 'response tokens generated per second of the whole step',
  timeGenerate: 'seconds spent sampling',
  timeScore: 'seconds spent in policy/reference/value forwards and scoring',
  timeUpdate: 'seconds spent in PPO epochs',
  valueGradNorm: 'value-model global gradient norm before clipping',
  eosFraction: 'fraction of responses that emitted the stop token',
  scoreMean: 'mean score after the missing-EOS penalty',
  epochsRun: 'PPO epochs run (fewer when early-stopped on KL)',
  learningRate: 'policy learning rate in force',
  valueLearningRate: 'value learning rate in force',
  timeStep: 'seconds for the whole step',
};
