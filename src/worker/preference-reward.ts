/**
 * "Train a reward model from a preference file" in the browser: core's preference pipeline
 * (src/core/reward/preference-pipeline.ts, the same defaults and training as `cli train-reward`) on a scalar
 * model that starts from the configured policy's weights. Bad lines of the file are skipped and listed (the CLI
 * refuses them instead). The result is held in memory as a reward folder (config.json +
 * reward_model.safetensors + reward_stats.json) under PREFERENCE_REWARD_MODEL, which config `reward: {model}`
 * then names.
 */
import { parsePreferences } from '../core/reward/preferences';
import {
  preferenceOptions,
  trainPreferenceRewardModel as trainFromPairs,
} from '../core/reward/preference-pipeline';
import { UserError } from '../common/errors';
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
  if (typeof opts !== 'object' || opts === null || Array.isArray(opts)) {
    throw new UserError('trainRewardModel: options must be an object {steps?, batchSize?, learningRate?}.');
  }
  const { steps, batchSize, learningRate } = opts;
  const options = preferenceOptions({ steps, batchSize, learningRate, seed }, 'trainRewardModel');
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
  const total = options.steps;
  const {
    files,
    result,
    pairs: split,
  } = await trainFromPairs(policyFiles, pairs, options, {
    start: ({ train }) => progress(0, `Training the reward model on ${train} pairs…`),
    log: (log) =>
      progress(
        log.step / total,
        `Reward model: step ${log.step}/${total}, loss ${log.loss.toFixed(3)}, accuracy ${(log.accuracy * 100).toFixed(0)}%`,
      ),
  });
  const report: RewardModelReport = {
    pairs: pairs.length,
    heldOut: split.heldOut,
    trainAccuracy: result.train.accuracy,
    heldOutAccuracy: result.heldOut.accuracy,
    skipped: errors,
  };
  progress(1, `Reward model trained: held-out accuracy ${(report.heldOutAccuracy * 100).toFixed(0)}%.`);
  return { report, files };
}
