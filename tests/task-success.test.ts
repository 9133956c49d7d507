/**
 * "What success looks like" (issue #33): every built-in task says its reward range and what a good run reaches
 * (src/common/tasks.ts, shown under the task picker). The ranges are checked against the tasks' own reward
 * functions (public/tasks/NAME.json through makeReward), and the good-run figures against the ranges.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TASK_INFO, taskInfo } from '../src/common/tasks';
import { parseTask, TASK_NAMES } from '../src/core/tasks';
import { arithmeticAnswer, makeReward } from '../src/core/reward/functions';
import { arithmeticChatAnswer } from '../src/core/reward/arithmetic';

const RESPONSES = [
  '',
  ' ',
  'happy',
  'happy love',
  'I love it, so happy!',
  'sad hate',
  'I hate this. So sad.',
  'The movie was great, wonderful and brilliant. I love it.',
  'terrible, awful, bad, the worst, hate it',
  'exactly twenty chars',
  'x'.repeat(70),
  'The answer is 12.',
  '7',
  '-3',
];

/** The responses above, plus the right answer of the prompt for the arithmetic tasks. */
function responsesFor(task: string, prompt: string): string[] {
  if (task === 'arithmetic') return [...RESPONSES, String(arithmeticAnswer(prompt))];
  if (task === 'arithmetic-chat') return [...RESPONSES, String(arithmeticChatAnswer(prompt))];
  return RESPONSES;
}

const scoresOf = async (name: string): Promise<number[]> => {
  const task = parseTask(JSON.parse(readFileSync(`public/tasks/${name}.json`, 'utf8')), name);
  const reward = makeReward(task.reward);
  const out: number[] = [];
  for (const prompt of task.prompts.slice(0, 8)) {
    for (const response of responsesFor(name, prompt)) {
      out.push(await reward({ prompt, response, promptTokens: [], responseTokens: [] }));
    }
  }
  return out;
};

describe('what success looks like, for every task', () => {
  it('covers exactly the built-in tasks, in their order', () => {
    expect(TASK_INFO.map((t) => t.name)).toEqual([...TASK_NAMES]);
  });

  it.each(TASK_NAMES.map((n) => [n]))('%s: its reward stays in the range it states', async (name) => {
    const info = taskInfo(name)!;
    const scores = await scoresOf(name);
    for (const s of scores) {
      expect(s).toBeGreaterThanOrEqual(info.reward.min);
      expect(s).toBeLessThanOrEqual(info.reward.max);
    }
    // A finite end of the range is one the reward really gives (sentiment's tanh only comes near ±1).
    if (name !== 'sentiment') {
      expect(Math.max(...scores)).toBe(info.reward.max);
      if (Number.isFinite(info.reward.min)) expect(Math.min(...scores)).toBe(info.reward.min);
    } else {
      expect(Math.max(...scores)).toBeGreaterThan(0.9);
      expect(Math.min(...scores)).toBeLessThan(-0.9);
    }
  });

  it.each(TASK_INFO.map((t) => [t.name, t]))(
    '%s: says its range and what a good run reaches, with figures in range and their source',
    (_name, info) => {
      expect(info.reward.text).not.toBe('');
      expect(info.goodRun).not.toBe('');
      expect(info.source).not.toBe('');
      expect(info.measured, 'every task has a measured run').not.toBeNull();
      const { first, last } = info.measured!;
      for (const v of [first, last]) {
        expect(v).toBeGreaterThanOrEqual(info.reward.min);
        expect(v).toBeLessThanOrEqual(info.reward.max);
        // The words give the same figures, to two decimals ("−0.14" written with a minus sign).
        const said = (info.goodRun.replace(/−/g, '-').match(/-?\d+(?:\.\d+)?/g) ?? []).map(Number);
        expect(
          said.some((x) => Math.abs(x - v) <= 0.005 + 1e-9),
          `${info.name}: ${v} in "${info.goodRun}"`,
        ).toBe(true);
      }
    },
  );
});
