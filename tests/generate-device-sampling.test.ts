/**
 * generate() samples through chooseTokens (src/core/model/sampling.ts): on WebGPU one fused WGSL dispatch
 * (model/sample-op.ts), on CPU the probabilities read back with `await data()` and walked in JavaScript
 * (pickTokens' rule). The same model, prompts, seed, temperature, top-k and top-p give the same tokens on both,
 * with log-probs within 1e-4, and on WebGPU the decode loop reads back far fewer buffers than it decodes tokens
 * (issue #22: only the chosen ids travel, at the end or at the "all rows stopped?" checks). Greedy decoding runs
 * the same kernel at temperature 0 on WebGPU (greedyTokensWebGpu): the CPU backend's tokens and log-probs, with the
 * recorded decode and without it (the kernel alone: tests/greedy-device.test.ts).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import { GPT2 } from '../src/core/model/gpt2';
import { generate } from '../src/core/model/sampling';
import { setDecodeReplay } from '../src/core/model/decode-replay';
import { parseGPT2Config } from '../src/core/model/config';
import { countDispatches } from '../src/core/kernels/webgpu-count';

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
const prompts = [[72, 101, 108], [84, 104, 101, 32, 109], [65], [119, 104, 121, 32]];
const opts = { maxNewTokens: 16, temperature: 0.9, topK: 20, topP: 0.95, padId: 257, rng: 7 };
const greedy = { maxNewTokens: 16, temperature: 0, padId: 257, rng: 7 };

const adapter = await webGpuAdapter();

describe('generate() samples the same tokens on CPU (host walk) and WebGPU (fused kernel)', () => {
  if (!adapter) return skipWithoutAdapter();
  let arrays: Map<string, Float32Array>;
  let cpu: { tokens: number[][]; logprobs: number[][] };
  let cpuGreedy: { tokens: number[][]; logprobs: number[][] };
  beforeAll(async () => {
    tf.env().set('PROD', true);
    await tf.setBackend('cpu');
    const m = GPT2.random(cfg, 3, false);
    // Larger weights: logits that vary, so top-k and top-p cut real mass.
    for (const v of m.params.values()) if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 8)));
    arrays = new Map();
    for (const [k, v] of m.params) arrays.set(k, (await v.data()) as Float32Array);
    cpu = await generate(m, prompts, opts);
    cpuGreedy = await generate(m, prompts, greedy);
    m.dispose();
  });

  it('tokens equal, log-probs within 1e-4; few readbacks on WebGPU', async () => {
    await useNodeWebGpu();
    const m = GPT2.fromArrays(cfg, arrays, false);
    try {
      let gpu: { tokens: number[][]; logprobs: number[][] } | null = null;
      const counted = await countDispatches(async () => {
        gpu = await generate(m, prompts, opts);
      });
      expect(gpu!.tokens).toEqual(cpu.tokens);
      for (let i = 0; i < prompts.length; i++)
        for (let t = 0; t < cpu.logprobs[i].length; t++)
          expect(Math.abs(gpu!.logprobs[i][t] - cpu.logprobs[i][t])).toBeLessThan(1e-4);
      // No per-token readback of the logits: far fewer mapAsync calls than decoded tokens.
      expect(counted.readbacks).toBeLessThan(opts.maxNewTokens / 2);
    } finally {
      m.dispose();
    }
  });

  it('greedy (the same kernel at temperature 0): the CPU backend’s tokens, log-probs within 1e-5, recorded and not', async () => {
    await useNodeWebGpu();
    const m = GPT2.fromArrays(cfg, arrays, false);
    try {
      for (const replay of [true, false]) {
        setDecodeReplay(replay);
        const gpu = await generate(m, prompts, greedy);
        expect(gpu.tokens, `replay ${replay}`).toEqual(cpuGreedy.tokens);
        for (let i = 0; i < prompts.length; i++)
          for (let t = 0; t < cpuGreedy.logprobs[i].length; t++)
            expect(Math.abs(gpu.logprobs[i][t] - cpuGreedy.logprobs[i][t])).toBeLessThan(1e-5);
      }
    } finally {
      setDecodeReplay(true);
      m.dispose();
    }
  });
});
