/**
 * scripts/compare-dpo-ppo.ts's pure parts (issue #23 point 7): the split check, the prompts, the budgets, the
 * judge's aggregation and the README table, on hand-made numbers (the judge's win rate also against eval's own, on a
 * record from the tiny model). The trainings themselves run in the script (minutes), not here; the configs it reads
 * are checked to agree on the split and to be valid configs.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  budgets,
  checkSameSplit,
  distinctPrompts,
  markdownTable,
  recordDistance,
  verdictOf,
  type ArmResult,
} from '../scripts/compare-dpo-ppo';
import { validateConfig } from '../src/common/config';
import { validateDpoConfig } from '../src/common/config/dpo';
import type { EvalRecord } from '../src/common/eval-record';
import { Evaluator } from '../src/core/ppo/eval';
import { buildTrainer } from '../src/core/ppo/setup';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { tinyConfig, tinyResources } from './helpers/trainer-fixture';

const ROOT = path.resolve(import.meta.dirname, '..');
const cfg = (name: string) =>
  JSON.parse(readFileSync(path.join(ROOT, 'configs/compare', name), 'utf8')) as Record<string, unknown>;

describe('verdictOf', () => {
  it('means the scores and counts strict wins and losses (ties are neither)', () => {
    const v = verdictOf([
      { policyReward: 1, referenceReward: 0 }, // win
      { policyReward: 0.5, referenceReward: 0.5 }, // tie
      { policyReward: -1, referenceReward: 0.25 }, // loss
      { policyReward: 0.75, referenceReward: 0.5 }, // win
    ]);
    expect(v.policy).toBe((1 + 0.5 - 1 + 0.75) / 4);
    expect(v.reference).toBe((0 + 0.5 + 0.25 + 0.5) / 4);
    expect(v.winRate).toBe(0.5);
    expect(v.lossRate).toBe(0.25);
    expect(v.n).toBe(4);
  });

  it('agrees with eval/winRate on a record (ties lose there too)', async () => {
    // A record made by eval itself (src/core/ppo/eval.ts Evaluator) from the tiny model, its reward handing out
    // these scores in the order eval asks for them: the policy's three answers, then the reference's.
    await useCpu();
    const dir = await makeTinyFolder();
    const scores = [2, 3, 0, 2, 1, 1];
    const t = await buildTrainer(
      tinyConfig(),
      tinyResources(() => dir),
      {
        rewardFn: { label: 'hand-made', fn: () => scores.shift()! },
      },
    );
    try {
      const record = await new Evaluator(t, ['a', 'b', 'c']).run(0);
      expect(record.samples.map((x) => [x.policyReward, x.referenceReward])).toEqual([
        [2, 2],
        [3, 1],
        [0, 1],
      ]);
      expect(verdictOf(record.samples).winRate).toBe(record['eval/winRate']);
      expect(record['eval/winRate']).toBe(1 / 3);
    } finally {
      t.disposeAll();
    }
  });

  it('refuses an empty evaluation', () => {
    expect(() => verdictOf([])).toThrow(/no samples/);
  });
});

describe('split and prompts', () => {
  it('the shipped compare configs train the reward model and DPO on the same split', () => {
    const rm = cfg('reward-model.json');
    const dpo = cfg('dpo.json');
    const keys = (c: Record<string, unknown>) => ({
      data: path.resolve(ROOT, 'configs/compare', String(c.data)),
      heldOut: Number(c.heldOut),
      seed: Number(c.seed),
    });
    expect(() => checkSameSplit(keys(rm), keys(dpo))).not.toThrow();
    // Same budget of pairs on both sides.
    expect(Number(rm.steps) * Number(rm.batchSize)).toBe(Number(dpo.steps) * Number(dpo.batchSize));
  });

  it('names every key that differs', () => {
    const a = { data: '/a.jsonl', heldOut: 0.1, seed: 1 };
    expect(() => checkSameSplit(a, { ...a, seed: 2 })).toThrow(
      /"seed" is 1 in reward-model.json and 2 in dpo.json/,
    );
    let msg = '';
    try {
      checkSameSplit(a, { data: '/b.jsonl', heldOut: 0.2, seed: 1 });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/"data"/);
    expect(msg).toMatch(/"heldOut" is 0.1 in reward-model.json and 0.2 in dpo.json/);
    expect(msg).not.toMatch(/"seed"/);
  });

  it('the RL configs are valid once the script fills in prompts and reward; the DPO config is valid', () => {
    for (const name of ['ppo.json', 'grpo.json']) {
      expect(() =>
        validateConfig({ ...cfg(name), prompts: ['The movie was'], reward: { model: 'runs/rm' } }),
      ).not.toThrow();
    }
    expect(() => validateDpoConfig(cfg('dpo.json'))).not.toThrow();
  });

  it('distinctPrompts keeps first appearances in order', () => {
    const p = (prompt: string) => ({ prompt, chosen: ' good', rejected: ' bad' });
    expect(distinctPrompts([p('b'), p('a'), p('b'), p('c'), p('a')])).toEqual(['b', 'a', 'c']);
  });
});

describe('budgets', () => {
  it('counts pairs as steps × batchSize and the RL runs’ own rollouts', () => {
    const b = budgets({
      rm: { steps: 60, batchSize: 8 },
      dpo: { steps: 30, batchSize: 16 },
      rl: [
        { name: 'PPO', steps: 30, batchSize: 16 },
        { name: 'GRPO', steps: 10, batchSize: 8 },
      ],
    });
    expect(b).toEqual([
      { arm: 'RM + PPO', pairs: 480, rollouts: 480 },
      { arm: 'RM + GRPO', pairs: 480, rollouts: 80 },
      { arm: 'DPO', pairs: 480, rollouts: 0 },
    ]);
  });
});

describe('markdownTable', () => {
  const v = (policy: number, reference: number, winRate: number, lossRate: number) => ({
    policy,
    reference,
    winRate,
    lossRate,
    n: 4,
  });
  const arms: ArmResult[] = [
    {
      arm: 'RM + PPO',
      verdicts: { rm: { heldout: v(1.234, 0.5, 0.75, 0.25) } },
      kl: 3.14,
      pairs: 480,
      rollouts: 480,
      seconds: 100.4,
    },
    {
      arm: 'DPO',
      verdicts: { rm: { heldout: v(-0.001, 0.5, 0, 0.5) } },
      kl: 1.05,
      pairs: 480,
      rollouts: 0,
      seconds: 40,
    },
  ];
  it('one row per arm after the reference, with score (win / loss) per judge and prompt set', () => {
    const t = markdownTable(arms, [{ key: 'rm', label: 'RM' }], [{ key: 'heldout', label: 'held out' }]);
    expect(t.split('\n')).toEqual([
      '| policy | RM, held out | eval/kl (nats) | pairs seen | own rollouts | train s |',
      '| --- | --- | --- | --- | --- | --- |',
      '| reference (base tiny) | 0.50 | 0 | — | — | — |',
      '| RM + PPO | 1.23 (75% / 25%) | 3.1 | 480 | 480 | 100 |',
      '| DPO | 0.00 (0% / 50%) | 1.1 | 480 | 0 | 40 |',
    ]);
  });
});

describe('recordDistance', () => {
  const rec = (policyReward: number, policy = 'a'): EvalRecord => ({
    step: 1,
    'eval/reward': policyReward,
    'eval/kl': 1,
    'eval/winRate': 1,
    samples: [{ prompt: 'p', reference: 'r', policy, referenceReward: 0, policyReward }],
  });
  it('is the largest metric or score difference, infinite when the answers differ', () => {
    expect(recordDistance(rec(0.5), rec(0.5))).toBe(0);
    expect(recordDistance(rec(0.5), rec(0.75))).toBe(0.25);
    expect(recordDistance(rec(0.5), rec(0.5, 'b'))).toBe(Infinity);
  });
});
