/**
 * The arithmetic-chat reward's maths (reward "arithmetic-chat" in ./functions.ts): the answer a question asks for,
 * computed from the question's own text. The task that makes such questions (core/tasks/arithmetic-chat.ts) uses
 * the same operations; it imports them from here (tasks build on rewards, never the reverse).
 */
import { UserError } from '../../common/errors';

/** The operations: addition, subtraction, multiplication. */
export type ArithmeticChatOp = '+' | '-' | '×';

/** a op b. */
export function computeArithmetic(a: number, op: ArithmeticChatOp, b: number): number {
  return op === '+' ? a + b : op === '-' ? a - b : a * b;
}

// One binary operation on two non-negative integers: not part of a longer expression ("3 + 4 + 5"), nor of a
// decimal ("3.5 + 4"), nor signed ("-3 + 4"). `-` and `−` (U+2212) subtract; `×` and `*` multiply.
const PROBLEM = /(?<![\d.]|[+\-−×*]\s*)(\d+)\s*([+\-−×*])\s*(\d+)(?!\d|\.\d|\s*[+\-−×*]\s*\d)/g;

/**
 * The answer to a question holding exactly one problem "a + b", "a - b" or "a × b" (non-negative integer operands;
 * also "−" and "*"), such as every question `generateArithmeticChat` makes. A UserError naming the prompt when it
 * holds no such problem or more than one.
 */
export function arithmeticChatAnswer(question: string): number {
  const matches = [...question.matchAll(PROBLEM)];
  if (matches.length !== 1) {
    throw new UserError(
      `reward "arithmetic-chat": the prompt ${JSON.stringify(question)} ` +
        (matches.length === 0 ? 'holds no problem' : `holds ${matches.length} problems`) +
        '; it must hold exactly one, like "What is 17 + 25? Answer with a number." ' +
        '(two non-negative integers joined by +, - or ×, and no other such pair anywhere in the prompt).',
    );
  }
  const [, a, op, b] = matches[0];
  const sym: ArithmeticChatOp = op === '+' ? '+' : op === '-' || op === '−' ? '-' : '×';
  return computeArithmetic(Number(a), sym, Number(b));
}
