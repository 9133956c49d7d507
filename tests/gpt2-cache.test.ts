import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { GPT2 } from '../src/core/model/gpt2';
import { generate, leftPad } from '../src/core/model/sampling';
import { parseGPT2Config } from '../src/core/model/config';

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

/** Full-forward logits of the last position of each row of a left-padded batch. */
async function fullLastLogits(model: GPT2, seqs: number[][]): Promise<number[][]> {
  const { ids, mask, Tp } = leftPad(seqs, 257);
  const B = seqs.length;
  const lg = tf.tidy(() => {
    const all = model.logits(tf.tensor2d(ids, [B, Tp], 'int32'), tf.tensor2d(mask, [B, Tp], 'int32'));
    return tf.squeeze(tf.slice(all, [0, Tp - 1, 0], [B, 1, -1]), [1]);
  });
  const out = (await lg.array()) as number[][];
  lg.dispose();
  return out;
}

describe('GPT-2 KV cache and padding', () => {
  let model: GPT2;
  beforeAll(async () => {
    await useCpu();
    model = GPT2.random(cfg, 3);
    // Larger weights so logits vary meaningfully.
    for (const v of model.params.values()) {
      if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 8)));
    }
  });

  it('greedy decode with the KV cache equals greedy full recompute, token by token', async () => {
    const prompts = [[72, 101, 108, 108, 111], [87, 104, 121], [65]];
    const a = await generate(model, prompts, { maxNewTokens: 12, temperature: 0, padId: 257, rng: 1 });
    const b = await generate(model, prompts, {
      maxNewTokens: 12,
      temperature: 0,
      padId: 257,
      rng: 1,
      useCache: false,
    });
    expect(a.tokens).toEqual(b.tokens);
    for (let i = 0; i < prompts.length; i++) {
      for (let t = 0; t < a.logprobs[i].length; t++)
        expect(a.logprobs[i][t]).toBeCloseTo(b.logprobs[i][t], 4);
    }
  });

  it('the logprob of each greedy token equals log softmax of the full-forward logits', async () => {
    const prompts = [[72, 101, 108], [87]];
    const r = await generate(model, prompts, { maxNewTokens: 6, temperature: 0, padId: 257, rng: 1 });
    for (let i = 0; i < prompts.length; i++) {
      for (let t = 0; t < r.tokens[i].length; t++) {
        const [row] = await fullLastLogits(model, [[...prompts[i], ...r.tokens[i].slice(0, t)]]);
        const m = Math.max(...row);
        const lse = m + Math.log(row.reduce((s, x) => s + Math.exp(x - m), 0));
        expect(r.tokens[i][t]).toBe(row.indexOf(m));
        expect(r.logprobs[i][t]).toBeCloseTo(row[r.tokens[i][t]] - lse, 4);
      }
    }
  });

  it('a left-padded batch gives each sequence the logits it has alone', async () => {
    const seqs = [
      [1, 2, 3, 4, 5, 6],
      [7, 8],
      [9, 10, 11, 12],
    ];
    const batched = await fullLastLogits(model, seqs);
    for (let i = 0; i < seqs.length; i++) {
      const [alone] = await fullLastLogits(model, [seqs[i]]);
      for (let v = 0; v < alone.length; v++) expect(batched[i][v]).toBeCloseTo(alone[v], 4);
    }
  });

  it('sampling is reproducible with the same seed and differs with another', async () => {
    const prompts = [
      [72, 101],
      [87, 104, 121],
    ];
    const o = { maxNewTokens: 10, temperature: 1, topK: 0, topP: 1, padId: 257 };
    const a = await generate(model, prompts, { ...o, rng: 42 });
    const b = await generate(model, prompts, { ...o, rng: 42 });
    const c = await generate(model, prompts, { ...o, rng: 43 });
    expect(a).toEqual(b);
    expect(a.tokens).not.toEqual(c.tokens);
  });

  it('stops after the stop token and pads nothing into the result', async () => {
    const prompts = [
      [72, 101],
      [87, 104, 121],
    ];
    const o = { maxNewTokens: 10, temperature: 0, padId: 257, rng: 5 };
    // The stop token is one a greedy run certainly emits: the first row's fourth token.
    const free = await generate(model, prompts, o);
    const stopToken = free.tokens[0][3];
    const r = await generate(model, prompts, { ...o, stopToken });
    // Each row is the greedy run up to and including its first stop token, and nothing after it.
    const expected = free.tokens.map((row) => {
      const i = row.indexOf(stopToken);
      return i >= 0 ? row.slice(0, i + 1) : row;
    });
    expect(r.tokens).toEqual(expected);
    expect(r.tokens[0].length).toBeLessThanOrEqual(4);
    expect(r.tokens[0].at(-1)).toBe(stopToken);
    for (let b = 0; b < prompts.length; b++) {
      expect(r.logprobs[b]).toHaveLength(r.tokens[b].length);
      expect(r.tokens[b]).not.toContain(257);
    }
  });

  it('tensor count is flat across repeated generate calls', async () => {
    const prompts = [
      [72, 101],
      [87, 104, 121],
    ];
    const o = { maxNewTokens: 8, temperature: 0.8, topK: 20, topP: 0.9, padId: 257, stopToken: 256 };
    await generate(model, prompts, { ...o, rng: 1 });
    const before = tf.memory().numTensors;
    for (let i = 0; i < 3; i++) await generate(model, prompts, { ...o, rng: i });
    expect(tf.memory().numTensors).toBe(before);
  });
});
