/**
 * The WASM KV-cache write (src/core/kernels/wasm-kv.ts, through model/attention.ts writeSlot) against the plain ops
 * it replaces, `cache + splitHeads(x) ⊗ slotOneHot`, run on the same backend: equal element for element (NaN where
 * they are NaN) for a one-hot slot at the first, a middle and the last position, for a slot vector that is not
 * one-hot and for a non-finite x (the formula route); and a whole generation of a GPT-2 and a Qwen2 (grouped-query)
 * model gives the same tokens and log-probs with the kernel as without it.
 */
import { describe, it, expect, beforeAll, beforeEach } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { splitHeads, writeSlot } from '../src/core/model/attention';
import { registerWasmWriteSlot, WRITE_SLOT_KERNEL, writeSlotStats } from '../src/core/kernels/wasm-kv';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { parseGPT2Config } from '../src/core/model/config';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { generate } from '../src/core/model/sampling';
import { normals as normalsSd } from './helpers/f16-base';

const normals = (n: number, seed: number) => normalsSd(n, seed, 1);

/** The plain ops' result, computed without the kernel. */
function plain(cache: tf.Tensor4D, x: tf.Tensor2D, oh: tf.Tensor1D): tf.Tensor4D {
  const [B, n, S] = cache.shape;
  return tf.tidy(() =>
    tf.add(cache, tf.mul(splitHeads(x, B, 1, n), tf.reshape(oh, [1, 1, S, 1]))),
  ) as tf.Tensor4D;
}

/** Elements where a and b differ (NaN equals NaN; +0 equals −0). */
function differing(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (!(a[i] === b[i] || (Number.isNaN(a[i]) && Number.isNaN(b[i])))) n++;
  return n;
}

const withoutKernel = async <T>(f: () => Promise<T>): Promise<T> => {
  const k = tf.getKernel(WRITE_SLOT_KERNEL, 'wasm')!;
  tf.unregisterKernel(WRITE_SLOT_KERNEL, 'wasm');
  try {
    return await f();
  } finally {
    tf.registerKernel(k);
  }
};

describe('the WASM KV-cache write', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    registerWasmWriteSlot();
  });
  beforeEach(() => {
    writeSlotStats.fast = 0;
    writeSlotStats.formula = 0;
  });

  const B = 3;
  const n = 4;
  const S = 7;
  const d = 5;
  const zeroSlots = (filled: number) => {
    // A cache as generate keeps it: values in the first `filled` positions, zeros after.
    const v = normals(B * n * S * d, 1);
    for (let bh = 0; bh < B * n; bh++)
      for (let s = filled; s < S; s++) v.fill(0, (bh * S + s) * d, (bh * S + s + 1) * d);
    return tf.tensor4d(v, [B, n, S, d]);
  };

  for (const slot of [0, 3, S - 1]) {
    it(`a one-hot slot at ${slot}: the plain ops' values, on the copy-and-add route`, async () => {
      const cache = zeroSlots(slot);
      const x = tf.tensor2d(normals(B * n * d, 2 + slot), [B, n * d]);
      const oh = tf
        .oneHot(tf.tensor1d([slot], 'int32'), S)
        .reshape([S])
        .toFloat() as tf.Tensor1D;
      const got = writeSlot(cache, x, oh);
      expect(writeSlotStats).toEqual({ fast: 1, formula: 0 });
      const want = plain(cache, x, oh);
      expect(got.shape).toEqual([B, n, S, d]);
      expect(differing(got.dataSync() as Float32Array, want.dataSync() as Float32Array)).toBe(0);
      // The input cache is untouched (a new tensor, as tfjs's ops make).
      expect(differing(cache.dataSync() as Float32Array, zeroSlots(slot).dataSync() as Float32Array)).toBe(0);
      tf.dispose([cache, x, oh, got, want]);
    });
  }

  it('a slot vector that is not one-hot, and a non-finite x: the formula, element for element', async () => {
    const cache = zeroSlots(4);
    const x = tf.tensor2d(normals(B * n * d, 9), [B, n * d]);
    const ohs = [
      [0, 1, 0, 0, 1, 0, 0],
      [0, 0, 0.5, 0, 0, 0, 0],
      [0, 0, 0, 0, 0, 0, 0],
    ];
    for (const o of ohs) {
      const oh = tf.tensor1d(o);
      const got = writeSlot(cache, x, oh);
      const want = plain(cache, x, oh);
      expect(differing(got.dataSync() as Float32Array, want.dataSync() as Float32Array)).toBe(0);
      tf.dispose([oh, got, want]);
    }
    const bad = normals(B * n * d, 10);
    bad[7] = Infinity;
    bad[11] = NaN;
    const xb = tf.tensor2d(bad, [B, n * d]);
    const oh = tf
      .oneHot(tf.tensor1d([4], 'int32'), S)
      .reshape([S])
      .toFloat() as tf.Tensor1D;
    const got = writeSlot(cache, xb, oh);
    const want = plain(cache, xb, oh);
    const g = got.dataSync() as Float32Array;
    expect(g.some((v) => Number.isNaN(v))).toBe(true);
    expect(differing(g, want.dataSync() as Float32Array)).toBe(0);
    expect(writeSlotStats).toEqual({ fast: 0, formula: ohs.length + 1 });
    tf.dispose([cache, x, xb, oh, got, want]);
  });

  const gpt2 = parseGPT2Config({
    vocab_size: 97,
    n_positions: 32,
    n_embd: 24,
    n_layer: 2,
    n_head: 3,
    tokenizer: 'gpt2-bpe',
  });
  const qwen2 = parseLlamaConfig({
    model_type: 'qwen2',
    vocab_size: 101,
    hidden_size: 32,
    intermediate_size: 48,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 64,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: false,
    bos_token_id: 98,
    eos_token_id: 99,
    pad_token_id: 100,
  });
  const models = [
    ['GPT-2', () => GPT2.random(gpt2, 4, false, 'kv-gpt2')],
    ['Qwen2 (grouped-query)', () => Llama.random(qwen2, 5, false, 'kv-qwen2')],
  ] as const;
  for (const [name, make] of models) {
    it(`${name}: generation with the kernel = without it (tokens and log-probs), every step on the fast route`, async () => {
      const model = make();
      // Rows of different lengths (left padding), sampled at temperature 1 with one seed.
      const prompts = [
        [5, 6, 7, 8, 9],
        [10, 11],
        [12, 13, 14],
      ];
      const opts = { maxNewTokens: 9, temperature: 1, padId: 0, stopToken: null, rng: 17 };
      try {
        // Without first: a model's first generation makes tables it keeps (the rotary cos/sin).
        const without = await withoutKernel(() => generate(model, prompts, opts));
        const before = tf.memory().numTensors;
        const withK = await generate(model, prompts, opts);
        // 8 decode steps (the first token comes from the prompt's forward), 2 layers, keys and values.
        expect(writeSlotStats.fast).toBe(8 * 2 * 2);
        expect(writeSlotStats.formula).toBe(0);
        expect(tf.memory().numTensors).toBe(before);
        expect(withK.tokens).toEqual(without.tokens);
        expect(withK.logprobs).toEqual(without.logprobs);
      } finally {
        model.dispose();
      }
    });
  }
});
