/**
 * Names the UI offers. The task list (src/common/tasks.ts) and the reward list mirror src/core/tasks (TASK_NAMES) and
 * src/core/reward/functions.ts (BUILTIN_REWARD_NAMES), which the UI must not import (they pull in the
 * sentiment lexicon); tests/ui-catalog.test.ts checks that the lists stay equal.
 */
import type { ConfigKey, FieldGroup } from '../../common/config';
import { TASK_INFO, type TaskInfo } from '../../common/tasks';
import type { ModelSource } from '../../worker/protocol';

/**
 * The built-in tasks with their reward ranges and what a good run reaches (src/common/tasks.ts; `heldOut`: the
 * task file has a held-out split, which config evalPrompts "heldout" takes).
 */
export const TASKS: readonly TaskInfo[] = TASK_INFO;

export const REWARD_NAMES: readonly { name: string; doc: string }[] = [
  { name: 'sentiment', doc: 'AFINN sentiment of the response, in (−1, 1)' },
  { name: 'length', doc: '0 at the target length, negative away from it' },
  { name: 'keywords', doc: '+1 per wanted keyword, −1 per unwanted one' },
  { name: 'arithmetic', doc: '1 for the right sum, 0.1 for a wrong number' },
  { name: 'arithmetic-chat', doc: '1 if the last number is the answer, else 0 (+ format for a bare number)' },
];

export interface ModelChoice {
  /** The config `model` value this choice stands for. */
  id: string;
  label: string;
  note: string;
  /**
   * Its published config's shape name (src/core/model/llama-config.ts LLAMA_SHAPES) for a Llama / Qwen model: the
   * worker's verdict on whether it fits this device is shown beside it (api.modelFits).
   */
  shape?: string;
}

export const MODEL_CHOICES: readonly ModelChoice[] = [
  { id: 'tiny', label: 'Built-in tiny', note: 'a few hundred kB; trains in seconds' },
  { id: 'distilbert/distilgpt2', label: 'DistilGPT-2 (Hub)', note: '82M parameters, ~330 MB download' },
  { id: 'openai-community/gpt2', label: 'GPT-2 (Hub)', note: '124M parameters, ~550 MB download' },
  // Llama / Qwen instruct models (issue #21): model.safetensors in bf16 plus a few MB of tokenizer files. Qwen3-0.6B's
  // file also stores its tied lm_head (151 936 × 1024) once more, so it is 1.5 GB rather than 2 bytes × 596M.
  {
    id: 'HuggingFaceTB/SmolLM2-135M-Instruct',
    shape: 'smollm2-135m',
    label: 'SmolLM2-135M-Instruct (Hub)',
    note: 'Llama, 135M parameters, ~270 MB download (bf16)',
  },
  {
    id: 'Qwen/Qwen2.5-0.5B-Instruct',
    shape: 'qwen2.5-0.5b',
    label: 'Qwen2.5-0.5B-Instruct (Hub)',
    note: 'Qwen2, 494M parameters, ~1.0 GB download (bf16)',
  },
  {
    id: 'Qwen/Qwen3-0.6B',
    shape: 'qwen3-0.6b',
    label: 'Qwen3-0.6B (Hub)',
    note: 'Qwen3, 596M parameters, ~1.5 GB download (bf16)',
  },
  // Issue #36: seed 003's sizes, for WebGPU with the base in f16 (the picker's verdict says where they fit). Their
  // weights are read a tensor at a time and placed on the device one by one (docs/models.md, "Reading a weights
  // file"): Qwen2.5-1.5B's one 3.1 GB file, Qwen3-1.7B's two shards (its tied lm_head stored a second time).
  {
    id: 'Qwen/Qwen2.5-1.5B-Instruct',
    shape: 'qwen2.5-1.5b',
    label: 'Qwen2.5-1.5B-Instruct (Hub)',
    note: 'Qwen2, 1544M parameters, ~3.1 GB download (bf16)',
  },
  {
    id: 'Qwen/Qwen3-1.7B',
    shape: 'qwen3-1.7b',
    label: 'Qwen3-1.7B (Hub)',
    note: 'Qwen3, 1721M parameters, ~4.1 GB download (bf16)',
  },
];

const HUB_ID = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

/** The worker source for a config `model` value: a built-in preset, a Hub repo id (`repo@revision`), or a URL. */
export function modelSourceFor(model: string): ModelSource {
  if (model === 'tiny') return { kind: 'builtin', name: 'tiny' };
  const [repo, revision] = model.split('@');
  if (HUB_ID.test(repo) && !/^https?:/.test(model)) {
    return revision ? { kind: 'hub', repo, revision } : { kind: 'hub', repo };
  }
  return { kind: 'url', baseUrl: model };
}

/** Charts: the four headline ones first, then the rest. `key` is a metric name of src/common/metrics.ts. */
export const CHARTS: readonly { key: string; title: string; headline: boolean }[] = [
  { key: 'reward', title: 'Reward', headline: true },
  { key: 'kl', title: 'KL', headline: true },
  { key: 'clipFrac', title: 'Clip fraction', headline: true },
  { key: 'valueLoss', title: 'Value loss', headline: true },
  { key: 'entropy', title: 'Entropy', headline: false },
  { key: 'approxKl', title: 'Approx KL', headline: false },
  { key: 'explainedVariance', title: 'Explained variance', headline: false },
  { key: 'responseLength', title: 'Response length', headline: false },
  { key: 'klCoef', title: 'KL coefficient', headline: false },
  { key: 'tokensPerSecond', title: 'Tokens per second', headline: false },
];

/** A DPO job's charts (TRL's names, contracts §9; docs/dpo.md): the four headline ones first. */
export const DPO_CHARTS: readonly { key: string; title: string; headline: boolean }[] = [
  { key: 'loss', title: 'DPO loss', headline: true },
  { key: 'rewards/accuracies', title: 'Reward accuracy', headline: true },
  { key: 'rewards/margins', title: 'Reward margin', headline: true },
  { key: 'eval/rewards/accuracies', title: 'Held-out accuracy', headline: true },
  { key: 'rewards/chosen', title: 'Reward of chosen', headline: false },
  { key: 'rewards/rejected', title: 'Reward of rejected', headline: false },
  { key: 'logps/chosen', title: 'Log-prob of chosen', headline: false },
  { key: 'logps/rejected', title: 'Log-prob of rejected', headline: false },
  { key: 'eval/loss', title: 'Held-out loss', headline: false },
  { key: 'eval/rewards/margins', title: 'Held-out margin', headline: false },
  { key: 'gradNorm', title: 'Gradient norm', headline: false },
];

/** An SFT job's charts (docs/sft.md). */
export const SFT_CHARTS: readonly { key: string; title: string; headline: boolean }[] = [
  { key: 'loss', title: 'SFT loss', headline: true },
  { key: 'gradNorm', title: 'Gradient norm', headline: true },
];

/** The charts of a job: an RL run's, or a DPO or SFT job's. */
export function chartsFor(job: 'dpo' | 'sft' | null | undefined) {
  return job === 'dpo' ? DPO_CHARTS : job === 'sft' ? SFT_CHARTS : CHARTS;
}

/** The held-out evaluation's charts (docs/eval.md): one point per evaluation, not per step. */
export const EVAL_CHARTS: readonly { key: string; title: string }[] = [
  { key: 'eval/reward', title: 'Eval reward' },
  { key: 'eval/kl', title: 'Eval KL' },
  { key: 'eval/winRate', title: 'Eval win rate' },
];

/** Whether the task `name` has a held-out split (config evalPrompts "heldout"). */
export function taskHasHeldOut(name: string | null): boolean {
  return TASKS.some((t) => t.name === name && t.heldOut === true);
}

/** Config keys with their own panels (data, model, reward) rather than the hyperparameter column. */
export const SETUP_KEYS: readonly ConfigKey[] = ['model', 'task', 'prompts', 'reward'];

/**
 * The basic view's settings (TensorFlow Playground's few controls), beside the model and the task of the left
 * column; every other setting is under "Advanced", grouped, with a filter box.
 */
export const BASIC_KEYS: readonly ConfigKey[] = [
  'algorithm',
  'learningRate',
  'klCoef',
  'batchSize',
  'responseLength',
  'steps',
  'lora',
  'seed',
];

export const GROUP_TITLES: Record<FieldGroup, string> = {
  setup: 'Run',
  optimiser: 'Optimiser',
  ppo: 'PPO',
  kl: 'KL penalty',
  advantages: 'Advantages',
  sampling: 'Sampling',
};

/** The hyperparameter column's order: what people reach for first on top. */
export const GROUP_ORDER: readonly FieldGroup[] = [
  'optimiser',
  'kl',
  'ppo',
  'advantages',
  'sampling',
  'setup',
];

export const DEFAULT_REWARD_CODE = "return sample.response.includes('good') ? 1 : 0;";
