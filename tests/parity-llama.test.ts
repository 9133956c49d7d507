/**
 * Parity of the Llama / Qwen2 / Qwen3 model (src/core/model/llama.ts) with transformers: tiny random folders and the
 * logits and greedy tokens transformers 5 computes for them (scripts/make_llama_parity_fixtures.py), on the CPU and
 * WASM backends. Logits: the largest difference over all positions and ids, relative to the largest logit, ≤ 1e-4.
 * Greedy decoding: the same 12 tokens with and without the KV cache, from a raw and a chat-formatted prompt; the
 * prompt ids our tokenizer and chat template give equal transformers'.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { readFileSync } from 'node:fs';
import { useCpu } from './helpers/backend';
import { loadLM } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { generate } from '../src/core/model/sampling';
import { readSafetensors } from '../src/core/model/safetensors';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { isLlamaConfig } from '../src/core/model/config';

const FIX = 'tests/fixtures/parity-llama';
const FOLDERS = ['llama-tiny', 'qwen2-tiny', 'qwen3-tiny'];
const CHAT_USER = 'What is 17 + 25? Answer with a number.';
const RAW = 'The quick brown fox jumps over';
/** The largest relative logit difference measured per backend and folder (printed for the closing note). */
const measured: Record<string, number> = {};

interface Greedy {
  prompt_ids: number[];
  new_tokens: number[];
  greedy_logprobs: number[];
}
interface Expected {
  single: { input_ids: number[][] };
  batch: { input_ids: number[][]; attention_mask: number[][] };
  greedy_raw: Greedy;
  greedy_chat: Greedy;
}

function relDiff(got: Float32Array | number[], want: Float32Array): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < want.length; i++) {
    d = Math.max(d, Math.abs(got[i] - want[i]));
    m = Math.max(m, Math.abs(want[i]));
  }
  return d / m;
}

for (const backend of ['cpu', 'wasm'] as const) {
  describe(`Llama-family parity with transformers on ${backend}`, () => {
    beforeAll(async () => {
      if (backend === 'cpu') return useCpu();
      registerWasmExtraKernels();
      await tf.setBackend('wasm');
      await tf.ready();
      tf.env().set('PROD', true);
    });
    afterAll(async () => {
      await useCpu();
    });

    describe.each(FOLDERS)('%s', (name) => {
      const dir = `${FIX}/${name}`;
      const exp = JSON.parse(readFileSync(`${dir}/expected.json`, 'utf8')) as Expected;
      const ref = readSafetensors(new Uint8Array(readFileSync(`${dir}/expected.safetensors`)), 'expected');

      it('loads as its family with the tokenizer of its folder', async () => {
        const { model, tokenizer, config } = await loadLM(nodeFiles(dir));
        try {
          expect(tf.getBackend()).toBe(backend);
          expect(isLlamaConfig(config)).toBe(true);
          expect(config.model_type).toBe(name.split('-')[0]);
          expect(tokenizer.kind).toBe('hf');
          expect(tokenizer.encode(RAW)).toEqual(exp.single.input_ids[0]);
          expect(tokenizer.stopIds).toEqual(expect.arrayContaining([511, 509]));
        } finally {
          model.dispose();
        }
      });

      it('logits of one prompt and of a left-padded batch within 1e-4 of transformers', async () => {
        const { model } = await loadLM(nodeFiles(dir));
        try {
          for (const [key, ids, mask] of [
            ['single_logits', exp.single.input_ids, exp.single.input_ids.map((r) => r.map(() => 1))],
            ['batch_logits', exp.batch.input_ids, exp.batch.attention_mask],
          ] as const) {
            const out = tf.tidy(() =>
              model.logits(
                tf.tensor2d(ids as number[][], undefined, 'int32'),
                tf.tensor2d(mask as number[][], undefined, 'int32'),
              ),
            );
            const got = (await out.data()) as Float32Array;
            out.dispose();
            const want = ref.tensors.get(key)!;
            expect(got.length).toBe(want.data.length);
            // Padded positions of the batch are not compared (transformers' values there depend on its mask fill).
            const keep = (mask as number[][]).flat();
            const V = want.shape[2];
            const g: number[] = [];
            const w: number[] = [];
            keep.forEach((m, p) => {
              if (!m) return;
              for (let v = 0; v < V; v++) {
                g.push(got[p * V + v]);
                w.push(want.data[p * V + v]);
              }
            });
            const rel = relDiff(g, Float32Array.from(w));
            measured[`${backend} ${name} ${key}`] = rel;
            expect(rel).toBeLessThanOrEqual(1e-4);
          }
        } finally {
          model.dispose();
        }
      });

      for (const useCache of [true, false]) {
        it(`greedy tokens equal transformers' from a raw and a chat prompt (${useCache ? 'KV cache' : 'no cache'})`, async () => {
          const { model, tokenizer } = await loadLM(nodeFiles(dir));
          try {
            const chat = tokenizer.encodeWithSpecials!(tokenizer.chatPrompt!(CHAT_USER));
            expect(chat).toEqual(exp.greedy_chat.prompt_ids);
            // The rotary table is made on first use and kept by the model (2 tensors); nothing else may stay.
            let before = -1;
            for (const g of [exp.greedy_raw, exp.greedy_chat]) {
              const out = await generate(model, [g.prompt_ids], {
                maxNewTokens: g.new_tokens.length,
                temperature: 0,
                rng: 1,
                padId: tokenizer.padId,
                stopToken: null,
                useCache,
              });
              expect(out.tokens[0]).toEqual(g.new_tokens);
              const lpErr = Math.max(...out.logprobs[0].map((lp, i) => Math.abs(lp - g.greedy_logprobs[i])));
              expect(lpErr).toBeLessThan(1e-4);
              if (before >= 0) expect(tf.memory().numTensors).toBe(before);
              before = tf.memory().numTensors;
            }
          } finally {
            model.dispose();
          }
        });
      }
    });
  });
}

describe('measured', () => {
  it('prints the largest relative logit differences', () => {
    console.log(JSON.stringify(measured, null, 1));
    expect(Object.keys(measured).length).toBeGreaterThan(0);
  });
});
