/**
 * Generate public/tasks/arithmetic-chat.json: the instruct-model form of the `arithmetic` task. Questions such
 * as "What is 17 + 25? Answer with a number." from `generateArithmeticChat` (src/core/tasks/arithmetic-chat.ts)
 * with the fixed seed and sizes it exports: 200 training prompts and 50 held-out `evalPrompts`, disjoint by
 * problem. Deterministic: tests/arithmetic-chat.test.ts checks the shipped file equals this script's output.
 * Usage: npx tsx scripts/make-arithmetic-chat-task.ts [OUT]
 */
import { writeFileSync } from 'node:fs';
import {
  ARITHMETIC_CHAT_EVAL,
  ARITHMETIC_CHAT_SEED,
  ARITHMETIC_CHAT_TRAIN,
  generateArithmeticChat,
} from '../src/core/tasks/arithmetic-chat';

/** The task file's JSON object (exported for the test that keeps the shipped file from drifting). */
export function arithmeticChatTask(): {
  name: string;
  description: string;
  reward: string;
  prompts: string[];
  evalPrompts: string[];
} {
  const split = generateArithmeticChat(ARITHMETIC_CHAT_SEED, ARITHMETIC_CHAT_TRAIN, ARITHMETIC_CHAT_EVAL);
  return {
    name: 'arithmetic-chat',
    description:
      'Arithmetic questions for instruct models ("What is 17 + 25? Answer with a number."; +, - up to 50, × up to ' +
      '12): the reward is 1 when the last number in the response is the answer, 0 otherwise. The prompts are the ' +
      `raw user turns (the chat template is applied by the tokenizer); ${ARITHMETIC_CHAT_EVAL} held-out problems ` +
      `are in evalPrompts (seed ${ARITHMETIC_CHAT_SEED}, scripts/make-arithmetic-chat-task.ts).`,
    reward: 'arithmetic-chat',
    prompts: split.train.map((q) => q.question),
    evalPrompts: split.eval.map((q) => q.question),
  };
}

/** The file's text: two-space JSON and a final newline. */
export function arithmeticChatTaskText(): string {
  return `${JSON.stringify(arithmeticChatTask(), null, 2)}\n`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = process.argv[2] ?? 'public/tasks/arithmetic-chat.json';
  writeFileSync(out, arithmeticChatTaskText());
  console.log(`wrote ${out}`);
}
