/**
 * Helpers for user reward code (`--reward-module FILE.mjs`, or a module the UI loads): the default export is called
 * once per sample and must give a finite number (docs/formats.md §1).
 */
import { UserError } from '../../common/errors';
import type { RewardFn, Sample } from './functions';

/** A prompt shortened for an error message. */
function preview(text: string, max = 40): string {
  const chars = [...text];
  return JSON.stringify(chars.length > max ? `${chars.slice(0, max).join('')}…` : text);
}

function describe(value: unknown): string {
  if (typeof value === 'number') return String(value); // NaN, Infinity, -Infinity
  if (value === undefined) return 'undefined';
  if (typeof value === 'bigint') return `the bigint ${value}n`;
  if (typeof value === 'string')
    return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === 'function') return 'a function';
  try {
    const json = JSON.stringify(value);
    return `${Array.isArray(value) ? 'an array' : typeof value} ${json.length > 60 ? `${json.slice(0, 60)}…` : json}`;
  } catch {
    return typeof value;
  }
}

/**
 * `value` when it is a finite number; otherwise a UserError such as
 * `reward module my.mjs returned NaN for sample 3 (prompt "The movie was"); it must return a finite number.`
 * `source` names where the value came from ("reward module my.mjs", "reward sentiment").
 */
export function validateScore(value: unknown, sampleIndex: number, source: string, prompt?: string): number {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  const which = `sample ${sampleIndex}${prompt === undefined ? '' : ` (prompt ${preview(prompt)})`}`;
  throw new UserError(`${source} returned ${describe(value)} for ${which}; it must return a finite number.`);
}

/**
 * Scores for a batch, one call per sample in order (user code may be stateful), awaiting each result. A throw from the
 * reward code becomes a UserError naming the source, the sample and the original message.
 */
export async function scoreSamples(fn: RewardFn, samples: Sample[], source: string): Promise<number[]> {
  const scores: number[] = [];
  for (let i = 0; i < samples.length; i++) {
    let value: unknown;
    try {
      value = await fn(samples[i]);
    } catch (e) {
      if (e instanceof UserError) throw e;
      const message = e instanceof Error ? e.message : String(e);
      throw new UserError(
        `${source} threw for sample ${i} (prompt ${preview(samples[i].prompt)}): ${message}`,
      );
    }
    scores.push(validateScore(value, i, source, samples[i].prompt));
  }
  return scores;
}

/** The default export of an imported reward module, checked to be a function. */
export function rewardFnFromModule(mod: unknown, source: string): RewardFn {
  const fn = typeof mod === 'object' && mod !== null ? (mod as { default?: unknown }).default : undefined;
  if (typeof fn !== 'function') {
    throw new UserError(
      `${source} must have a default export (sample) => number, ` +
        `got ${fn === undefined ? 'no default export' : describe(fn)}.`,
    );
  }
  return fn as RewardFn;
}
