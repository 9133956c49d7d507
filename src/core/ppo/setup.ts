/**
 * Build the models and a trainer from a validated config: policy, reference, reward, and for PPO the value model
 * (critic-free algorithms build none: docs/formats.md §7). Loading is platform-neutral: the caller
 * supplies how to open a model folder and a task (Node reads disk; the worker fetches or reads uploads).
 */
import { hasValueModel, type TrainConfig } from '../../common/config';
import type { ModelFiles } from '../model/folder';
import { loadLM, loadScalar } from '../model/folder';
import { ScalarModel } from '../model/heads';
import { LoraAdapters } from '../model/lora';
import type { CausalLM } from '../model/causal-lm';
import type { Tokenizer } from '../tokenizer/types';
import type { Task } from '../tasks';
import { makeReward, type RewardFn } from '../reward/functions';
import { readRewardMean, REWARD_FILE } from '../reward/reward-model';
import {
  PpoTrainer,
  type ConfigSource,
  type RewardSource,
  type TrainerEvents,
  type TrainerProgress,
} from './trainer';
import type { TrainerDevice } from './gpu-plan';
import { UserError } from '../../common/errors';

export interface Resources {
  /** Open a model folder by preset name or path/URL. */
  modelFiles(nameOrPath: string): ModelFiles;
  loadTask(name: string): Promise<Task>;
  /**
   * Build models with `wte` in vocabulary chunks of at most this many bytes (GPT2Options.maxBindingBytes; the
   * worker sets it on WebGPU to the device's binding limit, docs/tfjs.md trap 8). Absent: one `wte` tensor.
   */
  maxBindingBytes?: number;
}

/** A trainer's owner (the training session): where the trainer reads its config, and its phase callback. */
export interface TrainerOwner {
  config: ConfigSource;
  events?: TrainerEvents;
}

export interface BuildOptions {
  /** A user reward function (CLI --reward-module, the UI's code editor); overrides the task's reward. */
  rewardFn?: { fn: RewardFn; label: string };
  /** Weights to start from instead of loading (resume): policy, ref, value (null: critic-free), reward model. */
  weights?: {
    policy: CausalLM;
    ref: CausalLM;
    value: ScalarModel | null;
    rewardModel?: ScalarModel;
    tokenizer: Tokenizer;
  };
  /**
   * The owner of the trainer, given the validated config the trainer is built from (TrainingSession.build /
   * restore pass it, so the trainer reads the session's config from its first step). Absent: the trainer owns
   * `cfg` itself (a trainer used on its own, e.g. in tests).
   */
  owner?: (cfg: TrainConfig) => TrainerOwner;
  /**
   * The trainer's device collaborators: its error scopes and the device its plan is for (src/core/ppo/gpu-plan.ts;
   * default: WebGPU's, nothing elsewhere). Tests inject a device that runs out of memory.
   */
  device?: TrainerDevice;
  /** The progress a resumed run continues from (a checkpoint's; fields left out start fresh). */
  resume?: Partial<TrainerProgress>;
}

export async function resolvePrompts(
  cfg: TrainConfig,
  res: Resources,
): Promise<{ prompts: string[]; taskReward?: unknown }> {
  if (cfg.prompts && cfg.prompts.length)
    return { prompts: cfg.prompts, taskReward: cfg.task ? (await res.loadTask(cfg.task)).reward : undefined };
  if (!cfg.task)
    throw new UserError('config: give "task" (a built-in task name) or "prompts" (a list of strings).');
  const task = await res.loadTask(cfg.task);
  return { prompts: task.prompts, taskReward: task.reward };
}

export async function buildTrainer(
  cfg: TrainConfig,
  res: Resources,
  opts: BuildOptions = {},
): Promise<PpoTrainer> {
  const { prompts, taskReward } = await resolvePrompts(cfg, res);
  const spec: unknown = cfg.reward ?? taskReward;
  let policy: CausalLM, ref: CausalLM, tokenizer: Tokenizer;
  let rewardModel: ScalarModel | undefined;
  if (opts.weights) {
    ({ policy, ref, tokenizer } = opts.weights);
    rewardModel = opts.weights.rewardModel;
  } else if (cfg.lora > 0) {
    // LoRA (docs/formats.md §6): the base is loaded once, frozen. The policy is a view with adapters seeded from
    // cfg.seed (B = 0: it starts equal to the base); the reference IS the base, not a copy.
    const lm = await loadLM(res.modelFiles(cfg.model), {
      trainable: false,
      label: 'base',
      maxBindingBytes: res.maxBindingBytes,
      // The frozen base in f16 where asked (docs/models.md, "The frozen base in f16"); adapters stay f32.
      ...(cfg.baseDtype === 'f16' ? { baseDtype: 'f16' as const } : {}),
    });
    tokenizer = lm.tokenizer;
    ref = lm.model;
    policy = ref.withLora(LoraAdapters.create(ref.config, cfg, cfg.seed, 'policy'), 'policy');
  } else {
    const lm = await loadLM(res.modelFiles(cfg.model), {
      trainable: true,
      label: 'policy',
      maxBindingBytes: res.maxBindingBytes,
    });
    policy = lm.model;
    tokenizer = lm.tokenizer;
    ref = policy.clone(false, 'ref');
  }
  let reward: RewardSource;
  if (opts.rewardFn) {
    reward = { kind: 'fn', fn: opts.rewardFn.fn, label: opts.rewardFn.label };
  } else if (spec && typeof spec === 'object' && 'model' in spec) {
    const rmPath = String((spec as { model: unknown }).model);
    let rewardMean: number | null = null; // on resume, restoreTrainer sets the mean saved in the checkpoint
    if (!rewardModel) {
      const files = res.modelFiles(rmPath);
      rewardModel = await loadScalar(files, REWARD_FILE, {
        trainable: false,
        label: 'reward',
        maxBindingBytes: res.maxBindingBytes,
        // Frozen like the base: held in f16 too where the base is (a GPT-2-family reward model stays f32).
        ...(cfg.baseDtype === 'f16' ? { baseDtype: 'f16' as const } : {}),
      });
      rewardMean = await readRewardMean(files);
    }
    if (
      rewardModel.config.vocab_size !== policy.config.vocab_size ||
      rewardModel.config.tokenizer !== policy.config.tokenizer
    ) {
      throw new UserError(
        `reward model ${rmPath} uses the ${rewardModel.config.tokenizer} tokenizer (vocab ${rewardModel.config.vocab_size}); ` +
          `the policy uses ${policy.config.tokenizer} (vocab ${policy.config.vocab_size}). They must match.`,
      );
    }
    reward = { kind: 'model', model: rewardModel, label: rmPath, mean: rewardMean };
  } else if (spec !== undefined) {
    reward = {
      kind: 'fn',
      fn: makeReward(spec, 'reward'),
      label: typeof spec === 'string' ? spec : 'reward mix',
    };
  } else {
    throw new UserError(
      'config: no reward: set "reward", or a "task" whose reward is used, or pass --reward-module.',
    );
  }
  let value: ScalarModel | null;
  if (opts.weights) value = opts.weights.value;
  else if (!hasValueModel(cfg))
    value = null; // critic-free: no value model, no value optimiser
  else if (cfg.lora > 0 && cfg.valueModel === 'shared') {
    // The value model on the same frozen base: its own adapters (seed + 1) and a zero head (validateConfig
    // refuses valueInit "reward" here).
    const adapters = LoraAdapters.create(policy.config, cfg, cfg.seed + 1, 'value');
    value = ScalarModel.onSharedBase(policy.base, adapters, 'value');
  } else if (cfg.valueInit === 'reward') {
    if (reward.kind !== 'model') {
      throw new UserError(
        'config: valueInit "reward" needs a learned reward model ("reward": {"model": FOLDER}); use valueInit "policy" with reward functions.',
      );
    }
    value = reward.model.clone(true, 'value');
  } else {
    value = ScalarModel.fromTrunk(policy, true, 'value');
  }
  const owner = opts.owner?.(cfg);
  return new PpoTrainer(
    owner?.config ?? (() => cfg),
    { policy, ref, value, reward },
    tokenizer,
    prompts,
    owner?.events,
    opts.device,
    opts.resume,
  );
}
