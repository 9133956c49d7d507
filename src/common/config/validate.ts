/** Checking a config against the table: `validateConfig`, and the messages that name what is wrong and what would be right. */
import { UserError } from '../errors';
import {
  CONFIG_FIELDS,
  CONFIG_KEYS,
  DEFAULT_CONFIG,
  type ConfigField,
  type ConfigKey,
  type TrainConfig,
} from './fields';
import { groupSizeOf } from './derived';

// ---------------------------------------------------------------------------------------------------------
// Messages

export function show(v: unknown): string {
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

/** Valid keys close to a wrong one (case, snake_case, typos, prefixes), best first; a respelling alone. */
export function closeKeys(wrong: string): ConfigKey[] {
  const norm = (s: string) => s.toLowerCase().replace(/[_\-\s]/g, '');
  const w = norm(wrong);
  // The same key in another spelling (batch_size, BatchSize) is what was meant: suggest it alone.
  const same = CONFIG_KEYS.filter((k) => norm(k) === w);
  if (same.length > 0) return same;
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

export function unknownKeyMessage(source: string, key: string): string {
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
    if (c.evalEvery > 0 && c.evalPrompts === null) {
      problems.push(
        `${source}: "evalEvery" (${c.evalEvery}) needs "evalPrompts": "heldout" (the task's held-out split) or a ` +
          'file of prompts, one a line; or set evalEvery to 0 (no evaluation).',
      );
    }
    if (c.baseDtype === 'f16' && c.lora === 0) {
      problems.push(
        `${source}: "baseDtype" "f16" stores the frozen base of a LoRA model in half precision, but "lora" is 0 ` +
          '(full fine-tuning trains every weight, which stays f32); set "lora" to a rank ≥ 1, or "baseDtype" to "f32".',
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
