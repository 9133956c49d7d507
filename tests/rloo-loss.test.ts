/**
 * RLOO's loss is TRL RLOOTrainer's (docs/formats.md §7, trl 1.13 rloo_trainer.py `_compute_loss`): one ratio per
 * sequence exp(Σ_t logp − Σ_t logp_old) over counted tokens, clipped, and the per-sequence loss averaged over the
 * minibatch's sequences. Checked against a hand-worked batch, a plain-loop reference (loss, gradient, statistics),
 * and micro-batches of 4 against one micro-batch of 16 through the guarded update.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import {
  clipFractions,
  policyLoss,
  ratioLevelOf,
  sequencePolicyLoss,
  type Denominators,
} from '../src/core/ppo/losses';
import { jointGuardedStep, type UpdatePart } from '../src/core/ppo/update';
import { Rng } from '../src/core/base/rng';

beforeAll(async () => {
  await useCpu();
});

/** Plain loop: TRL's per-sequence loss, its gradient d loss / d logp[i][t], and the per-sequence statistics. */
function reference(
  logp: number[][],
  old: number[][],
  adv: number[],
  mask: number[][],
  eps: number,
  clamp: number,
) {
  const n = logp.length;
  let loss = 0;
  let clipped = 0;
  let approxKl = 0;
  let ratioSum = 0;
  let ratioMax = 0;
  let low = 0;
  let high = 0;
  const grad = logp.map((r) => r.map(() => 0));
  for (let i = 0; i < n; i++) {
    let s = 0;
    for (let t = 0; t < logp[i].length; t++) if (mask[i][t]) s += logp[i][t] - old[i][t];
    const sc = Math.min(clamp, Math.max(-clamp, s));
    const rho = Math.exp(sc);
    const rhoClip = Math.min(1 + eps, Math.max(1 - eps, rho));
    const l1 = -adv[i] * rho;
    const l2 = -adv[i] * rhoClip;
    loss += Math.max(l1, l2) / n;
    if (l2 > l1) clipped++;
    // d/d logp of −A·ρ (unclipped branch chosen, clamp not hit): −A·ρ at every counted token, / n.
    if (l1 >= l2 && Math.abs(s) < clamp) {
      for (let t = 0; t < logp[i].length; t++) if (mask[i][t]) grad[i][t] = (-adv[i] * rho) / n;
    }
    approxKl += (0.5 * s * s) / n;
    ratioSum += Math.exp(s);
    ratioMax = Math.max(ratioMax, Math.exp(s));
    if (Math.exp(s) < 1 - eps && adv[i] < 0) low++;
    if (Math.exp(s) > 1 + eps && adv[i] > 0) high++;
  }
  return {
    loss,
    grad,
    clipFrac: clipped / n,
    approxKl,
    ratioMean: ratioSum / n,
    ratioMax,
    low: low / n,
    high: high / n,
  };
}

const broadcast = (adv: number[], mask: number[][]) => mask.map((r, i) => r.map((m) => m * adv[i]));

describe('RLOO sequence-level loss (TRL RLOOTrainer)', () => {
  it('ratioLevelOf: sequence for rloo only', () => {
    expect(ratioLevelOf('rloo')).toBe('sequence');
    for (const a of ['ppo', 'grpo', 'reinforce++']) expect(ratioLevelOf(a)).toBe('token');
  });

  it('matches a hand-worked batch of 3 sequences', async () => {
    // Row 0: Σ log ratio = 0.1 − 0.05 = 0.05 (third token is padding, its wild value must not count),
    //   ρ = e^0.05 = 1.051271096, A = 1: unclipped (ρ < 1.2), L = −1.051271096.
    // Row 1: Σ = 0.3 + 0.2 + 0.1 = 0.6, ρ = e^0.6 = 1.8221188, A = 2 > 0: clipped at 1.2, L = max(−3.6442376, −2.4) = −2.4.
    // Row 2: Σ = −0.4, ρ = e^−0.4 = 0.670320046, A = −1: L = max(0.670320046, 0.8) = 0.8 (clipped from below).
    // loss = (−1.051271096 − 2.4 + 0.8) / 3 = −0.883757032.
    const logp = [
      [-1.0, -2.0, 50],
      [-0.7, -0.8, -0.9],
      [-1.4, -1.0, -1.0],
    ];
    const old = [
      [-1.1, -1.95, -3],
      [-1.0, -1.0, -1.0],
      [-1.0, -1.0, -1.0],
    ];
    const mask = [
      [1, 1, 0],
      [1, 1, 1],
      [1, 1, 1],
    ];
    const adv = [1, 2, -1];
    const out = policyLoss(
      tf.tensor2d(logp),
      tf.tensor2d(old),
      tf.tensor2d(broadcast(adv, mask)),
      tf.tensor2d(mask),
      0.2,
      20,
      { ratioLevel: 'sequence', aggregation: 'token-mean' },
    );
    expect(await out.loss.data()).toHaveLength(1);
    expect(out.loss.dataSync()[0]).toBeCloseTo(-0.883757032, 6);
    expect(out.clipFrac.dataSync()[0]).toBeCloseTo(2 / 3, 6);
    expect(out.ratioMax.dataSync()[0]).toBeCloseTo(1.8221188, 5);
    expect(out.approxKl.dataSync()[0]).toBeCloseTo((0.5 * (0.05 ** 2 + 0.6 ** 2 + 0.4 ** 2)) / 3, 6);
    const cf = clipFractions(
      tf.tensor2d(logp),
      tf.tensor2d(old),
      tf.tensor2d(broadcast(adv, mask)),
      tf.tensor2d(mask),
      0.2,
      undefined,
      'sequence',
    );
    expect(cf.low.dataSync()[0]).toBeCloseTo(1 / 3, 6);
    expect(cf.high.dataSync()[0]).toBeCloseTo(1 / 3, 6);
    // The per-token surrogate gives a different number on the same batch (so the test can tell them apart).
    const perToken = policyLoss(
      tf.tensor2d(logp),
      tf.tensor2d(old),
      tf.tensor2d(broadcast(adv, mask)),
      tf.tensor2d(mask),
      0.2,
      20,
    );
    expect(Math.abs(perToken.loss.dataSync()[0] - -0.883757032)).toBeGreaterThan(0.1);
  });

  it('loss, gradient and statistics equal the plain-loop reference on a random batch', () => {
    const rng = new Rng(3);
    const n = 7;
    const R = 5;
    const mask = Array.from({ length: n }, (_, i) =>
      Array.from({ length: R }, (_, t) => (t < 1 + (i % R) ? 1 : 0)),
    );
    const old = mask.map((r) => r.map(() => -0.5 - rng.next() * 2));
    const logp = old.map((r) => r.map((v) => v + (rng.next() - 0.5) * 0.4));
    const adv = Array.from({ length: n }, () => rng.next() * 2 - 1);
    const ref = reference(logp, old, adv, mask, 0.2, 20);
    const x = tf.variable(tf.tensor2d(logp));
    const { value, grads } = tf.variableGrads(
      () =>
        sequencePolicyLoss(x, tf.tensor2d(old), tf.tensor2d(broadcast(adv, mask)), tf.tensor2d(mask), 0.2, 20)
          .loss,
      [x],
    );
    expect(value.dataSync()[0]).toBeCloseTo(ref.loss, 6);
    const g = grads[x.name].arraySync() as number[][];
    for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) expect(g[i][t]).toBeCloseTo(ref.grad[i][t], 6);
    const stats = sequencePolicyLoss(
      tf.tensor2d(logp),
      tf.tensor2d(old),
      tf.tensor2d(broadcast(adv, mask)),
      tf.tensor2d(mask),
      0.2,
      20,
    );
    expect(stats.clipFrac.dataSync()[0]).toBeCloseTo(ref.clipFrac, 6);
    expect(stats.approxKl.dataSync()[0]).toBeCloseTo(ref.approxKl, 6);
    expect(stats.ratioMean.dataSync()[0]).toBeCloseTo(ref.ratioMean, 6);
    expect(stats.ratioMax.dataSync()[0]).toBeCloseTo(ref.ratioMax, 6);
    x.dispose();
  });

  it('a summed log ratio past logRatioClamp is clamped in the loss (no gradient) and counted', () => {
    const out = sequencePolicyLoss(
      tf.tensor2d([[3, 3]]),
      tf.tensor2d([[0, 0]]),
      tf.tensor2d([[-1, -1]]),
      tf.tensor2d([[1, 1]]),
      0.2,
      5,
    );
    // Σ = 6 > 5: ρ = e^5 in the loss, A = −1: L = max(e^5, 1.2) = e^5.
    expect(out.loss.dataSync()[0]).toBeCloseTo(Math.exp(5), 3);
    expect(out.logRatioClampFrac.dataSync()[0]).toBe(1);
  });

  it('micro-batches of 4 give the same loss, statistics and weights as one of 16 (mean over the minibatch)', async () => {
    const n = 16;
    const R = 4;
    const rng = new Rng(11);
    const mask: number[][] = Array.from({ length: n }, (_, i) =>
      Array.from({ length: R }, (_, t) => (t <= i % R ? 1 : 0)),
    );
    const old = mask.map((r) => r.map(() => -1 - rng.next()));
    const init = old.map((r) => r.map((v) => v + (rng.next() - 0.5) * 0.5));
    const adv = Array.from({ length: n }, () => rng.next() * 2 - 1);
    const run = async (micro: number) => {
      const x = tf.variable(tf.tensor2d(init), true, `rloo_mb_${micro}`);
      const opt = tf.train.sgd(0.5);
      const size = n / micro;
      const denom: Denominators = { rows: n, tokens: mask.flat().reduce((a, b) => a + b, 0) };
      const part: UpdatePart<'clipFrac' | 'ratioMax'> = {
        optimizer: opt,
        vars: [x],
        objective: (k) => {
          const rows = Array.from({ length: size }, (_, j) => k * size + j);
          const pick = (m: number[][]) => tf.tensor2d(rows.map((i) => m[i]));
          const lp = tf.gather(x, rows);
          const out = sequencePolicyLoss(
            lp,
            pick(old),
            pick(broadcast(adv, mask)),
            pick(mask),
            0.2,
            20,
            micro > 1 ? denom : undefined,
          );
          return { loss: out.loss, stats: { clipFrac: out.clipFrac, ratioMax: out.ratioMax } };
        },
      };
      const res = await jointGuardedStep<'clipFrac' | 'ratioMax'>([part], 0, {
        microBatches: micro,
        maxStats: ['ratioMax'],
      });
      const w = x.arraySync() as number[][];
      x.dispose();
      opt.dispose();
      return { res, w };
    };
    const one = await run(1);
    const four = await run(4);
    const ref = reference(init, old, adv, mask, 0.2, 20);
    expect(one.res.losses[0]).toBeCloseTo(ref.loss, 6);
    expect(four.res.losses[0]).toBeCloseTo(one.res.losses[0], 6);
    expect(four.res.stats.clipFrac).toBeCloseTo(one.res.stats.clipFrac, 6);
    expect(four.res.stats.ratioMax).toBeCloseTo(one.res.stats.ratioMax, 6);
    expect(four.res.gradNorms[0]).toBeCloseTo(one.res.gradNorms[0], 6);
    for (let i = 0; i < n; i++) for (let t = 0; t < R; t++) expect(four.w[i][t]).toBeCloseTo(one.w[i][t], 6);
    // Dividing each micro-batch by its own 4 sequences (the bug Denominators prevents) would be 4× the loss.
    expect(Math.abs(one.res.losses[0])).toBeGreaterThan(1e-3);
  });
});
