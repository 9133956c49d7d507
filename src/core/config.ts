/**
 * The one training config (docs/formats.md §5). Like TensorFlow Playground's `state.ts`, a single table,
 * `CONFIG_FIELDS`, drives the defaults, the one-line docs shown in the UI, the allowed ranges, the sliders'
 * scale, which keys may change on a running job, and the URL hash. Everything else reads from it.
 */
import { UserError } from './errors';

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
/** The Conv1D layers LoRA can adapt (docs/formats.md §6), in PEFT's target_modules names for GPT-2. */
export const LORA_TARGET_NAMES = ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'] as const;
export type LoraTargetName = (typeof LORA_TARGET_NAMES)[number];
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
    choices: LORA_TARGET_NAMES,
    live: false,
    doc: 'GPT-2 layers that get LoRA adapters (PEFT’s target_modules); default all four. Applies on reset.',
  },
  valueModel: {
    type: 'choice',
    group: 'setup',
    default: 'shared',
    choices: ['shared', 'separate'],
    live: false,
    doc: 'With LoRA: "shared" = value on the frozen base with its own adapters + zero head; "separate" = a full model (no LoRA: always separate). Applies on reset.',
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

// ---------------------------------------------------------------------------------------------------------
// Messages

function show(v: unknown): string {
  if (v === undefined) return 'nothing';
  let s: string;
  try {
    s = JSON.stringify(v) ?? String(v);
  } catch {
    s = String(v);
  }
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

/** "an integer from 1 to 4096", "one of "k1", "k2", "k3"", ... — what a key accepts, for messages and the UI. */
export function describeAllowed(key: ConfigKey): string {
  const f: ConfigField = CONFIG_FIELDS[key];
  switch (f.type) {
    case 'number':
      return `${f.integer ? 'an integer' : 'a number'} from ${f.min} to ${f.max}`;
    case 'boolean':
      return 'true or false';
    case 'choice':
      return `one of ${f.choices.map((c) => `"${c}"`).join(', ')}`;
    case 'choices':
      return `a non-empty list of distinct entries from ${f.choices.map((c) => `"${c}"`).join(', ')}`;
    case 'string':
      return f.nullable ? 'a non-empty string or null' : 'a non-empty string';
    case 'prompts':
      return 'a non-empty array of non-empty strings';
    case 'reward':
      return 'a reward name, {"mix": [{"name": string, "weight": number}, ...]} or {"model": "folder"}';
    case 'stopToken':
      return `"eos", null, or a token id from ${f.min} to ${f.max}`;
  }
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return row[b.length];
}

/** Valid keys close to a wrong one (case, snake_case, typos, prefixes), best first. */
export function closeKeys(wrong: string): ConfigKey[] {
  const norm = (s: string) => s.toLowerCase().replace(/[_\-\s]/g, '');
  const w = norm(wrong);
  return CONFIG_KEYS.map((k) => {
    const n = norm(k);
    let score = editDistance(w, n);
    if (n === w) score = -2;
    else if (w.length >= 3 && (n.includes(w) || w.includes(n))) score = Math.min(score, 1);
    return { k, score };
  })
    .filter((x) => x.score <= Math.max(2, Math.floor(w.length / 3)))
    .sort((a, b) => a.score - b.score)
    .slice(0, 3)
    .map((x) => x.k);
}

function unknownKeyMessage(source: string, key: string): string {
  const close = closeKeys(key);
  return close.length > 0
    ? `${source}: unknown key "${key}". Did you mean ${close.map((k) => `"${k}"`).join(' or ')}?`
    : `${source}: unknown key "${key}". Valid keys: ${CONFIG_KEYS.join(', ')}.`;
}

// ---------------------------------------------------------------------------------------------------------
// Validation

/** Config values are plain JSON, so a JSON round trip is a deep copy (core has no structuredClone in its libs). */
const jsonClone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const nonEmptyString = (v: unknown): v is string => typeof v === 'string' && v.trim().length > 0;

/** Check one reward spec; returns a problem or null. */
function rewardProblem(v: unknown): string | null {
  if (nonEmptyString(v)) return null;
  if (!isObject(v)) return 'not a string or object';
  const keys = Object.keys(v);
  if (keys.length !== 1 || (keys[0] !== 'mix' && keys[0] !== 'model')) {
    return `an object needs exactly one key, "mix" or "model" (got ${keys.map((k) => `"${k}"`).join(', ') || 'none'})`;
  }
  if ('model' in v) return nonEmptyString(v.model) ? null : '"model" must be a non-empty folder path';
  const mix = v.mix;
  if (!Array.isArray(mix) || mix.length === 0) return '"mix" must be a non-empty array of {name, weight}';
  for (let i = 0; i < mix.length; i++) {
    const term: unknown = mix[i];
    if (!isObject(term)) return `mix[${i}] must be an object {name, weight, options?}`;
    const extra = Object.keys(term).filter((k) => k !== 'name' && k !== 'weight' && k !== 'options');
    if (extra.length > 0) return `mix[${i}] has unknown key "${extra[0]}" (allowed: name, weight, options)`;
    if (!nonEmptyString(term.name)) return `mix[${i}].name must be a non-empty reward name`;
    if (typeof term.weight !== 'number' || !Number.isFinite(term.weight)) {
      return `mix[${i}].weight must be a finite number, got ${show(term.weight)}`;
    }
    if (term.options !== undefined && !isObject(term.options)) return `mix[${i}].options must be an object`;
  }
  return null;
}

/** Check and normalise one value; returns the value or throws a problem string. */
function checkValue(key: ConfigKey, v: unknown): unknown {
  const f: ConfigField = CONFIG_FIELDS[key];
  const bad = (why = '') => {
    throw new ProblemSignal(`"${key}" must be ${describeAllowed(key)}, got ${show(v)}${why}.`);
  };
  switch (f.type) {
    case 'number':
      if (typeof v !== 'number' || !Number.isFinite(v)) bad();
      if (f.integer && !Number.isInteger(v)) bad(' (not an integer)');
      if ((v as number) < f.min || (v as number) > f.max) bad();
      return v;
    case 'boolean':
      if (typeof v !== 'boolean') bad();
      return v;
    case 'choice':
      if (typeof v !== 'string' || !f.choices.includes(v)) bad();
      return v;
    case 'choices': {
      if (!Array.isArray(v) || v.length === 0) bad();
      const arr = v as unknown[];
      const i = arr.findIndex((x) => typeof x !== 'string' || !f.choices.includes(x));
      if (i >= 0) bad(` (entry ${show(arr[i])})`);
      if (new Set(arr).size !== arr.length) bad(' (an entry is listed twice)');
      return f.choices.filter((c) => arr.includes(c));
    }
    case 'string':
      if (v === null && f.nullable) return null;
      if (!nonEmptyString(v)) bad();
      return v;
    case 'prompts': {
      if (v === null) return undefined;
      if (!Array.isArray(v) || v.length === 0) bad();
      const arr = v as unknown[];
      const i = arr.findIndex((p) => !nonEmptyString(p));
      if (i >= 0) bad(` (prompts[${i}] is ${show(arr[i])})`);
      return [...(arr as string[])];
    }
    case 'reward': {
      if (v === null) return undefined;
      const p = rewardProblem(v);
      if (p) bad(`: ${p}`);
      return jsonClone(v);
    }
    case 'stopToken':
      if (v === 'eos' || v === null) return v;
      if (typeof v !== 'number' || !Number.isInteger(v) || v < f.min || v > f.max) bad();
      return v;
  }
}

class ProblemSignal {
  constructor(readonly message: string) {}
}

/**
 * Merge `partial` over the defaults and check every key. All problems are reported at once, each naming the
 * key, the value and what would be right. `source` names where the config came from (a file, "URL hash").
 */
export function validateConfig(partial: unknown, source = 'config'): TrainConfig {
  if (partial === undefined || partial === null) partial = {};
  if (!isObject(partial)) {
    throw new UserError(`${source}: expected a JSON object of config keys, got ${show(partial)}.`);
  }
  const problems: string[] = [];
  const out: Record<string, unknown> = jsonClone(DEFAULT_CONFIG);
  for (const [key, v] of Object.entries(partial)) {
    if (!Object.hasOwn(CONFIG_FIELDS, key)) {
      problems.push(unknownKeyMessage(source, key));
      continue;
    }
    if (v === undefined) continue;
    try {
      const checked = checkValue(key as ConfigKey, v);
      if (checked === undefined) delete out[key];
      else out[key] = checked;
    } catch (e) {
      if (!(e instanceof ProblemSignal)) throw e;
      problems.push(`${source}: ${e.message}`);
    }
  }
  if (problems.length === 0) {
    const c = out as unknown as TrainConfig;
    if (c.batchSize % c.miniBatches !== 0) {
      const divisors = [];
      for (let d = 1; d <= c.batchSize; d++) if (c.batchSize % d === 0) divisors.push(d);
      problems.push(
        `${source}: "batchSize" (${c.batchSize}) must be divisible by "miniBatches" (${c.miniBatches}); ` +
          `with batchSize ${c.batchSize}, miniBatches can be ${divisors.join(', ')}.`,
      );
    }
    if (c.task === null && c.prompts === undefined) {
      problems.push(
        `${source}: no prompts: set "task" to a built-in task name or "prompts" to an array of strings.`,
      );
    }
    if (c.adaptiveKl && c.klCoef === 0) {
      problems.push(`${source}: "adaptiveKl" needs "klCoef" > 0 (the controller multiplies it), got 0.`);
    }
    const G = groupSizeOf(c);
    if (c.batchSize % G !== 0) {
      problems.push(
        `${source}: "groupSize" (${G}${c.groupSize === 0 ? `, the default for "${c.algorithm}"` : ''}) must divide ` +
          `"batchSize" (${c.batchSize}) (batchSize counts samples, groupSize of them per prompt); ` +
          `set batchSize to a multiple of ${G} or choose another groupSize.`,
      );
    }
    if ((c.algorithm === 'grpo' || c.algorithm === 'rloo') && G < 2) {
      problems.push(
        `${source}: "algorithm" "${c.algorithm}" compares samples of the same prompt, so "groupSize" must be 2 or ` +
          `more, got ${G}; set groupSize to 0 (its default, 4) or 2 – ${c.batchSize}.`,
      );
    }
    if (c.algorithm !== 'ppo' && c.valueInit === 'reward') {
      problems.push(
        `${source}: "valueInit" "reward" needs a value model, but "algorithm" "${c.algorithm}" has none (it is ` +
          'critic-free); remove valueInit (or set it to "policy"), or use algorithm "ppo".',
      );
    }
    if (c.lora > 0 && c.valueModel === 'shared' && c.valueInit === 'reward') {
      problems.push(
        `${source}: "valueInit" "reward" cannot be used with "lora" > 0 and "valueModel" "shared" (the shared ` +
          'value model is the policy\'s base with its own adapters); set "valueModel" to "separate" or "valueInit" to "policy".',
      );
    }
  }
  if (problems.length > 0) throw new UserError(problems.join('\n'));
  return out as unknown as TrainConfig;
}

// ---------------------------------------------------------------------------------------------------------
// Derived sizes: computed in one place (CleanRL style).

/** G: the config's groupSize, or its algorithm's default when 0 (1 for ppo and reinforce++, 4 for grpo and rloo). */
export function groupSizeOf(cfg: Pick<TrainConfig, 'algorithm' | 'groupSize'>): number {
  if (cfg.groupSize > 0) return cfg.groupSize;
  return cfg.algorithm === 'grpo' || cfg.algorithm === 'rloo' ? 4 : 1;
}

/** Critic-free algorithms build no value model (docs/formats.md §7). */
export function hasValueModel(cfg: Pick<TrainConfig, 'algorithm'>): boolean {
  return cfg.algorithm === 'ppo';
}

export interface DerivedConfig {
  /** Samples per minibatch: batchSize / miniBatches. */
  miniBatchSize: number;
  /** Optimiser steps per PPO step: miniBatches × ppoEpochs. */
  updatesPerStep: number;
  /** Samples drawn over the whole run: steps × batchSize. */
  totalSamples: number;
  /** Upper bound on response tokens per rollout: batchSize × responseLength. */
  maxResponseTokensPerStep: number;
  /** Pure sampling (no top-k / top-p), so the KL estimate is unbiased. */
  pureSampling: boolean;
  /** G, samples per prompt: groupSize, or the algorithm's default when groupSize is 0. */
  groupSize: number;
  /** Distinct prompts per step: batchSize / groupSize. */
  promptsPerStep: number;
  /** Whether the run has a value model (ppo) or is critic-free. */
  valueModel: boolean;
}

export function derived(cfg: TrainConfig): DerivedConfig {
  return {
    miniBatchSize: cfg.batchSize / cfg.miniBatches,
    updatesPerStep: cfg.miniBatches * cfg.ppoEpochs,
    totalSamples: cfg.steps * cfg.batchSize,
    maxResponseTokensPerStep: cfg.batchSize * cfg.responseLength,
    pureSampling: cfg.topK === 0 && cfg.topP === 1,
    groupSize: groupSizeOf(cfg),
    promptsPerStep: cfg.batchSize / groupSizeOf(cfg),
    valueModel: hasValueModel(cfg),
  };
}

// ---------------------------------------------------------------------------------------------------------
// URL hash: only keys that differ from the defaults, `key=value&...` (form-urlencoded), in table order.

function encodeValue(key: ConfigKey, v: unknown): string {
  const f: ConfigField = CONFIG_FIELDS[key];
  switch (f.type) {
    case 'number':
    case 'boolean':
    case 'choice':
      return String(v);
    case 'choices':
      return (v as string[]).join(',');
    case 'string':
      return v === null ? '' : String(v);
    case 'stopToken':
      return v === null ? 'none' : String(v);
    case 'prompts':
      return JSON.stringify(v);
    case 'reward':
      return typeof v === 'string' && !v.startsWith('{') ? v : JSON.stringify(v);
  }
}

function decodeValue(key: ConfigKey, s: string): unknown {
  const f: ConfigField = CONFIG_FIELDS[key];
  const bad = (): never => {
    throw new UserError(`URL hash: "${key}" must be ${describeAllowed(key)}, got ${show(s)}.`);
  };
  switch (f.type) {
    case 'number': {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(s.trim())) bad();
      return Number(s);
    }
    case 'boolean':
      return s === 'true' ? true : s === 'false' ? false : bad();
    case 'choice':
      return s;
    case 'choices':
      return s === '' ? [] : s.split(',');
    case 'string':
      return s === '' && f.nullable ? null : s;
    case 'stopToken':
      if (s === 'eos') return 'eos';
      if (s === 'none') return null;
      return /^\d+$/.test(s) ? Number(s) : bad();
    case 'prompts':
    case 'reward':
      if (f.type === 'reward' && !s.startsWith('{')) return s;
      try {
        return JSON.parse(s) as unknown;
      } catch {
        return bad();
      }
  }
}

function sameValue(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The config as a URL hash (without '#'): only non-default keys, e.g. `steps=200&klCoef=0.1`. */
export function configToHash(cfg: TrainConfig): string {
  const parts: string[] = [];
  for (const key of CONFIG_KEYS) {
    const v = cfg[key];
    if (v === undefined || sameValue(v, DEFAULT_CONFIG[key])) continue;
    parts.push(`${key}=${encodeURIComponent(encodeValue(key, v))}`);
  }
  return parts.join('&');
}

/**
 * Parse a URL hash (with or without '#') back into a full, validated config. Reads `application/x-www-form-
 * urlencoded` like URLSearchParams ('+' is a space), which core cannot use: its libs have no DOM.
 */
export function configFromHash(hash: string): TrainConfig {
  const partial: Record<string, unknown> = {};
  const body = hash.replace(/^#/, '').replace(/^\?/, '');
  for (const part of body.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const rawKey = eq < 0 ? part : part.slice(0, eq);
    const rawValue = eq < 0 ? '' : part.slice(eq + 1);
    let key: string;
    let s: string;
    try {
      key = decodeURIComponent(rawKey.replace(/\+/g, ' '));
      s = decodeURIComponent(rawValue.replace(/\+/g, ' '));
    } catch {
      throw new UserError(`URL hash: "${rawKey}" has a broken %-escape in ${show(part)}.`);
    }
    if (!Object.hasOwn(CONFIG_FIELDS, key)) throw new UserError(unknownKeyMessage('URL hash', key));
    if (key in partial) throw new UserError(`URL hash: "${key}" appears more than once.`);
    partial[key] = decodeValue(key as ConfigKey, s);
  }
  return validateConfig(partial, 'URL hash');
}
