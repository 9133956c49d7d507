/**
 * Named tasks: prompts plus a reward spec (and optionally held-out prompts for evaluation), shipped as
 * public/tasks/NAME.json. Core never reads files: Node callers use
 * `loadTaskNode` (src/cli/tasks-node.ts), the browser fetches `taskUrl(name)`; both hand the JSON to `parseTask`.
 */
import { UserError } from '../../common/errors';
import { makeReward, type RewardSpec } from '../reward/functions';

export const TASK_NAMES = ['sentiment', 'length', 'keywords', 'arithmetic', 'arithmetic-chat'] as const;
export type TaskName = (typeof TASK_NAMES)[number];

export interface Task {
  name: string;
  description: string;
  reward: RewardSpec;
  prompts: string[];
  /**
   * Held-out prompts for evaluation: never trained on (disjoint from `prompts`), scored with the same reward.
   * Optional; absent when the task has none.
   */
  evalPrompts?: string[];
}

const TASK_KEYS = ['name', 'description', 'reward', 'prompts', 'evalPrompts'];

export function isTaskName(name: string): name is TaskName {
  return (TASK_NAMES as readonly string[]).includes(name);
}

/** Throws a UserError listing the built-in task names unless `name` is one. */
export function checkTaskName(name: string): TaskName {
  if (!isTaskName(name)) {
    throw new UserError(
      `unknown task ${JSON.stringify(name)}; built-in tasks are ${TASK_NAMES.map((n) => `"${n}"`).join(', ')} ` +
        '(or give "prompts" instead of "task").',
    );
  }
  return name;
}

/** The task file's path relative to the app's base URL (and to public/): `tasks/NAME.json`. */
export function taskUrl(name: string): string {
  return `tasks/${checkTaskName(name)}.json`;
}

/**
 * Validates parsed task JSON `{ name, description, reward, prompts, evalPrompts? }`; `source` (a file name or URL) starts every
 * error message. The reward spec is checked by building it once, so a bad name or option fails here, not mid-run.
 */
export function parseTask(json: unknown, source: string): Task {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new UserError(
      `${source}: a task must be a JSON object { "name", "description", "reward", "prompts", "evalPrompts"? }, ` +
        `got ${Array.isArray(json) ? 'an array' : json === null ? 'null' : typeof json}.`,
    );
  }
  const t = json as Record<string, unknown>;
  for (const key of Object.keys(t)) {
    if (!TASK_KEYS.includes(key)) {
      throw new UserError(
        `${source}: unknown key "${key}"; a task has ${TASK_KEYS.map((k) => `"${k}"`).join(', ')}.`,
      );
    }
  }
  if (typeof t.name !== 'string' || t.name.trim() === '') {
    throw new UserError(`${source}: "name" must be a non-empty string, got ${JSON.stringify(t.name)}.`);
  }
  const description = t.description ?? '';
  if (typeof description !== 'string') {
    throw new UserError(`${source}: "description" must be a string, got ${JSON.stringify(description)}.`);
  }
  if (t.reward === undefined) {
    throw new UserError(
      `${source}: "reward" is missing; give a reward name such as "sentiment", or { "mix": [...] }.`,
    );
  }
  makeReward(t.reward, `${source}: "reward"`);
  if (!Array.isArray(t.prompts) || t.prompts.length === 0) {
    throw new UserError(
      `${source}: "prompts" must be a non-empty array of strings, got ${JSON.stringify(t.prompts)}.`,
    );
  }
  t.prompts.forEach((p, i) => {
    if (typeof p !== 'string' || p === '') {
      throw new UserError(`${source}: "prompts"[${i}] must be a non-empty string, got ${JSON.stringify(p)}.`);
    }
  });
  const task: Task = {
    name: t.name,
    description,
    reward: t.reward as RewardSpec,
    prompts: [...(t.prompts as string[])],
  };
  if (t.evalPrompts !== undefined) task.evalPrompts = parseEvalPrompts(t.evalPrompts, task.prompts, source);
  return task;
}

/** `evalPrompts`: a non-empty array of non-empty strings, none of them also a training prompt. */
function parseEvalPrompts(value: unknown, prompts: string[], source: string): string[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new UserError(
      `${source}: "evalPrompts" (held-out prompts) must be a non-empty array of strings, ` +
        `got ${JSON.stringify(value)}; leave the key out for a task without them.`,
    );
  }
  const training = new Set(prompts);
  value.forEach((p, i) => {
    if (typeof p !== 'string' || p === '') {
      throw new UserError(
        `${source}: "evalPrompts"[${i}] must be a non-empty string, got ${JSON.stringify(p)}.`,
      );
    }
    if (training.has(p)) {
      throw new UserError(
        `${source}: "evalPrompts"[${i}] ${JSON.stringify(p)} is also in "prompts"; held-out prompts must not be ` +
          'trained on: remove it from one of the two lists.',
      );
    }
  });
  return [...(value as string[])];
}
