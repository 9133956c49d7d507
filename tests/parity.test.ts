/**
 * Parity with an independent reference: tiny random GPT-2 folders in Hugging Face layout and the logits a
 * plain-PyTorch implementation of the published GPT-2 equations computes for them
 * (scripts/make_parity_fixtures.py, run with Debian's python3-torch).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { readFileSync } from 'node:fs';
import { useCpu } from './helpers/backend';
import { loadLM, loadScalar } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { generate } from '../src/core/model/sampling';

const FIX = 'tests/fixtures/parity';

interface Expected {
  single: { input_ids: number[][]; attention_mask: number[][]; logits: number[][][] };
  batch_left_padded: {
    input_ids: number[][];
    attention_mask: number[][];
    logits: number[][][];
    score_values?: number[][];
    score_last?: number[];
  };
  greedy: { prompt_ids: number[]; new_tokens: number[]; greedy_logprobs: number[] };
}

function maxAbsDiff(a: number[], b: number[]): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

describe.each(['tiny-prefixed', 'tiny-plain'])('parity with the PyTorch reference: %s', (name) => {
  const dir = `${FIX}/${name}`;
  const exp = JSON.parse(readFileSync(`${dir}/expected.json`, 'utf8')) as Expected;

  beforeAll(useCpu);

  async function logitsOf(ids: number[][], mask: number[][]): Promise<number[][][]> {
    const { model } = await loadLM(nodeFiles(dir));
    const out = tf.tidy(() =>
      model.logits(tf.tensor2d(ids, undefined, 'int32'), tf.tensor2d(mask, undefined, 'int32')),
    );
    const arr = (await out.array()) as number[][][];
    out.dispose();
    model.dispose();
    return arr;
  }

  it('logits of one sequence match to 1e-4', async () => {
    const got = await logitsOf(exp.single.input_ids, exp.single.attention_mask);
    for (let t = 0; t < got[0].length; t++) {
      expect(maxAbsDiff(got[0][t], exp.single.logits[0][t])).toBeLessThan(1e-4);
    }
  });

  it('logits of a left-padded batch match at every real position to 1e-4', async () => {
    const c = exp.batch_left_padded;
    const got = await logitsOf(c.input_ids, c.attention_mask);
    let compared = 0;
    for (let b = 0; b < got.length; b++) {
      for (let t = 0; t < got[b].length; t++) {
        if (!c.attention_mask[b][t]) continue;
        expect(maxAbsDiff(got[b][t], c.logits[b][t])).toBeLessThan(1e-4);
        compared++;
      }
    }
    expect(compared).toBe(c.attention_mask.flat().filter((m) => m === 1).length);
  });

  it('greedy generation with the KV cache gives the reference tokens and logprobs', async () => {
    const { model } = await loadLM(nodeFiles(dir));
    const g = exp.greedy;
    const r = await generate(model, [g.prompt_ids], {
      maxNewTokens: g.new_tokens.length,
      temperature: 0,
      padId: 257,
      rng: 0,
    });
    model.dispose();
    expect(r.tokens[0]).toEqual(g.new_tokens);
    expect(maxAbsDiff(r.logprobs[0], g.greedy_logprobs)).toBeLessThan(1e-4);
  });

  if (exp.batch_left_padded.score_values) {
    it('the scalar-head model matches at every real position and at the last real token', async () => {
      const c = exp.batch_left_padded;
      const m = await loadScalar(nodeFiles(dir), 'reward_model.safetensors');
      const [vals, last] = tf.tidy(() => {
        const ids = tf.tensor2d(c.input_ids, undefined, 'int32');
        const mask = tf.tensor2d(c.attention_mask, undefined, 'int32');
        return [m.values(ids, mask), m.lastTokenValues(ids, mask)];
      });
      const v = (await vals.array()) as number[][];
      const l = (await last.array()) as number[];
      tf.dispose([vals, last]);
      m.dispose();
      for (let b = 0; b < v.length; b++) {
        for (let t = 0; t < v[b].length; t++) {
          if (c.attention_mask[b][t]) expect(Math.abs(v[b][t] - c.score_values![b][t])).toBeLessThan(1e-4);
        }
      }
      expect(maxAbsDiff(l, c.score_last!)).toBeLessThan(1e-4);
    });
  }
});
