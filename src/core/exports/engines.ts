/**
 * Exports for today's RL engines (issue #23 point 5; docs/exports.md): our training config as
 * - an OpenRLHF command (`python3 -m openrlhf.cli.train_ppo_ray` with the nested flag names of its current argument
 *   parser, e.g. `--algo.advantage.estimator`; names checked against OpenRLHF at commit 3c3be62, 2026-08-13:
 *   tests/fixtures/exports/openrlhf-train_ppo_ray-flags.json), for ppo, grpo, rloo and reinforce++;
 * - a verl command (`python3 -m verl.trainer.main_ppo` with Hydra overrides; keys checked against verl's resolved
 *   trainer config at commit b178a3c, 2026-01-29: tests/fixtures/exports/verl-ppo_trainer-keys.json), for the same
 *   four algorithms.
 * Every setting whose engine default differs from what our run does is written out: the learning-rate schedule
 * (constant, no warm-up), Adam's constants (β 0.9/0.999, no weight decay), KL coefficient and estimator, clip
 * ranges, epochs, batch arithmetic and sampling. What an engine cannot express is said in the file's comments.
 */
import { derived, type TrainConfig } from '../config';

/** Adam as our trainer runs it (src/core/fused-adam.ts = tf.train.adam): tfjs's float32 epsilon is 1e-7. */
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

/** A flag/override value: a list is written space-separated (argparse nargs) or as a Hydra list. */
export type FlagValue = string | number | boolean | number[] | string[];

/** OpenRLHF's estimator for each of our algorithms. */
export const OPENRLHF_ESTIMATOR: Record<TrainConfig['algorithm'], string> = {
  ppo: 'gae',
  grpo: 'group_norm',
  rloo: 'rloo',
  'reinforce++': 'reinforce',
};

/** verl's `algorithm.adv_estimator` for each of our algorithms. */
export const VERL_ESTIMATOR: Record<TrainConfig['algorithm'], string> = {
  ppo: 'gae',
  grpo: 'grpo',
  rloo: 'rloo',
  'reinforce++': 'reinforce_plus_plus',
};

/** verl's loss_agg_mode for our lossAggregation. */
export const VERL_LOSS_AGG: Record<TrainConfig['lossAggregation'], string> = {
  'token-mean': 'token-mean',
  'seq-mean': 'seq-mean-token-mean',
  'seq-sum-norm': 'seq-mean-token-sum-norm',
};

/** verl's kl_penalty / kl_loss_type names for our estimators. */
const VERL_KL: Record<TrainConfig['klEstimator'], string> = { k1: 'kl', k2: 'mse', k3: 'low_var_kl' };

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
  f['algo.advantage.estimator'] = OPENRLHF_ESTIMATOR[algo];
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
    f['algo.kl.target'] = cfg.targetKl;
    f['algo.kl.horizon'] = cfg.klHorizon;
  }
  if (algo === 'grpo' && cfg.scaleRewards === 'none') f['algo.advantage.no_std_norm'] = true;
  if (algo === 'grpo' && cfg.scaleRewards === 'batch')
    notes.push('scaleRewards "batch": OpenRLHF divides by the group std (group_norm) or not at all.');
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
    f['ds.lora.alpha'] = cfg.loraAlpha;
    f['ds.lora.dropout'] = 0;
    f['ds.lora.target_modules'] = [...cfg.loraTargets];
  }
  if (cfg.saveEvery > 0) f['ckpt.save_steps'] = cfg.saveEvery;
  if (cfg.lossAggregation !== 'token-mean')
    notes.push(`lossAggregation "${cfg.lossAggregation}": OpenRLHF takes the token mean.`);
  if (cfg.missingEosPenalty !== 0)
    notes.push(
      `missingEosPenalty ${cfg.missingEosPenalty}: subtract it in the reward for completions without EOS.`,
    );
  if (algo === 'rloo' && cfg.normalizeAdvantages)
    notes.push('normalizeAdvantages: OpenRLHF whitens advantages itself; check your version.');
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
      `# PPO Playground export (${cfg.algorithm}) for OpenRLHF: flag names of openrlhf/cli/train_ppo_ray.py at commit`,
      '# 3c3be6234e0cb353e76bb8019947db9dfe99fca7 (2026-08-13; the nested names, e.g. --algo.advantage.estimator).',
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
  o['actor_rollout_ref.rollout.n'] = G;
  o['actor_rollout_ref.rollout.do_sample'] = true;
  o['actor_rollout_ref.rollout.temperature'] = cfg.temperature;
  o['actor_rollout_ref.rollout.top_k'] = cfg.topK === 0 ? -1 : cfg.topK;
  o['actor_rollout_ref.rollout.top_p'] = cfg.topP;
  const mini = cfg.batchSize / cfg.miniBatches / G;
  if (Number.isInteger(mini)) o['actor_rollout_ref.actor.ppo_mini_batch_size'] = mini;
  else {
    o['actor_rollout_ref.actor.ppo_mini_batch_size'] = Math.max(1, Math.round(mini));
    notes.push(
      `miniBatches ${cfg.miniBatches}: verl's mini-batch counts prompts (whole groups); ${cfg.batchSize / cfg.miniBatches} samples is not a whole number of groups of ${G}.`,
    );
  }
  o['actor_rollout_ref.actor.ppo_epochs'] = cfg.ppoEpochs;
  o['actor_rollout_ref.actor.clip_ratio'] = cfg.clipRange;
  o['actor_rollout_ref.actor.clip_ratio_low'] = cfg.clipRange;
  o['actor_rollout_ref.actor.clip_ratio_high'] = cfg.clipRange;
  o['actor_rollout_ref.actor.loss_agg_mode'] = VERL_LOSS_AGG[cfg.lossAggregation];
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
  };
  optim('actor_rollout_ref.actor', cfg.learningRate);
  notes.push(`Adam epsilon ${OUR_ADAM.epsilon} here; verl's optimiser config has no eps key (torch's 1e-8).`);
  if (algo === 'grpo') {
    o['actor_rollout_ref.actor.use_kl_loss'] = cfg.klCoef > 0;
    o['actor_rollout_ref.actor.kl_loss_coef'] = cfg.klCoef;
    o['actor_rollout_ref.actor.kl_loss_type'] = 'low_var_kl';
    o['algorithm.use_kl_in_reward'] = false;
    o['algorithm.norm_adv_by_std_in_grpo'] = cfg.scaleRewards !== 'none';
    if (cfg.scaleRewards === 'batch')
      notes.push('scaleRewards "batch": verl divides by the group std or not at all.');
  } else {
    o['actor_rollout_ref.actor.use_kl_loss'] = false;
    o['algorithm.use_kl_in_reward'] = cfg.klCoef > 0 || cfg.adaptiveKl;
    o['algorithm.kl_penalty'] = VERL_KL[cfg.klEstimator];
    o['algorithm.kl_ctrl.type'] = cfg.adaptiveKl ? 'adaptive' : 'fixed';
    o['algorithm.kl_ctrl.kl_coef'] = cfg.klCoef;
    if (cfg.adaptiveKl) {
      o['algorithm.kl_ctrl.target_kl'] = cfg.targetKl;
      o['algorithm.kl_ctrl.horizon'] = cfg.klHorizon;
    }
  }
  o['algorithm.gamma'] = cfg.gamma;
  o['algorithm.lam'] = algo === 'ppo' ? cfg.lam : 1;
  const rm = rewardModelPath(cfg);
  if (rm) {
    o['reward_model.enable'] = true;
    o['reward_model.model.path'] = rm;
  } else {
    o['custom_reward_function.path'] = '<reward.py: compute_score doing what this run scores with>';
    o['custom_reward_function.name'] = 'compute_score';
  }
  if (algo === 'ppo') {
    o['critic.model.path'] = cfg.valueInit === 'reward' && rm ? rm : modelPath(cfg);
    o['critic.cliprange_value'] = cfg.clipRangeValue;
    o['critic.ppo_epochs'] = cfg.ppoEpochs;
    o['critic.grad_clip'] = cfg.maxGradNorm;
    optim('critic', cfg.valueLearningRate);
    notes.push('ppo: verl always whitens GAE advantages and clips actor and critic separately.');
  }
  if (cfg.lora > 0) {
    o['actor_rollout_ref.model.lora_rank'] = cfg.lora;
    o['actor_rollout_ref.model.lora_alpha'] = cfg.loraAlpha;
    o['actor_rollout_ref.model.target_modules'] = [...cfg.loraTargets];
  }
  o['trainer.total_training_steps'] = cfg.steps;
  o['trainer.nnodes'] = 1;
  o['trainer.n_gpus_per_node'] = 1;
  o['trainer.critic_warmup'] = 0;
  o['trainer.save_freq'] = cfg.saveEvery > 0 ? cfg.saveEvery : -1;
  if (cfg.missingEosPenalty !== 0)
    notes.push(
      `missingEosPenalty ${cfg.missingEosPenalty}: subtract it in compute_score for completions without EOS.`,
    );
  return { overrides: o, notes };
}

function hydraValue(v: FlagValue): string {
  if (Array.isArray(v))
    return `[${v.map((x) => (typeof x === 'string' ? JSON.stringify(x) : String(x))).join(',')}]`;
  const s = String(v);
  return /^[\w@%+:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The verl command as a shell script (comments first). */
export function verlCommand(cfg: TrainConfig): string {
  const { overrides, notes } = verlOverrides(cfg);
  const lines = Object.entries(overrides).map(([k, v]) => {
    const val = hydraValue(v);
    return `  ${k}=${Array.isArray(v) ? `'${val}'` : val}`;
  });
  return (
    [
      '#!/bin/sh',
      `# PPO Playground export (${cfg.algorithm}) for verl: Hydra overrides of verl/trainer/config/ppo_trainer.yaml,`,
      '# keys checked against verl commit b178a3cd56f58b2d502255daba591e92833930a7 (2026-01-29).',
      ...notes.map((n) => `# ${n}`),
      'python3 -m verl.trainer.main_ppo \\',
      lines.join(' \\\n'),
    ].join('\n') + '\n'
  );
}
