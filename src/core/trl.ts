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
 */
import { DEFAULT_CONFIG, type TrainConfig } from './config';

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

/**
 * Our config → TRL PPOConfig fields, plus `_comment` (what does not carry over), `_trl_classic` and, with LoRA,
 * `peft_config` (PEFT LoraConfig fields, for PPOTrainer's peft_config argument).
 */
export function toTrlConfig(cfg: TrainConfig): TrlConfig {
  const notes: string[] = [];
  const out: TrlConfig = {};
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
  if (cfg.klEstimator === 'k1' || cfg.klEstimator === 'k3') out.kl_estimator = cfg.klEstimator;
  else notes.push('klEstimator "k2": TRL offers kl_estimator "k1" or "k3" only.');
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
  if (cfg.lora > 0) {
    out.peft_config = {
      r: cfg.lora,
      lora_alpha: cfg.loraAlpha,
      target_modules: [...cfg.loraTargets],
      lora_dropout: 0,
      bias: 'none',
      task_type: 'CAUSAL_LM',
      fan_in_fan_out: true,
    };
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
  if (cfg.logRatioClamp !== DEFAULT_CONFIG.logRatioClamp) {
    notes.push(`logRatioClamp ${cfg.logRatioClamp}: TRL does not clamp the log ratio.`);
  }
  if (cfg.earlyStopKl) {
    notes.push(
      `earlyStopKl (earlyStopApproxKl ${cfg.earlyStopApproxKl} nats per token): TRL has no KL early stop of the PPO epochs.`,
    );
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
  notes.push(
    `prompts: ${cfg.prompts ? `${cfg.prompts.length} prompts of your own` : `the "${cfg.task}" task's prompts`} ` +
      'become the train_dataset (tokenised "input_ids").',
  );
  if (cfg.saveEvery > 0) notes.push(`saveEvery ${cfg.saveEvery}: use save_strategy "steps" with save_steps.`);
  out._comment = notes;
  return out;
}

/** The TRL config as pretty JSON text (what the worker's exportTrlConfig returns). */
export function trlConfigJson(cfg: TrainConfig): string {
  return JSON.stringify(toTrlConfig(cfg), null, 2) + '\n';
}
