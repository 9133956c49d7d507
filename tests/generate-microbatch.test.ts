/**
 * Generation in micro-batches (src/core/model/sampling.ts `generateInMicroBatches`): with one random stream per
 * row and the whole batch's prompt length, a batch generated in slices gives every row the same tokens (and the
 * same logprobs) as the batch at once — sampled, with top-k / top-p, with a stop token that ends rows early.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { GPT2 } from '../src/core/model/gpt2';
import { generate, generateInMicroBatches, type SampleOptions } from '../src/core/model/sampling';
import { parseGPT2Config } from '../src/core/model/config';
import { Rng } from '../src/core/base/rng';

const cfg = parseGPT2Config({
  vocab_size: 258,
  n_positions: 40,
  n_embd: 32,
  n_layer: 2,
  n_head: 4,
  tokenizer: 'bytes',
  bos_token_id: 256,
  eos_token_id: 256,
  pad_token_id: 257,
});

const PROMPTS = [
  [72, 101, 108, 108, 111],
  [87, 104, 121],
  [65],
  [66, 67, 68, 69, 70, 71, 72],
  [10, 11],
  [99],
];

/** One stream per row, each seeded from a parent stream (as the trainer seeds them from the run's Rng). */
const rowStreams = (seed: number, n: number) => {
  const parent = new Rng(seed);
  return Array.from({ length: n }, () => new Rng(parent.seed()));
};

describe('generation in micro-batches', () => {
  let model: GPT2;
  beforeAll(async () => {
    await useCpu();
    model = GPT2.random(cfg, 5);
    // Larger weights: peaked distributions.
    for (const v of model.params.values()) {
      if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 4)));
    }
  });
  afterAll(() => model.dispose());

  /**
   * Stop tokens that the same run without them certainly emits (the first row's third token, the second row's
   * sixth): the first two rows end by step 3 and 6, the others run on or stop where they meet one.
   */
  async function certainStops(o: Omit<SampleOptions, 'rng'>): Promise<number[]> {
    const free = await generate(model, PROMPTS, {
      ...o,
      stopToken: null,
      rng: rowStreams(42, PROMPTS.length),
    });
    return [free.tokens[0][2], free.tokens[1][5]];
  }

  const cases: { name: string; o: Omit<SampleOptions, 'rng'>; stops?: true }[] = [
    { name: 'pure sampling', o: { maxNewTokens: 10, temperature: 1, padId: 257 } },
    { name: 'top-k 5, T 0.7', o: { maxNewTokens: 10, temperature: 0.7, topK: 5, padId: 257 } },
    { name: 'top-p 0.8', o: { maxNewTokens: 10, temperature: 1, topP: 0.8, padId: 257 } },
    // Rows stop at different times; the early "all stopped" exit happens at different steps per slice.
    {
      name: 'stop token, checked every 2',
      o: { maxNewTokens: 12, temperature: 1.3, stopCheckEvery: 2, padId: 257 },
      stops: true,
    },
    { name: 'greedy', o: { maxNewTokens: 8, temperature: 0, padId: 257 } },
  ];

  for (const { name, o: base, stops } of cases) {
    it(`${name}: slices of 1, 2, 4 and the whole batch give the same tokens and logprobs`, async () => {
      const o = stops ? { ...base, stopToken: await certainStops(base) } : base;
      const whole = await generate(model, PROMPTS, { ...o, rng: rowStreams(42, PROMPTS.length) });
      if (stops) {
        // The stop tokens really ended rows early, and not all at the same step.
        const ids = o.stopToken as number[];
        expect(whole.tokens[0].length).toBeLessThanOrEqual(3);
        expect(whole.tokens[1].length).toBeLessThanOrEqual(6);
        for (const row of whole.tokens.slice(0, 2)) expect(ids).toContain(row.at(-1));
        expect(new Set(whole.tokens.map((r) => r.length)).size).toBeGreaterThan(1);
      }
      for (const micro of [1, 2, 4, 0]) {
        const parts = await generateInMicroBatches(
          model,
          PROMPTS,
          { ...o, rng: rowStreams(42, PROMPTS.length) },
          micro,
        );
        expect(parts.tokens).toEqual(whole.tokens);
        parts.logprobs.forEach((row, b) =>
          row.forEach((lp, t) => expect(Math.abs(lp - whole.logprobs[b][t])).toBeLessThan(1e-6)),
        );
      }
    });
  }

  it('the sampled tokens really depend on the seed (the test above can fail)', async () => {
    const o = { maxNewTokens: 10, temperature: 1, padId: 257 };
    const a = await generate(model, PROMPTS, { ...o, rng: rowStreams(1, PROMPTS.length) });
    const b = await generate(model, PROMPTS, { ...o, rng: rowStreams(2, PROMPTS.length) });
    expect(a.tokens).not.toEqual(b.tokens);
  });

  it('leaves no tensor behind', async () => {
    const before = tf.memory().numTensors;
    await generateInMicroBatches(
      model,
      PROMPTS,
      { maxNewTokens: 6, temperature: 1, padId: 257, rng: rowStreams(3, PROMPTS.length) },
      4,
    );
    expect(tf.memory().numTensors).toBe(before);
  });
});
