/**
 * The playground's supervised jobs (DPO on preference pairs, SFT on prompt / completion examples): building one
 * from the person's request and the run's config, as core's SupervisedSession (src/core/run/supervised-session.ts)
 * that the worker's Run (./run.ts) drives with the same commands and events as an RL run. docs/dpo.md "In the
 * app", docs/sft.md.
 */
import type { TrainConfig } from '../common/config';
import { jobKeys, DPO_FIELDS, jobDefaults, jobFieldProblems, SFT_FIELDS } from '../common/config/jobs';
import { validateDpoConfig, type DpoConfig } from '../common/config/dpo';
import { DpoTrainer, type DpoStepMetrics } from '../core/dpo/trainer';
import { SftTrainer, type SftRunOptions, type SftStepMetrics } from '../core/sft/sft';
import { SupervisedSession, type SupervisedHooks } from '../core/run/supervised-session';
import { UserError } from '../common/errors';
import { memoryFiles, type ModelFiles, type ModelLoadOptions } from '../core/model/folder';
import type { SupervisedJobStatus, SupervisedJobWire } from './protocol';

export type SupervisedMetrics = DpoStepMetrics | SftStepMetrics;
export type DpoJobWire = Extract<SupervisedJobWire, { kind: 'dpo' }>;
export type AnySupervisedSession = SupervisedSession<SupervisedMetrics>;

/** The keys a job request may carry: its kind, its data and the settings the app's card sets (common/config/jobs.ts). */
const DPO_JOB_KEYS = ['kind', 'data', 'dataName', ...jobKeys(DPO_FIELDS)];
const SFT_JOB_KEYS = ['kind', 'data', 'dataName', ...jobKeys(SFT_FIELDS)];

/** The request checked: its kind, its data, and no unknown keys. */
export function checkJob(job: unknown): SupervisedJobWire {
  if (job === null || typeof job !== 'object' || Array.isArray(job))
    throw new UserError('setSupervisedJob: expected {kind: "dpo" | "sft", data, dataName, …} or null.');
  const j = job as Record<string, unknown>;
  if (j.kind !== 'dpo' && j.kind !== 'sft')
    throw new UserError(`setSupervisedJob: "kind" must be "dpo" or "sft", got ${JSON.stringify(j.kind)}.`);
  const keys = j.kind === 'dpo' ? DPO_JOB_KEYS : SFT_JOB_KEYS;
  for (const k of Object.keys(j)) {
    if (!keys.includes(k) && j[k] !== undefined)
      throw new UserError(`setSupervisedJob: unknown key "${k}" for "${j.kind}" (keys: ${keys.join(', ')}).`);
  }
  if (typeof j.data !== 'string' || j.data.trim() === '')
    throw new UserError(`setSupervisedJob: "data" must be the JSONL file's text, and it is empty.`);
  if (typeof j.dataName !== 'string' || j.dataName === '')
    throw new UserError('setSupervisedJob: "dataName" must name the file.');
  return j as unknown as SupervisedJobWire;
}

/** DPO's config (contracts §9) from the request and the run's model, seed, maxGradNorm and LoRA keys. */
export function dpoConfigOf(job: Extract<SupervisedJobWire, { kind: 'dpo' }>, cfg: TrainConfig): DpoConfig {
  const { kind: _kind, data: _data, dataName, ...rest } = job;
  const raw: Record<string, unknown> = {
    algorithm: 'dpo',
    data: dataName,
    model: cfg.model,
    seed: cfg.seed,
    maxGradNorm: cfg.maxGradNorm,
    lora: cfg.lora,
    loraAlpha: cfg.loraAlpha,
    loraTargets: cfg.loraTargets,
  };
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) raw[k] = v;
  return validateDpoConfig(raw, 'DPO settings');
}

/**
 * SFT's options from the request (steps, batchSize, learningRate: the settings table's defaults where left out) and
 * the run's config (model, seed, maxGradNorm, microBatchSize).
 */
export function sftOptionsOf(
  job: Extract<SupervisedJobWire, { kind: 'sft' }>,
  cfg: TrainConfig,
): SftRunOptions {
  const problems = jobFieldProblems(SFT_FIELDS, job, jobKeys(SFT_FIELDS));
  if (problems.length) throw new UserError(`SFT settings: ${problems.join('; ')}.`);
  const d = jobDefaults(SFT_FIELDS);
  return {
    steps: job.steps ?? d.steps,
    batchSize: job.batchSize ?? d.batchSize,
    learningRate: job.learningRate ?? d.learningRate,
    maxGradNorm: cfg.maxGradNorm,
    seed: cfg.seed,
    // The run's microBatchSize bounds the memory of a step (0, auto for RL: the whole batch here).
    microBatchSize: cfg.microBatchSize,
  };
}

/** The files the app adds to a DPO job's checkpoint zip so that importing it resumes the job (docs/dpo.md). */
export const JOB_DATA_FILE = 'playground_preferences.jsonl';
export const JOB_FILE = 'playground_job.json';

/**
 * A DPO checkpoint's files (a zip exported by the app) as a job again, continuing at its step exactly
 * (DpoTrainer.restore). The app's zip holds the pairs (JOB_DATA_FILE) and the request (JOB_FILE); a CLI
 * checkpoint has neither and is refused with what to do instead.
 */
export async function restoreDpoJob(
  files: Map<string, Uint8Array>,
  label: string,
  spec: DpoJobWire,
  hooks: SupervisedHooks<SupervisedMetrics>,
  load: ModelLoadOptions = {},
): Promise<{ session: AnySupervisedSession; status: SupervisedJobStatus }> {
  const text = spec.data;
  const trainer = await DpoTrainer.restore(memoryFiles(label, files), { text, source: spec.dataName }, load);
  const { data: _d, ...settings } = trainer.cfg;
  return {
    session: new SupervisedSession<SupervisedMetrics>(
      'dpo',
      trainer,
      trainer.cfg.steps,
      trainer.cfg.evalEvery,
      hooks,
    ),
    status: {
      kind: 'dpo',
      dataName: spec.dataName,
      examples: trainer.train.length + trainer.held.length,
      settings,
    },
  };
}

/** The job request an app's DPO checkpoint holds (JOB_FILE, with the pairs of JOB_DATA_FILE), checked. */
export function dpoJobOf(files: Map<string, Uint8Array>, label: string): DpoJobWire {
  const data = files.get(JOB_DATA_FILE);
  const job = files.get(JOB_FILE);
  if (!data || !job)
    throw new UserError(
      `${label} is a DPO checkpoint without its preference pairs (one written by the CLI): resume it with ` +
        '`train --resume`, or export the checkpoint from the app, which keeps the pairs in the zip.',
    );
  const text = new TextDecoder().decode(data);
  const spec = checkJob({ ...(JSON.parse(new TextDecoder().decode(job)) as object), data: text });
  if (spec.kind !== 'dpo') throw new UserError(`${label}: ${JOB_FILE} is not a DPO job's.`);
  return spec;
}

/** Build the job's session from `files` (the run's model): its models load and its data is read here. */
export async function buildSupervised(
  job: SupervisedJobWire,
  cfg: TrainConfig,
  files: ModelFiles,
  hooks: SupervisedHooks<SupervisedMetrics>,
  load: ModelLoadOptions = {},
): Promise<{ session: AnySupervisedSession; status: SupervisedJobStatus }> {
  const data = { text: job.data, source: job.dataName };
  if (job.kind === 'dpo') {
    const dpo = dpoConfigOf(job, cfg);
    const trainer = await DpoTrainer.build(dpo, files, data, load);
    const { data: _d, ...settings } = dpo;
    return {
      session: new SupervisedSession<SupervisedMetrics>('dpo', trainer, dpo.steps, dpo.evalEvery, hooks),
      status: {
        kind: 'dpo',
        dataName: job.dataName,
        examples: trainer.train.length + trainer.held.length,
        settings,
      },
    };
  }
  const o = sftOptionsOf(job, cfg);
  const trainer = await SftTrainer.build(files, data, o, load);
  return {
    session: new SupervisedSession<SupervisedMetrics>('sft', trainer, o.steps, 0, hooks),
    status: {
      kind: 'sft',
      dataName: job.dataName,
      examples: trainer.examples.length,
      settings: { steps: o.steps, batchSize: o.batchSize, learningRate: o.learningRate },
    },
  };
}
