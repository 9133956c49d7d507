import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadLM, loadScalar, scalarSafetensors, configBytes, memoryFiles } from '../src/core/model/folder';
import { ScalarModel } from '../src/core/model/heads';
import {
  parsePreferences,
  loadPreferences,
  splitPreferences,
  type PreferencePair,
} from '../src/core/reward/preferences';
import {
  bradleyTerryLoss,
  bradleyTerryLossValue,
  pairSequences,
  scorePairs,
  trainRewardModel,
  readRewardMean,
  REWARD_STATS_FILE,
  type RewardLog,
} from '../src/core/reward/reward-model';
import { REWARD_FILE } from '../src/core/reward/reward-model';
import { Rng } from '../src/core/base/rng';
import { isUserError } from '../src/common/errors';

describe('parsePreferences', () => {
  const good = JSON.stringify({ prompt: 'P', chosen: 'a', rejected: 'b', extra: 1 });

  it('reads pairs, skips blank lines, ignores extra fields', () => {
    const { pairs, errors } = parsePreferences(`${good}\n\n  \r\n${good}\r\n`, 'x.jsonl');
    expect(errors).toEqual([]);
    expect(pairs).toEqual([
      { prompt: 'P', chosen: 'a', rejected: 'b' },
      { prompt: 'P', chosen: 'a', rejected: 'b' },
    ]);
  });

  it('reports each bad line by number with what is wrong', () => {
    const text = [
      good,
      '{"prompt": "P", "chosen": ', // 2: bad JSON
      JSON.stringify({ prompt: 'P', rejected: 'b' }), // 3: missing
      JSON.stringify({ prompt: 'P', chosen: 7, rejected: 'b' }), // 4: non-string
      '["P", "a", "b"]', // 5: not an object
      '"just a string"', // 6
      good,
    ].join('\n');
    const { pairs, errors } = parsePreferences(text, 'x.jsonl');
    expect(pairs).toHaveLength(2);
    expect(errors).toHaveLength(5);
    expect(errors[0]).toMatch(/^line 2: not valid JSON \(.+\)$/);
    expect(errors[1]).toBe('line 3: "chosen" is missing');
    expect(errors[2]).toBe('line 4: "chosen" must be a string, got number');
    expect(errors[3]).toMatch(/^line 5: expected a JSON object .* got an array$/);
    expect(errors[4]).toMatch(/^line 6: expected a JSON object .* got string$/);
    expect(() => loadPreferences(text, 'x.jsonl')).toThrow(
      /^x\.jsonl: 5 bad lines: line 2: not valid JSON .*, line 3: "chosen" is missing, line 4: .*, line 5: /,
    );
  });

  it('lists at most 10 bad lines', () => {
    const text = Array.from({ length: 13 }, () => '{}').join('\n');
    let msg = '';
    try {
      loadPreferences(text, 'big.jsonl');
    } catch (e) {
      expect(isUserError(e)).toBe(true);
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/^big\.jsonl: 13 bad lines: line 1: /);
    expect(msg).toContain('line 10:');
    expect(msg).not.toContain('line 11:');
    expect(msg).toContain('and 3 more');
  });

  it('an empty file is an error', () => {
    expect(parsePreferences('', 'e.jsonl')).toEqual({ pairs: [], errors: [] });
    expect(() => loadPreferences('\n \n', 'e.jsonl')).toThrow(/e\.jsonl: no preference pairs/);
  });

  it('splits deterministically with at least one held out', () => {
    const pairs = Array.from({ length: 25 }, (_, i) => ({ prompt: String(i), chosen: 'a', rejected: 'b' }));
    const a = splitPreferences(pairs, 0.1, 5);
    expect(a.heldOut).toHaveLength(3);
    expect(a.train).toHaveLength(22);
    expect(splitPreferences(pairs, 0.1, 5)).toEqual(a);
    expect(new Set([...a.train, ...a.heldOut].map((p) => p.prompt)).size).toBe(25);
    expect(splitPreferences(pairs.slice(0, 3), 0.01, 1).heldOut).toHaveLength(1);
    expect(() => splitPreferences(pairs.slice(0, 1), 0.1, 1)).toThrow(/at least 2/);
  });
});

describe('Bradley–Terry loss', () => {
  beforeAll(useCpu);

  it('equals softplus(-(rc - rr)) worked by hand', async () => {
    expect(bradleyTerryLossValue(2, 0)).toBeCloseTo(Math.log(1 + Math.exp(-2)), 12);
    expect(bradleyTerryLossValue(2, 0)).toBeCloseTo(0.126928, 6);
    expect(bradleyTerryLossValue(0, 0)).toBeCloseTo(Math.LN2, 12);
    expect(bradleyTerryLossValue(-800, 0)).toBeCloseTo(800, 9); // stable: no overflow
    const loss = bradleyTerryLoss(tf.tensor1d([2, 0, 1]), tf.tensor1d([0, 0, 3]));
    const want = (Math.log(1 + Math.exp(-2)) + Math.LN2 + Math.log(1 + Math.exp(2))) / 3;
    expect((await loss.data())[0]).toBeCloseTo(want, 5);
    loss.dispose();
  });
});

/**
 * An easy preference set: the chosen response ends in "good good good", the rejected one in "bad bad bad".
 * Short sequences (≤ 24 tokens): the CPU backend is slow and the test must stay fast.
 */
function easyPairs(n: number, seed: number): PreferencePair[] {
  const rng = new Rng(seed);
  const prompts = ['Hi', 'A day', 'We', 'It is', 'My cat'];
  const fillers = ['so', 'oh', 'and', 'yes', 'then'];
  return Array.from({ length: n }, () => {
    const prompt = prompts[rng.int(prompts.length)];
    const filler = fillers[rng.int(fillers.length)];
    return { prompt, chosen: ` ${filler} good good good`, rejected: ` ${filler} bad bad bad` };
  });
}

describe('trainRewardModel', () => {
  let dir: string;
  beforeAll(async () => {
    await useCpu();
    dir = await makeTinyFolder({ n_layer: 1, n_embd: 32, seed: 4 });
  });

  it('keeps the start and EOS when a sequence is too long', async () => {
    const { tokenizer } = await loadLM(nodeFiles(dir));
    const s = pairSequences(tokenizer, { prompt: 'abc', chosen: 'defgh', rejected: 'd' }, 6);
    expect(s.chosen).toEqual([...tokenizer.encode('abcde'), tokenizer.eosId]);
    expect(s.rejected).toEqual([...tokenizer.encode('abcd'), tokenizer.eosId]);
    expect(s.truncated).toBe(1);
  });

  it('learns an easy preference, leaks no tensors, and saves a folder that scores the same', async () => {
    const lm = await loadLM(nodeFiles(dir), { trainable: false, label: 'trunk' });
    const model = ScalarModel.fromTrunk(lm.model, true, 'reward');
    lm.model.dispose();
    const { train, heldOut } = splitPreferences(easyPairs(60, 3), 0.2, 1);

    const logs: RewardLog[] = [];
    const counts: number[] = [];
    const result = await trainRewardModel(
      model,
      lm.tokenizer,
      train,
      heldOut,
      // Frozen embeddings: their gradient (UnsortedSegmentSum) is most of a step on the CPU backend.
      {
        steps: 16,
        batchSize: 8,
        learningRate: 3e-3,
        maxGradNorm: 1,
        seed: 2,
        evalEvery: 8,
        logEvery: 1,
        freezeEmbeddings: true,
      },
      (log) => {
        logs.push(log);
        counts.push(tf.memory().numTensors);
      },
    );
    expect(logs.map((l) => l.step)).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
    expect(logs.filter((l) => l.heldOut).map((l) => l.step)).toEqual([8, 16]);
    // Adam's moments appear on the first step; after that the count must not move.
    expect(new Set(counts.slice(1)).size).toBe(1);
    expect(result.heldOut.accuracy).toBeGreaterThan(0.8);
    expect(result.train.accuracy).toBeGreaterThan(0.8);
    expect(result.loss).toBeLessThan(Math.LN2);
    // The head was scaled so training scores have std 1: the scaled model's scores on the training pairs, by a
    // plain loop (result.stats.std and .mean are the raw ones times the scale, so they cannot tell).
    const scored = await scorePairs(model, lm.tokenizer, train);
    const xs = [...scored.chosen, ...scored.rejected];
    const mean = xs.reduce((s, x) => s + x, 0) / xs.length;
    const std = Math.sqrt(xs.reduce((s, x) => s + (x - mean) ** 2, 0) / xs.length);
    expect(Math.abs(result.stats.rawStd - 1)).toBeGreaterThan(0.01); // the scaling had something to do
    expect(std).toBeCloseTo(1, 4);
    expect(result.stats.mean).toBeCloseTo(mean, 4);

    const files = new Map([
      ['config.json', configBytes(model.config)],
      [REWARD_FILE, await scalarSafetensors(model)],
    ]);
    const back = await loadScalar(memoryFiles('rm', files), REWARD_FILE, { trainable: false });
    const a = await scorePairs(model, lm.tokenizer, heldOut);
    const b = await scorePairs(back, lm.tokenizer, heldOut);
    for (let i = 0; i < heldOut.length; i++) {
      expect(b.chosen[i]).toBeCloseTo(a.chosen[i], 5);
      expect(b.rejected[i]).toBeCloseTo(a.rejected[i], 5);
    }
    model.dispose();
    back.dispose();
  });

  it('readRewardMean: the recorded mean, null without the file, a UserError naming the file when it is broken', async () => {
    const enc = (x: string) => new TextEncoder().encode(x);
    const folder = (stats?: string) =>
      memoryFiles('rm', new Map(stats === undefined ? [] : [[REWARD_STATS_FILE, enc(stats)]]));
    expect(await readRewardMean(folder(JSON.stringify({ mean: -0.5, std: 1 })))).toBe(-0.5);
    expect(await readRewardMean(folder())).toBeNull();
    for (const bad of ['{', JSON.stringify({ std: 1 }), JSON.stringify({ mean: 'x' })]) {
      const err = await readRewardMean(folder(bad)).catch((e: unknown) => e);
      expect(isUserError(err)).toBe(true);
      expect((err as Error).message).toContain(`rm/${REWARD_STATS_FILE}`);
    }
  });
});

describe('one preference pipeline for the CLI and the browser', () => {
  it('one defaults table; both front ends validate against it', async () => {
    const { PREFERENCE_DEFAULTS, preferenceOptions, logEvery } =
      await import('../src/core/reward/preference-pipeline');
    const { validateRewardConfig } = await import('../src/cli/train-reward');
    expect(PREFERENCE_DEFAULTS).toEqual({
      steps: 100,
      batchSize: 8,
      learningRate: 3e-4,
      maxGradNorm: 1,
      seed: 1,
      heldOut: 0.1,
      evalEvery: 20,
      freezeEmbeddings: false,
      normalise: true,
    });
    const cli = validateRewardConfig({ data: 'pairs.jsonl' }, '/cfg/rm.json');
    expect(cli).toEqual({ ...PREFERENCE_DEFAULTS, model: 'tiny', data: '/cfg/pairs.jsonl' });
    // The worker passes {steps, batchSize, learningRate} (undefined = default) and the run's seed.
    expect(preferenceOptions({ steps: 4, batchSize: undefined, seed: 7 }, 'trainRewardModel')).toEqual({
      ...PREFERENCE_DEFAULTS,
      steps: 4,
      seed: 7,
    });
    expect(() => preferenceOptions({ learningRate: 0 }, 'trainRewardModel')).toThrow(
      'trainRewardModel: "learningRate" must be a number above 0 up to 1, got 0.',
    );
    expect(() => validateRewardConfig({ data: 'x', batchSize: 1.5 }, 'rm.json')).toThrow(
      'train-reward: "batchSize" must be an integer from 1 to 4096, got 1.5.',
    );
    // About 20 progress reports a run, at least one every 10 steps.
    expect([1, 4, 30, 100, 200, 1000].map(logEvery)).toEqual([1, 1, 2, 5, 10, 10]);
  });
});
