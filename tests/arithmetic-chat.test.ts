import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { UserError } from '../src/common/errors';
import {
  arithmeticChatReward,
  isBareNumber,
  lastNumber,
  makeReward,
  type Sample,
} from '../src/core/reward/functions';
import {
  ARITHMETIC_CHAT_EVAL,
  ARITHMETIC_CHAT_PHRASINGS,
  ARITHMETIC_CHAT_PROBLEMS,
  ARITHMETIC_CHAT_SEED,
  ARITHMETIC_CHAT_TRAIN,
  generateArithmeticChat,
  type ArithmeticChatItem,
} from '../src/core/tasks/arithmetic-chat';
import { arithmeticChatAnswer } from '../src/core/reward/arithmetic';
import { parseTask } from '../src/core/tasks/index';
import { loadTaskNode, taskPathNode } from '../src/cli/tasks-node';
import { arithmeticChatTask, arithmeticChatTaskText } from '../scripts/make-arithmetic-chat-task';

const sample = (prompt: string, response: string): Sample => ({
  prompt,
  response,
  promptTokens: [],
  responseTokens: [],
});

/** The plain re-computation each question is checked against. */
function plain(a: number, op: string, b: number): number {
  if (op === '+') return a + b;
  if (op === '-') return a - b;
  if (op === '×') return a * b;
  throw new Error(`unexpected op ${op}`);
}

const problemKey = (q: ArithmeticChatItem): string => `${q.a} ${q.op} ${q.b}`;

describe('generateArithmeticChat', () => {
  const split = generateArithmeticChat(ARITHMETIC_CHAT_SEED, ARITHMETIC_CHAT_TRAIN, ARITHMETIC_CHAT_EVAL);
  const all = [...split.train, ...split.eval];

  it('is deterministic for a seed and differs between seeds', () => {
    expect(generateArithmeticChat(ARITHMETIC_CHAT_SEED, 200, 50)).toEqual(split);
    const other = generateArithmeticChat(ARITHMETIC_CHAT_SEED + 1, 200, 50);
    expect(other.train.map((q) => q.question)).not.toEqual(split.train.map((q) => q.question));
    // A smaller request is a prefix of the same stream: the first problems do not depend on the sizes.
    expect(generateArithmeticChat(ARITHMETIC_CHAT_SEED, 10, 0).train).toEqual(split.train.slice(0, 10));
  });

  it('gives the sizes asked for, train and eval disjoint by problem (not only by text)', () => {
    expect(split.train).toHaveLength(200);
    expect(split.eval).toHaveLength(50);
    const train = new Set(split.train.map(problemKey));
    expect(train.size).toBe(200);
    expect(new Set(split.eval.map(problemKey)).size).toBe(50);
    for (const q of split.eval) expect(train.has(problemKey(q))).toBe(false);
  });

  it('uses every operation and phrasing, operands in range, results non-negative', () => {
    for (const op of ['+', '-', '×']) expect(all.some((q) => q.op === op)).toBe(true);
    for (const p of ARITHMETIC_CHAT_PHRASINGS) {
      const [head] = p.split('{q}');
      expect(all.some((q) => q.question.startsWith(head))).toBe(true);
    }
    for (const q of all) {
      const max = q.op === '×' ? 12 : 50;
      expect(Number.isInteger(q.a) && q.a >= 0 && q.a <= max).toBe(true);
      expect(Number.isInteger(q.b) && q.b >= 0 && q.b <= max).toBe(true);
      expect(q.answer).toBeGreaterThanOrEqual(0);
    }
  });

  it("every question's answer is right: the item's and the one parsed back from the text", () => {
    for (const q of all) {
      expect(q.question).toContain(`${q.a} ${q.op} ${q.b}`);
      expect(q.answer).toBe(plain(q.a, q.op, q.b));
      expect(arithmeticChatAnswer(q.question)).toBe(plain(q.a, q.op, q.b));
    }
  });

  it('refuses impossible sizes with a UserError', () => {
    expect(() => generateArithmeticChat(1, -1, 0)).toThrow(/"train" must be a non-negative integer, got -1/);
    expect(() => generateArithmeticChat(1, 1, 2.5)).toThrow(/"eval" must be a non-negative integer/);
    expect(() => generateArithmeticChat(1, ARITHMETIC_CHAT_PROBLEMS, 1)).toThrow(
      new RegExp(`only ${ARITHMETIC_CHAT_PROBLEMS} distinct problems exist`),
    );
    // 51² sums + 51·52/2 differences + 13² products: every problem exists, each once.
    expect(ARITHMETIC_CHAT_PROBLEMS).toBe(2601 + 1326 + 169);
    const everything = generateArithmeticChat(3, ARITHMETIC_CHAT_PROBLEMS, 0).train;
    expect(new Set(everything.map(problemKey)).size).toBe(ARITHMETIC_CHAT_PROBLEMS);
  });
});

describe('arithmeticChatAnswer', () => {
  it.each([
    ['What is 17 + 25? Answer with a number.', 42],
    ['Compute 36 - 1. Reply with just the number.', 35],
    ['Calculate 7 × 12 and give only the result.', 84],
    ['6 × 11 = ? Answer with a number only.', 66],
    ['What is 9 − 4?', 5], // U+2212
    ['What is 3*4?', 12],
    ['What is 3 - 5?', -2],
  ])('%j → %d', (q, answer) => {
    expect(arithmeticChatAnswer(q)).toBe(answer);
  });

  it('answers the question inside a chat-formatted prompt too (ChatML, a system turn without problems)', () => {
    const chatml =
      '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' +
      '<|im_start|>user\nWhat is 17 + 25? Answer with a number.<|im_end|>\n<|im_start|>assistant\n';
    expect(arithmeticChatAnswer(chatml)).toBe(42);
    const llama =
      '<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024' +
      '<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nCompute 36 - 1. Reply with just the number.<|eot_id|>';
    expect(arithmeticChatAnswer(llama)).toBe(35);
  });

  it.each([
    ['Tell me a joke.', /holds no problem/],
    ['What is 3 + 4 + 5?', /holds no problem/],
    ['What is 3.5 + 4?', /holds no problem/],
    ['What is -3 + 4?', /holds no problem/],
    ['What is 3 + 4? And 5 - 1?', /holds 2 problems/],
  ])('names the prompt %j it cannot answer', (q, why) => {
    expect(() => arithmeticChatAnswer(q)).toThrow(UserError);
    expect(() => arithmeticChatAnswer(q)).toThrow(why);
    expect(() => arithmeticChatAnswer(q)).toThrow(
      `reward "arithmetic-chat": the prompt ${JSON.stringify(q)}`,
    );
  });
});

describe('the arithmetic-chat reward', () => {
  const q = 'What is 17 + 25? Answer with a number.';
  const r = makeReward('arithmetic-chat');

  it('the last-number rule, worked by hand', () => {
    expect(lastNumber('42')).toBe(42);
    expect(lastNumber('42.')).toBe(42);
    expect(lastNumber('**42**')).toBe(42);
    expect(lastNumber('The answer is 42')).toBe(42);
    expect(lastNumber('17 + 25 = 42')).toBe(42);
    expect(lastNumber('42, or maybe 41')).toBe(41);
    expect(lastNumber('-3')).toBe(-3);
    expect(lastNumber('It is −3.')).toBe(-3);
    expect(lastNumber('5-3')).toBe(3); // a minus after a digit is an operator, not a sign
    expect(lastNumber('1,000 apples')).toBe(1000);
    expect(lastNumber('42.0')).toBe(42);
    expect(lastNumber('2.5')).toBe(2.5);
    expect(lastNumber('no digits here')).toBeNull();
    expect(lastNumber('')).toBeNull();
  });

  it.each([
    ['42', 1],
    ['42.', 1],
    ['**42**', 1],
    ['The answer is 42', 1],
    ['17 + 25 = 42.', 1],
    ['42.0', 1],
    [' 42\n', 1],
    ['43', 0],
    ['42 or 43', 0], // the last number counts
    ['4242', 0],
    ['-42', 0],
    ['forty-two', 0],
    ['', 0],
  ])('scores %j with %d (right 1, wrong or none 0)', async (response, score) => {
    expect(await r(sample(q, response))).toBe(score);
  });

  it('scores a negative answer by its sign', async () => {
    const neg = 'What is 3 - 5?';
    expect(await r(sample(neg, '-2'))).toBe(1);
    expect(await r(sample(neg, 'The result is −2.'))).toBe(1);
    expect(await r(sample(neg, '2'))).toBe(0);
  });

  it('adds `format` for a bare number, right or wrong', async () => {
    const f = arithmeticChatReward({ format: 0.1 });
    expect(await f(sample(q, '42'))).toBe(1.1);
    expect(await f(sample(q, '**42**.'))).toBe(1.1);
    expect(await f(sample(q, '43'))).toBe(0.1);
    expect(await f(sample(q, 'The answer is 42'))).toBe(1);
    expect(await f(sample(q, 'none'))).toBe(0);
    expect(isBareNumber(' `-3` ')).toBe(true);
    expect(isBareNumber('42 apples')).toBe(false);
    expect(isBareNumber('')).toBe(false);
    // Through a spec, as a task or config carries it.
    expect(await makeReward({ name: 'arithmetic-chat', options: { format: 0.25 } })(sample(q, '42'))).toBe(
      1.25,
    );
  });

  it('validates its options', () => {
    expect(() => arithmeticChatReward({ format: '0.1' })).toThrow(UserError);
    expect(() => arithmeticChatReward({ format: '0.1' })).toThrow(
      'reward "arithmetic-chat": option "format" must be a number, got "0.1".',
    );
    expect(() => arithmeticChatReward({ partial: 0.1 })).toThrow(
      'reward "arithmetic-chat": unknown option "partial"; allowed options are "format".',
    );
    expect(() => makeReward({ name: 'arithmetic-chat', options: { format: Number.NaN } })).toThrow(
      /"format" must be a number/,
    );
  });

  it('names the prompt when the prompt is not a question it can answer', () => {
    expect(() => r(sample('The movie was', '42'))).toThrow(/the prompt "The movie was" holds no problem/);
  });
});

describe('public/tasks/arithmetic-chat.json', () => {
  it("is the script's output for its seed (regenerate: npx tsx scripts/make-arithmetic-chat-task.ts)", async () => {
    expect(readFileSync(taskPathNode('arithmetic-chat'), 'utf8')).toBe(arithmeticChatTaskText());
    const task = await loadTaskNode('arithmetic-chat');
    const split = generateArithmeticChat(ARITHMETIC_CHAT_SEED, ARITHMETIC_CHAT_TRAIN, ARITHMETIC_CHAT_EVAL);
    expect(task.prompts).toEqual(split.train.map((q) => q.question));
    expect(task.evalPrompts).toEqual(split.eval.map((q) => q.question));
    expect(task.reward).toBe('arithmetic-chat');
    expect(parseTask(arithmeticChatTask(), 'script')).toEqual(task);
  });

  it('its reward gives 1 to each prompt answered right and 0 to a wrong answer', async () => {
    const task = await loadTaskNode('arithmetic-chat');
    const r = makeReward(task.reward);
    const split = generateArithmeticChat(ARITHMETIC_CHAT_SEED, ARITHMETIC_CHAT_TRAIN, ARITHMETIC_CHAT_EVAL);
    for (const q of [...split.train, ...split.eval]) {
      expect(await r(sample(q.question, `The answer is ${plain(q.a, q.op, q.b)}.`))).toBe(1);
      expect(await r(sample(q.question, `${plain(q.a, q.op, q.b) + 1}`))).toBe(0);
    }
  });
});
