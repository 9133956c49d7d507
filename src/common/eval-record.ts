/**
 * What held-out evaluation records (src/core/ppo/eval.ts, docs/eval.md): the metric names it adds to a step's
 * line and one line of `eval.jsonl` (contracts §9). Types and constants only, so the worker protocol and the UI
 * can import them without the model.
 */
/** The metric names evaluation adds to a step's metrics line. */
export const EVAL_METRICS = ['eval/reward', 'eval/kl', 'eval/winRate'] as const;
export type EvalMetricName = (typeof EVAL_METRICS)[number];
export type EvalMetrics = Record<EvalMetricName, number>;

export const EVAL_METRIC_DOCS: Record<EvalMetricName, string> = {
  'eval/reward':
    'Held-out evaluation: mean score of the policy’s answers to the eval prompts (docs/eval.md).',
  'eval/kl':
    'Held-out evaluation: mean over eval prompts of Σ_t (log π − log π_ref) on the policy’s answer, nats per answer.',
  'eval/winRate':
    'Held-out evaluation: fraction of eval prompts where the policy’s score beats the reference’s.',
};

/** One eval prompt's answers and scores (a line of eval.jsonl holds one per prompt). */
export interface EvalSample {
  prompt: string;
  reference: string;
  policy: string;
  referenceReward: number;
  policyReward: number;
}

/** One line of eval.jsonl (contracts §9). */
export interface EvalRecord extends EvalMetrics {
  step: number;
  samples: EvalSample[];
}

/** The keyword of `evalPrompts` that takes the task's held-out split. */
export const HELDOUT = 'heldout';
