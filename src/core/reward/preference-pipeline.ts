/**
 * A reward model from preference pairs, end to end, for both `cli train-reward` (src/cli/train-reward.ts) and the
 * worker's "train a reward model from a preference file" (src/worker/preference-reward.ts): one defaults table,
 * one validation, one held-out split, the Bradley–Terry training of src/core/reward/reward-model.ts on a scalar
 * model started from a model folder's trunk, and the reward folder it makes (config.json +
 * reward_model.safetensors + reward_stats.json) that PPO's `"reward": {"model": …}` loads.
 *
 * Platform-neutral: the adapters read the preference text and the trunk's files, and write or hold the result.
 */
import { configBytes, loadLM, scalarSafetensors, type ModelFiles } from '../model/folder';
import { ScalarModel } from '../model/heads';
import { UserError } from '../../common/errors';
import { splitPreferences, type PreferencePair } from './preferences';
import {
  REWARD_FILE,
  REWARD_STATS_FILE,
  trainRewardModel,
  type RewardLog,
  type RewardTrainResult,
} from './reward-model';

export interface PreferenceTrainOptions {
  steps: number;
  /** Pairs per step. */
  batchSize: number;
  learningRate: number;
  /** Global gradient-norm clip; 0 = off. */
  maxGradNorm: number;
  seed: number;
  /** Fraction of the pairs held out to report accuracy. */
  heldOut: number;
  /** Evaluate on the held-out pairs every this many steps (and at the end). */
  evalEvery: number;
  /** Keep the token and position embeddings fixed. */
  freezeEmbeddings: boolean;
  /** Scale the head so scores have std 1 on the training responses. */
  normalise: boolean;
}

interface NumRule {
  dflt: number;
  min: number;
  max: number;
  integer?: boolean;
  /** The lower bound itself is not allowed. */
  openMin?: boolean;
}

/**
 * The one defaults table (defaults and allowed ranges) of reward-model training, for the CLI and the browser.
 * 100 steps of 8 pairs at 3e-4: a couple of minutes for the built-in tiny model on WASM, and enough for the
 * easy preference sets (tests/reward-model.test.ts, public/preferences/sentiment-pairs.jsonl) to pass 0.8
 * held-out accuracy; larger sets and models raise `steps` (configs/reward-sentiment.json sets its own).
 */
export const PREFERENCE_NUMBERS: Readonly<
  Record<Exclude<keyof PreferenceTrainOptions, 'freezeEmbeddings' | 'normalise'>, NumRule>
> = {
  steps: { dflt: 100, min: 1, max: 1e6, integer: true },
  batchSize: { dflt: 8, min: 1, max: 4096, integer: true },
  learningRate: { dflt: 3e-4, min: 0, max: 1, openMin: true },
  maxGradNorm: { dflt: 1, min: 0, max: 1e6 },
  seed: { dflt: 1, min: 0, max: 2 ** 32 - 1, integer: true },
  heldOut: { dflt: 0.1, min: 0, max: 0.5, openMin: true },
  evalEvery: { dflt: 20, min: 1, max: 1e6, integer: true },
};
export const PREFERENCE_BOOLEANS: Readonly<Record<'freezeEmbeddings' | 'normalise', boolean>> = {
  freezeEmbeddings: false,
  normalise: true,
};
export const PREFERENCE_KEYS = [
  ...Object.keys(PREFERENCE_NUMBERS),
  ...Object.keys(PREFERENCE_BOOLEANS),
] as (keyof PreferenceTrainOptions)[];

/** Every default, from the table. */
export const PREFERENCE_DEFAULTS: Readonly<PreferenceTrainOptions> = Object.freeze({
  ...(Object.fromEntries(Object.entries(PREFERENCE_NUMBERS).map(([k, r]) => [k, r.dflt])) as Omit<
    PreferenceTrainOptions,
    'freezeEmbeddings' | 'normalise'
  >),
  ...PREFERENCE_BOOLEANS,
});

/** Progress reports: every `logEvery(steps)` steps (about 20 reports a run, at least every 10 steps). */
export function logEvery(steps: number): number {
  return Math.min(10, Math.max(1, Math.round(steps / 20)));
}

/**
 * The options from `raw` (keys not given, or undefined, take the defaults); every value is checked against the
 * table. Keys outside the table are left to the caller (the CLI's config also has `model` and `data`).
 * `where` starts each message ("train-reward", "trainRewardModel").
 */
export function preferenceOptions(raw: Record<string, unknown>, where: string): PreferenceTrainOptions {
  const out: Record<string, unknown> = {};
  for (const [k, r] of Object.entries(PREFERENCE_NUMBERS) as [string, NumRule][]) {
    const v = raw[k] ?? r.dflt;
    const ok =
      typeof v === 'number' &&
      Number.isFinite(v) &&
      (r.openMin ? v > r.min : v >= r.min) &&
      v <= r.max &&
      (!r.integer || Number.isInteger(v));
    if (!ok) {
      const range = `${r.openMin ? 'above' : 'from'} ${r.min} ${r.openMin ? 'up ' : ''}to ${r.max}`;
      throw new UserError(
        `${where}: "${k}" must be ${r.integer ? 'an integer' : 'a number'} ${range}, got ${JSON.stringify(v)}.`,
      );
    }
    out[k] = v;
  }
  for (const [k, dflt] of Object.entries(PREFERENCE_BOOLEANS)) {
    const v = raw[k] ?? dflt;
    if (typeof v !== 'boolean')
      throw new UserError(`${where}: "${k}" must be true or false, got ${JSON.stringify(v)}.`);
    out[k] = v;
  }
  return out as unknown as PreferenceTrainOptions;
}

export interface PreferenceRewardResult {
  /** The reward folder: config.json, reward_model.safetensors, reward_stats.json. */
  files: Map<string, Uint8Array>;
  result: RewardTrainResult;
  /** How many pairs were trained on and held out. */
  pairs: { train: number; heldOut: number };
  /** The trunk's context length (sequences longer than it were cut: `result.truncated`). */
  nPositions: number;
}

export interface PreferenceHooks {
  /** Every `logEvery(steps)` steps, with held-out metrics on evaluation steps. */
  log?(log: RewardLog): void;
  /** Before training starts. */
  start?(info: { train: number; heldOut: number; label: string }): void;
}

/**
 * Train a Bradley–Terry reward model on `pairs`, starting from the trunk of the model in `trunk` with a zero
 * scalar head; `opts` from `preferenceOptions`. `extraStats` are added to reward_stats.json (the CLI records the
 * data path). The model's tensors are freed before this returns.
 */
export async function trainPreferenceRewardModel(
  trunk: ModelFiles,
  pairs: PreferencePair[],
  opts: PreferenceTrainOptions,
  hooks: PreferenceHooks = {},
  extraStats: Record<string, unknown> = {},
): Promise<PreferenceRewardResult> {
  const { train, heldOut } = splitPreferences(pairs, opts.heldOut, opts.seed);
  const lm = await loadLM(trunk, { trainable: false, label: 'reward-init' });
  const model = ScalarModel.fromTrunk(lm.model, true, 'reward');
  lm.model.dispose();
  try {
    hooks.start?.({ train: train.length, heldOut: heldOut.length, label: trunk.label });
    const result = await trainRewardModel(
      model,
      lm.tokenizer,
      train,
      heldOut,
      {
        steps: opts.steps,
        batchSize: opts.batchSize,
        learningRate: opts.learningRate,
        maxGradNorm: opts.maxGradNorm,
        seed: opts.seed,
        evalEvery: opts.evalEvery,
        logEvery: logEvery(opts.steps),
        freezeEmbeddings: opts.freezeEmbeddings,
        normalise: opts.normalise,
      },
      (l) => hooks.log?.(l),
    );
    const stats = {
      ...result.stats,
      note:
        `score.weight was multiplied by "scale" so the model's scores on the training responses have std 1; ` +
        `"mean" is their mean after scaling (the head has no bias to remove it). Scores are read at the EOS that ends prompt + response.`,
      steps: result.steps,
      trainAccuracy: result.train.accuracy,
      heldOutAccuracy: result.heldOut.accuracy,
      heldOutLoss: result.heldOut.loss,
      pairs: { train: train.length, heldOut: heldOut.length },
      ...extraStats,
    };
    const files = new Map<string, Uint8Array>([
      ['config.json', configBytes(model.config)],
      [REWARD_FILE, await scalarSafetensors(model)],
      [REWARD_STATS_FILE, new TextEncoder().encode(JSON.stringify(stats, null, 2) + '\n')],
    ]);
    return {
      files,
      result,
      pairs: { train: train.length, heldOut: heldOut.length },
      nPositions: model.config.n_positions,
    };
  } finally {
    model.dispose();
  }
}
