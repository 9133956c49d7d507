/**
 * The FLOP count of src/bench/perf/flops.ts against what the code actually multiplies: profile the CPU kernels of
 * a forward and of a training step and sum 2·m·k·n over every BatchMatMul. The MFU of `npm run bench` divides by
 * this count, so it must be the products our GPT-2 really computes.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { ScalarModel } from '../src/core/model/heads';
import { lmLoss } from '../src/core/sft/sft';
import { forwardFlops, lmTrainStepFlops, ppoUpdateFlops, trainFlops } from '../src/bench/perf/flops';

const config = parseGPT2Config({
  vocab_size: 258,
  n_positions: 32,
  n_embd: 16,
  n_layer: 2,
  n_head: 2,
  tokenizer: 'bytes',
  bos_token_id: 256,
  eos_token_id: 256,
  pad_token_id: 257,
});

/** Σ 2·m·k·n over the BatchMatMul kernels f runs (batch dims multiply in). */
async function matmulFlopsOf(f: () => tf.TensorContainer): Promise<number> {
  const prof = await tf.profile(f);
  let total = 0;
  for (const k of prof.kernels) {
    if (k.name !== 'BatchMatMul') continue;
    // a = [batch, m, k] and b = [batch, k, n] up to transposes (our model never broadcasts a matmul batch):
    // |a|·|b| = batch²·m·n·k², so k = √(|a|·|b| / (batch²·m·n)).
    const [a, b] = k.inputShapes as number[][];
    const out = k.outputShapes[0] as number[];
    const size = (s: number[]) => s.reduce((x, y) => x * y, 1);
    const batch = size(out.slice(0, -2));
    const [m, n] = out.slice(-2);
    const shared = Math.round(Math.sqrt((size(a) * size(b)) / (batch * batch * m * n)));
    total += 2 * size(out) * shared;
  }
  tf.dispose(prof.result as tf.Tensor);
  return total;
}

describe('model FLOP count', () => {
  let model: GPT2;
  beforeAll(async () => {
    await useCpu();
    model = GPT2.random(config, 1);
  });

  it('forward: trunk on every token + LM head on the rows it is applied to', async () => {
    const B = 3;
    const T = 10;
    const ids = tf.tensor2d(
      Array.from({ length: B * T }, (_, i) => i % 250),
      [B, T],
      'int32',
    );
    const mask = tf.onesLike(ids) as tf.Tensor2D;
    const got = await matmulFlopsOf(() => model.logits(ids, mask));
    expect(got).toBe(forwardFlops(config, B, T, B * T));
    tf.dispose([ids, mask]);
  });

  it('training step = 3 × forward (lmLoss through variableGrads)', async () => {
    const B = 2;
    const T = 8;
    const w = tf.tensor2d(
      Array.from({ length: B * (T + 1) }, (_, i) => (i * 7) % 250),
      [B, T + 1],
      'int32',
    );
    const got = await matmulFlopsOf(() => {
      const { value, grads } = tf.variableGrads(() => lmLoss(model, w), model.trainableVariables());
      tf.dispose(grads);
      return value;
    });
    expect(got).toBe(lmTrainStepFlops(config, B, T));
    w.dispose();
  });

  it('value model: trunk + scalar head on every position, 3× for training', async () => {
    const v = ScalarModel.fromTrunk(model, true);
    const ids = tf.tensor2d(
      Array.from({ length: 2 * 6 }, (_, i) => i),
      [2, 6],
      'int32',
    );
    const mask = tf.onesLike(ids) as tf.Tensor2D;
    const got = await matmulFlopsOf(() => {
      const { value, grads } = tf.variableGrads(
        () => tf.sum(v.values(ids, mask)) as tf.Scalar,
        v.trainableVariables(),
      );
      tf.dispose(grads);
      return value;
    });
    expect(got).toBe(trainFlops(config, 2, 6, 0, 12));
    v.dispose();
    tf.dispose([ids, mask]);
  });

  it('PPO update = epochs × (policy + value) training passes', () => {
    const o = { batch: 4, Tq: 8, R: 5, epochs: 2 };
    const T = 13;
    expect(ppoUpdateFlops(config, o)).toBe(
      2 * (trainFlops(config, 4, T, 4 * 5) + trainFlops(config, 4, T, 0, 4 * T)),
    );
    // ≈ 6·N·tokens per model for a small vocabulary and short context (the rule of thumb), N = 12·L·C².
    const N = 12 * config.n_layer * config.n_embd ** 2;
    const rule = 2 * 2 * 6 * N * 4 * T;
    expect(ppoUpdateFlops(config, o) / rule).toBeGreaterThan(1);
  });
});
