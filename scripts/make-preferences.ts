/**
 * Generate the small preference dataset shipped for `train-reward` (public/preferences/sentiment-pairs.jsonl).
 *
 * Each line is {"prompt", "chosen", "rejected"}: a review opening such as "The movie was", and two
 * continuations built from the same template and intensifier that differ only in their sentiment words, so a
 * reward model has to learn sentiment (not length or style) to rank them. Most pairs are positive ≻ negative;
 * a quarter are positive ≻ neutral or neutral ≻ negative, so the learned scale has a middle too.
 * Deterministic: same seed, same file. Usage: tsx scripts/make-preferences.ts [OUT] [PAIRS]
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { Rng } from '../src/core/base/rng';

const out = process.argv[2] ?? 'public/preferences/sentiment-pairs.jsonl';
const count = Number(process.argv[3] ?? 200);
const rng = new Rng(7);
const pick = <T>(xs: T[]): T => xs[rng.int(xs.length)];

const prompts = [
  'The movie was',
  'My day was',
  'The food was',
  'The weather today is',
  'This book is',
  'The new phone is',
  'Our trip to the beach was',
  'The concert last night was',
  'The service was',
  'The game was',
  'My teacher is',
  'The coffee here is',
  'The hotel was',
  'The party was',
  'I think the show is',
  'The dinner was',
];
const positive = [
  'great',
  'good',
  'wonderful',
  'amazing',
  'lovely',
  'fantastic',
  'excellent',
  'fun',
  'nice',
  'perfect',
];
const negative = [
  'bad',
  'terrible',
  'awful',
  'boring',
  'horrible',
  'sad',
  'poor',
  'dull',
  'disappointing',
  'annoying',
];
const neutral = ['long', 'short', 'new', 'old', 'quiet', 'busy', 'big', 'small', 'late', 'simple'];
const intensifiers = ['', '', 'very ', 'really ', 'so ', 'quite '];
const clauses: Record<'pos' | 'neg' | 'neu', string[]> = {
  pos: ['I loved it', 'we had a great time', 'it made me smile', 'I would recommend it', 'it was worth it'],
  neg: [
    'I hated it',
    'it was a waste of time',
    'it made me angry',
    'I would not recommend it',
    'it was not worth it',
  ],
  neu: [
    'it lasted two hours',
    'we went on Sunday',
    'I went with a friend',
    'there were many people',
    'we took the bus',
  ],
};
type Mood = keyof typeof clauses;
const words: Record<Mood, string[]> = { pos: positive, neg: negative, neu: neutral };

/** One continuation per mood from the same template, so a pair differs only in sentiment. */
function continuations(a: Mood, b: Mood): [string, string] {
  const form = rng.int(3);
  const intens = pick(intensifiers);
  const clauseIdx = rng.int(5);
  const make = (m: Mood): string => {
    if (form === 0) return ` ${intens}${pick(words[m])}.`;
    if (form === 1) return ` ${pick(words[m])} and ${pick(words[m])}.`;
    return ` ${intens}${pick(words[m])}, and ${clauses[m][clauseIdx]}.`;
  };
  return [make(a), make(b)];
}

const lines: string[] = [];
for (let i = 0; i < count; i++) {
  const r = rng.next();
  const [better, worse]: [Mood, Mood] =
    r < 0.75 ? ['pos', 'neg'] : r < 0.875 ? ['pos', 'neu'] : ['neu', 'neg'];
  const [chosen, rejected] = continuations(better, worse);
  lines.push(JSON.stringify({ prompt: pick(prompts), chosen, rejected }));
}
mkdirSync(path.dirname(out), { recursive: true });
writeFileSync(out, lines.join('\n') + '\n');
console.error(`wrote ${count} pairs to ${out}`);
