/**
 * Built-in reward functions (scores for whole responses) and the multi-objective mix.
 * A reward spec — a name, `{ name, options }`, or `{ mix: [{ name, weight, options? }] }` — is what task files,
 * training configs and the UI carry; `makeReward(spec)` turns it into a function.
 */
import Sentiment from 'sentiment';
import { UserError } from '../../common/errors';
import { arithmeticChatAnswer } from './arithmetic';

/** What a reward function sees for one sample (the same shape a `--reward-module` default export receives). */
export interface Sample {
  prompt: string;
  response: string;
  promptTokens: number[];
  responseTokens: number[];
}

export type RewardFn = (s: Sample) => number | Promise<number>;

export interface MixPart {
  fn: RewardFn;
  weight: number;
}

export type RewardOptions = Record<string, unknown>;
export interface NamedRewardSpec {
  name: string;
  options?: RewardOptions;
}
export interface MixRewardSpec {
  mix: { name: string; weight: number; options?: RewardOptions }[];
}
export type RewardSpec = string | NamedRewardSpec | MixRewardSpec;

// ---------------------------------------------------------------------------------------------------------------
// Option checking: an unknown key or a wrong type names the reward, the key and what would be right.

type OptionKind = 'number' | 'positive number' | 'boolean' | 'string list' | readonly string[];

function readOptions(
  reward: string,
  options: RewardOptions | undefined,
  allowed: Record<string, OptionKind>,
): RewardOptions {
  const o = options ?? {};
  if (typeof o !== 'object' || o === null || Array.isArray(o)) {
    throw new UserError(`reward "${reward}": options must be an object, got ${JSON.stringify(o)}.`);
  }
  const describe = (k: OptionKind): string =>
    Array.isArray(k) ? `one of ${k.map((v) => JSON.stringify(v)).join(', ')}` : `a ${k}`;
  for (const [key, value] of Object.entries(o)) {
    const kind = allowed[key];
    if (kind === undefined) {
      const keys = Object.keys(allowed);
      throw new UserError(
        `reward "${reward}": unknown option "${key}"; ` +
          (keys.length
            ? `allowed options are ${keys.map((k) => `"${k}"`).join(', ')}.`
            : 'it takes no options.'),
      );
    }
    const ok = Array.isArray(kind)
      ? kind.includes(value as string)
      : kind === 'number'
        ? typeof value === 'number' && Number.isFinite(value)
        : kind === 'positive number'
          ? typeof value === 'number' && Number.isFinite(value) && value > 0
          : kind === 'boolean'
            ? typeof value === 'boolean'
            : Array.isArray(value) && value.every((v) => typeof v === 'string' && v.trim() !== '');
    if (!ok) {
      throw new UserError(
        `reward "${reward}": option "${key}" must be ${describe(kind)}, got ${JSON.stringify(value)}.`,
      );
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------------------------------
// sentiment

let analyzer: Sentiment | undefined;

/**
 * AFINN-165 sentiment of the response, bounded: tanh(score / scale). `score` is the sum of the AFINN values (−5…+5
 * per word, a preceding negator such as "not" flips the sign) — or, with `comparative: true`, that sum divided by
 * the response's word count. Summing (the default) gives a tiny byte-level model a signal for every sentiment word
 * it manages to spell; tanh keeps the score in (−1, 1) so the KL penalty stays comparable and the policy cannot
 * profit without bound from repeating "love love love". With scale 5, one "good" (+3) scores 0.54, two score 0.83.
 */
export function sentimentReward(options?: RewardOptions): RewardFn {
  const o = readOptions('sentiment', options, { scale: 'positive number', comparative: 'boolean' });
  const scale = (o.scale as number | undefined) ?? 5;
  const comparative = (o.comparative as boolean | undefined) ?? false;
  return ({ response }) => {
    analyzer ??= new Sentiment();
    const r = analyzer.analyze(response);
    return Math.tanh((comparative ? r.comparative : r.score) / scale);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// length

/**
 * −|length − target| / target: 0 at the target length, −1 at an empty response (and below −1 past twice the
 * target). `unit: "chars"` counts Unicode code points of the response text (EOS is not in the text);
 * `unit: "tokens"` counts `responseTokens` as the trainer passes them (the counted tokens, EOS included when sampled).
 */
export function lengthReward(options?: RewardOptions): RewardFn {
  const o = readOptions('length', options, { target: 'positive number', unit: ['chars', 'tokens'] });
  const target = (o.target as number | undefined) ?? 20;
  const unit = (o.unit as 'chars' | 'tokens' | undefined) ?? 'chars';
  return ({ response, responseTokens }) => {
    const length = unit === 'tokens' ? responseTokens.length : [...response].length;
    const miss = Math.abs(length - target) / target;
    return miss === 0 ? 0 : -miss; // never -0
  };
}

// ---------------------------------------------------------------------------------------------------------------
// keywords

/** Lower-cased words: runs of letters and digits (Unicode-aware), so "Love," and "love" are the same word. */
export function wordsOf(text: string): string[] {
  return text
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w !== '');
}

/** Whether `phrase` (one or more words) occurs as whole consecutive words in `words`. */
function containsPhrase(words: string[], phrase: string[]): boolean {
  if (phrase.length === 0) return false;
  outer: for (let i = 0; i + phrase.length <= words.length; i++) {
    for (let k = 0; k < phrase.length; k++) if (words[i + k] !== phrase[k]) continue outer;
    return true;
  }
  return false;
}

/**
 * +1 for each `include` keyword present in the response, −1 for each `avoid` keyword present; each keyword counts
 * once however often it appears. Matching is case-insensitive and by whole words ("love" does not match "glove";
 * a keyword may be a phrase such as "thank you"). Defaults: include ["happy", "love"], avoid [].
 */
export function keywordsReward(options?: RewardOptions): RewardFn {
  const o = readOptions('keywords', options, { include: 'string list', avoid: 'string list' });
  const include = ((o.include as string[] | undefined) ?? ['happy', 'love']).map(wordsOf);
  const avoid = ((o.avoid as string[] | undefined) ?? []).map(wordsOf);
  if (include.length === 0 && avoid.length === 0) {
    throw new UserError('reward "keywords": give at least one keyword in option "include" or "avoid".');
  }
  return ({ response }) => {
    const words = wordsOf(response);
    let score = 0;
    for (const k of include) if (containsPhrase(words, k)) score += 1;
    for (const k of avoid) if (containsPhrase(words, k)) score -= 1;
    return score;
  };
}

// ---------------------------------------------------------------------------------------------------------------
// arithmetic

const PROBLEM = /(-?\d+)\s*([+\-*x×])\s*(-?\d+)\s*=\s*$/;

/** The correct result of a prompt ending in "a+b=", "a-b=" or "a*b=" (also "x"/"×"), or a UserError. */
export function arithmeticAnswer(prompt: string): number {
  const m = PROBLEM.exec(prompt);
  if (m === null) {
    throw new UserError(
      `reward "arithmetic": the prompt ${JSON.stringify(prompt)} is not a problem like "12+7=" ` +
        '(integers joined by +, - or *, ending in "=").',
    );
  }
  const a = Number(m[1]);
  const b = Number(m[3]);
  return m[2] === '+' ? a + b : m[2] === '-' ? a - b : a * b;
}

/**
 * 1 when the first integer in the response equals the result of the prompt's problem (prompt like "12+7="),
 * `partial` (default 0.1) when the response has an integer but a wrong one — a foothold for a model that does not
 * yet write numbers — and 0 when it has none. "19" after "12+7=" scores 0.1, "77" after "3+4=" also 0.1.
 */
export function arithmeticReward(options?: RewardOptions): RewardFn {
  const o = readOptions('arithmetic', options, { partial: 'number' });
  const partial = (o.partial as number | undefined) ?? 0.1;
  return ({ prompt, response }) => {
    const answer = arithmeticAnswer(prompt);
    const m = /-?\d+/.exec(response);
    if (m === null) return 0;
    return Number(m[0]) === answer ? 1 : partial;
  };
}

// ---------------------------------------------------------------------------------------------------------------
// arithmetic-chat

// A number as a model writes it: digits with optional thousands commas ("1,000") and decimals ("42.0"), a sign
// ("-" or "−") only when it does not follow a letter, digit or point (so "5-3" is 5 and 3, "= -3" is −3).
const NUMBER_IN_TEXT = /(?:(?<![\w.])[-−])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?/g;
// The same number alone: the whole response once whitespace, markdown emphasis and code marks (*, _, `) and one
// final "." are taken off.
const BARE_NUMBER = /^[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$/;

/** The value of a number as `NUMBER_IN_TEXT` matches it ("1,000" → 1000, "−3" → −3). */
function numberValue(text: string): number {
  return Number(text.replace(/,/g, '').replace('−', '-'));
}

/**
 * The response's answer by the last-number rule: the value of the LAST number in the response, or null when it
 * has none. "The answer is 42." → 42, "**42**" → 42, "-3" → −3, "17 + 25 = 42" → 42, "1,000" → 1000,
 * "42.0" → 42 (decimals are compared as numbers). A model that works the sum out first ends on its answer,
 * which is why the last number counts and not the first.
 */
export function lastNumber(response: string): number | null {
  const all = response.match(NUMBER_IN_TEXT);
  return all === null ? null : numberValue(all[all.length - 1]);
}

/** Whether the response is a number and nothing else, markdown emphasis and a final "." aside ("**42**", "42."). */
export function isBareNumber(response: string): boolean {
  const core = response.trim().replace(/[*_`]/g, '').trim().replace(/\.$/, '');
  return BARE_NUMBER.test(core);
}

/**
 * For questions like "What is 17 + 25? Answer with a number." (the `arithmetic-chat` task; the answer is computed
 * from the prompt by `arithmeticChatAnswer`, so the prompt must be the raw question, not the chat-formatted text):
 * 1 when the response's last number (`lastNumber`) is the answer, 0 otherwise — a wrong number and no number
 * alike, the binary accuracy reward of the GRPO papers (Shao et al. 2024; DeepSeek-R1). Option `format`
 * (default 0) is added when the response is a bare number (`isBareNumber`), right or wrong: a small format reward
 * such as 0.1 pays for answering in the asked-for form.
 */
export function arithmeticChatReward(options?: RewardOptions): RewardFn {
  const o = readOptions('arithmetic-chat', options, { format: 'number' });
  const format = (o.format as number | undefined) ?? 0;
  return ({ prompt, response }) => {
    const answer = arithmeticChatAnswer(prompt);
    const correct = lastNumber(response) === answer ? 1 : 0;
    return correct + (format !== 0 && isBareNumber(response) ? format : 0);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// mix and the registry

/** Weighted sum Σ weight·fn(sample) (multi-objective). Awaits only when some part returns a Promise. */
export function mix(parts: MixPart[]): RewardFn {
  if (parts.length === 0) throw new UserError('reward mix: give at least one part.');
  parts.forEach((p, i) => {
    if (typeof p.weight !== 'number' || !Number.isFinite(p.weight)) {
      throw new UserError(
        `reward mix: part ${i} has weight ${JSON.stringify(p.weight)}; weights must be finite numbers.`,
      );
    }
  });
  return (sample) => {
    const values = parts.map((p) => p.fn(sample));
    const weighted = (vs: number[]): number => vs.reduce((sum, v, i) => sum + parts[i].weight * v, 0);
    if (values.some((v) => typeof v !== 'number')) return Promise.all(values).then(weighted);
    return weighted(values as number[]);
  };
}

export interface BuiltinReward {
  doc: string;
  make(options?: RewardOptions): RewardFn;
}

export const BUILTIN_REWARDS: Record<string, BuiltinReward> = {
  sentiment: {
    doc: 'AFINN sentiment of the response, tanh(sum of word scores / scale) in (-1, 1). Options: scale (default 5), comparative (divide by word count; default false).',
    make: sentimentReward,
  },
  length: {
    doc: '-|length - target| / target, 0 at the target. Options: target (default 20), unit ("chars" default, or "tokens").',
    make: lengthReward,
  },
  keywords: {
    doc: '+1 per "include" keyword present, -1 per "avoid" keyword present; whole words, case-insensitive. Options: include (default ["happy","love"]), avoid (default []).',
    make: keywordsReward,
  },
  arithmetic: {
    doc: 'Prompts like "12+7=": 1 if the first integer in the response is the result, partial (default 0.1) for a wrong integer, 0 for none.',
    make: arithmeticReward,
  },
  'arithmetic-chat': {
    doc: 'Questions like "What is 17 + 25? Answer with a number.": 1 if the last number in the response is the answer, 0 otherwise. Options: format (default 0), added when the response is a bare number.',
    make: arithmeticChatReward,
  },
};

export const BUILTIN_REWARD_NAMES = Object.keys(BUILTIN_REWARDS);

function builtin(name: unknown, where: string): BuiltinReward {
  const entry =
    typeof name === 'string' && Object.hasOwn(BUILTIN_REWARDS, name) ? BUILTIN_REWARDS[name] : undefined;
  if (entry === undefined) {
    throw new UserError(
      `${where}: unknown reward ${JSON.stringify(name)}; valid names are ${BUILTIN_REWARD_NAMES.map((n) => `"${n}"`).join(', ')}` +
        ' (or { "mix": [{ "name", "weight", "options"? }] } to combine them).',
    );
  }
  return entry;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function checkKeys(obj: Record<string, unknown>, allowed: string[], where: string): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) {
      throw new UserError(
        `${where}: unknown key "${key}"; allowed keys are ${allowed.map((k) => `"${k}"`).join(', ')}.`,
      );
    }
  }
}

/**
 * A reward function from a spec: `"sentiment"`, `{ "name": "keywords", "options": { "include": ["love"] } }`, or
 * `{ "mix": [{ "name": "sentiment", "weight": 1 }, { "name": "length", "weight": 0.5, "options": { "target": 30 } }] }`.
 * `where` prefixes error messages (e.g. the task file). Every error is a UserError naming what would be right.
 */
export function makeReward(spec: unknown, where = 'reward'): RewardFn {
  if (typeof spec === 'string') return builtin(spec, where).make();
  if (isObject(spec) && 'mix' in spec) {
    checkKeys(spec, ['mix'], where);
    if (!Array.isArray(spec.mix) || spec.mix.length === 0) {
      throw new UserError(`${where}: "mix" must be a non-empty array of { "name", "weight", "options"? }.`);
    }
    const parts = spec.mix.map((part: unknown, i: number): MixPart => {
      const at = `${where}: mix[${i}]`;
      if (!isObject(part)) throw new UserError(`${at} must be an object { "name", "weight", "options"? }.`);
      checkKeys(part, ['name', 'weight', 'options'], at);
      if (typeof part.weight !== 'number' || !Number.isFinite(part.weight)) {
        throw new UserError(`${at}: "weight" must be a finite number, got ${JSON.stringify(part.weight)}.`);
      }
      return {
        fn: builtin(part.name, at).make(part.options as RewardOptions | undefined),
        weight: part.weight,
      };
    });
    return mix(parts);
  }
  if (isObject(spec) && 'name' in spec) {
    checkKeys(spec, ['name', 'options'], where);
    return builtin(spec.name, where).make(spec.options as RewardOptions | undefined);
  }
  throw new UserError(
    `${where}: a reward must be a name (${BUILTIN_REWARD_NAMES.map((n) => `"${n}"`).join(', ')}), ` +
      `{ "name", "options"? } or { "mix": [...] }, got ${JSON.stringify(spec)}.`,
  );
}
