/**
 * DPO's preference pairs: the JSONL that `train-reward` reads (src/core/reward/preferences.ts, its errors name the
 * line), tokenised for DPO. Each pair keeps its 1-based line number, so a DPO-specific problem (an empty string, a
 * pair longer than the model's context) names the line too. Completions end with EOS, as TRL's DPOTrainer appends
 * it; the log-probability of a completion is summed over its tokens, EOS included.
 */
import { UserError } from '../../common/errors';
import { loadPreferences, type PreferencePair } from '../reward/preferences';
import { Rng } from '../base/rng';
import type { Tokenizer } from '../tokenizer/types';

export interface TokenizedPair {
  /** 1-based line of the JSONL file. */
  line: number;
  prompt: number[];
  /** Completion ids, EOS last. */
  chosen: number[];
  rejected: number[];
}

/** The pairs of a preference JSONL text with their line numbers (loadPreferences's errors name bad lines). */
export function readPairs(text: string, source: string): { pair: PreferencePair; line: number }[] {
  const pairs = loadPreferences(text, source);
  const lines: number[] = [];
  text
    .replace(/^\uFEFF/, '')
    .split('\n')
    .forEach((l, i) => {
      if (l.replace(/\r$/, '').trim() !== '') lines.push(i + 1);
    });
  return pairs.map((pair, i) => ({ pair, line: lines[i] }));
}

/**
 * Tokenise pairs for a model of `nPositions` positions. Errors (all lines listed, up to 10): an empty prompt,
 * chosen or rejected, or prompt + completion + EOS longer than the context.
 */
export function tokenizePairs(
  pairs: { pair: PreferencePair; line: number }[],
  tokenizer: Tokenizer,
  nPositions: number,
  source: string,
): TokenizedPair[] {
  const problems: string[] = [];
  const out: TokenizedPair[] = [];
  for (const { pair, line } of pairs) {
    const empty = (['prompt', 'chosen', 'rejected'] as const).filter((f) => pair[f] === '');
    if (empty.length) {
      problems.push(
        `line ${line}: ${empty.map((f) => `"${f}"`).join(', ')} ${empty.length > 1 ? 'are' : 'is'} empty`,
      );
      continue;
    }
    const prompt = tokenizer.encode(pair.prompt);
    const chosen = [...tokenizer.encode(pair.chosen), tokenizer.eosId];
    const rejected = [...tokenizer.encode(pair.rejected), tokenizer.eosId];
    const longest = prompt.length + Math.max(chosen.length, rejected.length);
    if (longest > nPositions) {
      problems.push(
        `line ${line}: prompt + ${chosen.length >= rejected.length ? 'chosen' : 'rejected'} + EOS is ${longest} tokens, more than the model's ${nPositions} positions`,
      );
      continue;
    }
    out.push({ line, prompt, chosen, rejected });
  }
  if (problems.length) {
    const listed = problems.slice(0, 10).join(', ');
    const more = problems.length > 10 ? `, and ${problems.length - 10} more` : '';
    throw new UserError(
      `${source}: ${problems.length} bad pair${problems.length === 1 ? '' : 's'}: ${listed}${more}.`,
    );
  }
  return out;
}

/**
 * Train / held-out split by a seeded shuffle of the pair indices (as splitPreferences: round(fraction · n) held
 * out, at least 1, at least 1 left to train on).
 */
export function splitIndices(
  n: number,
  heldOut: number,
  seed: number,
): { train: number[]; heldOut: number[] } {
  if (n < 2)
    throw new UserError(`DPO needs at least 2 preference pairs (1 to train on, 1 held out), got ${n}.`);
  const nHeld = Math.min(n - 1, Math.max(1, Math.round(heldOut * n)));
  const order = new Rng(seed).permutation(n);
  return { heldOut: order.slice(0, nHeld), train: order.slice(nHeld) };
}

/**
 * One batch of sequences for 2·k completions (chosen of each pair, then rejected of each): prompts left-padded to
 * Tq, completions right-padded to R. `mask` [2k, R] is 1 on completion tokens; `tokens` [2k·R] the completion ids
 * (padding filled with `padId`).
 */
export function batchOf(pairs: TokenizedPair[], padId: number) {
  const seqs = [...pairs.map((p) => [p.prompt, p.chosen]), ...pairs.map((p) => [p.prompt, p.rejected])];
  const Tq = Math.max(...seqs.map(([q]) => q.length));
  const R = Math.max(...seqs.map(([, c]) => c.length));
  const n = seqs.length;
  const T = Tq + R;
  const ids = new Int32Array(n * T).fill(padId);
  const attn = new Int32Array(n * T);
  const tokens = new Int32Array(n * R).fill(padId);
  const mask = new Float32Array(n * R);
  seqs.forEach(([q, c], k) => {
    const off = k * T + Tq - q.length;
    ids.set(q, off);
    attn.fill(1, off, off + q.length);
    ids.set(c, k * T + Tq);
    attn.fill(1, k * T + Tq, k * T + Tq + c.length);
    tokens.set(c, k * R);
    mask.fill(1, k * R, k * R + c.length);
  });
  const counts = seqs.map(([, c]) => c.length);
  return { ids, attn, tokens, mask, n, T, Tq, R, counts };
}
