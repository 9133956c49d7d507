/**
 * DPO's training config (contracts §9; docs/dpo.md): `train --config FILE` with `"algorithm": "dpo"`. Keys:
 * data, heldOut, beta, dpoLoss, labelSmoothing, and the usual model, seed, steps, batchSize (pairs per step),
 * learningRate, maxGradNorm, lora, loraAlpha, loraTargets, microBatchSize, saveEvery, evalEvery. Any other key of
 * the RL config (PPO's) is a clear error naming it; an unknown key too.
 */
import { UserError } from '../errors';
import { CONFIG_KEYS, LORA_TARGET_NAMES, type LoraTargetName } from '../config';
import { DPO_FIELDS, jobDefaults, jobFieldProblems, type DpoFieldKey, type DpoLossType } from './jobs';

export interface DpoConfig {
  algorithm: 'dpo';
  model: string;
  /** The preference JSONL as given (relative to the config file for the CLI). */
  data: string;
  heldOut: number;
  beta: number;
  dpoLoss: DpoLossType;
  labelSmoothing: number;
  seed: number;
  steps: number;
  /** Pairs per step. */
  batchSize: number;
  learningRate: number;
  maxGradNorm: number;
  lora: number;
  loraAlpha: number;
  loraTargets: LoraTargetName[];
  /** Pairs per micro-batch; 0 = the whole batch at once. */
  microBatchSize: number;
  saveEvery: number;
  /** Held-out evaluation every this many steps (and at the last step); 0 = only at the last step. */
  evalEvery: number;
}

/** DPO's defaults: the settings table's (common/config/jobs.ts DPO_FIELDS), the preset model, every LoRA target. */
export const DPO_DEFAULTS: Omit<DpoConfig, 'data'> = {
  algorithm: 'dpo',
  model: 'tiny',
  ...jobDefaults(DPO_FIELDS),
  loraTargets: [...LORA_TARGET_NAMES],
};

export const DPO_KEYS = ['data', ...Object.keys(DPO_DEFAULTS)] as const;

const NUMBER_KEYS = Object.keys(DPO_FIELDS).filter((k) => DPO_FIELDS[k as DpoFieldKey].type === 'number');

/** Validate a parsed DPO config; `source` names it in messages. */
export function validateDpoConfig(raw: unknown, source = 'config'): DpoConfig {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new UserError(`${source}: a DPO config must be a JSON object with keys: ${DPO_KEYS.join(', ')}.`);
  const obj = raw as Record<string, unknown>;
  const problems: string[] = [];
  for (const k of Object.keys(obj)) {
    if ((DPO_KEYS as readonly string[]).includes(k)) continue;
    if ((CONFIG_KEYS as readonly string[]).includes(k))
      problems.push(
        `"${k}" is a key of the RL algorithms (ppo, grpo, rloo, reinforce++), not of "dpo"; remove it (DPO keys: ${DPO_KEYS.join(', ')})`,
      );
    else problems.push(`unknown key "${k}" (DPO keys: ${DPO_KEYS.join(', ')})`);
  }
  const cfg = { ...DPO_DEFAULTS, loraTargets: [...DPO_DEFAULTS.loraTargets] } as DpoConfig;
  if (obj.algorithm !== 'dpo')
    problems.push(`"algorithm" must be "dpo" here, got ${JSON.stringify(obj.algorithm)}`);
  if (typeof obj.data !== 'string' || obj.data === '')
    problems.push(`"data" must be the path of a preference JSONL file, got ${JSON.stringify(obj.data)}`);
  else cfg.data = obj.data;
  if (obj.model !== undefined) {
    if (typeof obj.model !== 'string' || obj.model === '')
      problems.push(`"model" must be a preset name or a model folder, got ${JSON.stringify(obj.model)}`);
    else cfg.model = obj.model;
  }
  const bad = jobFieldProblems(DPO_FIELDS, obj, [...NUMBER_KEYS, 'dpoLoss']);
  problems.push(...bad);
  for (const k of [...NUMBER_KEYS, 'dpoLoss']) {
    if (obj[k] !== undefined && !bad.some((p) => p.startsWith(`"${k}"`)))
      (cfg as unknown as Record<string, unknown>)[k] = obj[k];
  }
  if (cfg.labelSmoothing !== 0 && cfg.dpoLoss !== 'sigmoid')
    problems.push(
      `"labelSmoothing" applies to dpoLoss "sigmoid" only; got dpoLoss "${cfg.dpoLoss}" with labelSmoothing ${cfg.labelSmoothing}`,
    );
  if (obj.loraTargets !== undefined) {
    const t = obj.loraTargets;
    if (
      !Array.isArray(t) ||
      t.length === 0 ||
      !t.every((x) => (LORA_TARGET_NAMES as readonly string[]).includes(x as string))
    )
      problems.push(
        `"loraTargets" must be a non-empty list of ${LORA_TARGET_NAMES.map((n) => `"${n}"`).join(', ')}, got ${JSON.stringify(t)}`,
      );
    else cfg.loraTargets = [...(t as LoraTargetName[])];
  }
  if (cfg.microBatchSize > 0 && cfg.batchSize % cfg.microBatchSize !== 0)
    problems.push(
      `"microBatchSize" (${cfg.microBatchSize}) must divide "batchSize" (${cfg.batchSize}), or be 0 (the whole batch)`,
    );
  if (problems.length) throw new UserError(`${source}: ${problems.join('; ')}.`);
  return cfg;
}

/** Whether a parsed config object asks for DPO (the CLI routes it here instead of the RL trainer). */
export function isDpoConfig(raw: unknown): boolean {
  return raw !== null && typeof raw === 'object' && (raw as Record<string, unknown>).algorithm === 'dpo';
}
