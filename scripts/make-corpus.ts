/**
 * Generate the small English corpus the built-in `tiny` model is pretrained on (public/corpus/tiny.txt).
 *
 * One short review-like sentence per line, from a seeded grammar with a balanced mix of positive, negative
 * and neutral words (many of them in the AFINN list the sentiment reward uses), so that a 1–3 M parameter
 * byte-level model learns English-like text whose sentiment PPO can then move within a few dozen steps.
 * Deterministic: same seed, same file. Usage: tsx scripts/make-corpus.ts [OUT] [LINES]
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { Rng } from '../src/core/base/rng';

const out = process.argv[2] ?? 'public/corpus/tiny.txt';
const lines = Number(process.argv[3] ?? 40000);
const rng = new Rng(2024);
const pick = <T>(xs: T[]): T => xs[rng.int(xs.length)];

const subjects = [
  'The movie',
  'The film',
  'The book',
  'The food',
  'The food at the restaurant',
  'My day',
  'The weather',
  'The trip',
  'The game',
  'The show',
  'The music',
  'The party',
  'The hotel',
  'The service',
  'The coffee',
  'The class',
  'The story',
  'The new phone',
  'The concert',
  'The weekend',
  'The dinner',
  'The team',
  'My new job',
  'The city',
  'The garden',
  'The test',
  'The song',
  'The room',
  'The meeting',
  'The car',
];
const positive = [
  'great',
  'good',
  'wonderful',
  'amazing',
  'lovely',
  'fantastic',
  'excellent',
  'beautiful',
  'fun',
  'nice',
  'perfect',
  'awesome',
  'brilliant',
  'delightful',
  'happy',
  'pleasant',
  'superb',
  'charming',
  'cool',
  'best',
];
const negative = [
  'bad',
  'terrible',
  'awful',
  'boring',
  'horrible',
  'sad',
  'ugly',
  'poor',
  'dull',
  'disappointing',
  'annoying',
  'worst',
  'broken',
  'painful',
  'messy',
  'stupid',
  'weak',
  'nasty',
  'hard',
  'wrong',
];
const neutral = [
  'long',
  'short',
  'new',
  'old',
  'quiet',
  'busy',
  'big',
  'small',
  'late',
  'early',
  'strange',
  'simple',
];
const intensifiers = ['', '', '', 'very ', 'really ', 'so ', 'quite ', 'truly ', 'a bit '];
const posClauses = [
  'I loved it',
  'I enjoyed every minute',
  'we had a great time',
  'everyone was happy',
  'I want to go back',
  'it made me smile',
  'I would recommend it',
  'it was worth it',
  'we laughed a lot',
  'I feel good about it',
  'the people were kind',
  'it was a joy',
  'my friends loved it too',
  'I am glad we went',
];
const negClauses = [
  'I hated it',
  'I want my money back',
  'it was a waste of time',
  'nobody liked it',
  'I will not go back',
  'it made me angry',
  'I would not recommend it',
  'it was not worth it',
  'we were bored',
  'I feel bad about it',
  'the people were rude',
  'it was a mess',
  'my friends hated it too',
  'I regret going',
];
const neutralClauses = [
  'it lasted two hours',
  'we went on Sunday',
  'it was in the city',
  'I went with a friend',
  'it rained a little',
  'there were many people',
  'we took the bus',
  'it started at noon',
  'I had tea after',
];
const openers = [
  'I think that',
  'I felt that',
  'To be honest,',
  'In my opinion',
  'Today',
  'Yesterday',
  'Last night',
];
const connect = [' and ', ', and ', ' but ', ' so ', '. '];

function adjective(mood: number): string {
  return mood > 0 ? pick(positive) : mood < 0 ? pick(negative) : pick(neutral);
}
function clause(mood: number): string {
  return mood > 0 ? pick(posClauses) : mood < 0 ? pick(negClauses) : pick(neutralClauses);
}
function lower(s: string): string {
  return s[0].toLowerCase() + s.slice(1);
}

function sentence(): string {
  const mood = pick([1, 1, -1, -1, 0]);
  const subj = pick(subjects);
  const form = rng.int(6);
  let s: string;
  if (form === 0) s = `${subj} was ${pick(intensifiers)}${adjective(mood)}`;
  else if (form === 1) s = `${pick(openers)} ${lower(subj)} was ${pick(intensifiers)}${adjective(mood)}`;
  else if (form === 2) s = `${subj} was ${adjective(mood)} and ${adjective(mood)}`;
  else if (form === 3)
    s = `${subj} was ${pick(intensifiers)}${adjective(mood)}${pick(connect)}${clause(mood)}`;
  else if (form === 4) s = `${subj} is ${pick(intensifiers)}${adjective(mood)}`;
  else s = `${pick(openers)} ${lower(subj)} was ${adjective(0)}${pick(connect)}${clause(mood)}`;
  s = s.replace(/\. (\w)/, (_, c: string) => `. ${c.toUpperCase()}`);
  return s + (rng.next() < 0.8 ? '.' : '!');
}

const text: string[] = [];
for (let i = 0; i < lines; i++) text.push(sentence());
mkdirSync(path.dirname(out), { recursive: true });
writeFileSync(out, text.join('\n') + '\n');
console.error(`wrote ${lines} lines to ${out}`);
