import { describe, expect, it } from 'vitest';
import { UserError } from '../src/common/errors';
import { makeReward } from '../src/core/reward/functions';
import { TASK_NAMES, parseTask, taskUrl } from '../src/core/tasks/index';
import { loadTaskNode } from '../src/cli/tasks-node';

describe('shipped tasks', () => {
  for (const name of TASK_NAMES) {
    it(`${name}.json parses and its reward scores its own prompts`, async () => {
      const task = await loadTaskNode(name);
      expect(task.name).toBe(name);
      expect(task.prompts.length).toBeGreaterThan(0);
      expect(task.description).not.toBe('');
      const reward = makeReward(task.reward);
      for (const prompt of task.prompts) {
        expect(prompt.length).toBeGreaterThan(0);
        const score = await reward({ prompt, response: ' 5 happy', promptTokens: [], responseTokens: [] });
        expect(Number.isFinite(score)).toBe(true);
      }
    });
  }

  it('sentiment and arithmetic have 64 distinct prompts', async () => {
    for (const name of ['sentiment', 'arithmetic']) {
      const { prompts } = await loadTaskNode(name);
      expect(prompts).toHaveLength(64);
      expect(new Set(prompts).size).toBe(64);
    }
    const { prompts } = await loadTaskNode('arithmetic');
    for (const p of prompts) expect(p).toMatch(/^\d\+\d=$/);
  });

  it('taskUrl is relative and rejects unknown names', async () => {
    expect(taskUrl('sentiment')).toBe('tasks/sentiment.json');
    expect(() => taskUrl('sentimnet')).toThrow(
      /built-in tasks are "sentiment", "length", "keywords", "arithmetic", "arithmetic-chat"/,
    );
    await expect(loadTaskNode('nope')).rejects.toThrow(UserError);
  });
});

describe('parseTask errors', () => {
  const good = { name: 't', description: 'd', reward: 'length', prompts: ['a'] };
  it('accepts a good task, with or without held-out evalPrompts', () => {
    expect(parseTask(good, 'my.json')).toEqual(good);
    expect('evalPrompts' in parseTask(good, 'my.json')).toBe(false);
    const withEval = { ...good, evalPrompts: ['b', 'c'] };
    expect(parseTask(withEval, 'my.json')).toEqual(withEval);
  });
  it.each([
    [[], /my\.json: a task must be a JSON object.*got an array/],
    [{ ...good, name: '' }, /"name" must be a non-empty string/],
    [{ ...good, prompts: [] }, /"prompts" must be a non-empty array/],
    [{ ...good, prompts: ['a', 3] }, /"prompts"\[1\] must be a non-empty string/],
    [{ ...good, reward: 'nope' }, /my\.json: "reward": unknown reward "nope"; valid names are/],
    [{ ...good, reward: undefined }, /"reward" is missing/],
    [{ ...good, reward: { name: 'length', options: { target: -1 } } }, /"target" must be a positive number/],
    [{ ...good, promts: ['a'] }, /unknown key "promts"; a task has .*"evalPrompts"/],
    [
      { ...good, evalPrompts: [] },
      /"evalPrompts" \(held-out prompts\) must be a non-empty array of strings, got \[\]/,
    ],
    [{ ...good, evalPrompts: 'b' }, /"evalPrompts" \(held-out prompts\) must be a non-empty array.*got "b"/],
    [{ ...good, evalPrompts: ['b', ''] }, /my\.json: "evalPrompts"\[1\] must be a non-empty string, got ""/],
    [{ ...good, evalPrompts: ['b', 7] }, /"evalPrompts"\[1\] must be a non-empty string, got 7/],
    [{ ...good, evalPrompts: ['b', 'a'] }, /"evalPrompts"\[1\] "a" is also in "prompts"; held-out prompts/],
  ])('rejects %j', (json, message) => {
    expect(() => parseTask(json, 'my.json')).toThrow(UserError);
    expect(() => parseTask(json, 'my.json')).toThrow(message);
  });
});
