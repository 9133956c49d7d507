/**
 * Benchmarks that run on any backend (Node CLI and the browser bench page share them). Speed numbers come
 * from these, never from unit tests.
 */
import { generate } from './model/sampling';
import type { GPT2 } from './model/gpt2';

export interface GenBench {
  batch: number;
  newTokens: number;
  cacheTokensPerSecond: number;
  recomputeTokensPerSecond: number;
  kvSpeedup: number;
}

/** Time generate() with and without the KV cache after one warm-up call each (shader/kernel compilation). */
export async function benchGeneration(model: GPT2, batch: number, newTokens: number, promptLen = 8): Promise<GenBench> {
  const prompts = Array.from({ length: batch }, (_, b) => Array.from({ length: promptLen }, (_, t) => (b * 7 + t * 13) % 250));
  const opts = { maxNewTokens: newTokens, temperature: 1, padId: model.config.vocab_size - 1, rng: 1, stopToken: null };
  const time = async (useCache: boolean): Promise<number> => {
    await generate(model, prompts, { ...opts, maxNewTokens: Math.min(4, newTokens), useCache });
    const t0 = performance.now();
    await generate(model, prompts, { ...opts, useCache });
    return (batch * newTokens) / ((performance.now() - t0) / 1000);
  };
  const cache = await time(true);
  const recompute = await time(false);
  return { batch, newTokens, cacheTokensPerSecond: cache, recomputeTokensPerSecond: recompute, kvSpeedup: cache / recompute };
}

export const TINY_SHAPE = {
  vocab_size: 258, n_positions: 128, n_embd: 160, n_layer: 4, n_head: 4, tokenizer: 'bytes',
  bos_token_id: 256, eos_token_id: 256, pad_token_id: 257,
};

