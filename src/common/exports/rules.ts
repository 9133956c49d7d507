/**
 * The rule list per engine (issue #34): for every name our exports write, its type and default in the engine, the
 * keys the engine requires before it starts, the keys that depend on each other, our key → theirs and the value
 * conversions. The exporter (engines.ts, ../trl.ts) takes its names, tables and conversions from here; the tests
 * (tests/exports-rules.test.ts) parse each printed file as the engine would and run it through the checks below,
 * which restate, in our words, the start-up checks of each engine's source at the commit named in its SOURCE.
 *
 * Read from:
 * - OpenRLHF 3c3be6234e0cb353e76bb8019947db9dfe99fca7 (2026-08-13): openrlhf/cli/train_ppo_ray.py (argparse types,
 *   the checks after parse_args and in train()), trainer/ppo_utils/samples_generator.py (generation needs a vLLM
 *   engine), trainer/ppo_utils/experience_maker.py (estimators, whitening), trainer/ppo_trainer.py (KL controller).
 * - verl b178a3cd56f58b2d502255daba591e92833930a7 (2026-01-29): verl/trainer/config/_generated_ppo_trainer.yaml,
 *   verl/workers/config/{actor,critic,rollout,model,optimizer}.py, verl/utils/config.py validate_config,
 *   verl/workers/fsdp_workers.py (batch normalisation, rollout mesh), verl/workers/actor/dp_actor.py and
 *   verl/trainer/ppo/core_algos.py (agg_loss, dual clip, KL controller).
 * - TRL 1.13.0 (the wheel): trl/trainer/grpo_config.py, rloo_config.py, dpo_config.py; PPOConfig's history from the
 *   git tags of huggingface/trl (v0.12.0 … v1.9.0, and f2cd57710ae345ea6428ae95363267fcf38a3dc8).
 */

/** Where a rule list was read. */
export interface EngineSource {
  repo: string;
  commit: string;
  date: string;
  files: string[];
}

// ---------------------------------------------------------------------------------------------------------
// OpenRLHF
// ---------------------------------------------------------------------------------------------------------

export const OPENRLHF_SOURCE: EngineSource = {
  repo: 'OpenRLHF/OpenRLHF',
  commit: '3c3be6234e0cb353e76bb8019947db9dfe99fca7',
  date: '2026-08-13',
  files: [
    'openrlhf/cli/train_ppo_ray.py',
    'openrlhf/trainer/ppo_utils/samples_generator.py',
    'openrlhf/trainer/ppo_utils/experience_maker.py',
    'openrlhf/trainer/ppo_trainer.py',
  ],
};

/** An argparse argument: `type=` (int / float / str) or a store_true flag, nargs and choices. */
export interface ArgRule {
  type: 'int' | 'float' | 'str' | 'store_true';
  nargs?: number | '*';
  choices?: readonly string[];
  default: unknown;
}

const OPENRLHF_ESTIMATORS = [
  'gae',
  'reinforce',
  'rloo',
  'reinforce_baseline',
  'group_norm',
  'dr_grpo',
] as const;
export type OpenRlhfEstimator = (typeof OPENRLHF_ESTIMATORS)[number];

function optimiserArgs(p: 'actor' | 'critic'): Record<string, ArgRule> {
  return {
    [`${p}.adam.lr`]: { type: 'float', default: p === 'actor' ? 1e-6 : 9e-6 },
    [`${p}.adam.betas`]: { type: 'float', nargs: 2, default: [0.9, 0.95] },
    [`${p}.adam.eps`]: { type: 'float', default: 1e-8 },
    [`${p}.adam.weight_decay`]: { type: 'float', default: 0 },
    [`${p}.lr_scheduler`]: { type: 'str', default: 'cosine_with_min_lr' },
    [`${p}.lr_warmup_ratio`]: { type: 'float', default: 0.03 },
    [`${p}.max_norm`]: { type: 'float', default: 1 },
  };
}

/** train_ppo_ray's arguments that our exports write or its checks read (name without the leading "--"). */
export const OPENRLHF_ARGS: Record<string, ArgRule> = {
  'actor.model_name_or_path': { type: 'str', default: null },
  'reward.model_name_or_path': { type: 'str', default: null },
  'reward.remote_url': { type: 'str', default: null },
  'critic.model_name_or_path': { type: 'str', default: null },
  'data.prompt_dataset': { type: 'str', default: null },
  'data.input_key': { type: 'str', default: 'input' },
  'algo.advantage.estimator': { type: 'str', choices: OPENRLHF_ESTIMATORS, default: 'gae' },
  'algo.advantage.no_std_norm': { type: 'store_true', default: false },
  'algo.advantage.gamma': { type: 'float', default: 1 },
  'algo.advantage.lambd': { type: 'float', default: 1 },
  'rollout.batch_size': { type: 'int', default: 1024 },
  'rollout.n_samples_per_prompt': { type: 'int', default: 1 },
  'rollout.micro_batch_size': { type: 'int', default: 1 },
  'rollout.max_new_tokens': { type: 'int', default: null },
  'rollout.temperature': { type: 'float', default: 1 },
  'rollout.top_p': { type: 'float', default: 1 },
  'train.batch_size': { type: 'int', default: 128 },
  'train.micro_batch_size': { type: 'int', default: 1 },
  'train.max_epochs': { type: 'int', default: 1 },
  'train.num_episodes': { type: 'int', default: 1 },
  'train.seed': { type: 'int', default: 42 },
  'train.colocate_all': { type: 'store_true', default: false },
  'train.colocate_actor_ref': { type: 'store_true', default: false },
  'train.async_enable': { type: 'store_true', default: false },
  'data.max_samples': { type: 'int', default: 1e8 },
  'algo.kl.use_loss': { type: 'store_true', default: false },
  'algo.kl.estimator': { type: 'str', choices: ['k1', 'k2', 'k3'], default: 'k1' },
  'algo.kl.init_coef': { type: 'float', default: 0.01 },
  'algo.kl.target': { type: 'float', default: null },
  'algo.kl.horizon': { type: 'int', default: 10000 },
  'actor.eps_clip': { type: 'float', default: 0.2 },
  'actor.dual_clip': { type: 'float', default: null },
  'actor.entropy_coef': { type: 'float', default: null },
  'critic.value_clip': { type: 'float', default: 0.5 },
  'reward.clip_range': { type: 'float', nargs: 2, default: [-10, 10] },
  ...optimiserArgs('actor'),
  ...optimiserArgs('critic'),
  'ds.lora.rank': { type: 'int', default: 0 },
  'ds.lora.alpha': { type: 'int', default: 16 },
  'ds.lora.dropout': { type: 'float', default: 0 },
  'ds.lora.target_modules': { type: 'str', nargs: '*', default: 'all-linear' },
  'ds.ring_attn_size': { type: 'int', default: 1 },
  'ds.tensor_parallel_size': { type: 'int', default: 1 },
  'ds.enable_sleep': { type: 'store_true', default: false },
  'ckpt.save_steps': { type: 'int', default: -1 },
  'vllm.num_engines': { type: 'int', default: null },
  'vllm.tensor_parallel_size': { type: 'int', default: 1 },
  'vllm.gpu_memory_utilization': { type: 'float', default: 0.95 },
  'vllm.enable_sleep': { type: 'store_true', default: false },
  ...Object.fromEntries(
    (['actor', 'critic', 'ref', 'reward'] as const).flatMap((g) => [
      [`${g}.num_nodes`, { type: 'int', default: 1 } as ArgRule],
      [`${g}.num_gpus_per_node`, { type: 'int', default: 8 } as ArgRule],
    ]),
  ),
};

/** Estimators that subtract a per-prompt group baseline: OpenRLHF asserts n_samples_per_prompt > 1 for them. */
export const OPENRLHF_GROUP_ESTIMATORS: readonly OpenRlhfEstimator[] = [
  'rloo',
  'reinforce_baseline',
  'group_norm',
  'dr_grpo',
];
/** Estimators whose advantages OpenRLHF whitens over the batch's tokens (no_std_norm: mean only). */
export const OPENRLHF_WHITENED: readonly OpenRlhfEstimator[] = ['gae', 'reinforce', 'reinforce_baseline'];

/**
 * Our algorithm → OpenRLHF's estimator. group_norm always divides by the group's std (no_std_norm applies only to
 * the whitened estimators), so GRPO without std scaling (Dr. GRPO) is `dr_grpo`: the group mean subtracted only.
 */
export function openRlhfEstimator(
  algorithm: 'ppo' | 'grpo' | 'rloo' | 'reinforce++',
  scaleRewards: 'group' | 'batch' | 'none',
): OpenRlhfEstimator {
  switch (algorithm) {
    case 'ppo':
      return 'gae';
    case 'grpo':
      return scaleRewards === 'none' ? 'dr_grpo' : 'group_norm';
    case 'rloo':
      return 'rloo';
    case 'reinforce++':
      return 'reinforce';
  }
}

/** Our exports run on one GPU: every model and the vLLM engine share it (OpenRLHF's hybrid engine). */
export const EXPORT_GPUS = 1;

/** A parsed command line: flag → value, as argparse would have converted it. */
export type ParsedArgs = Record<string, unknown>;

/** Splits a shell command (our printed form: single quotes, backslash-newline continuations, # comments). */
export function shellWords(text: string): string[] {
  const src = text
    .split('\n')
    .filter((l) => !/^\s*#/.test(l))
    .join('\n')
    .replace(/\\\n/g, ' ');
  const words: string[] = [];
  let cur = '';
  let inWord = false;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "'") {
      const j = src.indexOf("'", i + 1);
      if (j < 0) throw new Error('unterminated single quote');
      cur += src.slice(i + 1, j);
      i = j;
      inWord = true;
    } else if (c === '"') {
      let j = i + 1;
      while (j < src.length && src[j] !== '"') {
        if (src[j] === '\\' && j + 1 < src.length) {
          cur += src[j + 1];
          j += 2;
        } else cur += src[j++];
      }
      if (j >= src.length) throw new Error('unterminated double quote');
      i = j;
      inWord = true;
    } else if (c === '\\' && i + 1 < src.length) {
      cur += src[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(cur);
      cur = '';
      inWord = false;
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (inWord) words.push(cur);
  return words;
}

function convertArg(name: string, rule: ArgRule, raw: string): unknown {
  if (rule.type === 'int') {
    // argparse's type=int is Python's int(): an optional sign and digits only ("12.5" and "1e3" are refused).
    if (!/^\s*[+-]?\d+\s*$/.test(raw)) throw new Error(`--${name}: invalid int value: '${raw}'`);
    return Number.parseInt(raw, 10);
  }
  if (rule.type === 'float') {
    const v = Number(raw);
    if (raw.trim() === '' || (Number.isNaN(v) && !/^\s*[+-]?nan\s*$/i.test(raw)))
      throw new Error(`--${name}: invalid float value: '${raw}'`);
    return v;
  }
  if (rule.choices && !rule.choices.includes(raw))
    throw new Error(`--${name}: invalid choice: '${raw}' (choose from ${rule.choices.join(', ')})`);
  return raw;
}

/**
 * Parses a printed OpenRLHF command as train_ppo_ray's argparse would (for the arguments in OPENRLHF_ARGS; any
 * other flag is an error here), then fills the defaults. Throws argparse's complaint on a bad value.
 */
export function parseOpenRlhfCommand(text: string): ParsedArgs {
  const words = shellWords(text);
  const start = words.indexOf('openrlhf.cli.train_ppo_ray');
  if (start < 0) throw new Error('no "python3 -m openrlhf.cli.train_ppo_ray" in the command');
  const argv = words.slice(start + 1);
  const out: ParsedArgs = {};
  for (let i = 0; i < argv.length;) {
    const w = argv[i];
    if (!w.startsWith('--')) throw new Error(`unrecognized arguments: ${w}`);
    const name = w.slice(2);
    const rule = OPENRLHF_ARGS[name];
    if (!rule) throw new Error(`unrecognized arguments: ${w}`);
    i++;
    if (rule.type === 'store_true') {
      out[name] = true;
      continue;
    }
    const vals: string[] = [];
    const want = rule.nargs ?? 1;
    while (i < argv.length && !argv[i].startsWith('--') && (want === '*' || vals.length < want)) {
      vals.push(argv[i++]);
    }
    if (want !== '*' && vals.length !== want)
      throw new Error(`argument --${name}: expected ${want} argument${want === 1 ? '' : 's'}`);
    const conv = vals.map((v) => convertArg(name, rule, v));
    out[name] = rule.nargs === undefined ? conv[0] : conv;
  }
  for (const [k, r] of Object.entries(OPENRLHF_ARGS)) if (!(k in out)) out[k] = r.default;
  return out;
}

/**
 * train_ppo_ray's start-up checks (after parse_args and in train()), and what fails at the first rollout, restated
 * for a run on EXPORT_GPUS GPUs. Returns the failures (empty: it starts).
 */
export function checkOpenRlhfArgs(a: ParsedArgs): string[] {
  const errs: string[] = [];
  const n = (k: string) => a[k] as number;
  const est = a['algo.advantage.estimator'] as OpenRlhfEstimator;
  if (!a['actor.model_name_or_path']) errs.push('--actor.model_name_or_path is required');
  if (!a['data.prompt_dataset']) errs.push('--data.prompt_dataset is required');
  if (!a['reward.remote_url'] && !a['reward.model_name_or_path'])
    errs.push('a reward: --reward.remote_url or --reward.model_name_or_path');
  if (OPENRLHF_GROUP_ESTIMATORS.includes(est) && n('rollout.n_samples_per_prompt') <= 1)
    errs.push(`${est} requires n_samples_per_prompt > 1`);
  // Generation goes only through vLLM engines (SamplesGenerator): with none, the first rollout fails.
  const engines = a['vllm.num_engines'] as number | null;
  if (engines === null || engines <= 0)
    errs.push('--vllm.num_engines must be ≥ 1: without a vLLM engine the first rollout fails');
  const colocateAll = a['train.colocate_all'] === true;
  const gpus = (g: string) => n(`${g}.num_nodes`) * n(`${g}.num_gpus_per_node`);
  if (colocateAll && !a['train.async_enable'] && engines && engines > 0) {
    if (gpus('actor') !== engines * n('vllm.tensor_parallel_size'))
      errs.push('colocate_all: actor GPUs must equal vllm.num_engines × vllm.tensor_parallel_size');
  }
  const useRef = n('algo.kl.init_coef') > 0;
  if ((colocateAll || a['train.colocate_actor_ref']) && useRef && gpus('ref') !== gpus('actor'))
    errs.push('colocated actor and ref need the same num_nodes and num_gpus_per_node');
  if (
    Math.floor(
      (n('rollout.n_samples_per_prompt') * n('rollout.batch_size')) / n('rollout.micro_batch_size'),
    ) < Math.floor(gpus('actor') / n('ds.ring_attn_size') / n('ds.tensor_parallel_size'))
  )
    errs.push('the number of sample batches must be ≥ the number of actor processes');
  // GPUs asked for: colocate_all puts every model and the vLLM engines on the actor's GPUs.
  const critic = est === 'gae';
  const reward = !a['reward.remote_url'];
  const groups = [
    'actor',
    ...(useRef ? ['ref'] : []),
    ...(critic ? ['critic'] : []),
    ...(reward ? ['reward'] : []),
  ];
  const asked = colocateAll
    ? Math.max(...groups.map(gpus), (engines ?? 0) * n('vllm.tensor_parallel_size'))
    : groups.reduce((s, g) => s + gpus(g), 0) + (engines ?? 0) * n('vllm.tensor_parallel_size');
  if (asked > EXPORT_GPUS) errs.push(`asks for ${asked} GPUs; the export is for ${EXPORT_GPUS}`);
  if (colocateAll && groups.some((g) => gpus(g) !== gpus('actor')))
    errs.push('colocate_all: every model group needs the actor’s GPU count');
  // Flags that are accepted but do nothing with this estimator.
  if (a['algo.advantage.no_std_norm'] === true && !OPENRLHF_WHITENED.includes(est))
    errs.push(`--algo.advantage.no_std_norm has no effect with ${est}`);
  const alpha = a['ds.lora.alpha'];
  if (typeof alpha !== 'number' || !Number.isInteger(alpha)) errs.push('--ds.lora.alpha must be an int');
  return errs;
}

// ---------------------------------------------------------------------------------------------------------
// verl
// ---------------------------------------------------------------------------------------------------------

export const VERL_SOURCE: EngineSource = {
  repo: 'volcengine/verl',
  commit: 'b178a3cd56f58b2d502255daba591e92833930a7',
  date: '2026-01-29',
  files: [
    'verl/trainer/config/_generated_ppo_trainer.yaml',
    'verl/workers/config/actor.py',
    'verl/workers/config/critic.py',
    'verl/workers/config/rollout.py',
    'verl/workers/config/model.py',
    'verl/workers/config/optimizer.py',
    'verl/utils/config.py',
    'verl/workers/fsdp_workers.py',
    'verl/workers/actor/dp_actor.py',
    'verl/trainer/ppo/core_algos.py',
  ],
};

/** A config key: its type in verl's dataclass (or yaml when no dataclass types it), default, `???` = mandatory. */
export interface KeyRule {
  type: 'int' | 'float' | 'str' | 'bool' | 'list' | 'dict';
  nullable?: boolean;
  default: unknown;
  mandatory?: boolean;
  choices?: readonly string[];
}

const A = 'actor_rollout_ref';
function optimKeys(p: string, lr: number): Record<string, KeyRule> {
  return {
    [`${p}.optim.lr`]: { type: 'float', default: lr },
    [`${p}.optim.lr_scheduler_type`]: { type: 'str', default: 'constant', choices: ['constant', 'cosine'] },
    [`${p}.optim.lr_warmup_steps_ratio`]: { type: 'float', default: 0 },
    [`${p}.optim.weight_decay`]: { type: 'float', default: 0.01 },
    [`${p}.optim.betas`]: { type: 'list', default: [0.9, 0.999] },
    // FSDPOptimizerConfig: passed to the optimiser's constructor as keyword arguments (build_optimizer).
    [`${p}.optim.override_optimizer_config`]: { type: 'dict', nullable: true, default: null },
  };
}

/** verl's keys that our exports write or its checks read. */
export const VERL_KEYS: Record<string, KeyRule> = {
  'algorithm.adv_estimator': { type: 'str', default: 'gae' },
  'algorithm.gamma': { type: 'float', default: 1 },
  'algorithm.lam': { type: 'float', default: 1 },
  'algorithm.norm_adv_by_std_in_grpo': { type: 'bool', default: true },
  'algorithm.use_kl_in_reward': { type: 'bool', default: false },
  'algorithm.kl_penalty': { type: 'str', default: 'kl', choices: ['kl', 'abs', 'mse', 'low_var_kl', 'full'] },
  'algorithm.kl_ctrl.type': { type: 'str', default: 'fixed', choices: ['fixed', 'adaptive'] },
  'algorithm.kl_ctrl.kl_coef': { type: 'float', default: 0.001 },
  'algorithm.kl_ctrl.target_kl': { type: 'float', default: 0.1 },
  'algorithm.kl_ctrl.horizon': { type: 'int', default: 10000 },
  'data.train_files': { type: 'str', default: '~/data/rlhf/gsm8k/train.parquet' },
  'data.val_files': { type: 'str', default: '~/data/rlhf/gsm8k/test.parquet' },
  'data.train_batch_size': { type: 'int', default: 1024 },
  'data.max_response_length': { type: 'int', default: 512 },
  'data.seed': { type: 'int', nullable: true, default: null },
  [`${A}.model.path`]: { type: 'str', default: '~/models/deepseek-llm-7b-chat' },
  [`${A}.model.lora_rank`]: { type: 'int', default: 0 },
  [`${A}.model.lora_alpha`]: { type: 'int', default: 16 },
  [`${A}.model.target_modules`]: { type: 'str', nullable: true, default: 'all-linear' },
  [`${A}.rollout.name`]: {
    type: 'str',
    default: null,
    mandatory: true,
    choices: ['vllm', 'sglang', 'trtllm'],
  },
  [`${A}.rollout.n`]: { type: 'int', default: 1 },
  [`${A}.rollout.do_sample`]: { type: 'bool', default: true },
  [`${A}.rollout.temperature`]: { type: 'float', default: 1 },
  [`${A}.rollout.top_k`]: { type: 'int', default: -1 },
  [`${A}.rollout.top_p`]: { type: 'float', default: 1 },
  [`${A}.rollout.tensor_model_parallel_size`]: { type: 'int', default: 2 },
  [`${A}.rollout.data_parallel_size`]: { type: 'int', default: 1 },
  [`${A}.rollout.log_prob_micro_batch_size`]: { type: 'int', nullable: true, default: null },
  [`${A}.rollout.log_prob_micro_batch_size_per_gpu`]: { type: 'int', nullable: true, default: null },
  [`${A}.ref.log_prob_micro_batch_size`]: { type: 'int', nullable: true, default: null },
  [`${A}.ref.log_prob_micro_batch_size_per_gpu`]: { type: 'int', nullable: true, default: null },
  [`${A}.actor.ppo_mini_batch_size`]: { type: 'int', default: 256 },
  [`${A}.actor.ppo_micro_batch_size`]: { type: 'int', nullable: true, default: null },
  [`${A}.actor.ppo_micro_batch_size_per_gpu`]: { type: 'int', nullable: true, default: null },
  [`${A}.actor.use_dynamic_bsz`]: { type: 'bool', default: false },
  [`${A}.actor.ppo_epochs`]: { type: 'int', default: 1 },
  [`${A}.actor.clip_ratio`]: { type: 'float', default: 0.2 },
  [`${A}.actor.clip_ratio_low`]: { type: 'float', default: 0.2 },
  [`${A}.actor.clip_ratio_high`]: { type: 'float', default: 0.2 },
  [`${A}.actor.clip_ratio_c`]: { type: 'float', default: 3 },
  [`${A}.actor.loss_agg_mode`]: {
    type: 'str',
    default: 'token-mean',
    choices: ['token-mean', 'seq-mean-token-sum', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'],
  },
  [`${A}.actor.entropy_coeff`]: { type: 'float', default: 0 },
  [`${A}.actor.grad_clip`]: { type: 'float', default: 1 },
  [`${A}.actor.use_kl_loss`]: { type: 'bool', default: false },
  [`${A}.actor.kl_loss_coef`]: { type: 'float', default: 0.001 },
  [`${A}.actor.kl_loss_type`]: { type: 'str', default: 'low_var_kl' },
  ...optimKeys(`${A}.actor`, 1e-6),
  'critic.model.path': { type: 'str', default: '~/models/deepseek-llm-7b-chat' },
  'critic.ppo_micro_batch_size': { type: 'int', nullable: true, default: null },
  'critic.ppo_micro_batch_size_per_gpu': { type: 'int', nullable: true, default: null },
  'critic.cliprange_value': { type: 'float', default: 0.5 },
  'critic.ppo_epochs': { type: 'int', default: 1 },
  'critic.grad_clip': { type: 'float', default: 1 },
  ...optimKeys('critic', 1e-5),
  'reward_model.enable': { type: 'bool', default: false },
  'reward_model.use_reward_loop': { type: 'bool', default: true },
  'reward_model.model.path': { type: 'str', default: '~/models/FsfairX-LLaMA3-RM-v0.1' },
  'reward_model.model.input_tokenizer': {
    type: 'str',
    nullable: true,
    default: '${actor_rollout_ref.model.path}',
  },
  'reward_model.micro_batch_size': { type: 'int', nullable: true, default: null },
  'reward_model.micro_batch_size_per_gpu': { type: 'int', nullable: true, default: null },
  'custom_reward_function.path': { type: 'str', nullable: true, default: null },
  'custom_reward_function.name': { type: 'str', default: 'compute_score' },
  'trainer.total_training_steps': { type: 'int', nullable: true, default: null },
  'trainer.nnodes': { type: 'int', default: 1 },
  'trainer.n_gpus_per_node': { type: 'int', default: 8 },
  'trainer.critic_warmup': { type: 'int', default: 0 },
  'trainer.save_freq': { type: 'int', default: -1 },
  'trainer.logger': { type: 'list', default: ['console', 'wandb'] },
  'trainer.val_before_train': { type: 'bool', default: true },
};

/** Our algorithm → verl's algorithm.adv_estimator. */
export const VERL_ESTIMATOR = {
  ppo: 'gae',
  grpo: 'grpo',
  rloo: 'rloo',
  'reinforce++': 'reinforce_plus_plus',
} as const;

/** Our lossAggregation → verl's loss_agg_mode. */
export const VERL_LOSS_AGG = {
  'token-mean': 'token-mean',
  'seq-mean': 'seq-mean-token-mean',
  'seq-sum-norm': 'seq-mean-token-sum-norm',
} as const;

/**
 * Micro-batch (samples per GPU) under which verl's default (legacy FSDP) worker computes our aggregation: dp_actor
 * scales each micro-batch's agg_loss by 1 / (micro-batches per mini-batch). token-mean then equals ours only with
 * one micro-batch per mini-batch ("mini"); seq-mean-token-sum-norm divides each micro-batch's sum by the response
 * length, so Σ / (n × L) needs micro-batches of one sample; seq-mean-token-mean holds for any equal split.
 */
export const VERL_MICRO_FOR_LOSS_AGG = {
  'token-mean': 'mini',
  'seq-mean-token-mean': 'any',
  'seq-mean-token-sum-norm': 1,
} as const;

/** Our klEstimator → verl's kl_penalty / kl_loss_type. */
export const VERL_KL = { k1: 'kl', k2: 'mse', k3: 'low_var_kl' } as const;

/**
 * clip_ratio_c turns the dual clip off when it can never bind: verl clamps log(π/π_old) to ±20 before exp, so the
 * ratio never exceeds e^20 ≈ 4.9e8 (clip_ratio_c must be > 1; it cannot be null).
 */
export const VERL_DUAL_CLIP_OFF = 1e9;

/** PEFT's "all-linear": every nn.Linear / Conv1D but the output layer, which is GPT-2's four and Llama's seven. */
export function verlTargetModules(targets: readonly string[]): string {
  const gpt2 = ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'];
  const llama = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];
  const set = new Set(targets);
  if ([gpt2, llama].some((all) => all.length === set.size && all.every((t) => set.has(t))))
    return 'all-linear';
  // PEFT reads a string target_modules as a regex that must match the whole module name.
  const alt = targets.map((t) => t.replace(/\./g, '[.]')).join('|');
  return `.*[.](${alt})`;
}

/** Which module names a verl (PEFT) string target_modules selects: all-linear, or re.fullmatch of the regex. */
export function verlTargetMatches(targetModules: string, moduleName: string): boolean {
  if (targetModules === 'all-linear') return !/(^|\.)lm_head$/.test(moduleName);
  return new RegExp(`^(?:${targetModules})$`).test(moduleName);
}

/**
 * Parses one Hydra override value (the subset our exports write): null, true/false, ints, floats (with exponent,
 * inf, nan), quoted strings, [lists] and {dicts}; anything else is an unquoted string.
 */
export function parseHydraValue(text: string): unknown {
  let i = 0;
  const s = text;
  const ws = () => {
    while (i < s.length && /\s/.test(s[i])) i++;
  };
  const value = (stop: string): unknown => {
    ws();
    const c = s[i];
    if (c === '[') {
      i++;
      const out: unknown[] = [];
      ws();
      if (s[i] === ']') {
        i++;
        return out;
      }
      for (;;) {
        out.push(value(',]'));
        ws();
        if (s[i] === ',') i++;
        else if (s[i] === ']') {
          i++;
          return out;
        } else throw new Error(`bad list in ${text}`);
      }
    }
    if (c === '{') {
      i++;
      const out: Record<string, unknown> = {};
      ws();
      if (s[i] === '}') {
        i++;
        return out;
      }
      for (;;) {
        ws();
        const k = /^[\w.-]+/.exec(s.slice(i));
        if (!k) throw new Error(`bad dict key in ${text}`);
        i += k[0].length;
        ws();
        if (s[i] !== ':') throw new Error(`bad dict in ${text}`);
        i++;
        out[k[0]] = value(',}');
        ws();
        if (s[i] === ',') i++;
        else if (s[i] === '}') {
          i++;
          return out;
        } else throw new Error(`bad dict in ${text}`);
      }
    }
    if (c === "'" || c === '"') {
      let str = '';
      let j = i + 1;
      while (j < s.length && s[j] !== c) {
        if (s[j] === '\\' && (s[j + 1] === c || s[j + 1] === '\\')) j++;
        str += s[j++];
      }
      if (j >= s.length) throw new Error(`unterminated quote in ${text}`);
      i = j + 1;
      return str;
    }
    let j = i;
    while (j < s.length && !stop.includes(s[j])) j++;
    const tok = s.slice(i, j).trim();
    i = j;
    if (/^null$/i.test(tok)) return null;
    if (/^true$/i.test(tok)) return true;
    if (/^false$/i.test(tok)) return false;
    if (/^[+-]?\d+$/.test(tok)) return Number.parseInt(tok, 10);
    if (/^[+-]?(\d+\.\d*|\d*\.\d+|\d+)([eE][+-]?\d+)?$/.test(tok) || /^[+-]?(inf|nan)$/i.test(tok))
      return /inf/i.test(tok) ? (tok.startsWith('-') ? -Infinity : Infinity) : Number(tok);
    return tok;
  };
  const v = value('');
  ws();
  if (i !== s.length) throw new Error(`trailing text in ${text}`);
  return v;
}

/** Parses a printed verl command: `python3 -m verl.trainer.main_ppo key=value ...` → key → value. */
export function parseVerlCommand(text: string): Record<string, unknown> {
  const words = shellWords(text);
  const start = words.indexOf('verl.trainer.main_ppo');
  if (start < 0) throw new Error('no "python3 -m verl.trainer.main_ppo" in the command');
  const out: Record<string, unknown> = {};
  for (const w of words.slice(start + 1)) {
    const eq = w.indexOf('=');
    if (eq < 0) throw new Error(`not a key=value override: ${w}`);
    const key = w.slice(0, eq);
    if (key.startsWith('+') || key.startsWith('~')) throw new Error(`adds or deletes a key: ${w}`);
    out[key] = parseHydraValue(w.slice(eq + 1));
  }
  return out;
}

function typeOk(rule: KeyRule, v: unknown): boolean {
  if (v === null) return !!rule.nullable;
  switch (rule.type) {
    case 'int':
      return typeof v === 'number' && Number.isInteger(v);
    case 'float':
      return typeof v === 'number';
    case 'str':
      return typeof v === 'string';
    case 'bool':
      return typeof v === 'boolean';
    case 'list':
      return Array.isArray(v);
    case 'dict':
      return typeof v === 'object' && !Array.isArray(v);
  }
}

/**
 * verl's start-up checks for a parsed override set (keys outside VERL_KEYS keep the engine's defaults and are not
 * checked here): types of the dataclasses, mandatory values, validate_config's micro-batch and batch checks, the
 * workers' batch normalisation and rollout mesh. Returns the failures (empty: it starts).
 */
export function checkVerlOverrides(o: Record<string, unknown>): string[] {
  const errs: string[] = [];
  const c: Record<string, unknown> = {};
  for (const [k, r] of Object.entries(VERL_KEYS)) c[k] = r.default;
  for (const [k, v] of Object.entries(o)) {
    const r = VERL_KEYS[k];
    if (r && !typeOk(r, v)) errs.push(`${k}: ${JSON.stringify(v)} is not of type ${r.type}`);
    if (r?.choices && typeof v === 'string' && !r.choices.includes(v))
      errs.push(`${k}: ${v} is not one of ${r.choices.join(', ')}`);
    c[k] = v;
  }
  for (const [k, r] of Object.entries(VERL_KEYS))
    if (r.mandatory && (c[k] === null || c[k] === undefined))
      errs.push(`${k} is mandatory (??? in verl's config)`);
  const num = (k: string) => c[k] as number;
  const nGpus = num('trainer.n_gpus_per_node') * num('trainer.nnodes');
  const n = num(`${A}.rollout.n`);
  const exactlyOne = (a: string, b: string) => {
    if (c[a] === null && c[b] === null) errs.push(`set one of ${a} or ${b}`);
    if (c[a] !== null && c[b] !== null) errs.push(`set only ${b}, not both ${a} and ${b}`);
  };
  const estimator = c['algorithm.adv_estimator'];
  const critic = estimator === 'gae';
  const ref = c[`${A}.actor.use_kl_loss`] === true || c['algorithm.use_kl_in_reward'] === true;
  if (!c[`${A}.actor.use_dynamic_bsz`]) {
    if ((num('data.train_batch_size') * n) % nGpus !== 0)
      errs.push('data.train_batch_size × rollout.n must be divisible by the GPU count');
    exactlyOne(`${A}.actor.ppo_micro_batch_size`, `${A}.actor.ppo_micro_batch_size_per_gpu`);
    if (ref) exactlyOne(`${A}.ref.log_prob_micro_batch_size`, `${A}.ref.log_prob_micro_batch_size_per_gpu`);
    exactlyOne(`${A}.rollout.log_prob_micro_batch_size`, `${A}.rollout.log_prob_micro_batch_size_per_gpu`);
    if (critic) exactlyOne('critic.ppo_micro_batch_size', 'critic.ppo_micro_batch_size_per_gpu');
    if (num('data.train_batch_size') < num(`${A}.actor.ppo_mini_batch_size`))
      errs.push('data.train_batch_size must be ≥ actor.ppo_mini_batch_size');
    // fsdp_workers: the mini-batch in samples per GPU, divisible by the micro-batch.
    const mini = Math.floor((num(`${A}.actor.ppo_mini_batch_size`) * n) / nGpus);
    const micro = c[`${A}.actor.ppo_micro_batch_size_per_gpu`] as number | null;
    if (mini <= 0) errs.push('normalised ppo_mini_batch_size must be > 0');
    if (micro !== null && (micro <= 0 || mini % micro !== 0))
      errs.push(
        `normalised ppo_mini_batch_size ${mini} must be divisible by ppo_micro_batch_size_per_gpu ${micro}`,
      );
    const cmicro = c['critic.ppo_micro_batch_size_per_gpu'] as number | null;
    if (critic && cmicro !== null && (cmicro <= 0 || mini % cmicro !== 0))
      errs.push(`critic: normalised ppo_mini_batch_size ${mini} must be divisible by ${cmicro}`);
  }
  if (c['reward_model.enable'] === true && c['reward_model.use_reward_loop'] !== true)
    exactlyOne('reward_model.micro_batch_size', 'reward_model.micro_batch_size_per_gpu');
  const infer = num(`${A}.rollout.tensor_model_parallel_size`) * num(`${A}.rollout.data_parallel_size`);
  if (nGpus % infer !== 0)
    errs.push(`rollout world size ${nGpus} is not divisible by tensor × data parallel size ${infer}`);
  if (!(num(`${A}.actor.clip_ratio_c`) > 1)) errs.push('actor.clip_ratio_c must be > 1');
  return errs;
}

// ---------------------------------------------------------------------------------------------------------
// TRL
// ---------------------------------------------------------------------------------------------------------

/** The TRL release the GRPOConfig / RLOOConfig / DPOConfig exports were built and checked against. */
export const TRL_SOURCE = {
  version: '1.13.0',
  files: ['trl/trainer/grpo_config.py', 'trl/trainer/rloo_config.py', 'trl/trainer/dpo_config.py'],
  /** PPOConfig's history, from the git tags of huggingface/trl. */
  history: {
    repo: 'huggingface/trl',
    commit: 'f2cd57710ae345ea6428ae95363267fcf38a3dc8',
    date: '2026-07-24',
  },
} as const;

/**
 * Where TRL's on-policy PPOConfig lives: top-level `trl.PPOConfig` from 0.12 to 0.28 (0.29 dropped it), with
 * `kl_estimator` from 0.17; `trl.experimental.ppo.PPOConfig` from 0.26 (present in 1.9, gone in the 1.13 wheel).
 */
export const TRL_PPO = {
  topLevel: '>=0.12,<0.29',
  klEstimator: '>=0.17',
  experimental: '>=0.26',
  experimentalLastSeen: '1.9.0',
  absentIn: '1.13.0',
} as const;

/**
 * GRPOConfig fields whose TRL 1.13 default differs from what our GRPO does, with the value that means ours: KL is
 * klCoef · k3 per token without the importance ratio (TRL 1.13 multiplies it by the ratio by default), entropy is
 * the mean per-token entropy (TRL's entropy_coef term is the same whatever loss_type).
 */
export const TRL_GRPO_DEFAULTS = {
  use_bias_correction_kl: { trl: true, ours: false },
  entropy_coef: { trl: 0 },
  beta: { trl: 0 },
  loss_type: { trl: 'dapo' },
} as const;

/** Our lossAggregation → GRPOConfig.loss_type (one device, no gradient accumulation). */
export const TRL_LOSS_TYPE = {
  // Σ over the minibatch's counted tokens / their number ("dapo", TRL's default, equals it on one device).
  'token-mean': 'bnpo',
  // Mean over sequences of each sequence's token mean.
  'seq-mean': 'grpo',
  // Σ / (sequences × max_completion_length).
  'seq-sum-norm': 'dr_grpo',
} as const;
