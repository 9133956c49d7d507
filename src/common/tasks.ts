/**
 * What each built-in task is for a person choosing it: its name in the app, what it asks, the range of its reward
 * and what a good run reaches, with where that figure comes from. Pure data (no tfjs, no reward code), so the UI
 * may show it; src/core/tasks (TASK_NAMES, the task files in public/tasks/) is the engine's side, and
 * tests/task-success.test.ts checks that the two agree: the same names, and every reward the task's own reward
 * function gives lies in the range said here.
 *
 * "What a good run reaches" is measured, never guessed: the mean reward of the first 10 and of the last 10 steps
 * of a run, on the built-in tiny model unless said otherwise. The default run is the app's default settings
 * (src/common/config/fields.ts: PPO, learning rate 1e-4, klCoef 0.05, batch 16, 24 tokens, 100 steps, seed 1)
 * with only the task changed, trained with the CLI on WASM (`npm run -s cli -- train --config C --out D`, C =
 * `{"task": NAME, "steps": 100}`); docs/training.md, "What success looks like", lists the runs.
 */

export interface TaskRewardRange {
  /** The lowest score the reward gives (-Infinity: unbounded below). */
  min: number;
  /** The highest score the reward gives. */
  max: number;
  /** The range in words, as the app shows it. */
  text: string;
}

export interface TaskInfo {
  /** The config `task` value (a name of src/core/tasks TASK_NAMES). */
  name: string;
  label: string;
  /** What the prompts are and what the reward pays for, in one short line. */
  doc: string;
  /** The task file has a held-out split (`evalPrompts`), which config evalPrompts "heldout" takes. */
  heldOut?: boolean;
  reward: TaskRewardRange;
  /** What a good run reaches, in words, with its figures (mean rewards) and the run that gave them. */
  goodRun: string;
  /** The figures of `goodRun` as numbers: mean reward of the first and of the last 10 steps (null: none measured). */
  measured: { first: number; last: number } | null;
  /** Where the figures come from. */
  source: string;
}

/** The default run's settings, as the figures below name them. */
const DEFAULT_RUN = 'the default run (built-in tiny model, 100 steps)';

export const TASK_INFO: readonly TaskInfo[] = [
  {
    name: 'sentiment',
    label: 'Sentiment',
    doc: 'continue movie-review openings; reward: positive words',
    reward: { min: -1, max: 1, text: '−1 to 1 (tanh of the AFINN word scores / 5; 0 = neutral)' },
    goodRun: `${DEFAULT_RUN} rises from 0.17 (first 10 steps) to 0.71 (last 10)`,
    measured: { first: 0.166, last: 0.705 },
    source:
      'CLI, default settings, WASM; the same run as tests/default-run-health.slow.test.ts (0.166 → 0.705)',
  },
  {
    name: 'length',
    label: 'Length',
    doc: 'reward: a response of the target length (20 characters)',
    reward: {
      min: -Infinity,
      max: 0,
      text: '0 at exactly 20 characters, −1 for an empty answer, −0.05 per character off',
    },
    goodRun: `${DEFAULT_RUN} moves only from −0.20 to −0.14 (from 4 to about 3 characters off on average)`,
    measured: { first: -0.198, last: -0.144 },
    source: 'CLI, default settings with task "length", WASM',
  },
  {
    name: 'keywords',
    label: 'Keywords',
    doc: 'reward: +1 per wanted keyword, −1 per unwanted one',
    reward: {
      min: -2,
      max: 2,
      text: '−2 to 2 (+1 each for "happy" and "love", −1 each for "sad" and "hate")',
    },
    goodRun: `${DEFAULT_RUN} rises from 0.04 to 0.91: nearly every answer says one wanted word`,
    measured: { first: 0.044, last: 0.912 },
    source: 'CLI, default settings with task "keywords", WASM',
  },
  {
    name: 'arithmetic',
    label: 'Arithmetic',
    doc: 'prompts like "3+4="; reward: the right sum',
    reward: { min: 0, max: 1, text: '0 to 1 (1 for the right sum, 0.1 for a wrong number, 0 for none)' },
    goodRun:
      'the built-in tiny model writes no digits: its default run stays at 0, and the "no learning signal" alert ' +
      'says so from step 10. It needs a model that writes numbers (GPT-2); no run of one is measured yet',
    measured: { first: 0, last: 0 },
    source: 'CLI, default settings with task "arithmetic", WASM (every reward 0 for 100 steps)',
  },
  {
    name: 'arithmetic-chat',
    label: 'Arithmetic (chat)',
    doc: 'for instruct models: "What is 17 + 25? Answer with a number."; reward: 1 for the right number',
    heldOut: true,
    reward: { min: 0, max: 1, text: '0 or 1 per answer (the mean is the share answered right)' },
    goodRun:
      'a small instruct model, after a format warm start, rises from 0.25 to 0.70 in 80 GRPO steps; the built-in ' +
      'tiny model answers "The…" and stays at 0',
    measured: { first: 0.25, last: 0.7 },
    source:
      'docs/models.md, "A task for instruct models" (tests/arithmetic-chat-learning.slow.test.ts: a 2-layer Qwen2, GRPO, 80 steps)',
  },
];

/** The task of `name`, or undefined (no task, or your own prompts). */
export function taskInfo(name: string | null | undefined): TaskInfo | undefined {
  return TASK_INFO.find((t) => t.name === name);
}
