/**
 * Exports for today's RL engines (issues #23 point 5 and #34; docs/exports.md): our training config as
 * - an OpenRLHF command (`python3 -m openrlhf.cli.train_ppo_ray` with the nested flag names of its current argument
 *   parser, e.g. `--algo.advantage.estimator`), for ppo, grpo, rloo and reinforce++;
 * - a verl command (`python3 -m verl.trainer.main_ppo` with Hydra overrides of its trainer config), for the same
 *   four algorithms.
 * Names, types, conversions and the engines' start-up checks come from the rule list in ./rules.ts (with the
 * commit each was read from); every file is written to start as printed on one GPU, with placeholders only for
 * paths and model ids that are the user's to choose (each named in a comment). Every setting whose engine default
 * differs from what our run does is written out; what an engine cannot express is said in one line of the file and
 * the closest equivalent is written.
 */
import { derived, type TrainConfig } from '../config';
import {
  EXPORT_GPUS,
  OPENRLHF_SOURCE,
  VERL_DUAL_CLIP_OFF,
  VERL_ESTIMATOR as VERL_ESTIMATOR_RULE,
  VERL_KL,
  VERL_LOSS_AGG as VERL_LOSS_AGG_RULE,
  VERL_MICRO_FOR_LOSS_AGG,
  VERL_SOURCE,
  openRlhfEstimator,
  verlTargetModules,
} from './rules';

/** Adam as our trainer runs it (src/core/optim/fused-adam.ts = tf.train.adam): tfjs's float32 epsilon is 1e-7. */
export const OUR_ADAM = { beta1: 0.9, beta2: 0.999, epsilon: 1e-7, weightDecay: 0 } as const;

const HUB_ID = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

function modelPath(cfg: TrainConfig): string {
  return HUB_ID.test(cfg.model) ? cfg.model : `<path to the policy model folder: export "${cfg.model}">`;
}

function rewardModelPath(cfg: TrainConfig): string | null {
  const r = cfg.reward;
  if (r !== undefined && typeof r === 'object' && 'model' in r) {
    return HUB_ID.test(r.model) ? r.model : `<path to the reward model folder "${r.model}">`;
  }
  return null;
}

/** One exported file: which engine (and version) it is for, its name and text. */
export interface EngineExport {
  /** The engine and the version or commit the names were checked against, e.g. "OpenRLHF (train_ppo_ray, 3c3be62)". */
  engine: string;
  /** File name to save it under. */
  fileName: string;
  mime: string;
  text: string;
}

/**
 * A flag/override value: a list is written space-separated (argparse nargs) or as a Hydra list, a record as a Hydra
 * dict.
 */
export type FlagValue = string | number | boolean | null | number[] | string[] | Record<string, number>;

/** OpenRLHF's estimator for each of our algorithms (GRPO without std scaling: `dr_grpo`, see rules.ts). */
export const OPENRLHF_ESTIMATOR: Record<TrainConfig['algorithm'], string> = {
  ppo: 'gae',
  grpo: 'group_norm',
  rloo: 'rloo',
  'reinforce++': 'reinforce',
};

/** verl's `algorithm.adv_estimator` for each of our algorithms. */
export const VERL_ESTIMATOR: Record<TrainConfig['algorithm'], string> = VERL_ESTIMATOR_RULE;

/** verl's loss_agg_mode for our lossAggregation. */
export const VERL_LOSS_AGG: Record<TrainConfig['lossAggregation'], string> = VERL_LOSS_AGG_RULE;

/**
 * The adaptive KL target: ours is nats per sample (summed over the completion), OpenRLHF's and verl's controllers
 * compare the per-token mean (averaged over samples) with theirs. targetKl / responseLength equals ours when
 * completions run to full length.
 */
export function perTokenKlTarget(cfg: Pick<TrainConfig, 'targetKl' | 'responseLength'>): number {
  return cfg.targetKl / cfg.responseLength;
}

function perTokenKlNote(cfg: TrainConfig): string {
  return `targetKl ${cfg.targetKl} nats per sample: the engine's target is the per-token mean KL, written as targetKl / responseLength = ${perTokenKlTarget(cfg)} (equal for full-length completions).`;
}

/** LoRA alpha as an engine that types it int takes it: the nearest integer, and a note when it is not exact. */
function intAlpha(cfg: TrainConfig, engine: string, notes: string[]): number {
  const a = Math.round(cfg.loraAlpha);
  if (a !== cfg.loraAlpha)
    notes.push(
      `loraAlpha ${cfg.loraAlpha}: ${engine} types lora_alpha as an int; written as ${a} (scaling ${a}/${cfg.lora} instead of ${cfg.loraAlpha}/${cfg.lora}).`,
    );
  return Math.max(1, a);
}

function placeholderNotes(values: FlagValue[]): string[] {
  const ph = [...new Set(values.filter((v): v is string => typeof v === 'string' && /^<.*>$/.test(v)))];
  return ph.length ? [`Placeholders, yours to fill (a path or a model id): ${ph.join(', ')}.`] : [];
}

/**
 * OpenRLHF train_ppo_ray flags (name without the leading "--" → value; `true` = a store_true flag present) and
 * notes on what does not carry over.
 */
export function openRlhfFlags(cfg: TrainConfig): { flags: Record<string, FlagValue>; notes: string[] } {
  const G = derived(cfg).groupSize;
  const algo = cfg.algorithm;
  const notes: string[] = [];
  const f: Record<string, FlagValue> = {};
  f['actor.model_name_or_path'] = modelPath(cfg);
  const rm = rewardModelPath(cfg);
  if (rm) f['reward.model_name_or_path'] = rm;
  else {
    f['reward.remote_url'] = '<reward_func.py: a reward_func doing what this run scores with>';
    notes.push(
      'reward: OpenRLHF takes a Python file with reward_func(queries, prompts, labels) as --reward.remote_url.',
    );
  }
  f['data.prompt_dataset'] = '<prompts.jsonl: one {"input": prompt} a line>';
  f['data.input_key'] = 'input';
  const estimator = openRlhfEstimator(algo, cfg.scaleRewards);
  f['algo.advantage.estimator'] = estimator;
  // One GPU: actor, reference, critic, reward model and one vLLM engine share it (OpenRLHF's hybrid engine).
  // Without --vllm.num_engines there is no generator at all and the first rollout fails.
  f['vllm.num_engines'] = EXPORT_GPUS;
  f['vllm.tensor_parallel_size'] = 1;
  f['vllm.gpu_memory_utilization'] = 0.5;
  f['train.colocate_all'] = true;
  f['vllm.enable_sleep'] = true;
  f['ds.enable_sleep'] = true;
  for (const g of ['actor', 'ref', ...(algo === 'ppo' ? ['critic'] : []), ...(rm ? ['reward'] : [])]) {
    f[`${g}.num_nodes`] = 1;
    f[`${g}.num_gpus_per_node`] = EXPORT_GPUS;
  }
  notes.push(
    'one GPU: every model and the vLLM engine colocated (--train.colocate_all); raise the *.num_gpus_per_node and --vllm.num_engines together for more.',
  );
  // Batch arithmetic: OpenRLHF's rollout batch counts prompts, each sampled n_samples_per_prompt times; its
  // train batch counts samples per optimiser step. steps rollouts = max_samples prompts, one episode.
  f['rollout.batch_size'] = cfg.batchSize / G;
  f['rollout.n_samples_per_prompt'] = G;
  f['train.batch_size'] = cfg.batchSize / cfg.miniBatches;
  f['train.max_epochs'] = cfg.ppoEpochs;
  f['train.num_episodes'] = 1;
  f['data.max_samples'] = cfg.steps * (cfg.batchSize / G);
  notes.push(
    `steps ${cfg.steps}: data.max_samples = steps × prompts per step with one episode; the prompt file needs that many lines (repeat prompts).`,
  );
  f['train.seed'] = cfg.seed;
  // Sampling.
  f['rollout.max_new_tokens'] = cfg.responseLength;
  f['rollout.temperature'] = cfg.temperature;
  f['rollout.top_p'] = cfg.topP;
  if (cfg.topK !== 0) notes.push(`topK ${cfg.topK}: OpenRLHF's train_ppo_ray has no top-k flag.`);
  // KL.
  if (algo === 'grpo') {
    f['algo.kl.use_loss'] = true;
    f['algo.kl.estimator'] = 'k3';
  } else {
    f['algo.kl.estimator'] = cfg.klEstimator;
  }
  f['algo.kl.init_coef'] = cfg.klCoef;
  if (cfg.adaptiveKl) {
    f['algo.kl.target'] = perTokenKlTarget(cfg);
    f['algo.kl.horizon'] = cfg.klHorizon;
    notes.push(perTokenKlNote(cfg));
  }
  if (algo === 'grpo' && cfg.scaleRewards === 'batch')
    notes.push(
      'scaleRewards "batch": OpenRLHF divides by the group std (group_norm) or not at all (dr_grpo); group_norm written.',
    );
  f['algo.advantage.gamma'] = cfg.gamma;
  f['algo.advantage.lambd'] = algo === 'ppo' ? cfg.lam : 1;
  f['actor.eps_clip'] = cfg.clipRange;
  f['actor.entropy_coef'] = cfg.entropyCoef;
  // Rewards are used as they come (OpenRLHF clips to ±10 by default).
  f['reward.clip_range'] = [-1e9, 1e9];
  // Optimiser and schedule: ours is Adam at a constant rate (OpenRLHF: cosine with warm-up, β2 0.95).
  const opt = (who: 'actor' | 'critic', lr: number) => {
    f[`${who}.adam.lr`] = lr;
    f[`${who}.adam.betas`] = [OUR_ADAM.beta1, OUR_ADAM.beta2];
    f[`${who}.adam.eps`] = OUR_ADAM.epsilon;
    f[`${who}.adam.weight_decay`] = OUR_ADAM.weightDecay;
    f[`${who}.lr_scheduler`] = 'constant';
    f[`${who}.lr_warmup_ratio`] = 0;
    f[`${who}.max_norm`] = cfg.maxGradNorm;
  };
  opt('actor', cfg.learningRate);
  if (algo === 'ppo') {
    f['critic.model_name_or_path'] = cfg.valueInit === 'reward' && rm ? rm : modelPath(cfg);
    f['critic.value_clip'] = cfg.clipRangeValue;
    opt('critic', cfg.valueLearningRate);
    notes.push(
      `maxGradNorm ${cfg.maxGradNorm}: here one clip over policy and value together; OpenRLHF clips each model on its own.`,
    );
    if (cfg.vfCoef !== 0.1)
      notes.push(`vfCoef ${cfg.vfCoef}: OpenRLHF's critic has its own optimiser, no vf coefficient.`);
  }
  if (cfg.lora > 0) {
    f['ds.lora.rank'] = cfg.lora;
    f['ds.lora.alpha'] = intAlpha(cfg, 'OpenRLHF', notes);
    f['ds.lora.dropout'] = 0;
    f['ds.lora.target_modules'] = [...cfg.loraTargets];
  }
  if (cfg.saveEvery > 0) f['ckpt.save_steps'] = cfg.saveEvery;
  notes.push('dtype: OpenRLHF trains in bf16 or fp16 (--ds.param_dtype); this run is float32.');
  if (cfg.lossAggregation !== 'token-mean')
    notes.push(`lossAggregation "${cfg.lossAggregation}": OpenRLHF takes the token mean.`);
  if (cfg.missingEosPenalty !== 0)
    notes.push(
      `missingEosPenalty ${cfg.missingEosPenalty}: subtract it in the reward for completions without EOS.`,
    );
  if (algo === 'rloo') {
    notes.push(
      'rloo: OpenRLHF takes the leave-one-out baseline of the scores and keeps the KL penalty per token; here the baseline is of score − klCoef·ΣKL.',
    );
    if (cfg.normalizeAdvantages)
      notes.push(
        'normalizeAdvantages: OpenRLHF never whitens rloo advantages (only gae / reinforce / reinforce_baseline); not expressible.',
      );
  }
  notes.push(...placeholderNotes(Object.values(f)));
  return { flags: f, notes };
}

function shellQuote(v: string): string {
  return /^[\w@%+=:,./-]+$/.test(v) ? v : `'${v.replace(/'/g, `'\\''`)}'`;
}

function shellValue(v: FlagValue): string {
  if (Array.isArray(v)) return v.map((x) => shellQuote(String(x))).join(' ');
  return shellQuote(String(v));
}

/** The OpenRLHF command as a shell script (comments first). */
export function openRlhfCommand(cfg: TrainConfig): string {
  const { flags, notes } = openRlhfFlags(cfg);
  const lines = Object.entries(flags)
    .filter(([, v]) => v !== false)
    .map(([k, v]) => (v === true ? `  --${k}` : `  --${k} ${shellValue(v)}`));
  return (
    [
      '#!/bin/sh',
      `# PPO Playground export (${cfg.algorithm}) for OpenRLHF: flags of openrlhf/cli/train_ppo_ray.py at commit`,
      `# ${OPENRLHF_SOURCE.commit} (${OPENRLHF_SOURCE.date}; the nested names, e.g. --algo.advantage.estimator).`,
      ...notes.map((n) => `# ${n}`),
      'python3 -m openrlhf.cli.train_ppo_ray \\',
      lines.join(' \\\n'),
    ].join('\n') + '\n'
  );
}

/** verl Hydra overrides (dotted key → value) and notes. */
export function verlOverrides(cfg: TrainConfig): { overrides: Record<string, FlagValue>; notes: string[] } {
  const G = derived(cfg).groupSize;
  const algo = cfg.algorithm;
  const notes: string[] = [];
  const o: Record<string, FlagValue> = {};
  o['algorithm.adv_estimator'] = VERL_ESTIMATOR[algo];
  o['data.train_files'] = '<prompts.parquet>';
  o['data.val_files'] = '<prompts.parquet>';
  // verl's batch sizes count prompts; each is sampled rollout.n times.
  o['data.train_batch_size'] = cfg.batchSize / G;
  o['data.max_response_length'] = cfg.responseLength;
  o['data.seed'] = cfg.seed;
  o['actor_rollout_ref.model.path'] = modelPath(cfg);
  // Mandatory (??? in verl's config), and on one GPU the rollout's tensor parallelism is 1 (verl's default is 2).
  o['actor_rollout_ref.rollout.name'] = 'vllm';
  o['actor_rollout_ref.rollout.tensor_model_parallel_size'] = 1;
  o['actor_rollout_ref.rollout.n'] = G;
  o['actor_rollout_ref.rollout.do_sample'] = true;
  o['actor_rollout_ref.rollout.temperature'] = cfg.temperature;
  o['actor_rollout_ref.rollout.top_k'] = cfg.topK === 0 ? -1 : cfg.topK;
  o['actor_rollout_ref.rollout.top_p'] = cfg.topP;
  const mini = cfg.batchSize / cfg.miniBatches / G;
  const miniPrompts = Number.isInteger(mini) ? mini : Math.max(1, Math.round(mini));
  o['actor_rollout_ref.actor.ppo_mini_batch_size'] = miniPrompts;
  if (!Number.isInteger(mini)) {
    notes.push(
      `miniBatches ${cfg.miniBatches}: verl's mini-batch counts prompts (whole groups); ${cfg.batchSize / cfg.miniBatches} samples is not a whole number of groups of ${G}.`,
    );
  }
  // Micro-batches (samples per GPU): verl requires them; the size that keeps our loss aggregation (rules.ts).
  const miniSamples = miniPrompts * G;
  const lossAgg = VERL_LOSS_AGG[cfg.lossAggregation] as keyof typeof VERL_MICRO_FOR_LOSS_AGG;
  const rule = VERL_MICRO_FOR_LOSS_AGG[lossAgg];
  const micro = rule === 1 ? 1 : miniSamples;
  o['actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'] = micro;
  o['actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu'] = miniSamples;
  o['actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu'] = miniSamples;
  if (rule === 1)
    notes.push(
      `lossAggregation "seq-sum-norm": verl's worker divides each micro-batch's sum by the response length; micro-batches of 1 sample make it Σ / (sequences × ${cfg.responseLength}) as here.`,
    );
  else if (rule === 'mini')
    notes.push(
      `micro-batch ${micro} = the whole mini-batch: verl's worker averages micro-batch token means, which is the token mean of the mini-batch only with one micro-batch.`,
    );
  o['actor_rollout_ref.actor.ppo_epochs'] = cfg.ppoEpochs;
  o['actor_rollout_ref.actor.clip_ratio'] = cfg.clipRange;
  o['actor_rollout_ref.actor.clip_ratio_low'] = cfg.clipRange;
  o['actor_rollout_ref.actor.clip_ratio_high'] = cfg.clipRange;
  // Dual-clip off: the bound can never bind (verl's ratio is at most e^20).
  o['actor_rollout_ref.actor.clip_ratio_c'] = VERL_DUAL_CLIP_OFF;
  o['actor_rollout_ref.actor.loss_agg_mode'] = lossAgg;
  if (algo === 'rloo')
    notes.push("rloo: here one ratio per sequence (TRL RLOOTrainer); verl's actor loss is per token.");
  o['actor_rollout_ref.actor.entropy_coeff'] = cfg.entropyCoef;
  o['actor_rollout_ref.actor.grad_clip'] = cfg.maxGradNorm;
  const optim = (prefix: string, lr: number) => {
    o[`${prefix}.optim.lr`] = lr;
    o[`${prefix}.optim.lr_scheduler_type`] = 'constant';
    o[`${prefix}.optim.lr_warmup_steps_ratio`] = 0;
    o[`${prefix}.optim.weight_decay`] = OUR_ADAM.weightDecay;
    o[`${prefix}.optim.betas`] = [OUR_ADAM.beta1, OUR_ADAM.beta2];
    // Passed to torch.optim.AdamW as keyword arguments.
    o[`${prefix}.optim.override_optimizer_config`] = { eps: OUR_ADAM.epsilon };
  };
  optim('actor_rollout_ref.actor', cfg.learningRate);
  if (algo === 'grpo') {
    o['actor_rollout_ref.actor.use_kl_loss'] = cfg.klCoef > 0;
    o['actor_rollout_ref.actor.kl_loss_coef'] = cfg.klCoef;
    o['actor_rollout_ref.actor.kl_loss_type'] = 'low_var_kl';
    o['algorithm.use_kl_in_reward'] = false;
    o['algorithm.norm_adv_by_std_in_grpo'] = cfg.scaleRewards !== 'none';
    if (cfg.scaleRewards === 'batch')
      notes.push('scaleRewards "batch": verl divides by the group std or not at all; the group std written.');
  } else {
    o['actor_rollout_ref.actor.use_kl_loss'] = false;
    o['algorithm.use_kl_in_reward'] = cfg.klCoef > 0 || cfg.adaptiveKl;
    o['algorithm.kl_penalty'] = VERL_KL[cfg.klEstimator];
    o['algorithm.kl_ctrl.type'] = cfg.adaptiveKl ? 'adaptive' : 'fixed';
    o['algorithm.kl_ctrl.kl_coef'] = cfg.klCoef;
    if (cfg.adaptiveKl) {
      o['algorithm.kl_ctrl.target_kl'] = perTokenKlTarget(cfg);
      o['algorithm.kl_ctrl.horizon'] = cfg.klHorizon;
      notes.push(perTokenKlNote(cfg));
    }
  }
  if (algo === 'rloo' && cfg.normalizeAdvantages)
    notes.push('normalizeAdvantages: verl never whitens rloo advantages; not expressible.');
  o['algorithm.gamma'] = cfg.gamma;
  o['algorithm.lam'] = algo === 'ppo' ? cfg.lam : 1;
  const rm = rewardModelPath(cfg);
  if (rm) {
    // The worker that scores with a sequence-classification model on the policy's own tokens (the reward loop
    // would re-tokenise through the reward model's chat template, which a GPT-2 reward model lacks).
    o['reward_model.enable'] = true;
    o['reward_model.use_reward_loop'] = false;
    o['reward_model.model.path'] = rm;
    o['reward_model.model.input_tokenizer'] = null;
    o['reward_model.micro_batch_size_per_gpu'] = miniSamples;
  } else {
    o['custom_reward_function.path'] = '<reward.py: compute_score doing what this run scores with>';
    o['custom_reward_function.name'] = 'compute_score';
  }
  if (algo === 'ppo') {
    o['critic.model.path'] = cfg.valueInit === 'reward' && rm ? rm : modelPath(cfg);
    o['critic.ppo_micro_batch_size_per_gpu'] = micro;
    o['critic.cliprange_value'] = cfg.clipRangeValue;
    o['critic.ppo_epochs'] = cfg.ppoEpochs;
    o['critic.grad_clip'] = cfg.maxGradNorm;
    optim('critic', cfg.valueLearningRate);
    notes.push('ppo: verl always whitens GAE advantages and clips actor and critic separately.');
  }
  if (cfg.lora > 0) {
    o['actor_rollout_ref.model.lora_rank'] = cfg.lora;
    o['actor_rollout_ref.model.lora_alpha'] = intAlpha(cfg, 'verl', notes);
    // verl types target_modules as one string: PEFT's "all-linear" or a regex over module names.
    o['actor_rollout_ref.model.target_modules'] = verlTargetModules(cfg.loraTargets);
  }
  o['trainer.total_training_steps'] = cfg.steps;
  o['trainer.nnodes'] = 1;
  o['trainer.n_gpus_per_node'] = EXPORT_GPUS;
  o['trainer.critic_warmup'] = 0;
  o['trainer.save_freq'] = cfg.saveEvery > 0 ? cfg.saveEvery : -1;
  // Console only (verl's default also logs to wandb, which needs an account), no validation pass before training.
  o['trainer.logger'] = ['console'];
  o['trainer.val_before_train'] = false;
  notes.push('dtype: verl computes in bf16 (fsdp_config.dtype, rollout.dtype); this run is float32.');
  if (cfg.missingEosPenalty !== 0)
    notes.push(
      `missingEosPenalty ${cfg.missingEosPenalty}: subtract it in compute_score for completions without EOS.`,
    );
  notes.push(...placeholderNotes(Object.values(o)));
  return { overrides: o, notes };
}

function hydraScalar(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'string') {
    // Unquoted where Hydra reads the text as the same string; otherwise a quoted string.
    return /^[A-Za-z_~][\w./~-]*$/.test(x) && !/^(null|true|false|inf|nan)$/i.test(x)
      ? x
      : `"${x.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
  }
  return String(x);
}

function hydraValue(v: FlagValue): string {
  if (Array.isArray(v)) return `[${(v as unknown[]).map(hydraScalar).join(',')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.entries(v)
      .map(([k, x]) => `${k}:${hydraScalar(x)}`)
      .join(',')}}`;
  return hydraScalar(v);
}

/** The verl command as a shell script (comments first). */
export function verlCommand(cfg: TrainConfig): string {
  const { overrides, notes } = verlOverrides(cfg);
  const lines = Object.entries(overrides).map(([k, v]) => `  ${k}=${shellQuote(hydraValue(v))}`);
  return (
    [
      '#!/bin/sh',
      `# PPO Playground export (${cfg.algorithm}) for verl: Hydra overrides of verl/trainer/config/ppo_trainer.yaml,`,
      `# keys and checks of verl commit ${VERL_SOURCE.commit} (${VERL_SOURCE.date}).`,
      ...notes.map((n) => `# ${n}`),
      'python3 -m verl.trainer.main_ppo \\',
      lines.join(' \\\n'),
    ].join('\n') + '\n'
  );
}
