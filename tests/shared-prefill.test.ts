/**
 * Generation's prefill run once per distinct prompt (src/core/model/sampling.ts `sharedPrefill`, SampleOptions
 * `sharePrompts`): the rows it picks against a hand-worked batch, and generations of GPT-2, Llama, Qwen2 and Qwen3
 * under LoRA that give the same tokens and log-probs with the prefill shared as without it — greedy, sampled with a
 * stream per row, and in micro-batches — with the trunk called over the distinct prompts only and no tensor left
 * behind. On the CPU backend; tests/webgpu-shared-prefix.test.ts runs the replayed decode on WebGPU both ways.
 */
import { beforeAll, describe, expect, it, vi } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { liven, relDiff, tinyGpt2, tinyQwen2, TINY_QWEN2_JSON, tinyQwen3 } from './helpers/f16-base';
import {
  generate,
  generateInMicroBatches,
  leftPad,
  sharedPrefill,
  type GenerateResult,
} from '../src/core/model/sampling';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { lmRandom } from '../src/core/model/causal-lm';
import { LoraAdapters } from '../src/core/model/lora';
import type { LMConfig } from '../src/core/model/config';
import type { CausalLM } from '../src/core/model/lm';
import { Rng } from '../src/core/base/rng';

beforeAll(useCpu);

describe('sharedPrefill', () => {
  it('keeps one row per distinct left-padded prompt, in order of first appearance', () => {
    // Rows 0 and 2 hold [5, 6]; row 1 [5, 6, 7]; row 3 [6] (left-padded: the mask tells it from row 0's tail).
    const prompts = [[5, 6], [5, 6, 7], [5, 6], [6], [5, 6, 7]];
    const { ids, mask, Tp } = leftPad(prompts, 0);
    const s = sharedPrefill(ids, mask, prompts.length, Tp)!;
    expect(Tp).toBe(3);
    expect(s.first).toEqual([0, 1, 3]);
    expect(Array.from(s.owner)).toEqual([0, 1, 0, 2, 1]);
    expect(Array.from(s.ids)).toEqual([0, 5, 6, 5, 6, 7, 0, 0, 6]);
    expect(Array.from(s.mask)).toEqual([0, 1, 1, 1, 1, 1, 0, 0, 1]);
  });

  it('is null where no prompt repeats, the padding included', () => {
    // Same ids, one of them a real 0 token where the other pads: not the same prompt.
    const prompts = [[0, 6], [6]];
    const { ids, mask, Tp } = leftPad(prompts, 0);
    expect(Array.from(ids)).toEqual([0, 6, 0, 6]);
    expect(sharedPrefill(ids, mask, 2, Tp)).toBeNull();
  });
});

const LLAMA = parseLlamaConfig({ ...TINY_QWEN2_JSON, model_type: 'llama', tie_word_embeddings: true });

/** Two prompts of different lengths, each three times, interleaved as a minibatch's permutation might hold them. */
function groupedPrompts(vocab: number): number[][] {
  const a = [3, 9, 4, 1, 7].map((x) => x % vocab);
  const b = [8, 2, 6].map((x) => x % vocab);
  return [a, b, a, a, b, b];
}

function expectSame(shared: GenerateResult, full: GenerateResult, what: string): void {
  expect(shared.tokens, `${what}: tokens`).toEqual(full.tokens);
  expect(relDiff(shared.logprobs.flat(), full.logprobs.flat()), `${what}: log-probs`).toBeLessThan(1e-5);
}

describe.each([
  ['GPT-2', tinyGpt2],
  ['Llama', LLAMA],
  ['Qwen2', tinyQwen2],
  ['Qwen3', tinyQwen3],
] as [string, LMConfig][])('%s under LoRA, a shared prefill', (name, config) => {
  it('gives the same tokens and log-probs, greedy, sampled and in micro-batches', async () => {
    const base = lmRandom(config, 21, false, `spf_${name}`);
    const adapters = LoraAdapters.create(config, { lora: 4 }, 7);
    liven(adapters);
    const model: CausalLM = base.withLora(adapters);
    const prompts = groupedPrompts(config.vocab_size);
    const run = (share: boolean, temperature: number, micro = 0) =>
      generateInMicroBatches(
        model,
        prompts,
        {
          maxNewTokens: 6,
          temperature,
          padId: 0,
          rng: prompts.map((_, i) => new Rng(100 + i)),
          sharePrompts: share,
        },
        micro,
      );
    try {
      await run(true, 0); // the rotary tables are made on first use and kept: made before counting
      const before = tf.memory().numTensors;
      const trunk = vi.spyOn(model, 'trunk');
      const greedy = await run(true, 0);
      // The prefill ran over the 2 distinct prompts, padded to the longest (5).
      expect(trunk.mock.calls.map((c) => c[0].shape)).toEqual([[2, 5]]);
      trunk.mockClear();
      const greedyFull = await run(false, 0);
      expect(trunk.mock.calls.map((c) => c[0].shape)).toEqual([[6, 5]]);
      trunk.mockRestore();
      expectSame(greedy, greedyFull, `${name} greedy`);
      // Sampled: every row of a group starts from the same logits and still draws its own tokens.
      const sampled = await run(true, 1);
      expectSame(sampled, await run(false, 1), `${name} sampled`);
      expect(new Set(sampled.tokens.map((t) => t.join(','))).size).toBeGreaterThan(2);
      // Micro-batches of 4: the first slice shares (rows 0, 2, 3 hold one prompt), the second (two rows of b) too.
      const sliced = vi.spyOn(model, 'trunk');
      expectSame(await run(true, 1, 4), sampled, `${name} micro-batches`);
      expect(sliced.mock.calls.map((c) => c[0].shape)).toEqual([
        [2, 5],
        [1, 5],
      ]);
      sliced.mockRestore();
      expect(tf.memory().numTensors).toBe(before);
    } finally {
      adapters.dispose();
      base.dispose();
    }
  });
});

it('a batch of distinct prompts runs the prefill as before', async () => {
  const model = lmRandom(tinyQwen3, 4, false, 'spf_distinct');
  try {
    const trunk = vi.spyOn(model, 'trunk');
    const out = await generate(model, [[1, 2], [2, 1], [3]], {
      maxNewTokens: 3,
      temperature: 0,
      padId: 0,
      rng: 1,
    });
    expect(trunk.mock.calls.map((c) => c[0].shape)).toEqual([[3, 2]]);
    expect(out.tokens.map((t) => t.length)).toEqual([3, 3, 3]);
  } finally {
    model.dispose();
  }
});
