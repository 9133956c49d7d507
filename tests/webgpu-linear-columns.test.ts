/**
 * The column program of kernels/webgpu-linear.ts (ColumnsMatMulProgram): what a software adapter (SwiftShader,
 * lavapipe) runs for a fused linear of at most LINEAR_SOFTWARE_COLUMN_ROWS rows instead of the 64×64 tiles, one
 * output column per thread over all of K. It sums in the tiles' order with the tiles' fma, so its outputs are the
 * tiles' bit for bit: checked here on whole models, through every option the fused linears take — GPT-2's
 * layer-norm prologue, gelu_new and residual epilogues and LoRA up-projection (decode and training), and Llama's
 * RMSNorm prologue, q|k|v in parts, biases, SwiGLU and the packed-f16 base (Qwen2 in f32, Qwen3 in f16) — on
 * log-probs, LoRA gradients and greedy tokens. The kernel-level cases (values and gradients against a float64
 * loop) are in tests/webgpu-linear.test.ts.
 */
import { describe, it, expect, beforeAll, afterEach } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  LINEAR_SOFTWARE_COLUMN_ROWS,
  linearPlan,
  resetWebGpuLinearSmallRows,
  setWebGpuLinearColumns,
  setWebGpuLinearSmallRows,
} from '../src/core/kernels/webgpu-linear';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { LoraAdapters } from '../src/core/model/lora';
import { gatherRows } from '../src/core/model/gather';
import { generate } from '../src/core/model/sampling';
import { hostWeights, tinyGpt2, tinyQwen2, tinyQwen3 } from './helpers/f16-base';

const adapter = await webGpuAdapter();

afterEach(() => {
  setWebGpuLinearColumns(null);
  resetWebGpuLinearSmallRows();
});

describe('linearPlan: the column program (no GPU needed)', () => {
  it('up to 16 rows: blocks of 1, 2, 4 or 8 rows × 256 columns; beyond, and for dW, the other programs', () => {
    setWebGpuLinearColumns(true);
    expect(LINEAR_SOFTWARE_COLUMN_ROWS).toBe(16);
    expect(linearPlan(1, 300)).toEqual({ program: 'columns', groups: [2, 1], rows: 1, columns: 256 });
    expect(linearPlan(2, 2304)).toEqual({ program: 'columns', groups: [9, 1], rows: 2, columns: 256 });
    expect(linearPlan(3, 70)).toEqual({ program: 'columns', groups: [1, 1], rows: 4, columns: 256 });
    expect(linearPlan(16, 768)).toEqual({ program: 'columns', groups: [3, 2], rows: 8, columns: 256 });
    expect(linearPlan(17, 768).program).not.toBe('columns');
    expect(linearPlan(8, 768, true).program).toBe('tiled');
    setWebGpuLinearColumns(false);
    expect(linearPlan(16, 768).program).not.toBe('columns');
  });
});

/** Object.is on every element: the same bits (NaN included), not merely close. */
function expectSameBits(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  expect(a.length, what).toBe(b.length);
  let differ = 0;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) differ++;
  expect(differ, `${what}: elements that differ`).toBe(0);
}

interface Out {
  logprobs: Float32Array;
  grads: Float32Array[];
  tokens: number[][];
  genLogprobs: number[][];
}

/**
 * Per-token log-probs of a left-padded batch of 2 × 6 (12 rows through each linear) and the LoRA gradients of their
 * weighted sum, then greedy generation of 4 tokens for 2 prompts (the decode step's 2 rows).
 */
async function runModel(m: GPT2 | Llama, adapters: LoraAdapters): Promise<Out> {
  const V = m.config.vocab_size;
  const B = 2;
  const T = 6;
  const t = (i: number) => (i * 37 + 5) % (V - 3);
  const ids = [t(1), t(2), t(3), t(4), t(5), t(6), 0, 0, t(7), t(8), t(9), t(10)];
  const mask = [1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1];
  const targets = [t(2), t(3), t(4), t(5), t(6), t(11), 0, 0, t(8), t(9), t(10), t(12)];
  const weights = tf.tensor1d(mask.map((v, i) => v * Math.cos(i + 1)));
  const idsT = tf.tensor2d(ids, [B, T], 'int32');
  const maskT = tf.tensor2d(mask, [B, T], 'int32');
  const targetsT = tf.tensor1d(targets, 'int32');
  let lp: tf.Tensor | null = null;
  const g = tf.variableGrads(() => {
    const logits = tf.reshape(m.logits(idsT, maskT), [B * T, V]) as tf.Tensor2D;
    const l = tf.sub(gatherRows(logits, targetsT), tf.logSumExp(logits, 1));
    lp = tf.keep(l);
    return tf.sum(tf.mul(l, weights)) as tf.Scalar;
  }, adapters.variables());
  const logprobs = (await lp!.data()) as Float32Array;
  const grads: Float32Array[] = [];
  for (const v of adapters.variables()) grads.push((await g.grads[v.name].data()) as Float32Array);
  tf.dispose([lp!, g.value, ...Object.values(g.grads), weights, idsT, maskT, targetsT]);
  const gen = await generate(m, [ids.slice(0, 4), ids.slice(8, 11)], {
    maxNewTokens: 4,
    temperature: 0,
    padId: 299,
    rng: 1,
  });
  return { logprobs, grads, tokens: gen.tokens, genLogprobs: gen.logprobs };
}

/** Whether the backend has compiled a column program (tfjs caches pipelines under the program's shaderKey). */
function columnPipelines(): number {
  const cache = (tf.backend() as unknown as { pipelineCache: Record<string, unknown> }).pipelineCache;
  return Object.keys(cache).filter((k) => k.startsWith('perfLinearCols_')).length;
}

describe('the column program on Node WebGPU: the tiles bit for bit, on whole models', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('a software adapter runs it by default up to 16 rows; setWebGpuLinearSmallRows (the GPU route) turns it off', () => {
    resetWebGpuLinearSmallRows();
    expect(linearPlan(16, 768).program).toBe(adapter!.software ? 'columns' : 'rows');
    expect(linearPlan(17, 768).program).toBe(adapter!.software ? 'tiled' : 'rows');
    setWebGpuLinearSmallRows(64);
    expect(linearPlan(16, 768).program).toBe('rows');
  });

  const models: [string, () => { m: GPT2 | Llama; base: GPT2 | Llama; adapters: LoraAdapters }][] = [
    [
      'GPT-2 under LoRA r 4 (layer-norm prologue, gelu_new, residual, LoRA up-projection)',
      () => {
        const base = GPT2.random(tinyGpt2, 3, false);
        const adapters = LoraAdapters.create(tinyGpt2, { lora: 4 }, 5);
        return { m: base.withLora(adapters), base, adapters };
      },
    ],
    [
      'Qwen2 under LoRA r 4, f32 base (RMSNorm prologue, q|k|v in parts with biases, SwiGLU)',
      () => {
        const c = tinyQwen2;
        const base = Llama.fromArrays(c, hostWeights(c, 7, 0.08, false), false, 'q2');
        const adapters = LoraAdapters.create(c, { lora: 4 }, 5);
        return { m: base.withLora(adapters), base, adapters };
      },
    ],
    [
      'Qwen3 under LoRA r 4, the base packed in f16 (q_norm / k_norm, tied head)',
      () => {
        const c = tinyQwen3;
        const base = Llama.fromArrays(c, hostWeights(c, 9, 0.08, true), false, 'q3', { baseDtype: 'f16' });
        const adapters = LoraAdapters.create(c, { lora: 4 }, 5);
        return { m: base.withLora(adapters), base, adapters };
      },
    ],
  ];
  for (const [name, make] of models) {
    it(`${name}: log-probs, LoRA gradients, greedy tokens and their log-probs`, async () => {
      const before = tf.memory().numTensors;
      const { m, base, adapters } = make();
      // Non-zero B: the LoRA terms take part in every output.
      for (const mod of adapters.modules.values()) {
        const v = tf.randomNormal(mod.b.shape, 0, 0.05, 'float32', 13);
        mod.b.assign(v);
        v.dispose();
      }
      try {
        const compiled = columnPipelines();
        setWebGpuLinearColumns(true);
        const cols = await runModel(m, adapters);
        expect(columnPipelines()).toBeGreaterThan(compiled);
        setWebGpuLinearColumns(false);
        setWebGpuLinearSmallRows(0);
        const tiled = await runModel(m, adapters);
        expectSameBits(cols.logprobs, tiled.logprobs, 'log-probs');
        cols.grads.forEach((g, i) => expectSameBits(g, tiled.grads[i], `LoRA gradient ${i}`));
        expect(cols.tokens).toEqual(tiled.tokens);
        expectSameBits(cols.genLogprobs.flat(), tiled.genLogprobs.flat(), 'generated log-probs');
        expect(cols.logprobs.every(Number.isFinite)).toBe(true);
      } finally {
        adapters.dispose();
        base.dispose();
      }
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);
    }, 120_000);
  }
});
