import { useEffect } from 'react';
import { estimateLine } from '../lib/memory-estimate';
import { useActions, useBackend, useModel, usePlayground } from '../store/hooks';

/** The config keys the estimate depends on (beside the model and the backend). */
const KEYS = [
  'model',
  'task',
  'prompts',
  'reward',
  'algorithm',
  'lora',
  'loraTargets',
  'valueModel',
  'baseDtype',
  'batchSize',
  'miniBatches',
  'responseLength',
  'microBatchSize',
  'recompute',
] as const;

/**
 * What a run of the current config would hold, broken down, before Start (the worker computes it from the model's
 * config.json and the config); it says so when Start would refuse the run, and why. Asks again when the model,
 * the backend or a key it depends on changes. Beside it, the step plan: the one the run's steps use now (the
 * worker's status, after the first step; smaller after the device ran out of memory), else the one the estimate
 * plans (src/core/ppo/gpu-plan.ts describePlan).
 */
export function MemoryEstimate() {
  const model = useModel();
  const backend = useBackend()?.backend ?? null;
  const estimate = usePlayground((s) => s.estimate);
  const planInForce = usePlayground((s) => s.runStatus?.plan?.text ?? null);
  const deps = usePlayground((s) => JSON.stringify(KEYS.map((k) => s.editedConfig[k] ?? null)));
  const { refreshEstimate } = useActions();
  const label = model?.label ?? null;

  useEffect(() => {
    void refreshEstimate();
  }, [refreshEstimate, label, backend, deps]);

  if (!estimate) return null;
  const plan = planInForce ?? estimate.plan ?? null;
  return (
    <div
      className={`memory-estimate small${estimate.problem ? ' memory-estimate-over' : ''}`}
      data-testid="memory-estimate"
      title={`Peak memory of a run of this config, estimated from config.json; ${estimate.budget}.`}
    >
      <span className="muted">Memory estimate </span>
      <span data-testid="memory-estimate-line">{estimateLine(estimate)}</span>
      {plan && (
        <span className="muted" data-testid="memory-plan">
          {` · plan: ${plan}`}
        </span>
      )}
      {estimate.problem && (
        <p className="problem" data-testid="memory-estimate-problem">
          {estimate.problem}
        </p>
      )}
    </div>
  );
}
