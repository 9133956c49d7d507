/**
 * "Export as TRL config": our training config (docs/formats.md §5) in the field names of Hugging Face TRL's
 * `PPOConfig` (the on-policy PPOTrainer of TRL ≥ 0.12, built on `transformers.TrainingArguments`), so a run
 * tried here can be repeated at scale. Keys with no TRL equivalent are listed in `_comment`; drop the keys that
 * start with "_" before `PPOConfig(**config)`.
 *
 * LoRA runs (docs/formats.md §6) add `peft_config`, PEFT's LoraConfig fields (r, lora_alpha, target_modules,
 * lora_dropout 0, bias "none", task_type "CAUSAL_LM", fan_in_fan_out true for GPT-2's Conv1D), beside the
 * PPOConfig fields: pop it too and pass `PPOTrainer(..., peft_config=LoraConfig(**peft_config))`; TRL then uses
 * the policy with its adapters off as the reference, as this run does.
 *
 * Batch sizes. TRL's rollout batch per device is
 *   per_device_train_batch_size × gradient_accumulation_steps × num_mini_batches,
 * and each optimiser step sees per_device_train_batch_size × gradient_accumulation_steps samples. Ours are
 * batchSize and batchSize / miniBatches, so per_device_train_batch_size = batchSize / miniBatches with
 * gradient_accumulation_steps = 1 (on one device). `batch_size` is what TRL derives from them at run time.
 *
 * Critic-free algorithms (docs/formats.md §7): "grpo" writes a `GRPOConfig` and "rloo" an `RLOOConfig` (TRL's
 * standard RL trainers), with their field names (num_generations, beta, epsilon, num_iterations, scale_rewards,
 * loss_type, normalize_advantages, steps_per_generation, …, as in trl/trainer/grpo_config.py and rloo_config.py).
 * TRL has no REINFORCE++: "reinforce++" writes OpenRLHF's train_ppo_ray flags (`--advantage_estimator
 * reinforce`) under `_openrlhf`. `_trl_class` names the class the fields belong to (null: none in TRL).
 *
 * GRPO/RLOO batch sizes: TRL counts completions; one generation batch of per_device_train_batch_size ×
 * steps_per_generation completions (our batchSize) is split into steps_per_generation optimiser steps (our
 * miniBatches) and reused num_iterations times (our ppoEpochs), so max_steps = steps × miniBatches × ppoEpochs.
 */
import { DEFAULT_CONFIG, derived, type LossAggregation, type TrainConfig } from '../config';
import type { DpoConfig } from '../config/dpo';
import { OUR_ADAM, openRlhfCommand, openRlhfFlags, verlCommand, type EngineExport } from './engines';
import {
  OPENRLHF_SOURCE,
  TRL_GRPO_DEFAULTS,
  TRL_LOSS_TYPE as TRL_LOSS_TYPE_RULE,
  TRL_PPO,
  TRL_SOURCE,
  VERL_SOURCE,
} from './rules';

/** The TRL release the GRPOConfig / RLOOConfig / DPOConfig exports were built and checked against. */
export const TRL_VERSION: string = TRL_SOURCE.version;

/**
 * Where TRL's PPOConfig lives, by version (rules.ts TRL_PPO, from TRL's git tags): the on-policy PPOTrainer's config is
 * top-level `trl.PPOConfig` from 0.12 to 0.28, with `kl_estimator` from 0.17; `trl.experimental.ppo.PPOConfig` from
 * 0.26 (still in 1.9); the 1.13.0 wheel has neither.
 */
export const TRL_PPO_VERSIONS =
  `trl ${TRL_PPO.topLevel} as trl.PPOConfig (kl_estimator from ${TRL_PPO.klEstimator.slice(2)}); ` +
  `trl.experimental.ppo.PPOConfig from ${TRL_PPO.experimental.slice(2)} (still in ${TRL_PPO.experimentalLastSeen}); ` +
  `absent in trl ${TRL_PPO.absentIn.replace(/\.0$/, '')}`;

/**
 * Training-argument fields whose TRL (transformers TrainingArguments) default differs from what our run does,
 * resolved: the learning rate stays constant (TRL: linear decay to 0), Adam's constants are tfjs's (epsilon 1e-7,
 * TRL 1e-8), no weight decay, float32 (TRL 1.13 turns bf16 on by default), a metric line every step.
 */
function trainingArgs(out: TrlConfig): void {
  out.lr_scheduler_type = 'constant';
  out.warmup_steps = 0;
  out.optim = 'adamw_torch';
  out.adam_beta1 = OUR_ADAM.beta1;
  out.adam_beta2 = OUR_ADAM.beta2;
  out.adam_epsilon = OUR_ADAM.epsilon;
  out.weight_decay = OUR_ADAM.weightDecay;
  out.bf16 = false;
  out.fp16 = false;
  out.logging_steps = 1;
}

const HUB_ID = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

/** The TRL-side object; values are JSON. */
export type TrlConfig = Record<string, unknown>;

function describeReward(cfg: TrainConfig): string {
  const r = cfg.reward;
  if (r === undefined) return cfg.task ? `the "${cfg.task}" task's reward function` : 'a reward function';
  if (typeof r === 'string') return `the "${r}" reward function`;
  if ('mix' in r)
    return `a mix of reward functions (${r.mix.map((m) => `${m.weight}×${m.name}`).join(' + ')})`;
  return '';
}

/** TRL GRPOConfig's loss_type for our lossAggregation (one device, no gradient accumulation; rules.ts). */
export const TRL_LOSS_TYPE: Record<LossAggregation, string> = TRL_LOSS_TYPE_RULE;

function peftConfig(cfg: Pick<TrainConfig, 'lora' | 'loraAlpha' | 'loraTargets'>): TrlConfig {
  return {
    r: cfg.lora,
    lora_alpha: cfg.loraAlpha,
    target_modules: [...cfg.loraTargets],
    lora_dropout: 0,
    bias: 'none',
    task_type: 'CAUSAL_LM',
    fan_in_fan_out: true,
  };
}

/** Notes every algorithm shares: sampling filters, clamps, early stop, prompts, saving. */
function commonNotes(cfg: TrainConfig, notes: string[]): void {
  if (cfg.logRatioClamp !== DEFAULT_CONFIG.logRatioClamp) {
    notes.push(`logRatioClamp ${cfg.logRatioClamp}: TRL does not clamp the log ratio.`);
  }
  if (cfg.earlyStopKl) {
    notes.push(
      `earlyStopKl (earlyStopApproxKl ${cfg.earlyStopApproxKl} nats per token): TRL has no KL early stop of the PPO epochs.`,
    );
  }
  notes.push(
    `prompts: ${cfg.prompts ? `${cfg.prompts.length} prompts of your own` : `the "${cfg.task}" task's prompts`} ` +
      'become the train_dataset (tokenised "input_ids").',
  );
  if (cfg.saveEvery > 0) notes.push(`saveEvery ${cfg.saveEvery}: use save_strategy "steps" with save_steps.`);
}

/**
 * Our config → the TRL config of its algorithm: PPOConfig (ppo), GRPOConfig (grpo), RLOOConfig (rloo), or for
 * reinforce++ OpenRLHF's flags; plus `_comment` (what does not carry over) and, with LoRA, `peft_config` (PEFT
 * LoraConfig fields, for the trainer's peft_config argument).
 */
export function toTrlConfig(cfg: TrainConfig): TrlConfig {
  switch (cfg.algorithm) {
    case 'grpo':
    case 'rloo':
      return groupConfig(cfg);
    case 'reinforce++':
      return openRlhfConfig(cfg);
    case 'ppo':
      return ppoConfig(cfg);
  }
}

/** GRPOConfig / RLOOConfig fields (TRL's GRPOTrainer / RLOOTrainer). */
function groupConfig(cfg: TrainConfig): TrlConfig {
  const grpo = cfg.algorithm === 'grpo';
  const notes: string[] = [];
  const out: TrlConfig = { _trl_class: grpo ? 'GRPOConfig' : 'RLOOConfig' };
  out.output_dir = `ppo-playground-${cfg.algorithm}`;
  out._model = HUB_ID.test(cfg.model)
    ? cfg.model
    : `<path to the policy model folder: export "${cfg.model}" from the playground>`;
  const rm = cfg.reward !== undefined && typeof cfg.reward === 'object' && 'model' in cfg.reward;
  notes.push(
    `_model: not a config field; pass it as ${grpo ? 'GRPOTrainer' : 'RLOOTrainer'}(model=..., reward_funcs=..., args=config). ` +
      `reward_funcs: ${rm ? 'the reward model folder' : `a function doing what ${describeReward(cfg) || 'the reward'} does`} ` +
      '(TRL calls reward functions with the prompts and completions).',
  );
  out.learning_rate = cfg.learningRate;
  out.per_device_train_batch_size = cfg.batchSize / cfg.miniBatches;
  out.gradient_accumulation_steps = 1;
  out.steps_per_generation = cfg.miniBatches;
  out.num_generations = derived(cfg).groupSize;
  out.num_iterations = cfg.ppoEpochs;
  out.max_steps = cfg.steps * cfg.miniBatches * cfg.ppoEpochs;
  out.epsilon = cfg.clipRange;
  out.epsilon_high = cfg.clipRange;
  out.beta = cfg.klCoef;
  out._trl_version = TRL_VERSION;
  if (grpo) {
    out.scale_rewards = cfg.scaleRewards;
    out.loss_type = TRL_LOSS_TYPE[cfg.lossAggregation];
    out.importance_sampling_level = 'token';
    out.top_entropy_quantile = 1.0;
    // Our KL term is klCoef · k3 per token, not multiplied by the importance ratio (TRL 1.13's default is True).
    out.use_bias_correction_kl = TRL_GRPO_DEFAULTS.use_bias_correction_kl.ours;
    // The same bonus as ours: the mean per-token entropy, whatever loss_type.
    out.entropy_coef = cfg.entropyCoef;
  } else {
    out.normalize_advantages = cfg.normalizeAdvantages;
    notes.push(
      "rloo: the loss is RLOOTrainer's, as here: one ratio per sequence, exp(Σ_t logp − Σ_t old logp), clipped, " +
        'mean over sequences (docs/exports.md).',
    );
    if (cfg.ppoEpochs * cfg.miniBatches > 1) {
      notes.push(
        `ppoEpochs ${cfg.ppoEpochs} × miniBatches ${cfg.miniBatches}: samples are reused; with a ratio per whole ` +
          'sequence that leaves the clip quickly at high learning rates (TRL defaults to num_iterations 1).',
      );
    }
    if (cfg.lossAggregation !== 'token-mean') {
      notes.push(`lossAggregation "${cfg.lossAggregation}": RLOOConfig has no loss_type to choose it.`);
    }
    if (cfg.klEstimator !== 'k1') {
      notes.push(
        `klEstimator "${cfg.klEstimator}": here RLOO's sequence penalty sums ${cfg.klEstimator}; check which estimator your TRL version's RLOOTrainer sums.`,
      );
    }
  }
  out.max_completion_length = cfg.responseLength;
  out.temperature = cfg.temperature;
  out.top_k = cfg.topK;
  out.top_p = cfg.topP;
  out.min_p = null;
  out.repetition_penalty = 1.0;
  out.mask_truncated_completions = false;
  out.disable_dropout = true;
  out.max_grad_norm = cfg.maxGradNorm;
  out.seed = cfg.seed;
  trainingArgs(out);
  if (cfg.lora > 0) {
    out.peft_config = peftConfig(cfg);
    notes.push(
      `peft_config: not a ${out._trl_class as string} field; pop it and pass ${grpo ? 'GRPOTrainer' : 'RLOOTrainer'}(..., peft_config=LoraConfig(**peft_config)).`,
    );
  }
  if (cfg.adaptiveKl) notes.push('adaptiveKl: TRL keeps beta fixed.');
  if (cfg.missingEosPenalty !== 0) {
    notes.push(
      `missingEosPenalty ${cfg.missingEosPenalty}: subtract it in your reward function for completions without EOS.`,
    );
  }
  if (cfg.entropyCoef !== 0 && !grpo)
    notes.push(`entropyCoef ${cfg.entropyCoef}: RLOOConfig has no entropy bonus.`);
  if (cfg.stopToken !== 'eos')
    notes.push(`stopToken ${JSON.stringify(cfg.stopToken)}: TRL stops at the tokenizer's EOS.`);
  if (rm && cfg.rewardModelCenter) {
    notes.push(
      `rewardModelCenter: subtract the "mean" of the reward model's reward_stats.json in the reward.`,
    );
  }
  out._comment = notes;
  commonNotes(cfg, notes);
  return out;
}

/**
 * REINFORCE++ has no TRL trainer: OpenRLHF's train_ppo_ray flags for it, under `_openrlhf` (today's nested names,
 * without the leading "--"; exports/engines.ts), and the whole command under `_openrlhf_command`.
 */
function openRlhfConfig(cfg: TrainConfig): TrlConfig {
  const { flags, notes: flagNotes } = openRlhfFlags(cfg);
  const notes: string[] = [
    'reinforce++: TRL has no REINFORCE++ trainer. OpenRLHF runs it: python3 -m openrlhf.cli.train_ppo_ray ' +
      '--algo.advantage.estimator reinforce with the flags in _openrlhf (as --name value), or _openrlhf_command.',
    ...flagNotes,
  ];
  commonNotes(cfg, notes);
  return {
    _trl_class: null,
    output_dir: 'ppo-playground-reinforce++',
    _openrlhf: flags,
    _openrlhf_command: openRlhfCommand(cfg),
    _comment: notes,
  };
}

/** PPOConfig fields (TRL's on-policy PPOTrainer). */
function ppoConfig(cfg: TrainConfig): TrlConfig {
  const notes: string[] = [];
  const out: TrlConfig = { _trl_class: 'PPOConfig' };
  out._trl_versions = TRL_PPO_VERSIONS;
  notes.push(`PPOConfig: ${TRL_PPO_VERSIONS}. For current engines use this run's OpenRLHF or verl export.`);
  out.output_dir = 'ppo-playground-trl';
  out.sft_model_path = HUB_ID.test(cfg.model)
    ? cfg.model
    : `<path to the policy model folder: export "${cfg.model}" from the playground>`;
  const rewardModel = cfg.reward !== undefined && typeof cfg.reward === 'object' && 'model' in cfg.reward;
  out.reward_model_path =
    rewardModel && HUB_ID.test((cfg.reward as { model: string }).model)
      ? (cfg.reward as { model: string }).model
      : '<path to a reward model folder (GPT2ForSequenceClassification)>';
  if (!rewardModel) {
    notes.push(
      `reward: this run scores with ${describeReward(cfg)}; TRL's PPOTrainer scores with a reward model ` +
        '(train one from preference pairs, or pass your own function to a custom trainer).',
    );
  }
  out.learning_rate = cfg.learningRate;
  out.per_device_train_batch_size = cfg.batchSize / cfg.miniBatches;
  out.gradient_accumulation_steps = 1;
  out.num_mini_batches = cfg.miniBatches;
  out.batch_size = cfg.batchSize;
  out.total_episodes = cfg.steps * cfg.batchSize;
  out.num_ppo_epochs = cfg.ppoEpochs;
  out.cliprange = cfg.clipRange;
  out.cliprange_value = cfg.clipRangeValue;
  out.vf_coef = cfg.vfCoef;
  out.kl_coef = cfg.klCoef;
  if (cfg.klEstimator === 'k1' || cfg.klEstimator === 'k3') {
    out.kl_estimator = cfg.klEstimator;
    notes.push(
      `kl_estimator: TRL ${TRL_PPO.klEstimator}; drop it for 0.12–0.16, whose PPOTrainer uses k1${cfg.klEstimator === 'k1' ? ' (the same)' : ''}.`,
    );
  } else notes.push('klEstimator "k2": TRL offers kl_estimator "k1" or "k3" only.');
  out.gamma = cfg.gamma;
  out.lam = cfg.lam;
  out.whiten_rewards = cfg.whitenRewards;
  out.temperature = cfg.temperature;
  out.response_length = cfg.responseLength;
  if (cfg.stopToken === 'eos') out.stop_token = 'eos';
  else if (cfg.stopToken === null) out.stop_token = null;
  else out.stop_token_id = cfg.stopToken;
  out.missing_eos_penalty = cfg.missingEosPenalty === 0 ? null : cfg.missingEosPenalty;
  out.max_grad_norm = cfg.maxGradNorm;
  out.seed = cfg.seed;
  trainingArgs(out);
  if (cfg.lora > 0) {
    out.peft_config = peftConfig(cfg);
    notes.push(
      'peft_config: not a PPOConfig field; pop it and pass PPOTrainer(..., peft_config=LoraConfig(**peft_config)) ' +
        '(the reference is then the policy with its adapters off, as here).',
    );
    if (cfg.valueModel === 'shared') {
      notes.push(
        'valueModel "shared": here the value model is the frozen base with its own adapters and a zero head; ' +
          "TRL's PPOTrainer trains a full value model (value_model, from reward_model_path).",
      );
    }
  }

  // TRL-classic (PPOTrainer before 0.12) names for the adaptive KL controller.
  out._trl_classic = {
    adap_kl_ctrl: cfg.adaptiveKl,
    init_kl_coef: cfg.klCoef,
    target: cfg.targetKl,
    horizon: cfg.klHorizon,
  };
  if (cfg.adaptiveKl) {
    notes.push(
      `adaptiveKl / targetKl ${cfg.targetKl} / klHorizon ${cfg.klHorizon}: the current PPOTrainer keeps kl_coef fixed; ` +
        'TRL-classic calls these adap_kl_ctrl / target / horizon (see _trl_classic).',
    );
  }
  if (cfg.valueLearningRate !== cfg.learningRate) {
    notes.push(
      `valueLearningRate ${cfg.valueLearningRate}: TRL trains policy and value with one optimiser at learning_rate.`,
    );
  }
  if (!cfg.whitenAdvantages) notes.push('whitenAdvantages false: TRL always whitens advantages.');
  if (cfg.entropyCoef !== 0)
    notes.push(`entropyCoef ${cfg.entropyCoef}: TRL's PPO loss has no entropy bonus.`);
  if (cfg.topK !== 0 || cfg.topP !== 1) {
    notes.push(`topK ${cfg.topK} / topP ${cfg.topP}: TRL samples with temperature only (top_k 0, top_p 1).`);
  }
  if (cfg.lossAggregation !== 'token-mean') {
    notes.push(`lossAggregation "${cfg.lossAggregation}": TRL's PPOTrainer takes the token mean.`);
  }
  if (derived(cfg).groupSize > 1) {
    notes.push(`groupSize ${derived(cfg).groupSize}: TRL's PPOTrainer samples each prompt once per batch.`);
  }
  if (rewardModel && cfg.rewardModelCenter) {
    notes.push(
      'rewardModelCenter: TRL uses the reward model\'s raw scores; subtract the "mean" of its reward_stats.json ' +
        '(e.g. fold it into a score bias) to train on the same rewards.',
    );
  }
  if (cfg.valueInit === 'policy') {
    notes.push(
      'valueInit "policy": TRL initialises the value model from reward_model_path (our valueInit "reward").',
    );
  }
  commonNotes(cfg, notes);
  out._comment = notes;
  return out;
}

/** The TRL config as pretty JSON text (what the worker's exportTrlConfig returns). */
export function trlConfigJson(cfg: TrainConfig): string {
  return JSON.stringify(toTrlConfig(cfg), null, 2) + '\n';
}

/**
 * Every file this run exports for other engines, each naming its engine: TRL (GRPOConfig / RLOOConfig, checked
 * with TRL 1.13; PPOConfig only for the TRL versions that have it), OpenRLHF and verl commands for all four
 * algorithms. The UI's export menu lists these (src/ui/components/CheckpointPanel.tsx).
 */
export function engineExports(cfg: TrainConfig): EngineExport[] {
  const a = cfg.algorithm;
  const out: EngineExport[] = [];
  const json = 'application/json';
  if (a === 'grpo' || a === 'rloo') {
    const cls = a === 'grpo' ? 'GRPOConfig' : 'RLOOConfig';
    out.push({
      engine: `TRL ${TRL_VERSION} ${cls}`,
      fileName: `trl-${a}-config.json`,
      mime: json,
      text: trlConfigJson(cfg),
    });
  } else if (a === 'ppo') {
    out.push({
      engine: 'TRL PPOConfig (trl 0.12–0.28; trl.experimental.ppo 0.26–1.9; not in 1.13)',
      fileName: 'trl-ppo-config.json',
      mime: json,
      text: trlConfigJson(cfg),
    });
  }
  const safe = a.replace('+', 'p');
  out.push({
    engine: `OpenRLHF train_ppo_ray (flags of commit ${OPENRLHF_SOURCE.commit.slice(0, 7)})`,
    fileName: `openrlhf-${safe}.sh`,
    mime: 'text/x-shellscript',
    text: openRlhfCommand(cfg),
  });
  out.push({
    engine: `verl main_ppo (config keys of commit ${VERL_SOURCE.commit.slice(0, 7)})`,
    fileName: `verl-${safe}.sh`,
    mime: 'text/x-shellscript',
    text: verlCommand(cfg),
  });
  return out;
}

/**
 * A DPO run (src/core/dpo, contracts §9) as TRL 1.13's `DPOConfig`: beta, loss_type, label_smoothing, the batch
 * (per_device_train_batch_size = pairs per micro-batch, gradient_accumulation_steps = micro-batches per step),
 * max_steps, the constant learning rate and Adam constants (trainingArgs), reference log-probs precomputed once
 * (as here), no truncation (here a pair longer than the context is an error), dropout off. Under LoRA,
 * `peft_config` (pop it; TRL then uses the base with adapters off as the reference, as here).
 */
export function dpoTrlConfig(cfg: DpoConfig): TrlConfig {
  const notes: string[] = [];
  const micro = cfg.microBatchSize || cfg.batchSize;
  const out: TrlConfig = { _trl_class: 'DPOConfig', _trl_version: TRL_VERSION };
  out.output_dir = 'ppo-playground-dpo';
  out._model = HUB_ID.test(cfg.model)
    ? cfg.model
    : `<path to the policy model folder: export "${cfg.model}" from the playground>`;
  notes.push(
    '_model: pass it as DPOTrainer(model=..., args=config, train_dataset=...); the dataset is the preference JSONL ' +
      `(${cfg.data}) with its "prompt", "chosen", "rejected" columns, less the held-out ${cfg.heldOut} share (eval_dataset).`,
  );
  out.learning_rate = cfg.learningRate;
  out.per_device_train_batch_size = micro;
  out.per_device_eval_batch_size = micro;
  out.gradient_accumulation_steps = cfg.batchSize / micro;
  out.max_steps = cfg.steps;
  out.beta = cfg.beta;
  out.loss_type = [cfg.dpoLoss];
  out.label_smoothing = cfg.labelSmoothing;
  if (cfg.labelSmoothing !== 0) {
    notes.push(
      `labelSmoothing ${cfg.labelSmoothing}: here the sigmoid loss is cDPO's −(1−ε)·log σ(βh) − ε·log σ(−βh); ` +
        "TRL 1.13's sigmoid loss ignores label_smoothing (use a TRL version whose sigmoid loss applies it).",
    );
  }
  if (cfg.dpoLoss === 'ipo')
    notes.push("ipo: the log-ratios are averaged over each completion's tokens, as TRL 1.13 does.");
  out.precompute_ref_log_probs = true;
  out.max_length = null;
  out.disable_dropout = true;
  out.max_grad_norm = cfg.maxGradNorm;
  out.seed = cfg.seed;
  if (cfg.evalEvery > 0) {
    out.eval_strategy = 'steps';
    out.eval_steps = cfg.evalEvery;
  }
  if (cfg.saveEvery > 0) {
    out.save_strategy = 'steps';
    out.save_steps = cfg.saveEvery;
  }
  trainingArgs(out);
  if (cfg.lora > 0) {
    out.peft_config = peftConfig(cfg);
    notes.push(
      'peft_config: not a DPOConfig field; pop it and pass DPOTrainer(..., peft_config=LoraConfig(**peft_config)).',
    );
  }
  notes.push('Completions end with EOS, counted in their log-probabilities, as TRL appends it.');
  out._comment = notes;
  return out;
}

/** dpoTrlConfig as pretty JSON text. */
export function dpoConfigJson(cfg: DpoConfig): string {
  return JSON.stringify(dpoTrlConfig(cfg), null, 2) + '\n';
}
