/**
 * The `arithmetic-chat` task's questions: the instruct-model form of `arithmetic` ("3+4="). A question is a user
 * turn such as "What is 17 + 25? Answer with a number." — raw text; the chat template is applied later, by the
 * tokenizer layer — and its answer is computed from the question's own text (`arithmeticChatAnswer`), so the
 * reward needs nothing but the prompt.
 *
 * Problems (all results are non-negative integers):
 *   a + b   with a, b in 0…50
 *   a - b   with 0 ≤ b ≤ a ≤ 50
 *   a × b   with a, b in 0…12
 * Each question draws an operation (uniformly), its operands (uniformly in the ranges above) and one of
 * `ARITHMETIC_CHAT_PHRASINGS`, from `Rng(seed)`. The split is by problem: the first `train` distinct problems
 * (a, op, b) drawn are the training prompts, the next `eval` distinct ones the held-out prompts, so no held-out
 * problem is ever trained on, not even in another phrasing. Same seed and sizes → the same questions everywhere.
 * public/tasks/arithmetic-chat.json is made from this by scripts/make-arithmetic-chat-task.ts.
 */
import { UserError } from '../../common/errors';
import { computeArithmetic, type ArithmeticChatOp } from '../reward/arithmetic';

import { Rng } from '../base/rng';

export const ARITHMETIC_CHAT_OPS: readonly ArithmeticChatOp[] = ['+', '-', '×'];

/** `{q}` is replaced by the problem, e.g. "17 + 25". Each phrasing asks for a bare number. */
export const ARITHMETIC_CHAT_PHRASINGS: readonly string[] = [
  'What is {q}? Answer with a number.',
  'Compute {q}. Reply with just the number.',
  'Calculate {q} and give only the result.',
  '{q} = ? Answer with a number only.',
  'What is the value of {q}? Respond with a single number.',
];

/** The shipped task's seed and sizes (scripts/make-arithmetic-chat-task.ts; tests check the file against them). */
export const ARITHMETIC_CHAT_SEED = 21;
export const ARITHMETIC_CHAT_TRAIN = 200;
export const ARITHMETIC_CHAT_EVAL = 50;

/** Operand ranges (inclusive) per operation. */
const MAX_OPERAND: Record<ArithmeticChatOp, number> = { '+': 50, '-': 50, '×': 12 };

/** How many distinct problems the ranges allow: 51² sums, 51·52/2 differences, 13² products. */
export const ARITHMETIC_CHAT_PROBLEMS = 51 * 51 + (51 * 52) / 2 + 13 * 13;

export interface ArithmeticChatItem {
  question: string;
  a: number;
  op: ArithmeticChatOp;
  b: number;
  answer: number;
}

export interface ArithmeticChatSplit {
  train: ArithmeticChatItem[];
  eval: ArithmeticChatItem[];
}

/**
 * `train` training questions and `eval` held-out ones from `seed`, disjoint by problem (see the file's comment).
 * A UserError when the sizes are not non-negative integers or ask for more problems than exist.
 */
export function generateArithmeticChat(seed: number, train: number, evalCount: number): ArithmeticChatSplit {
  for (const [name, n] of [
    ['train', train],
    ['eval', evalCount],
  ] as const) {
    if (!Number.isInteger(n) || n < 0) {
      throw new UserError(`arithmetic-chat: "${name}" must be a non-negative integer, got ${n}.`);
    }
  }
  if (train + evalCount > ARITHMETIC_CHAT_PROBLEMS) {
    throw new UserError(
      `arithmetic-chat: ${train} + ${evalCount} questions asked, but only ${ARITHMETIC_CHAT_PROBLEMS} distinct ` +
        'problems exist; ask for fewer.',
    );
  }
  if (!Number.isInteger(seed))
    throw new UserError(`arithmetic-chat: the seed must be an integer, got ${seed}.`);
  const rng = new Rng(seed);
  const seen = new Set<string>();
  const items: ArithmeticChatItem[] = [];
  while (items.length < train + evalCount) {
    const op = ARITHMETIC_CHAT_OPS[rng.int(ARITHMETIC_CHAT_OPS.length)];
    const max = MAX_OPERAND[op];
    let a = rng.int(max + 1);
    let b = rng.int(max + 1);
    if (op === '-' && b > a) [a, b] = [b, a];
    const phrasing = ARITHMETIC_CHAT_PHRASINGS[rng.int(ARITHMETIC_CHAT_PHRASINGS.length)];
    const key = `${a}${op}${b}`;
    if (seen.has(key)) continue;
    seen.add(key);
    items.push({
      question: phrasing.replace('{q}', `${a} ${op} ${b}`),
      a,
      op,
      b,
      answer: computeArithmetic(a, op, b),
    });
  }
  return { train: items.slice(0, train), eval: items.slice(train) };
}
