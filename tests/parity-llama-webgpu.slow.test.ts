/**
 * tests/parity-llama.test.ts's checks on the WebGPU backend, through Dawn in Node (SwiftShader where there is no
 * GPU): the Llama / Qwen2 / Qwen3 tiny folders' logits within 1e-4 (relative to the largest logit) of transformers',
 * and the same greedy tokens with and without the KV cache, from a raw and a chat-formatted prompt.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { readFileSync } from 'node:fs';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { loadLM } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { generate } from '../src/core/model/sampling';
import { readSafetensors } from '../src/core/model/safetensors';

const adapter = await webGpuAdapter();
const FIX = 'tests/fixtures/parity-llama';

interface Greedy {
  prompt_ids: number[];
  new_tokens: number[];
}

describe('Llama-family parity with transformers on WebGPU (Node, Dawn)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  const measured: Record<string, number> = {};

  describe.each(['llama-tiny', 'qwen2-tiny', 'qwen3-tiny'])('%s', (name) => {
    const dir = `${FIX}/${name}`;
    const exp = JSON.parse(readFileSync(`${dir}/expected.json`, 'utf8'));
    const ref = readSafetensors(new Uint8Array(readFileSync(`${dir}/expected.safetensors`)), 'expected');

    it('logits of one prompt and of a left-padded batch within 1e-4; greedy tokens equal, with and without the cache', async () => {
      expect(tf.getBackend()).toBe('webgpu');
      const { model, tokenizer } = await loadLM(nodeFiles(dir));
      try {
        for (const [key, ids, mask] of [
          ['single_logits', exp.single.input_ids, exp.single.input_ids.map((r: number[]) => r.map(() => 1))],
          ['batch_logits', exp.batch.input_ids, exp.batch.attention_mask],
        ] as [string, number[][], number[][]][]) {
          const out = tf.tidy(() =>
            model.logits(tf.tensor2d(ids, undefined, 'int32'), tf.tensor2d(mask, undefined, 'int32')),
          );
          const got = (await out.data()) as Float32Array;
          out.dispose();
          const want = ref.tensors.get(key)!;
          const V = want.shape[2];
          let d = 0;
          let m = 0;
          mask.flat().forEach((keep, p) => {
            if (!keep) return;
            for (let v = 0; v < V; v++) {
              d = Math.max(d, Math.abs(got[p * V + v] - want.data[p * V + v]));
              m = Math.max(m, Math.abs(want.data[p * V + v]));
            }
          });
          measured[`${name} ${key}`] = d / m;
          expect(d / m).toBeLessThanOrEqual(1e-4);
        }
        for (const useCache of [true, false]) {
          for (const g of [exp.greedy_raw, exp.greedy_chat] as Greedy[]) {
            const out = await generate(model, [g.prompt_ids], {
              maxNewTokens: g.new_tokens.length,
              temperature: 0,
              rng: 1,
              padId: tokenizer.padId,
              stopToken: null,
              useCache,
            });
            expect(out.tokens[0], `${useCache ? 'cache' : 'no cache'}`).toEqual(g.new_tokens);
          }
        }
        expect(await webGpuErrors()).toEqual([]);
      } finally {
        model.dispose();
      }
    });
  });

  it('prints the largest relative logit differences', () => {
    console.log(JSON.stringify(measured, null, 1));
    expect(Object.keys(measured).length).toBe(6);
  });
});
