/**
 * Preference pairs for reward-model training (`cli train-reward`): JSONL, one object per non-empty line,
 * `{"prompt": "...", "chosen": "...", "rejected": "..."}` (extra fields are ignored), the layout of
 * Anthropic HH / TRL's "explicit prompt" preference datasets.
 *
 * Every bad line is reported by its 1-based line number with what is wrong, so a person can fix the file
 * in one pass instead of one error at a time.
 */
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';

export interface PreferencePair {
  prompt: string;
  /** The response people preferred. */
  chosen: string;
  rejected: string;
}

export interface ParsedPreferences {
  pairs: PreferencePair[];
  /** One message per bad line, e.g. `line 7: "chosen" must be a string, got number`. */
  errors: string[];
}

const FIELDS = ['prompt', 'chosen', 'rejected'] as const;
/** How many bad lines one error message lists before "and N more". */
export const MAX_LISTED_ERRORS = 10;

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v;
}

/**
 * Parse JSONL preference pairs, collecting a message for each bad line instead of stopping at the first.
 * Messages name only the line; `loadPreferences` prefixes the source (a path, "uploaded file").
 */
export function parsePreferences(text: string, _source: string): ParsedPreferences {
  const pairs: PreferencePair[] = [];
  const errors: string[] = [];
  const lines = text.replace(/^\uFEFF/, '').split('\n');
  lines.forEach((rawLine, i) => {
    const line = rawLine.replace(/\r$/, '');
    if (line.trim() === '') return;
    const where = `line ${i + 1}`;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch (e) {
      errors.push(`${where}: not valid JSON (${(e as Error).message})`);
      return;
    }
    if (v === null || typeof v !== 'object' || Array.isArray(v)) {
      errors.push(
        `${where}: expected a JSON object with string fields "prompt", "chosen", "rejected", got ${kindOf(v)}`,
      );
      return;
    }
    const obj = v as Record<string, unknown>;
    const problems: string[] = [];
    for (const f of FIELDS) {
      if (!(f in obj)) problems.push(`"${f}" is missing`);
      else if (typeof obj[f] !== 'string') problems.push(`"${f}" must be a string, got ${kindOf(obj[f])}`);
    }
    if (problems.length) {
      errors.push(`${where}: ${problems.join('; ')}`);
      return;
    }
    pairs.push({
      prompt: obj.prompt as string,
      chosen: obj.chosen as string,
      rejected: obj.rejected as string,
    });
  });
  return { pairs, errors };
}

/** Parse and insist on a clean file: one UserError listing up to 10 bad lines, or when there are no pairs. */
export function loadPreferences(text: string, source: string): PreferencePair[] {
  const { pairs, errors } = parsePreferences(text, source);
  if (errors.length) {
    const listed = errors.slice(0, MAX_LISTED_ERRORS).join(', ');
    const more = errors.length > MAX_LISTED_ERRORS ? `, and ${errors.length - MAX_LISTED_ERRORS} more` : '';
    throw new UserError(
      `${source}: ${errors.length} bad line${errors.length === 1 ? '' : 's'}: ${listed}${more}.`,
    );
  }
  if (pairs.length === 0) {
    throw new UserError(
      `${source}: no preference pairs; expected JSONL with one {"prompt": ..., "chosen": ..., "rejected": ...} object per line.`,
    );
  }
  return pairs;
}

/**
 * Deterministic train / held-out split by a seeded shuffle: round(fraction · n) pairs held out, at least 1,
 * and at least 1 left to train on. Same pairs + fraction + seed → same split on every platform.
 */
export function splitPreferences(
  pairs: PreferencePair[],
  heldOutFraction: number,
  seed: number,
): { train: PreferencePair[]; heldOut: PreferencePair[] } {
  if (!(heldOutFraction > 0 && heldOutFraction < 1)) {
    throw new UserError(`heldOut must be a fraction between 0 and 1 (exclusive), got ${heldOutFraction}.`);
  }
  if (pairs.length < 2) {
    throw new UserError(`need at least 2 preference pairs (1 to train on, 1 held out), got ${pairs.length}.`);
  }
  const nHeld = Math.min(pairs.length - 1, Math.max(1, Math.round(heldOutFraction * pairs.length)));
  const order = new Rng(seed).permutation(pairs.length);
  return {
    heldOut: order.slice(0, nHeld).map((i) => pairs[i]),
    train: order.slice(nHeld).map((i) => pairs[i]),
  };
}
