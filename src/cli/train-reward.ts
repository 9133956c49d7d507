/**
 * `train-reward`: a Bradley–Terry reward model from preference pairs (src/core/reward/reward-model.ts).
 * The output folder is what PPO's `"reward": {"model": DIR}` loads (config.json + reward_model.safetensors),
 * plus metrics.jsonl and reward_stats.json (the reward scale; see reward-model.ts).
 */
import { readFile, appendFile, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { parse, num, str } from './args';
import { setNodeBackend } from './backend-node';
import { assertFolder, nodeFiles, writeFolder } from './files-node';
import { resolveModel } from './models';
import { readJsonFile } from './train';
import { loadLM, configBytes, scalarSafetensors } from '../core/model/folder';
import { ScalarModel } from '../core/model/heads';
import { REWARD_FILE } from '../core/ppo/setup';
import { loadPreferences, splitPreferences } from '../core/reward/preferences';
import {
  trainRewardModel,
  REWARD_STATS_FILE,
  type RewardLog,
  type RewardTrainOptions,
} from '../core/reward/reward-model';
import { UserError } from '../core/errors';

export const TRAIN_REWARD_HELP = `train-reward --config FILE --out DIR [--steps N] [--backend wasm|cpu] [--json]
  Train a Bradley–Terry reward model on preference pairs (JSONL lines {"prompt", "chosen", "rejected"}).
  Config JSON keys: model (preset or folder whose trunk to start from, default "tiny"), data (JSONL path,
  relative to the config file's folder), steps, batchSize, learningRate, maxGradNorm, seed, heldOut (fraction
  held out for evaluation), evalEvery, freezeEmbeddings, normalise. Writes DIR/config.json,
  DIR/${REWARD_FILE}, DIR/metrics.jsonl, DIR/${REWARD_STATS_FILE}; use it in PPO as "reward": {"model": "DIR"}.`;

interface NumKey {
  dflt: number;
  min: number;
  max: number;
  integer?: boolean;
  /** The lower bound itself is not allowed. */
  openMin?: boolean;
}

/** Numeric config keys: default and allowed range (one table drives defaults, validation and messages). */
const NUM_KEYS: Record<string, NumKey> = {
  steps: { dflt: 200, min: 1, max: 1e6, integer: true },
  batchSize: { dflt: 16, min: 1, max: 4096, integer: true },
  learningRate: { dflt: 1e-4, min: 0, max: 1, openMin: true },
  maxGradNorm: { dflt: 1, min: 0, max: 1e6 },
  seed: { dflt: 1, min: 0, max: 2 ** 32 - 1, integer: true },
  heldOut: { dflt: 0.1, min: 0, max: 0.5, openMin: true },
  evalEvery: { dflt: 50, min: 1, max: 1e6, integer: true },
};
const BOOL_KEYS = { freezeEmbeddings: false, normalise: true };
const KEYS = ['model', 'data', ...Object.keys(NUM_KEYS), ...Object.keys(BOOL_KEYS)];

export interface TrainRewardConfig {
  model: string;
  /** Absolute path of the JSONL file. */
  data: string;
  steps: number;
  batchSize: number;
  learningRate: number;
  maxGradNorm: number;
  seed: number;
  heldOut: number;
  evalEvery: number;
  freezeEmbeddings: boolean;
  normalise: boolean;
}

/** Validate a parsed config object; `cfgPath` names it in messages and anchors the relative data path. */
export function validateRewardConfig(raw: unknown, cfgPath: string): TrainRewardConfig {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new UserError(
      `train-reward: config ${cfgPath} must be a JSON object with keys: ${KEYS.join(', ')}.`,
    );
  }
  const obj = raw as Record<string, unknown>;
  for (const k of Object.keys(obj)) {
    if (!KEYS.includes(k))
      throw new UserError(
        `train-reward: unknown config key "${k}" in ${cfgPath}; allowed: ${KEYS.join(', ')}.`,
      );
  }
  const out: Record<string, unknown> = {};
  for (const [k, r] of Object.entries(NUM_KEYS)) {
    const v = obj[k] ?? r.dflt;
    const ok =
      typeof v === 'number' &&
      Number.isFinite(v) &&
      (r.openMin ? v > r.min : v >= r.min) &&
      v <= r.max &&
      (!r.integer || Number.isInteger(v));
    if (!ok) {
      const range = `${r.openMin ? 'above' : 'from'} ${r.min} ${r.openMin ? 'up ' : ''}to ${r.max}`;
      throw new UserError(
        `train-reward: "${k}" must be ${r.integer ? 'an integer' : 'a number'} ${range}, got ${JSON.stringify(v)}.`,
      );
    }
    out[k] = v;
  }
  for (const [k, dflt] of Object.entries(BOOL_KEYS)) {
    const v = obj[k] ?? dflt;
    if (typeof v !== 'boolean')
      throw new UserError(`train-reward: "${k}" must be true or false, got ${JSON.stringify(v)}.`);
    out[k] = v;
  }
  const model = obj.model ?? 'tiny';
  if (typeof model !== 'string' || model === '')
    throw new UserError(
      `train-reward: "model" must be a preset name or a folder path, got ${JSON.stringify(model)}.`,
    );
  if (typeof obj.data !== 'string' || obj.data === '') {
    throw new UserError(
      `train-reward: "data" must be the path of a JSONL preference file (relative to ${path.dirname(cfgPath)}), got ${JSON.stringify(obj.data)}.`,
    );
  }
  return {
    ...(out as Omit<TrainRewardConfig, 'model' | 'data'>),
    model,
    data: path.resolve(path.dirname(cfgPath), obj.data),
  };
}

function fmtLog(l: RewardLog, steps: number): string {
  let s =
    `step ${l.step}/${steps} loss ${l.loss.toFixed(4)} acc ${l.accuracy.toFixed(3)} margin ${l.margin.toFixed(3)} ` +
    `gradNorm ${l.gradNorm.toFixed(3)} ${l.pairsPerSecond.toFixed(1)} pairs/s`;
  if (l.heldOut) s += ` | held-out acc ${l.heldOut.accuracy.toFixed(3)} loss ${l.heldOut.loss.toFixed(4)}`;
  return s;
}

export async function cmdTrainReward(argv: string[]): Promise<void> {
  const v = parse('train-reward', argv, {
    config: { type: 'string' },
    out: { type: 'string' },
    steps: { type: 'string' },
    backend: { type: 'string' },
    json: { type: 'boolean' },
  });
  const cfgPath = str('train-reward', v, 'config', true);
  const out = str('train-reward', v, 'out', true);
  const cfg = validateRewardConfig(await readJsonFile(cfgPath, 'config'), cfgPath);
  cfg.steps = num('train-reward', v, 'steps', cfg.steps, { min: 1, max: 1e6, integer: true });

  let text: string;
  try {
    text = await readFile(cfg.data, 'utf8');
  } catch (e) {
    throw new UserError(
      `train-reward: cannot read data ${cfg.data}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}.`,
    );
  }
  const pairs = loadPreferences(text, cfg.data);
  const { train, heldOut } = splitPreferences(pairs, cfg.heldOut, cfg.seed);
  const modelDir = resolveModel(cfg.model);
  await assertFolder(modelDir);

  await setNodeBackend(str('train-reward', v, 'backend') ?? 'wasm');
  const lm = await loadLM(nodeFiles(modelDir), { trainable: false, label: 'trunk' });
  const model = ScalarModel.fromTrunk(lm.model, true, 'reward');
  lm.model.dispose();
  try {
    process.stderr.write(
      `train-reward: ${train.length} training pairs, ${heldOut.length} held out; trunk ${modelDir}\n`,
    );
    await mkdir(out, { recursive: true });
    const metricsPath = path.join(out, 'metrics.jsonl');
    await writeFile(metricsPath, '');
    let writes: Promise<void> = Promise.resolve();
    const opts: RewardTrainOptions = {
      steps: cfg.steps,
      batchSize: cfg.batchSize,
      learningRate: cfg.learningRate,
      maxGradNorm: cfg.maxGradNorm,
      seed: cfg.seed,
      evalEvery: cfg.evalEvery,
      freezeEmbeddings: cfg.freezeEmbeddings,
      normalise: cfg.normalise,
    };
    const result = await trainRewardModel(model, lm.tokenizer, train, heldOut, opts, (l) => {
      process.stderr.write(fmtLog(l, cfg.steps) + '\n');
      const { heldOut: h, ...rest } = l;
      const row = h
        ? { ...rest, heldOutAccuracy: h.accuracy, heldOutLoss: h.loss, heldOutMargin: h.meanMargin }
        : rest;
      writes = writes.then(() => appendFile(metricsPath, JSON.stringify(row) + '\n'));
    });
    await writes;
    if (result.truncated > 0) {
      process.stderr.write(
        `warning: ${result.truncated} sequences were longer than n_positions (${model.config.n_positions}) and were cut.\n`,
      );
    }
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
      data: cfg.data,
    };
    await writeFolder(
      out,
      new Map([
        ['config.json', configBytes(model.config)],
        [REWARD_FILE, await scalarSafetensors(model)],
        [REWARD_STATS_FILE, new TextEncoder().encode(JSON.stringify(stats, null, 2) + '\n')],
      ]),
    );
    process.stderr.write(
      `train-reward: held-out accuracy ${result.heldOut.accuracy.toFixed(3)}, train accuracy ${result.train.accuracy.toFixed(3)}; wrote ${out}\n`,
    );
    if (v.json) {
      process.stdout.write(
        JSON.stringify({
          out,
          steps: result.steps,
          heldOutAccuracy: result.heldOut.accuracy,
          trainAccuracy: result.train.accuracy,
          loss: result.loss,
          heldOutLoss: result.heldOut.loss,
        }) + '\n',
      );
    }
  } finally {
    model.dispose();
  }
}
