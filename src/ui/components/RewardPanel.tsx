import { useId } from 'react';
import type { RewardMixTerm, RewardSpec } from '../../common/config';
import { REWARD_NAMES, TASKS } from '../lib/catalog';
import { formatNumber } from '../lib/format';
import {
  useActions,
  useEditedConfigValue,
  useIoTask,
  useProgress,
  useRewardCodeInUse,
  useRewardInWords,
  useRewardModel,
} from '../store/hooks';
import { AppliesOnReset } from './AppliesOnReset';
import { ProgressBar } from './ProgressBar';
import { RewardCodeEditor } from './RewardCodeEditor';

const MAX_WEIGHT = 2;

/** The weights a reward spec gives each built-in reward (the task's own reward counts 1). */
export function mixWeights(reward: RewardSpec | undefined, task: string | null): Record<string, number> {
  const weights: Record<string, number> = Object.fromEntries(REWARD_NAMES.map((r) => [r.name, 0]));
  if (reward === undefined) {
    if (task !== null && task in weights) weights[task] = 1;
  } else if (typeof reward === 'string') weights[reward] = 1;
  else if ('mix' in reward) for (const t of reward.mix) weights[t.name] = (weights[t.name] ?? 0) + t.weight;
  return weights;
}

/** The mix with one weight changed; zero weights drop out (one term always stays). Options are kept. */
export function withWeight(
  reward: RewardSpec | undefined,
  task: string | null,
  name: string,
  weight: number,
): { mix: RewardMixTerm[] } {
  const weights = mixWeights(reward, task);
  weights[name] = weight;
  const old = reward && typeof reward === 'object' && 'mix' in reward ? reward.mix : [];
  const mix: RewardMixTerm[] = REWARD_NAMES.filter((r) => weights[r.name] !== 0).map((r) => {
    const options = old.find((t) => t.name === r.name)?.options;
    return options
      ? { name: r.name, weight: weights[r.name], options }
      : { name: r.name, weight: weights[r.name] };
  });
  return { mix: mix.length > 0 ? mix : [{ name, weight: 0 }] };
}

function RewardMix() {
  const reward = useEditedConfigValue('reward');
  const task = useEditedConfigValue('task');
  const { setConfigValue } = useActions();
  const id = useId();
  const isMix = reward !== undefined && typeof reward === 'object' && 'mix' in reward;
  const isModel = reward !== undefined && typeof reward === 'object' && 'model' in reward;
  const weights = mixWeights(reward, task);
  const taskLabel = TASKS.find((t) => t.name === task)?.label ?? 'none';
  return (
    <div className="reward-mix">
      <span className="field-head">
        <label className="inline">
          <input
            type="checkbox"
            checked={isMix}
            onChange={(e) =>
              setConfigValue(
                'reward',
                e.target.checked ? withWeight(undefined, task, task ?? 'sentiment', 1) : undefined,
              )
            }
          />
          Mix rewards
        </label>
        <AppliesOnReset name="reward" />
      </span>
      {!isMix && (
        <small className="muted">
          {isModel
            ? 'Scoring with a reward model. Tick to use weighted built-in rewards instead.'
            : `Scoring with the task’s reward (${taskLabel}). Tick to weigh several objectives.`}
        </small>
      )}
      {isMix &&
        REWARD_NAMES.map((r) => (
          <div key={r.name} className="weight-row">
            <label htmlFor={`${id}-${r.name}`}>{r.name}</label>
            <input
              id={`${id}-${r.name}`}
              type="range"
              min={-MAX_WEIGHT}
              max={MAX_WEIGHT}
              step={0.05}
              value={weights[r.name]}
              aria-label={`${r.name} weight`}
              onChange={(e) =>
                setConfigValue('reward', withWeight(reward, task, r.name, e.target.valueAsNumber))
              }
            />
            <output>{formatNumber(weights[r.name])}</output>
            <small className="muted">{r.doc}</small>
          </div>
        ))}
    </div>
  );
}

/** Preference pairs (JSONL) → a Bradley–Terry reward model that then scores the samples. */
function PreferenceUpload() {
  const ioTask = useIoTask();
  const progress = useProgress();
  const report = useRewardModel();
  const { trainRewardModel } = useActions();
  const busy = ioTask === 'reward-model';
  return (
    <div className="preferences">
      <label className="file-button">
        {busy ? 'Training reward model…' : 'Preference pairs (JSONL)'}
        <input
          type="file"
          accept=".jsonl,.json,.txt,application/jsonl"
          disabled={ioTask !== null}
          onChange={async (e) => {
            const file = e.target.files?.[0];
            e.target.value = '';
            if (file) await trainRewardModel(await file.text());
          }}
        />
      </label>
      <small className="muted">
        One JSON object per line with a prompt, a chosen and a rejected response.
      </small>
      {busy && <ProgressBar progress={progress} label="Reward model training" />}
      {report && (
        <p className="report" data-testid="reward-model-report">
          Reward model in use: held-out accuracy <strong>{(report.heldOutAccuracy * 100).toFixed(0)}%</strong>{' '}
          (training {(report.trainAccuracy * 100).toFixed(0)}%) on {report.pairs} pairs, {report.heldOut} held
          out.
          {report.skipped.length > 0 && (
            <details>
              <summary>{report.skipped.length} lines skipped</summary>
              <ul>
                {report.skipped.map((s, i) => (
                  <li key={i}>{s}</li>
                ))}
              </ul>
            </details>
          )}
        </p>
      )}
    </div>
  );
}

/** The left column's reward card: task weights, a learned reward model, or your own code. */
export function RewardPanel() {
  const codeInUse = useRewardCodeInUse();
  const inWords = useRewardInWords();
  return (
    <section className="card" aria-labelledby="reward-heading">
      <h2 id="reward-heading">Reward</h2>
      <p className="small" data-testid="reward-source">
        Scoring with: <strong>{inWords ?? (codeInUse ? 'your reward code' : 'the task’s reward')}</strong>
      </p>
      <RewardMix />
      <h3 className="subhead">Reward model</h3>
      <PreferenceUpload />
      <h3 className="subhead">Reward code</h3>
      <RewardCodeEditor />
    </section>
  );
}
