/**
 * The export variants issue #34 names (PPO, PPO + LoRA + adaptive KL + a reward model, GRPO's three scalings, Dr.
 * GRPO, GRPO + LoRA with a fractional alpha, RLOO, REINFORCE++), as training-config overrides: the rule-list tests
 * (tests/exports-rules.test.ts) and the engines' own checks (tests/exports-python.test.ts) export the same runs.
 */
export const EXPORT_VARIANTS: Record<string, Record<string, unknown>> = {
  ppo: { algorithm: 'ppo', task: 'sentiment' },
  'ppo lora adaptiveKl': {
    algorithm: 'ppo',
    task: 'sentiment',
    lora: 8,
    adaptiveKl: true,
    targetKl: 4,
    responseLength: 32,
    valueModel: 'separate',
    valueInit: 'reward',
    reward: { model: 'org/rm' },
  },
  'grpo group': { algorithm: 'grpo', task: 'sentiment', batchSize: 16, miniBatches: 2 },
  'grpo batch': { algorithm: 'grpo', task: 'sentiment', scaleRewards: 'batch' },
  'grpo none': { algorithm: 'grpo', task: 'sentiment', scaleRewards: 'none' },
  'dr grpo': { algorithm: 'grpo', task: 'sentiment', scaleRewards: 'none', lossAggregation: 'seq-sum-norm' },
  'grpo lora alpha 12.5': {
    algorithm: 'grpo',
    task: 'sentiment',
    lora: 8,
    loraAlpha: 12.5,
    loraTargets: ['c_attn', 'mlp.c_proj'],
    entropyCoef: 0.01,
  },
  rloo: { algorithm: 'rloo', task: 'sentiment', normalizeAdvantages: true, klEstimator: 'k3' },
  'reinforce++': { algorithm: 'reinforce++', task: 'sentiment', gamma: 0.9, entropyCoef: 0.01 },
};
