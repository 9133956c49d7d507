/**
 * Gradient accumulation in the guarded update (src/core/ppo/update.ts): a minibatch cut into micro-batches, each
 * returning its share of the minibatch's loss, gives the same loss, statistics, gradient norm, clip factor and
 * applied weights as the whole minibatch at once — and the clip acts on the SUMMED gradient.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { jointGuardedStep, type UpdatePart } from '../src/core/ppo/update';
import { Rng } from '../src/core/base/rng';

type Stat = 'meanErr' | 'maxErr';

/** Rows X [n, D], targets y [n], a 0/1 weight per row (some rows do not count). */
function data(n: number, D: number, seed: number) {
  const rng = new Rng(seed);
  const X = Array.from({ length: n }, () => Array.from({ length: D }, () => rng.next() * 2 - 1));
  const y = Array.from({ length: n }, () => rng.next() * 4 - 2);
  const m: number[] = Array.from({ length: n }, (_, i) => (i % 3 === 2 ? 0 : 1));
  return { X, y, m };
}

/** Cut 0..n-1 into `k` contiguous slices of unequal sizes (the last one shorter). */
function slices(n: number, k: number): number[][] {
  const size = Math.ceil(n / k);
  return Array.from({ length: k }, (_, j) =>
    Array.from({ length: Math.max(0, Math.min(size, n - j * size)) }, (_, i) => j * size + i),
  ).filter((s) => s.length > 0);
}

async function runStep(micro: number, maxGradNorm: number) {
  const D = 5;
  const n = 11;
  const { X, y, m } = data(n, D, 7);
  const counted = m.reduce((a, b) => a + b, 0);
  const w = tf.variable(tf.tensor1d([0.3, -0.2, 0.5, 0.1, -0.4]), true, `mb_w_${micro}_${maxGradNorm}`);
  const opt = tf.train.adam(0.05);
  const parts = slices(n, micro);
  const part: UpdatePart<Stat> = {
    optimizer: opt,
    vars: [w],
    objective: (k) => {
      const rows = parts[k];
      const xs = tf.tensor2d(rows.map((i) => X[i]));
      const ys = tf.tensor1d(rows.map((i) => y[i]));
      const ms = tf.tensor1d(rows.map((i) => m[i]));
      const err = tf.sub(tf.squeeze(tf.matMul(xs, tf.reshape(w, [D, 1])), [1]), ys);
      const sq = tf.mul(tf.square(err), ms);
      // This micro-batch's share: its sum over the WHOLE minibatch's counted rows.
      return {
        loss: tf.div(tf.sum(sq), counted) as tf.Scalar,
        stats: {
          meanErr: tf.div(tf.sum(tf.mul(tf.abs(err), ms)), counted) as tf.Scalar,
          maxErr: tf.max(tf.mul(tf.abs(err), ms)) as tf.Scalar,
        },
      };
    },
  };
  const res = await jointGuardedStep<Stat>([part], maxGradNorm, {
    microBatches: parts.length,
    maxStats: ['maxErr'],
  });
  const after = Array.from(await w.data());
  opt.dispose();
  w.dispose();
  return { res, after, micros: parts.length };
}

/** The same step by plain loops in float64: loss, gradient, norm, and the stats. */
function plainReference() {
  const D = 5;
  const n = 11;
  const { X, y, m } = data(n, D, 7);
  const w = [0.3, -0.2, 0.5, 0.1, -0.4];
  const counted = m.reduce((a, b) => a + b, 0);
  let loss = 0;
  let meanErr = 0;
  let maxErr = 0;
  const grad = new Array(D).fill(0);
  for (let i = 0; i < n; i++) {
    const e = X[i].reduce((s, x, d) => s + x * w[d], 0) - y[i];
    loss += (m[i] * e * e) / counted;
    meanErr += (m[i] * Math.abs(e)) / counted;
    maxErr = Math.max(maxErr, m[i] * Math.abs(e));
    for (let d = 0; d < D; d++) grad[d] += (2 * m[i] * e * X[i][d]) / counted;
  }
  const norm = Math.sqrt(grad.reduce((s, g) => s + g * g, 0));
  return { loss, meanErr, maxErr, norm };
}

const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-12);

describe('gradient accumulation over micro-batches (jointGuardedStep)', () => {
  beforeAll(useCpu);

  it('one micro-batch matches the float64 loop (loss, statistics, gradient norm)', async () => {
    const ref = plainReference();
    const { res } = await runStep(1, 0);
    expect(rel(res.losses[0], ref.loss)).toBeLessThan(1e-5);
    expect(rel(res.stats.meanErr, ref.meanErr)).toBeLessThan(1e-5);
    expect(rel(res.stats.maxErr, ref.maxErr)).toBeLessThan(1e-5);
    expect(rel(res.gradNorms[0], ref.norm)).toBeLessThan(1e-5);
  });

  for (const maxGradNorm of [0, 0.1]) {
    it(`2, 3 and 11 micro-batches give the 1-micro-batch step (maxGradNorm ${maxGradNorm}; the clip on the summed gradient)`, async () => {
      const one = await runStep(1, maxGradNorm);
      if (maxGradNorm > 0) expect(one.res.clipScale).toBeLessThan(1); // the clip really acts
      for (const k of [2, 3, 11]) {
        const many = await runStep(k, maxGradNorm);
        expect(many.micros).toBe(k);
        expect(rel(many.res.losses[0], one.res.losses[0])).toBeLessThan(1e-6);
        expect(rel(many.res.gradNorms[0], one.res.gradNorms[0])).toBeLessThan(1e-6);
        expect(rel(many.res.clipScale, one.res.clipScale)).toBeLessThan(1e-6);
        expect(rel(many.res.stats.meanErr, one.res.stats.meanErr)).toBeLessThan(1e-6);
        expect(many.res.stats.maxErr).toBe(one.res.stats.maxErr);
        many.after.forEach((x, i) => expect(rel(x, one.after[i])).toBeLessThan(1e-6));
      }
    });
  }

  it("leaves no tensor behind (tfjs's own Adam leaks one per optimiser, so one optimiser serves every step)", async () => {
    const w = tf.variable(tf.tensor1d([0.5, -1, 2]), true, 'mb_leak_w');
    const opt = tf.train.adam(0.05);
    const x = tf.tensor2d([
      [1, 2, 3],
      [-1, 0, 2],
      [0.5, 0.5, 0.5],
    ]);
    const part: UpdatePart<Stat> = {
      optimizer: opt,
      vars: [w],
      objective: (k) =>
        tf.tidy(() => {
          const e = tf.matMul(tf.slice(x, [k, 0], [1, 3]), tf.reshape(w, [3, 1]));
          return {
            loss: tf.div(tf.sum(tf.square(e)), 3) as tf.Scalar,
            stats: {
              meanErr: tf.div(tf.sum(tf.abs(e)), 3) as tf.Scalar,
              maxErr: tf.max(tf.abs(e)) as tf.Scalar,
            },
          };
        }),
    };
    const step = () => jointGuardedStep<Stat>([part], 0.1, { microBatches: 3, maxStats: ['maxErr'] });
    await step(); // Adam makes its moment slots on the first step
    const before = tf.memory().numTensors;
    await step();
    await step();
    expect(tf.memory().numTensors).toBe(before);
    opt.dispose();
    tf.dispose([w, x]);
  });

  it('refuses a micro-batch count that is not a whole number ≥ 1', async () => {
    const w = tf.variable(tf.scalar(1));
    const opt = tf.train.sgd(0.1);
    const part: UpdatePart<never> = {
      optimizer: opt,
      vars: [w],
      objective: () => ({ loss: tf.square(w) as tf.Scalar, stats: {} }),
    };
    await expect(jointGuardedStep([part], 0, { microBatches: 0 })).rejects.toThrow(/whole number/);
    opt.dispose();
    w.dispose();
  });
});
