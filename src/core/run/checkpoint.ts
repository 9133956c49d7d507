/**
 * Checkpoints in the layout of docs/formats.md §2: a Hugging Face model folder (config.json + model.safetensors
 * that `transformers` loads) plus value_model / ref_model / reward_model safetensors, optimizer.safetensors
 * (Adam moments and step per variable) and trainer_state.json (step, config, KL controller, RNG state,
 * prompt order, metric history, bad-step counter, the reward model's recorded mean). Restoring it continues the same run.
 *
 * A LoRA run (docs/formats.md §6) writes model.safetensors as the MERGED policy, the policy's adapters as PEFT's
 * pair in a subfolder, adapter/adapter_config.json + adapter/adapter_model.safetensors, the frozen base once as
 * ref_model.safetensors (from step 1; at step 0 the merged policy is the base, B being 0), and a shared-base
 * value model as value_adapter/adapter_config.json + value_adapter/adapter_model.safetensors (its adapters in
 * PEFT names and its head as `base_model.model.score.weight`, PEFT's modules_to_save). No adapter_config.json
 * at the top: transformers with peft installed would apply it on top of the merged model.safetensors. Restore
 * also reads older checkpoints with the pairs at the top (adapter_*, value_adapter_*). Adam moments exist for
 * adapters and heads only.
 *
 * A critic-free run (algorithm grpo / rloo / reinforce++, docs/formats.md §7) has no value model: no value file
 * (value_model.safetensors, value_adapter/) and no `value.*` Adam tensors are written or read.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { DevicePlan, PpoTrainer } from '../ppo/trainer';
import {
  configBytes,
  lmSafetensorsStream,
  scalarSafetensors,
  loadLM,
  loadScalar,
  readConfig,
  type ModelFiles,
} from '../model/folder';
import {
  collectBytes,
  readSafetensors,
  writeSafetensors,
  type FileBody,
  type NamedTensor,
} from '../model/safetensors';
import { hasValueModel, validateConfig, type TrainConfig } from '../../common/config';
import type { KlControllerState } from '../ppo/kl';
import { buildTrainer, type Resources } from '../ppo/setup';
import { REWARD_FILE } from '../reward/reward-model';
import type { StepMetrics } from '../../common/metrics';
import { UserError } from '../../common/errors';
import type { CausalLM } from '../model/causal-lm';
import { ScalarModel } from '../model/heads';
import { resolveLoraTargets, type LoraAdapters } from '../model/lora';
import { adapterFiles, readAdapterSet, PEFT_CONFIG_NAME, PEFT_WEIGHTS_NAME } from '../model/peft';
import { allFinite } from '../optim/optim';
import type { Tokenizer } from '../tokenizer/types';

/**
 * A shared-base value model's adapters and head (docs/formats.md §6): PEFT's pair under PEFT's own names in
 * value_adapter/, so `PeftModel.from_pretrained(GPT2ForSequenceClassification…, "CKPT/value_adapter")` reads it.
 */
export const VALUE_ADAPTER_DIR = 'value_adapter';
export const VALUE_ADAPTER_CONFIG_FILE = `${VALUE_ADAPTER_DIR}/${PEFT_CONFIG_NAME}`;
export const VALUE_ADAPTER_WEIGHTS_FILE = `${VALUE_ADAPTER_DIR}/${PEFT_WEIGHTS_NAME}`;
/** Where checkpoints before the value_adapter/ folder kept it (still read, never written). */
export const LEGACY_VALUE_ADAPTER_FILES = {
  configFile: 'value_adapter_config.json',
  weightsFile: 'value_adapter_model.safetensors',
};
/** The value head's name in VALUE_ADAPTER_WEIGHTS_FILE (PEFT's name for modules_to_save ["score"]). */
export const VALUE_HEAD_TENSOR = 'base_model.model.score.weight';
const VALUE_FILES = {
  configFile: VALUE_ADAPTER_CONFIG_FILE,
  weightsFile: VALUE_ADAPTER_WEIGHTS_FILE,
  legacy: LEGACY_VALUE_ADAPTER_FILES,
  taskType: 'SEQ_CLS',
  modulesToSave: ['score'],
};

/** What trainer_state.json records of a LoRA run (null: full fine-tuning). */
export interface LoraState {
  r: number;
  loraAlpha: number;
  targets: string[];
  /** "shared": the value model's adapters + head are in value_adapter/; "separate": value_model.safetensors. */
  valueModel: 'shared' | 'separate';
}

export const CHECKPOINT_FORMAT = 'ppo-playground-checkpoint/1';

export interface TrainerState {
  format: string;
  step: number;
  config: TrainConfig;
  kl: KlControllerState;
  rng: number[];
  promptOrder: number[];
  promptCursor: number;
  /** Which optional model files this checkpoint holds. */
  files: { ref: boolean; reward: boolean };
  /** The LoRA settings of the run; absent or null = full fine-tuning. */
  lora?: LoraState | null;
  history: StepMetrics[];
  /** Consecutive steps with skipped (non-finite) updates; absent in older checkpoints (read as 0). */
  badSteps?: number;
  /**
   * The reward model's recorded mean score (from its reward_stats.json), subtracted with rewardModelCenter;
   * null = none recorded. Absent in older checkpoints (read as null).
   */
  rewardMean?: number | null;
  /**
   * The smaller plan the run fell back to after the device ran out of memory, and the key (live keys and device)
   * it holds for (src/core/ppo/gpu-plan.ts); absent or null = none (older checkpoints: none).
   */
  devicePlan?: DevicePlan | null;
}

async function adamTensors(opt: tf.Optimizer, prefix: string, varNames: string[]): Promise<NamedTensor[]> {
  const weights = await opt.getWeights();
  // getWeights() makes a fresh scalar for the iteration count each call (the moments are the optimizer's own
  // variables): free it, or every checkpoint (autosave!) leaks one tensor per optimizer.
  const [iter, ...moments] = weights;
  const steps = iter ? Float32Array.from(await iter.tensor.data()) : null;
  iter?.tensor.dispose();
  if (weights.length <= 1 || !steps) return []; // no update yet: no moments
  const n = varNames.length;
  if (moments.length !== 2 * n)
    throw new Error(`optimizer ${prefix}: ${moments.length} moments for ${n} variables`);
  const out: NamedTensor[] = [{ name: `${prefix}.step`, shape: [1], data: steps }];
  for (let i = 0; i < 2 * n; i++) {
    const kind = i < n ? 'm' : 'v';
    const t = moments[i].tensor;
    out.push({
      name: `${prefix}.${kind}.${varNames[i % n]}`,
      shape: t.shape,
      data: (await t.data()) as Float32Array,
    });
  }
  return mergeWteChunks(out);
}

/** `….wte.weight.chunk{k}` (a model held under a binding limit, gpt2.ts): its moments' rows in vocabulary order. */
const WTE_CHUNK = /^(.*\.wte\.weight)\.chunk(\d+)$/;

/**
 * The file names wte's moments `wte.weight` whatever the in-memory layout: chunked moments are written as one
 * tensor (rows concatenated in chunk order), so a checkpoint restores with or without a binding limit.
 */
function mergeWteChunks(tensors: NamedTensor[]): NamedTensor[] {
  const out: NamedTensor[] = [];
  const merged = new Map<string, NamedTensor[]>();
  for (const t of tensors) {
    const m = WTE_CHUNK.exec(t.name);
    if (!m) out.push(t);
    else (merged.get(m[1]) ?? merged.set(m[1], []).get(m[1])!)[Number(m[2])] = t;
  }
  for (const [name, chunks] of merged) {
    const data = new Float32Array(chunks.reduce((a, c) => a + c.data.length, 0));
    let at = 0;
    for (const c of chunks) data.set(c.data, (at += c.data.length) - c.data.length);
    out.push({ name, shape: [chunks.reduce((a, c) => a + c.shape[0], 0), chunks[0].shape[1]], data });
  }
  return out;
}

function specNames(vars: tf.Variable[]): string[] {
  return vars.map((v) => v.name.slice(v.name.indexOf('/') + 1));
}

/**
 * What a checkpoint is for. "export" (the default): the folder of docs/formats.md §2, which `transformers` loads
 * (a LoRA run's merged policy as model.safetensors). "resume": only what restoreTrainer reads back, for the app's
 * autosave and backend switch: a LoRA run past step 0 leaves the merged policy out (restore builds the policy from
 * ref_model.safetensors and the adapters), half the bytes of a model-sized save.
 */
export type CheckpointPurpose = 'export' | 'resume';

/** The files of a checkpoint of the trainer's current state (checkpointSources, every file's bytes made). */
export async function checkpointFiles(
  t: PpoTrainer,
  purpose: CheckpointPurpose = 'export',
): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  for (const [name, body] of await checkpointSources(t, purpose)) out.set(name, await collectBytes(body));
  return out;
}

/**
 * The files of a run's checkpoints that never change while it runs: the reference (a LoRA run's frozen base, or a
 * full fine-tuning run's frozen copy of the starting policy) and the reward model. The app's autosave writes
 * them once per run (src/services/autosave.ts).
 */
export const FROZEN_CHECKPOINT_FILES: readonly string[] = ['ref_model.safetensors', REWARD_FILE];

/**
 * The files of a checkpoint, the LM weights (model.safetensors, ref_model.safetensors) as ByteSources that read
 * one weight at a time as they are written: a writer that streams them (the CLI) holds one weight's values, not
 * the 0.5 GB files of GPT-2 124M. They read the weights when written: write them before the next step. `omit`:
 * files not to make (an autosave that already holds them, FROZEN_CHECKPOINT_FILES).
 */
export async function checkpointSources(
  t: PpoTrainer,
  purpose: CheckpointPurpose = 'export',
  omit: ReadonlySet<string> = new Set(),
): Promise<Map<string, FileBody>> {
  const { policy, ref, value, reward } = t.models;
  if (!(await allFinite([...policy.trainableVariables(), ...(value?.trainableVariables() ?? [])]))) {
    throw new UserError(
      `not writing a checkpoint at step ${t.step}: the weights hold NaN/Inf values. The last checkpoint written is the last good one.`,
    );
  }
  const files = new Map<string, FileBody>();
  const writeRef = t.step > 0;
  files.set('config.json', configBytes(policy.config));
  // A LoRA view writes the merged weights; a resume-only checkpoint of a LoRA run past step 0 leaves them out.
  if (!(purpose === 'resume' && policy.lora && writeRef))
    files.set('model.safetensors', lmSafetensorsStream(policy));
  // A Hugging Face tokenizer's files (Llama/Qwen folders): the checkpoint loads anywhere the model folder did.
  for (const [k, v] of t.tokenizer.files?.() ?? []) files.set(k, v);
  let lora: LoraState | null = null;
  if (policy.lora) {
    if (ref !== policy.base) throw new Error("checkpoint: a LoRA run's reference must be its policy's base");
    for (const [k, v] of await adapterFiles(policy.lora, t.cfg.model)) files.set(k, v);
    const shared = value !== null && value.trunkModel.base === policy.base && value.trunkModel.lora !== null;
    lora = {
      r: policy.lora.r,
      loraAlpha: policy.lora.alpha,
      targets: [...policy.lora.targets],
      valueModel: value === null ? t.cfg.valueModel : shared ? 'shared' : 'separate',
    };
    if (value && shared) {
      const head = { name: VALUE_HEAD_TENSOR, shape: [1, value.config.n_embd], data: await scoreData(value) };
      for (const [k, v] of await adapterFiles(value.trunkModel.lora!, t.cfg.model, VALUE_FILES, [head]))
        files.set(k, v);
    } else if (value) files.set('value_model.safetensors', await scalarSafetensors(value));
  } else if (value) files.set('value_model.safetensors', await scalarSafetensors(value));
  if (writeRef && !omit.has('ref_model.safetensors'))
    files.set('ref_model.safetensors', lmSafetensorsStream(ref, { keepF16: true }));
  if (reward.kind === 'model' && !omit.has(REWARD_FILE))
    files.set(REWARD_FILE, await scalarSafetensors(reward.model));
  const opt = [
    ...(await adamTensors(t.policyOpt, 'policy', specNames(policy.trainableVariables()))),
    ...(value && t.valueOpt
      ? await adamTensors(t.valueOpt, 'value', specNames(value.trainableVariables()))
      : []),
  ];
  if (opt.length) files.set('optimizer.safetensors', writeSafetensors(opt, { format: CHECKPOINT_FORMAT }));
  const { step, kl, rng, promptOrder, promptCursor, history, badSteps, rewardMean, devicePlan } = t.state();
  const state: TrainerState = {
    format: CHECKPOINT_FORMAT,
    step,
    config: t.cfg,
    kl,
    rng,
    promptOrder,
    promptCursor,
    files: { ref: writeRef, reward: reward.kind === 'model' },
    lora,
    history,
    badSteps,
    rewardMean,
    devicePlan,
  };
  files.set(
    'trainer_state.json',
    new TextEncoder().encode(
      JSON.stringify(state, (_, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v)) + '\n',
    ),
  );
  return files;
}

async function scoreData(value: ScalarModel): Promise<Float32Array> {
  return (await value.score.data()) as Float32Array;
}

function reviveNumbers(history: unknown[]): StepMetrics[] {
  return history.map((h) => {
    const o: Record<string, number> = {};
    for (const [k, v] of Object.entries(h as Record<string, unknown>))
      o[k] = typeof v === 'string' ? Number(v) : (v as number);
    return o as StepMetrics;
  });
}

async function restoreAdam(
  opt: tf.Optimizer,
  prefix: string,
  vars: tf.Variable[],
  file: ReturnType<typeof readSafetensors> | null,
  label: string,
) {
  if (!file) return;
  const step = file.tensors.get(`${prefix}.step`);
  if (!step) return;
  const varNames = specNames(vars);
  const host: { name: string; data: Float32Array; shape: number[] }[] = [];
  for (const kind of ['m', 'v']) {
    let wteRow = 0; // wte's chunks (in vocabulary order) take their rows of the file's one wte.weight moment
    for (const [i, n] of varNames.entries()) {
      const chunk = WTE_CHUNK.exec(`${prefix}.${kind}.${n}`);
      const whole = chunk ? file.tensors.get(chunk[1]) : undefined;
      if (chunk && whole) {
        const [rows, C] = vars[i].shape;
        const data = whole.data.slice(wteRow * C, (wteRow + rows) * C);
        wteRow += rows;
        if (data.length === rows * C) {
          host.push({ name: n, data, shape: [rows, C] });
          continue;
        }
      }
      const t = file.tensors.get(`${prefix}.${kind}.${n}`);
      if (!t)
        throw new UserError(`${label}/optimizer.safetensors: tensor "${prefix}.${kind}.${n}" is missing.`);
      host.push({ name: n, data: t.data, shape: t.shape });
    }
  }
  const weights: { name: string; tensor: tf.Tensor }[] = [
    { name: 'iter', tensor: tf.scalar(step.data[0], 'int32') },
    ...host.map((h) => ({ name: h.name, tensor: tf.tensor(h.data, h.shape) })),
  ];
  await opt.setWeights(weights);
  tf.dispose(weights.map((w) => w.tensor));
}

const isNonNegInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * Check the shape of a parsed trainer_state.json (a file edited by hand or damaged must be a clear error, not a
 * crash deep in the trainer). The config is checked by validateConfig, the KL state by klControllerFromState.
 */
function checkTrainerState(raw: unknown, where: string): TrainerState {
  const fail = (what: string, got: unknown): never => {
    let shown: string;
    try {
      shown = JSON.stringify(got) ?? 'nothing';
    } catch {
      shown = typeof got;
    }
    if (shown.length > 60) shown = `${shown.slice(0, 57)}...`;
    throw new UserError(
      `${where}: ${what}, got ${shown}. The file was edited or damaged; re-export the checkpoint from the app or the CLI.`,
    );
  };
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('expected a JSON object', raw);
  const s = raw as Record<string, unknown>;
  if (s.format !== CHECKPOINT_FORMAT) {
    throw new UserError(`${where}: format is ${JSON.stringify(s.format)}, expected "${CHECKPOINT_FORMAT}".`);
  }
  if (!isNonNegInt(s.step)) fail('"step" must be a whole number of 0 or more', s.step);
  if (typeof s.config !== 'object' || s.config === null || Array.isArray(s.config)) {
    fail('"config" must be an object of config keys', s.config);
  }
  if (typeof s.kl !== 'object' || s.kl === null) fail('"kl" must be the KL controller\'s state object', s.kl);
  const rng = s.rng;
  if (!Array.isArray(rng) || rng.length !== 4 || !rng.every((x) => isNonNegInt(x) && x < 2 ** 32)) {
    fail('"rng" must be 4 unsigned 32-bit integers', rng);
  }
  if (!Array.isArray(s.promptOrder) || !s.promptOrder.every(isNonNegInt)) {
    fail('"promptOrder" must be an array of prompt indices', s.promptOrder);
  }
  if (!isNonNegInt(s.promptCursor))
    fail('"promptCursor" must be a whole number of 0 or more', s.promptCursor);
  const f = s.files as Record<string, unknown> | null | undefined;
  if (typeof f !== 'object' || f === null || typeof f.ref !== 'boolean' || typeof f.reward !== 'boolean') {
    fail('"files" must be {"ref": true|false, "reward": true|false}', f);
  }
  const h = s.history;
  if (!Array.isArray(h) || !h.every((m) => typeof m === 'object' && m !== null && !Array.isArray(m))) {
    fail('"history" must be an array of per-step metric objects', h);
  }
  if (s.badSteps !== undefined && !isNonNegInt(s.badSteps)) {
    fail(
      '"badSteps" must be a whole number of 0 or more (consecutive steps with skipped updates)',
      s.badSteps,
    );
  }
  const l = s.lora as Record<string, unknown> | null | undefined;
  if (
    l !== undefined &&
    l !== null &&
    (typeof l !== 'object' ||
      !isNonNegInt(l.r) ||
      typeof l.loraAlpha !== 'number' ||
      !Array.isArray(l.targets) ||
      (l.valueModel !== 'shared' && l.valueModel !== 'separate'))
  ) {
    fail('"lora" must be null or {"r", "loraAlpha", "targets", "valueModel": "shared"|"separate"}', l);
  }
  const rm = s.rewardMean;
  if (rm !== undefined && rm !== null && (typeof rm !== 'number' || !Number.isFinite(rm))) {
    fail('"rewardMean" must be a finite number or null', rm);
  }
  const dp = s.devicePlan as { key?: unknown; plan?: Record<string, unknown> | null } | null | undefined;
  const whole = (x: unknown) => isNonNegInt(x) && x >= 1;
  if (
    dp !== undefined &&
    dp !== null &&
    (typeof dp !== 'object' ||
      typeof dp.key !== 'string' ||
      typeof dp.plan !== 'object' ||
      dp.plan === null ||
      !whole(dp.plan.microBatchSize) ||
      !whole(dp.plan.generateMicroBatchSize) ||
      typeof dp.plan.recompute !== 'boolean')
  ) {
    fail(
      '"devicePlan" must be null or {"key": string, "plan": {"microBatchSize": n >= 1, ' +
        '"generateMicroBatchSize": n >= 1, "recompute": true|false}} (delete it to plan afresh)',
      dp,
    );
  }
  return raw as TrainerState;
}

/** Rebuild a trainer from a checkpoint folder so that the next step continues the saved run. */
export async function restoreTrainer(
  files: ModelFiles,
  res: Resources,
  opts: Parameters<typeof buildTrainer>[2] = {},
): Promise<PpoTrainer> {
  const raw = await files.read('trainer_state.json');
  if (!raw) {
    const isModel = (await files.read('config.json')) !== null;
    throw new UserError(
      isModel
        ? `${files.label}: trainer_state.json is missing; this is a model folder, not a training checkpoint.`
        : `${files.label}: trainer_state.json is missing, so this is not a PPO Playground checkpoint; choose a ` +
            'checkpoint exported by the app ("Export checkpoint") or written by the CLI (checkpoint-N folders).',
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(raw));
  } catch (e) {
    throw new UserError(`${files.label}/trainer_state.json is not valid JSON (${(e as Error).message}).`);
  }
  const state = checkTrainerState(parsed, `${files.label}/trainer_state.json`);
  const cfg = validateConfig(state.config, `${files.label}/trainer_state.json config`);
  await readConfig(files);
  // Everything built here is freed again if anything below fails: a bad file leaves no tensors behind.
  const built: { dispose(): void }[] = [];
  const keep = <T extends { dispose(): void }>(x: T): T => (built.push(x), x);
  let t: PpoTrainer | null = null;
  try {
    const m = await restoreModels(files, state, cfg, keep, res.maxBindingBytes);
    const rewardModel = state.files.reward
      ? keep(
          await loadScalar(files, REWARD_FILE, {
            trainable: false,
            label: 'reward',
            config: m.policy.config,
            maxBindingBytes: res.maxBindingBytes,
            ...(cfg.baseDtype === 'f16' ? { baseDtype: 'f16' as const } : {}),
          }),
        )
      : undefined;
    // The trainer continues from the saved progress (an order that no longer fits the prompts starts afresh).
    t = await buildTrainer(cfg, res, {
      ...opts,
      weights: { ...m, rewardModel },
      resume: {
        step: state.step,
        kl: state.kl,
        rng: state.rng,
        promptOrder: state.promptOrder,
        promptCursor: state.promptCursor,
        history: reviveNumbers(state.history),
        badSteps: state.badSteps ?? 0,
        rewardMean: state.rewardMean ?? null,
        devicePlan: state.devicePlan ?? null,
      },
    });
    const optBytes = await files.read('optimizer.safetensors');
    const optFile = optBytes ? readSafetensors(optBytes, `${files.label}/optimizer.safetensors`) : null;
    await restoreAdam(t.policyOpt, 'policy', m.policy.trainableVariables(), optFile, files.label);
    if (m.value && t.valueOpt) {
      await restoreAdam(t.valueOpt, 'value', m.value.trainableVariables(), optFile, files.label);
    }
  } catch (e) {
    t?.disposeOptimizers();
    for (const b of built.reverse()) b.dispose();
    throw e;
  }
  return t;
}

/**
 * The policy, reference and value model of a checkpoint. Full fine-tuning: model / ref_model / value_model
 * safetensors. LoRA (trainer_state.json's config has lora > 0): the frozen base (ref_model.safetensors, or at
 * step 0 model.safetensors, which then equals it), the policy's PEFT adapters on it (adapter/), and the value
 * model's adapters + head on the same base ("shared", value_adapter/) or its own value_model.safetensors
 * ("separate"). Checkpoints of earlier versions with the pairs at the top read the same.
 */
async function restoreModels(
  files: ModelFiles,
  state: TrainerState,
  cfg: TrainConfig,
  keep: <T extends { dispose(): void }>(x: T) => T,
  maxBindingBytes?: number,
): Promise<{ policy: CausalLM; ref: CausalLM; value: ScalarModel | null; tokenizer: Tokenizer }> {
  const refFile = 'ref_model.safetensors';
  const withValue = hasValueModel(cfg); // critic-free runs: no value file to read
  if (cfg.lora === 0) {
    const { model: policy, tokenizer } = await loadLM(files, {
      trainable: true,
      label: 'policy',
      maxBindingBytes,
    });
    keep(policy);
    const ref = keep(
      state.files.ref
        ? (await loadLM(files, { trainable: false, label: 'ref', file: refFile, maxBindingBytes })).model
        : policy.clone(false, 'ref'),
    );
    const value = withValue
      ? keep(
          await loadScalar(files, 'value_model.safetensors', {
            trainable: true,
            label: 'value',
            config: policy.config,
            maxBindingBytes,
          }),
        )
      : null;
    return { policy, ref, value, tokenizer };
  }
  const lm = await loadLM(files, {
    trainable: false,
    label: 'base',
    file: state.files.ref ? refFile : 'model.safetensors',
    maxBindingBytes,
    ...(cfg.baseDtype === 'f16' ? { baseDtype: 'f16' as const } : {}),
  });
  const base = keep(lm.model);
  const policyRead = await readAdapterSet(files, base); // adapter/, or the top of an older checkpoint
  const adapters = keep(policyRead.adapters);
  sameLora(adapters, cfg, `${files.label}/${policyRead.configFile}`, base);
  const policy = keep(base.withLora(adapters, 'policy'));
  let value: ScalarModel | null;
  if (!withValue) value = null;
  else if (cfg.valueModel === 'shared') {
    const C = base.config.n_embd;
    const read = await readAdapterSet(files, base, VALUE_FILES, [{ name: VALUE_HEAD_TENSOR, shape: [1, C] }]);
    keep(read.adapters);
    sameLora(read.adapters, cfg, `${files.label}/${read.configFile}`, base);
    const shared = keep(ScalarModel.onSharedBase(base, read.adapters, 'value'));
    const head = read.extra.get(VALUE_HEAD_TENSOR)!;
    tf.tidy(() => shared.score.assign(tf.tensor2d(head, [1, C])));
    value = shared;
  } else {
    value = keep(
      await loadScalar(files, 'value_model.safetensors', {
        trainable: true,
        label: 'value',
        config: base.config,
        maxBindingBytes,
      }),
    );
  }
  return { policy, ref: base, value, tokenizer: lm.tokenizer };
}

/** The adapters in a checkpoint must have the run's lora / loraAlpha / loraTargets. */
function sameLora(a: LoraAdapters, cfg: TrainConfig, where: string, model: CausalLM): void {
  const got = `r ${a.r}, lora_alpha ${a.alpha}, target_modules ${JSON.stringify(a.targets)}`;
  // The run's loraTargets as this model's family reads them (GPT-2's default names mean all of a Llama's layers).
  const targets = resolveLoraTargets(model.config, cfg.loraTargets);
  const want = `r ${cfg.lora}, lora_alpha ${cfg.loraAlpha}, target_modules ${JSON.stringify(targets)}`;
  if (got !== want) {
    throw new UserError(
      `${where}: the adapters have ${got}, but trainer_state.json's config has lora ${cfg.lora}, loraAlpha ` +
        `${cfg.loraAlpha}, loraTargets ${JSON.stringify(cfg.loraTargets)} (${want}); they must agree.`,
    );
  }
}
