/**
 * The config table (docs/formats.md §5): the types, `CONFIG_FIELDS` (defaults, one-line docs, ranges, slider
 * scales, which keys are live) and what follows from it alone (`CONFIG_KEYS`, `DEFAULT_CONFIG`).
 */

export type KlEstimator = 'k1' | 'k2' | 'k3';
/** The RL algorithm (docs/formats.md §7): PPO with a value model, or one of the critic-free three. */
export const ALGORITHMS = ['ppo', 'grpo', 'rloo', 'reinforce++'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];
/** GRPO's division of the group-centred scores: by the group's std, the batch's std, or not at all (Dr. GRPO). */
export type ScaleRewards = 'group' | 'batch' | 'none';
/** How per-token policy losses become one number per minibatch (docs/formats.md §7). */
export type LossAggregation = 'token-mean' | 'seq-mean' | 'seq-sum-norm';
export type ValueInit = 'policy' | 'reward';
/** With LoRA: the value model on the policy's frozen base (own adapters + zero head), or a full copy of its own. */
export type ValueModelKind = 'shared' | 'separate';
/** How the frozen base of a LoRA model is stored on WebGPU (docs/models.md, "The frozen base in f16"). */
export type BaseDtype = 'f32' | 'f16';
/** The Conv1D layers LoRA can adapt (docs/formats.md §6), in PEFT's target_modules names for GPT-2. */
export const LORA_TARGET_NAMES = ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'] as const;
/** The nn.Linear layers LoRA can adapt in the Llama, Qwen2 and Qwen3 families (PEFT's names; docs/models.md). */
export const LLAMA_LORA_TARGET_NAMES = [
  'q_proj',
  'k_proj',
  'v_proj',
  'o_proj',
  'gate_proj',
  'up_proj',
  'down_proj',
] as const;
/** Every name `loraTargets` accepts: GPT-2's, then the Llama families'. */
export const ALL_LORA_TARGET_NAMES = [...LORA_TARGET_NAMES, ...LLAMA_LORA_TARGET_NAMES] as const;
export type LoraTargetName = (typeof ALL_LORA_TARGET_NAMES)[number];
/** Activation recomputation in the update: never, per transformer block, or when the run needs it (auto). */
export type RecomputeMode = 'off' | 'blocks' | 'auto';
/** `'eos'` = the model's EOS id; a number = that token id; `null` = never stop early. */
export type StopToken = 'eos' | number | null;

/** One term of a weighted reward mix; `name` is a built-in reward function. */
export interface RewardMixTerm {
  name: string;
  weight: number;
  options?: Record<string, unknown>;
}
/** A built-in reward name, a weighted mix of built-ins, or a reward-model folder. */
export type RewardSpec = string | { mix: RewardMixTerm[] } | { model: string };

export interface TrainConfig {
  model: string;
  /** `null` only when `prompts` (and usually `reward`) are given instead. */
  task: string | null;
  prompts?: string[];
  reward?: RewardSpec;
  seed: number;
  steps: number;
  batchSize: number;
  miniBatches: number;
  ppoEpochs: number;
  /**
   * Samples per micro-batch (0 = auto): scoring and each minibatch's update run over slices of this many samples,
   * gradients summed into one optimiser step per minibatch; generation too (on WebGPU in the largest slice that
   * holds no more than they do: model/size.ts deviceStepPlan); the results do not depend on it.
   */
  microBatchSize: number;
  /** Recompute each block's activations in the update's backward (model/recompute.ts); same gradients. */
  recompute: RecomputeMode;
  /** On WebGPU, record the first decode token's kernels and replay them for the rest (model/decode-replay.ts). */
  decodeReplay: boolean;
  /** On WebGPU, record a whole-minibatch update's forward and backward once and replay it (ppo/update-replay.ts). */
  updateReplay: boolean;
  learningRate: number;
  valueLearningRate: number;
  clipRange: number;
  clipRangeValue: number;
  vfCoef: number;
  entropyCoef: number;
  klCoef: number;
  adaptiveKl: boolean;
  targetKl: number;
  klHorizon: number;
  klEstimator: KlEstimator;
  earlyStopKl: boolean;
  earlyStopApproxKl: number;
  rewardModelCenter: boolean;
  gamma: number;
  lam: number;
  whitenAdvantages: boolean;
  whitenRewards: boolean;
  maxGradNorm: number;
  logRatioClamp: number;
  responseLength: number;
  temperature: number;
  topK: number;
  topP: number;
  stopToken: StopToken;
  /** Format prompts with the model's own chat template (when its tokenizer has one). */
  chatTemplate: boolean;
  missingEosPenalty: number;
  valueInit: ValueInit;
  /** LoRA rank r (docs/formats.md §6); 0 = off, full fine-tuning. */
  lora: number;
  /** LoRA scaling = loraAlpha / lora. */
  loraAlpha: number;
  /** The layers LoRA adapts, in LORA_TARGET_NAMES order. */
  loraTargets: LoraTargetName[];
  /** With LoRA: "shared" base for the value model, or "separate" full value model (no LoRA: always separate). */
  valueModel: ValueModelKind;
  /**
   * Storage of the frozen base under LoRA on WebGPU: "f32", or "f16" (the large matrices packed two halves per u32,
   * all arithmetic in f32; docs/models.md, "The frozen base in f16"). "f16" needs "lora" > 0 and the webgpu backend.
   */
  baseDtype: BaseDtype;
  saveEvery: number;
  /** docs/formats.md §7. */
  algorithm: Algorithm;
  /** Samples per prompt (G); 0 = the algorithm's default (`derived(cfg).groupSize`: 1 for ppo/reinforce++, 4 for grpo/rloo). */
  groupSize: number;
  /** GRPO only. */
  scaleRewards: ScaleRewards;
  /** RLOO only: whiten the advantages over the batch's samples. */
  normalizeAdvantages: boolean;
  lossAggregation: LossAggregation;
  /** Held-out evaluation every this many steps and at the last step (docs/eval.md); 0 = off. */
  evalEvery: number;
  /** The held-out prompts: "heldout" (the task's held-out split) or a file of prompts, one a line; null = none. */
  evalPrompts: string | null;
  /** Held-out evaluation's sampling: 0 = greedy; > 0 = sampled at this temperature with fixed seeds. */
  evalTemperature: number;
}

export type ConfigKey = keyof TrainConfig;
export type FieldGroup = 'setup' | 'optimiser' | 'ppo' | 'kl' | 'advantages' | 'sampling';

interface FieldCommon {
  /** One line, shown in the UI and in `--help`. */
  doc: string;
  /** Whether the key may change on a running job (applied from the next PPO step). */
  live: boolean;
  group: FieldGroup;
}
export interface NumberField extends FieldCommon {
  type: 'number';
  default: number;
  /** Inclusive bounds. */
  min: number;
  max: number;
  integer: boolean;
  /** How a slider maps to the value; `log` only where min > 0. */
  scale: 'log' | 'linear';
}
export interface BooleanField extends FieldCommon {
  type: 'boolean';
  default: boolean;
}
export interface ChoiceField extends FieldCommon {
  type: 'choice';
  default: string;
  choices: readonly string[];
}
/** A non-empty list of distinct entries of `choices` (kept in `choices` order). */
export interface ChoicesField extends FieldCommon {
  type: 'choices';
  default: readonly string[];
  choices: readonly string[];
}
/** A free string (model preset or folder, task name); `nullable` fields accept `null`. */
export interface StringField extends FieldCommon {
  type: 'string';
  default: string | null;
  nullable: boolean;
}
export interface PromptsField extends FieldCommon {
  type: 'prompts';
  default: undefined;
}
export interface RewardField extends FieldCommon {
  type: 'reward';
  default: undefined;
}
/** `'eos'`, `null` (never stop) or a token id from `min` to `max`. */
export interface StopTokenField extends FieldCommon {
  type: 'stopToken';
  default: StopToken;
  min: number;
  max: number;
}
export type ConfigField =
  | NumberField
  | BooleanField
  | ChoiceField
  | ChoicesField
  | StringField
  | PromptsField
  | RewardField
  | StopTokenField;

type Table = { readonly [K in ConfigKey]-?: ConfigField & { default: TrainConfig[K] } };

const num = (
  group: FieldGroup,
  dflt: number,
  min: number,
  max: number,
  doc: string,
  o: { integer?: boolean; scale?: 'log' | 'linear'; live?: boolean } = {},
): NumberField => ({
  type: 'number',
  group,
  default: dflt,
  min,
  max,
  doc,
  integer: o.integer ?? false,
  scale: o.scale ?? 'linear',
  live: o.live ?? true,
});
const int = (
  group: FieldGroup,
  dflt: number,
  min: number,
  max: number,
  doc: string,
  o: { scale?: 'log' | 'linear'; live?: boolean } = {},
): NumberField => num(group, dflt, min, max, doc, { ...o, integer: true });
const bool = (group: FieldGroup, dflt: boolean, doc: string, live = true): BooleanField => ({
  type: 'boolean',
  group,
  default: dflt,
  doc,
  live,
});

/** The table. Key order here is the order of the docs, the UI and the URL hash. */
export const CONFIG_FIELDS = {
  // --- setup ---
  model: {
    type: 'string',
    group: 'setup',
    default: 'tiny',
    nullable: false,
    live: false,
    doc: 'Policy to start from: a built-in preset name ("tiny") or a model folder.',
  },
  task: {
    type: 'string',
    group: 'setup',
    default: 'sentiment',
    nullable: true,
    live: false,
    doc: 'Built-in task (prompts + reward). `prompts` replaces its prompts, `reward` its reward; null = no task.',
  },
  prompts: {
    type: 'prompts',
    group: 'setup',
    default: undefined,
    live: false,
    doc: 'Your own prompts (non-empty strings), used instead of the task’s.',
  },
  reward: {
    type: 'reward',
    group: 'setup',
    default: undefined,
    live: false,
    doc: 'Reward instead of the task’s: a built-in name, {"mix":[{"name","weight"}]} or {"model":"folder"}.',
  },
  seed: int(
    'setup',
    1,
    0,
    2147483647,
    'Seed for sampling, shuffling and initialisation; same seed, same run.',
    {
      live: false,
    },
  ),
  steps: int('setup', 100, 1, 1_000_000, 'PPO steps (rollout + update) to run.', { scale: 'log' }),
  saveEvery: int(
    'setup',
    50,
    0,
    1_000_000,
    'Write a checkpoint every this many steps (and at the end); 0 = end only.',
  ),
  evalEvery: int(
    'setup',
    0,
    0,
    1_000_000,
    'Held-out evaluation every this many steps and at the last step: policy and reference answer evalPrompts, giving eval/reward, eval/kl, eval/winRate (docs/eval.md); 0 = off. Applies on reset.',
    { live: false },
  ),
  evalPrompts: {
    type: 'string',
    group: 'setup',
    default: null,
    nullable: true,
    live: false,
    doc: 'Prompts of the held-out evaluation: "heldout" (the task’s held-out split) or a file of prompts, one a line, its path relative to the config file (CLI); null = none. Applies on reset.',
  },
  evalTemperature: num(
    'setup',
    0,
    0,
    10,
    'Held-out evaluation’s sampling: 0 = greedy; above 0, sampled at this temperature with the same fixed seeds at every evaluation. Applies on reset.',
    { live: false },
  ),
  valueInit: {
    type: 'choice',
    group: 'setup',
    default: 'policy',
    choices: ['policy', 'reward'],
    live: false,
    doc: 'Value model starts from the policy with a zero head, or from the reward model.',
  },
  lora: int(
    'setup',
    0,
    0,
    1024,
    'LoRA rank r: train low-rank adapters on one frozen base (0 = off, full fine-tuning); wants ~10× the learning rate (1e-4 to 1e-3 for GPT-2 small). Applies on reset.',
    { live: false },
  ),
  loraAlpha: num(
    'setup',
    16,
    0.01,
    10000,
    'LoRA alpha: the adapters are scaled by loraAlpha / lora (PEFT’s lora_alpha). Applies on reset.',
    { scale: 'log', live: false },
  ),
  loraTargets: {
    type: 'choices',
    group: 'setup',
    default: [...LORA_TARGET_NAMES],
    choices: ALL_LORA_TARGET_NAMES,
    live: false,
    doc: 'Layers that get LoRA adapters (PEFT’s target_modules): GPT-2’s c_attn, attn.c_proj, c_fc, mlp.c_proj, or a Llama/Qwen model’s q/k/v/o_proj, gate/up/down_proj. The default (GPT-2’s four) means every linear layer of a Llama/Qwen model. Applies on reset.',
  },
  valueModel: {
    type: 'choice',
    group: 'setup',
    default: 'shared',
    choices: ['shared', 'separate'],
    live: false,
    doc: 'With LoRA: "shared" = value on the frozen base with its own adapters + zero head; "separate" = a full model (no LoRA: always separate). Applies on reset.',
  },
  baseDtype: {
    type: 'choice',
    group: 'setup',
    default: 'f32',
    choices: ['f32', 'f16'],
    live: false,
    doc: 'Storage of the frozen base under LoRA: "f16" halves its memory on WebGPU (Llama/Qwen; adapters, optimizer and all arithmetic stay f32); needs "lora" > 0 and the webgpu backend. Applies on reset.',
  },
  rewardModelCenter: bool(
    'setup',
    true,
    'Subtract the mean that train-reward recorded in reward_stats.json from reward-model scores (none recorded: as is).',
    false,
  ),
  // --- optimiser ---
  learningRate: num(
    'optimiser',
    1e-4,
    1e-7,
    0.1,
    'Adam learning rate of the policy (tiny models: 1e-4 to 1e-3).',
    {
      scale: 'log',
    },
  ),
  valueLearningRate: num('optimiser', 1e-3, 1e-7, 0.1, 'Adam learning rate of the value model.', {
    scale: 'log',
  }),
  maxGradNorm: num(
    'optimiser',
    1,
    0,
    1000,
    'Clip the global gradient norm over policy and value parameters together to this; 0 = no clipping.',
  ),
  // --- ppo ---
  algorithm: {
    type: 'choice',
    group: 'ppo',
    default: 'ppo',
    choices: ALGORITHMS,
    live: false,
    doc: 'RL algorithm: "ppo" (value model + GAE), or critic-free "grpo", "rloo", "reinforce++" (no value model). Applies on reset.',
  },
  groupSize: int(
    'ppo',
    0,
    0,
    4096,
    'Samples per prompt (G) in a step; must divide batchSize. 0 = the algorithm’s default: 1 for ppo and reinforce++, 4 for grpo and rloo (which need ≥ 2). Applies on reset.',
    { live: false },
  ),
  scaleRewards: {
    type: 'choice',
    group: 'ppo',
    default: 'group',
    choices: ['group', 'batch', 'none'],
    live: true,
    doc: 'GRPO: divide the group-centred scores by the group’s std + 1e-4, the batch’s std + 1e-4, or not at all ("none", Dr. GRPO).',
  },
  normalizeAdvantages: bool(
    'ppo',
    false,
    'RLOO: whiten the leave-one-out advantages over the batch’s samples (mean 0, std 1).',
  ),
  lossAggregation: {
    type: 'choice',
    group: 'ppo',
    default: 'token-mean',
    choices: ['token-mean', 'seq-mean', 'seq-sum-norm'],
    live: true,
    doc: 'Policy loss over a minibatch: mean over counted tokens, mean per sequence then over sequences, or sum / (sequences × responseLength) (Dr. GRPO).',
  },
  batchSize: int(
    'ppo',
    16,
    1,
    4096,
    'Samples per step (the rollout batch): batchSize / groupSize prompts, each sampled groupSize times.',
    {
      scale: 'log',
      live: false,
    },
  ),
  miniBatches: int(
    'ppo',
    2,
    1,
    4096,
    'Minibatches the rollout is split into per epoch; must divide batchSize.',
    {
      live: false,
    },
  ),
  microBatchSize: int(
    'ppo',
    0,
    0,
    4096,
    'Samples per micro-batch (0 = auto): scoring and each minibatch update run in slices this big, gradients summed into one step; generation too, or on WebGPU in the largest slice that holds no more than they do. Bounds memory; the results do not depend on it.',
    { scale: 'linear' },
  ),
  recompute: {
    type: 'choice',
    group: 'ppo',
    default: 'auto',
    choices: ['off', 'blocks', 'auto'],
    live: true,
    doc: 'Recompute each transformer block in the update’s backward instead of keeping its activations: the same gradients, less memory, about one more forward. auto: on when even one sample per micro-batch would not fit the memory budget without it.',
  },
  decodeReplay: bool(
    'ppo',
    true,
    'On WebGPU, record the first generated token’s GPU programs and replay them for every later token (the same tokens, a fraction of the JavaScript per token). Off: every token through tfjs’s ops. Other backends ignore it.',
  ),
  updateReplay: bool(
    'ppo',
    true,
    'On WebGPU, record a minibatch’s forward and backward once (when it runs as one micro-batch) and replay it for every later minibatch and step (the same numbers, a fraction of the JavaScript; the recording holds about twice the update’s working memory). Off: every update through tfjs’s ops. Other backends ignore it.',
  ),
  ppoEpochs: int('ppo', 2, 1, 64, 'Passes over the rollout per PPO step.'),
  clipRange: num('ppo', 0.2, 0.01, 1, 'PPO ratio clip ε: the ratio is clipped to [1−ε, 1+ε].'),
  clipRangeValue: num('ppo', 0.2, 0.01, 100, 'Value clip: predictions are clipped to old value ± this.', {
    scale: 'log',
  }),
  vfCoef: num(
    'ppo',
    0.1,
    0,
    10,
    'Weight of the value loss in loss = policy − entropyCoef·entropy + vfCoef·value, whose gradient norm maxGradNorm clips.',
  ),
  entropyCoef: num(
    'ppo',
    0,
    0,
    1,
    'Entropy bonus weight (0 = none: entropy is then only measured, not differentiated).',
  ),
  logRatioClamp: num('ppo', 20, 0.1, 80, 'Clamp log(π/π_old) to ±this before exp, against overflow.', {
    scale: 'log',
  }),
  // --- kl ---
  klCoef: num(
    'kl',
    0.05,
    0,
    10,
    'β: per-token KL penalty weight against the reference (start value if adaptive).',
  ),
  adaptiveKl: bool(
    'kl',
    false,
    'Adapt β towards targetKl (Ziegler et al.) instead of keeping it fixed.',
    false,
  ),
  targetKl: num('kl', 6, 0.01, 1000, 'Target KL to the reference, nats per sample, for the adaptive β.', {
    scale: 'log',
  }),
  klHorizon: int('kl', 10000, 1, 10_000_000, 'Adaptive β horizon, in samples: larger = slower changes.', {
    scale: 'log',
  }),
  klEstimator: {
    type: 'choice',
    group: 'kl',
    default: 'k1',
    choices: ['k1', 'k2', 'k3'],
    live: true,
    doc: 'Per-token KL estimator in the penalty: k1 = log ratio, k2 = ½ log ratio², k3 = (r−1) − log r.',
  },
  earlyStopKl: bool(
    'kl',
    false,
    'Skip the remaining PPO epochs of a step once a minibatch’s approx KL passes earlyStopApproxKl.',
  ),
  earlyStopApproxKl: num(
    'kl',
    0.02,
    1e-6,
    10,
    'earlyStopKl threshold, nats per token: mean ½(log π/π_rollout)² over a minibatch’s counted tokens, measured before its update.',
    { scale: 'log' },
  ),
  // --- advantages ---
  gamma: num('advantages', 1, 0, 1, 'Discount γ over response tokens.'),
  lam: num('advantages', 0.95, 0, 1, 'GAE λ: 0 = one-step TD, 1 = Monte Carlo.'),
  whitenAdvantages: bool('advantages', true, 'Whiten advantages over the whole batch (mean 0, std 1).'),
  whitenRewards: bool(
    'advantages',
    false,
    'Scale per-token rewards to unit variance over the batch before GAE.',
  ),
  // --- sampling ---
  responseLength: int('sampling', 24, 1, 1024, 'Maximum tokens generated per response.', { live: false }),
  temperature: num(
    'sampling',
    1,
    0.05,
    10,
    'Sampling temperature; logprobs use the same temperature so the first PPO ratio is 1.',
    { scale: 'log', live: false },
  ),
  topK: int(
    'sampling',
    0,
    0,
    1_000_000,
    'Sample among the top K tokens only; 0 = off. Biases the KL estimate.',
  ),
  topP: num('sampling', 1, 0.01, 1, 'Nucleus sampling mass; 1 = off. Biases the KL estimate.'),
  chatTemplate: bool(
    'sampling',
    true,
    'Format each prompt as a user message with the model’s own chat template (tokenizer_config.json’s chat_template, add_generation_prompt) when it has one (Llama/Qwen instruct models); off: the prompt text as is. GPT-2 has no template. Applies on reset.',
    false,
  ),
  stopToken: {
    type: 'stopToken',
    group: 'sampling',
    default: 'eos',
    min: 0,
    max: 1_000_000,
    live: false,
    doc: 'Token that ends a response (counted, then padding): "eos", a token id, or null = never.',
  },
  missingEosPenalty: num(
    'sampling',
    0,
    0,
    100,
    'Subtracted from the score of a response that never stopped.',
  ),
} as const satisfies Table;

export const CONFIG_KEYS = Object.keys(CONFIG_FIELDS) as ConfigKey[];

/** Every default, straight from the table. */
export const DEFAULT_CONFIG: Readonly<TrainConfig> = Object.freeze(
  Object.fromEntries(
    CONFIG_KEYS.filter((k) => CONFIG_FIELDS[k].default !== undefined).map((k) => [
      k,
      CONFIG_FIELDS[k].default,
    ]),
  ) as unknown as TrainConfig,
);
