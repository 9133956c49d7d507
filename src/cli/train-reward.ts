/**
 * `train-reward`: a Bradley–Terry reward model from preference pairs (src/core/reward/reward-model.ts).
 * The output folder is what PPO's `"reward": {"model": DIR}` loads (config.json + reward_model.safetensors),
 * plus metrics.jsonl and reward_stats.json (the reward scale; see reward-model.ts).
 */
import { readFile, appendFile, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { parse, num, str } from './args';
import { setNodeBackend } from './backend-node';
import { assertFolder, nodeFiles, readJsonFile, writeFolder } from './files-node';
import { resolveModel } from './models';
import { REWARD_FILE } from '../core/reward/reward-model';
import { loadPreferences } from '../core/reward/preferences';
import { REWARD_STATS_FILE, type RewardLog } from '../core/reward/reward-model';
import {
  PREFERENCE_DEFAULTS,
  PREFERENCE_KEYS,
  preferenceOptions,
  trainPreferenceRewardModel,
  type PreferenceTrainOptions,
} from '../core/reward/preference-pipeline';
import { UserError } from '../common/errors';

export const TRAIN_REWARD_HELP = `train-reward --config FILE --out DIR [--steps N] [--backend wasm|cpu|webgpu] [--json]
  Train a Bradley–Terry reward model on preference pairs (JSONL lines {"prompt", "chosen", "rejected"}).
  Config JSON keys: model (preset or folder whose trunk to start from, default "tiny"), data (JSONL path,
  relative to the config file's folder), steps, batchSize, learningRate, maxGradNorm, seed, heldOut (fraction
  held out for evaluation), evalEvery, freezeEmbeddings, normalise; the defaults (the browser's too):
  ${Object.entries(PREFERENCE_DEFAULTS)
    .map(([k, d]) => `${k} ${d}`)
    .join(', ')}.
  Writes DIR/config.json, DIR/${REWARD_FILE}, DIR/metrics.jsonl, DIR/${REWARD_STATS_FILE}; use it in PPO as
  "reward": {"model": "DIR"}.`;

const KEYS = ['model', 'data', ...PREFERENCE_KEYS];

/** The options of src/core/reward/preference-pipeline.ts, plus the trunk to start from and the data file. */
export interface TrainRewardConfig extends PreferenceTrainOptions {
  model: string;
  /** Absolute path of the JSONL file. */
  data: string;
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
  const opts = preferenceOptions(obj, 'train-reward');
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
  return { ...opts, model, data: path.resolve(path.dirname(cfgPath), obj.data) };
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
  const modelDir = resolveModel(cfg.model);
  await assertFolder(modelDir);

  await setNodeBackend(str('train-reward', v, 'backend') ?? 'wasm');
  await (await import('./preflight')).preflightTrainReward(cfg.model, { batchSize: cfg.batchSize, pairs }); // memory check
  await mkdir(out, { recursive: true });
  const metricsPath = path.join(out, 'metrics.jsonl');
  await writeFile(metricsPath, '');
  let writes: Promise<void> = Promise.resolve();
  const { files, result, nPositions } = await trainPreferenceRewardModel(
    nodeFiles(modelDir),
    pairs,
    cfg,
    {
      start: ({ train, heldOut }) =>
        process.stderr.write(
          `train-reward: ${train} training pairs, ${heldOut} held out; trunk ${modelDir}\n`,
        ),
      log: (l) => {
        process.stderr.write(fmtLog(l, cfg.steps) + '\n');
        const { heldOut: h, ...rest } = l;
        const row = h
          ? { ...rest, heldOutAccuracy: h.accuracy, heldOutLoss: h.loss, heldOutMargin: h.meanMargin }
          : rest;
        writes = writes.then(() => appendFile(metricsPath, JSON.stringify(row) + '\n'));
      },
    },
    { data: cfg.data },
  );
  await writes;
  if (result.truncated > 0) {
    process.stderr.write(
      `warning: ${result.truncated} sequences were longer than n_positions (${nPositions}) and were cut.\n`,
    );
  }
  await writeFolder(out, files);
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
}
