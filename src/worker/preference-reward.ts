/**
 * "Train a reward model from a preference file" in the browser: Bradley–Terry training (core:
 * src/core/reward/reward-model.ts) of a scalar model that starts from the configured policy's weights.
 * The result is held in memory as a reward folder (config.json + reward_model.safetensors) under
 * PREFERENCE_REWARD_MODEL, which config `reward: {model}` then names.
 */
import { configBytes, loadLM, scalarSafetensors } from '../core/model/folder';
import { ScalarModel } from '../core/model/heads';
import { parsePreferences, splitPreferences } from '../core/reward/preferences';
import { REWARD_STATS_FILE, trainRewardModel } from '../core/reward/reward-model';
import { REWARD_FILE } from '../core/ppo/setup';
import { UserError } from '../core/errors';
import type { ModelFiles } from '../core/model/folder';
import type { RewardModelReport } from './protocol';

export interface PreferenceOptions {
  steps?: number;
  batchSize?: number;
  learningRate?: number;
}

export async function trainPreferenceRewardModel(
  policyFiles: ModelFiles,
  jsonl: string,
  opts: PreferenceOptions,
  seed: number,
  progress: (fraction: number, message: string) => void,
): Promise<{ report: RewardModelReport; files: Map<string, Uint8Array> }> {
  const { pairs, errors } = parsePreferences(jsonl, 'preference file');
  if (pairs.length < 2) {
    const bad = errors.length
      ? ` (${errors.length} bad line${errors.length === 1 ? '' : 's'}: ${errors.slice(0, 3).join('; ')})`
      : '';
    throw new UserError(
      `The preference file has ${pairs.length} usable pair${pairs.length === 1 ? '' : 's'}${bad}; at least 2 are needed ` +
        '(one is held out). Each line: {"prompt": "...", "chosen": "...", "rejected": "..."}.',
    );
  }
  const { train, heldOut } = splitPreferences(pairs, 0.1, seed);
  const steps = opts.steps ?? 100;
  const lm = await loadLM(policyFiles, { trainable: false, label: 'reward-init' });
  const model = ScalarModel.fromTrunk(lm.model, true, 'reward');
  lm.model.dispose();
  try {
    progress(0, `Training the reward model on ${train.length} pairs…`);
    const result = await trainRewardModel(
      model,
      lm.tokenizer,
      train,
      heldOut,
      {
        steps,
        batchSize: opts.batchSize ?? 8,
        learningRate: opts.learningRate ?? 3e-4,
        maxGradNorm: 1,
        seed,
        evalEvery: steps,
        logEvery: Math.max(1, Math.round(steps / 20)),
      },
      (log) =>
        progress(
          log.step / steps,
          `Reward model: step ${log.step}/${steps}, loss ${log.loss.toFixed(3)}, accuracy ${(log.accuracy * 100).toFixed(0)}%`,
        ),
    );
    const files = new Map<string, Uint8Array>([
      ['config.json', configBytes(model.config)],
      [REWARD_FILE, await scalarSafetensors(model)],
      [REWARD_STATS_FILE, new TextEncoder().encode(JSON.stringify(result.stats, null, 2) + '\n')],
    ]);
    const report: RewardModelReport = {
      pairs: pairs.length,
      heldOut: heldOut.length,
      trainAccuracy: result.train.accuracy,
      heldOutAccuracy: result.heldOut.accuracy,
      skipped: errors,
    };
    progress(1, `Reward model trained: held-out accuracy ${(report.heldOutAccuracy * 100).toFixed(0)}%.`);
    return { report, files };
  } finally {
    model.dispose();
  }
}
