import * as tf from '@tensorflow/tfjs-core';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  entropyFromLogits,
  logprobsFromLogits,
  maskedMeanT,
  policyLoss,
  valueLoss,
} from '../src/core/ppo/losses';
import { useCpu } from './helpers/backend';

// CPU backend + tfjs's gradients (tfjs-core registers none by itself).
beforeAll(useCpu);

const read = async (t: tf.Tensor): Promise<number> => (await t.data())[0];
const readAll = async (o: Record<string, tf.Tensor>): Promise<Record<string, number>> => {
  const out: Record<string, number> = {};
  for (const [k, t] of Object.entries(o)) out[k] = await read(t);
  tf.dispose(o);
  return out;
};

/** Tokens a–d counted, e masked (ε = 0.2):
 *  a: A = 1,  ratio 1.5 → −1.5 vs −1.2 → −1.2 (clipped)
 *  b: A = −1, ratio 0.5 → 0.5 vs 0.8  → 0.8  (clipped)
 *  c: A = 2,  ratio 0.5 → −1 vs −1.6  → −1   (not clipped: the pessimistic branch is the unclipped one)
 *  d: A = −1, ratio 1.1 → 1.1 vs 1.1  → 1.1  (inside the range)
 *  e: A = 100, ratio 3, masked out
 *  loss = (−1.2 + 0.8 − 1 + 1.1)/4 = −0.075, clipFrac = 2/4 */
function policyCase() {
  const ratios = [
    [1.5, 0.5, 0.5],
    [1.1, 3, 1],
  ];
  const logpOld = tf.fill([2, 3], -2);
  const logpNew = tf.add(logpOld, tf.tensor2d(ratios.map((r) => r.map(Math.log))));
  const advantages = tf.tensor2d([
    [1, -1, 2],
    [-1, 100, 0],
  ]);
  const mask = tf.tensor2d([
    [1, 1, 1],
    [1, 0, 0],
  ]);
  return { logpNew, logpOld, advantages, mask };
}

describe('policyLoss', () => {
  it('hand-worked, with clipping on both sides', async () => {
    const { logpNew, logpOld, advantages, mask } = policyCase();
    const r = await readAll(policyLoss(logpNew, logpOld, advantages, mask, 0.2, 20));
    expect(r.loss).toBeCloseTo(-0.075, 5);
    expect(r.clipFrac).toBeCloseTo(0.5, 6);
    const l = [Math.log(1.5), Math.log(0.5), Math.log(0.5), Math.log(1.1)];
    expect(r.approxKl).toBeCloseTo(l.reduce((s, x) => s + 0.5 * x * x, 0) / 4, 5);
    expect(r.ratioMean).toBeCloseTo((1.5 + 0.5 + 0.5 + 1.1) / 4, 5);
    expect(r.ratioMax).toBeCloseTo(1.5, 5); // the masked ratio 3 does not count
    expect(r.logRatioClampFrac).toBe(0);
    tf.dispose([logpNew, logpOld, advantages, mask]);
  });

  it('gradient flows only through unclipped tokens: −A·ratio/n', async () => {
    const { logpNew, logpOld, advantages, mask } = policyCase();
    const g = tf.grad((x: tf.Tensor) => policyLoss(x, logpOld, advantages, mask, 0.2, 20).loss)(logpNew);
    const got = Array.from(await g.data());
    const want = [0, 0, (-2 * 0.5) / 4, (1 * 1.1) / 4, 0, 0];
    got.forEach((v, i) => expect(v).toBeCloseTo(want[i], 5));
    tf.dispose([logpNew, logpOld, advantages, mask, g]);
  });

  it('clamps the log ratio and reports the clamped fraction', async () => {
    const { logpNew, logpOld, advantages, mask } = policyCase();
    // |ln 0.5| = 0.69 > 0.5 for b and c; a (0.405) and d (0.095) stay
    const r = await readAll(policyLoss(logpNew, logpOld, advantages, mask, 0.2, 0.5));
    expect(r.logRatioClampFrac).toBeCloseTo(0.5, 6);
    // The loss sees the clamped ratios: a 1.5 → −1.2 (clipped), b e^−0.5 → 0.8 (clipped), c e^−0.5 → −2e^−0.5, d 1.1.
    expect(r.loss).toBeCloseTo((-1.2 + 0.8 - 2 * Math.exp(-0.5) + 1.1) / 4, 5);
    // The statistics report what the policy did, from the unclamped log ratio (they would under-report
    // exactly when the clamp fires otherwise).
    const l = [Math.log(1.5), Math.log(0.5), Math.log(0.5), Math.log(1.1)];
    expect(r.approxKl).toBeCloseTo(l.reduce((s, x) => s + 0.5 * x * x, 0) / 4, 5);
    expect(r.ratioMean).toBeCloseTo((1.5 + 0.5 + 0.5 + 1.1) / 4, 5);
    expect(r.ratioMax).toBeCloseTo(1.5, 5);
    tf.dispose([logpNew, logpOld, advantages, mask]);
  });

  it('statistics from the unclamped log ratio: a ratio above the clamp shows in ratioMax; padding never makes NaN', async () => {
    // Counted: log ratios 3 and 0; padding: a log ratio of 200 (e^200 overflows float32 to Infinity).
    const logpOld = tf.tensor2d([[-4, -1, -300]]);
    const logpNew = tf.tensor2d([[-1, -1, -100]]);
    const A = tf.tensor2d([[1, 1, 1]]);
    const mask = tf.tensor2d([[1, 1, 0]]);
    const r = await readAll(policyLoss(logpNew, logpOld, A, mask, 0.2, 1));
    expect(r.ratioMax).toBeCloseTo(Math.exp(3), 3);
    expect(r.ratioMean).toBeCloseTo((Math.exp(3) + 1) / 2, 3);
    expect(r.approxKl).toBeCloseTo((0.5 * 9) / 2, 5);
    expect(r.logRatioClampFrac).toBeCloseTo(0.5, 6);
    tf.dispose([logpNew, logpOld, A, mask]);
  });

  it('ratio exactly 1 → loss = −mean(A), clipFrac 0, approxKl 0', async () => {
    const logp = tf.tensor2d([
      [-1, -2, -3, -4],
      [-0.5, -0.1, -9, -2],
    ]);
    const A = [
      [0.3, -1.2, 2, 0.7],
      [-0.4, 1.1, 5, 5],
    ];
    const maskRows = [
      [1, 1, 1, 1],
      [1, 1, 0, 0],
    ];
    const r = await readAll(policyLoss(logp, logp, tf.tensor2d(A), tf.tensor2d(maskRows), 0.2, 20));
    expect(r.loss).toBeCloseTo(-(0.3 - 1.2 + 2 + 0.7 - 0.4 + 1.1) / 6, 6);
    expect(r.clipFrac).toBe(0);
    expect(r.approxKl).toBe(0);
    expect(r.ratioMean).toBeCloseTo(1, 6);
    expect(r.ratioMax).toBeCloseTo(1, 6);
  });
});

describe('valueLoss', () => {
  it('hand-worked: clips the prediction around the old value; the clipped branch can win', async () => {
    // ε = 0.2
    // 1: Vold 0, V 1,   R 1:  (1−1)² = 0,   clip→0.2: (0.2−1)² = 0.64 → 0.64 (clipped wins)
    // 2: Vold 0, V 0.1, R 1:  0.81,          inside:  0.81           → 0.81
    // 3: Vold 1, V 0.5, R 0:  0.25,          clip→0.8: 0.64          → 0.64 (clipped wins)
    // 4: Vold 0, V 1,   R −1: 4,             clip→0.2: 1.44          → 4
    // 5: masked
    // loss = ½·(0.64 + 0.81 + 0.64 + 4)/4 = 0.76125, clipFrac = 2/4
    const vPred = tf.tensor2d([[1, 0.1, 0.5, 1, 50]]);
    const vOld = tf.tensor2d([[0, 0, 1, 0, 0]]);
    const returns = tf.tensor2d([[1, 1, 0, -1, -50]]);
    const mask = tf.tensor2d([[1, 1, 1, 1, 0]]);
    const r = await readAll(valueLoss(vPred, vOld, returns, mask, 0.2));
    expect(r.loss).toBeCloseTo(0.76125, 5);
    expect(r.clipFrac).toBeCloseTo(0.5, 6);
    // No gradient where the clipped branch wins (the clipped prediction is constant in V there).
    const g = tf.grad((v: tf.Tensor) => valueLoss(v, vOld, returns, mask, 0.2).loss)(vPred);
    const got = Array.from(await g.data());
    // d/dV ½·mean((V−R)²) = (V − R)/n for unclipped tokens
    const want = [0, (0.1 - 1) / 4, 0, (1 + 1) / 4, 0];
    got.forEach((v, i) => expect(v).toBeCloseTo(want[i], 5));
    tf.dispose([vPred, vOld, returns, mask, g]);
  });

  it('a prediction inside the range is never counted as clipped (V_old + (V − V_old) may round off V)', async () => {
    // float32: 0.15949744 + (0.033726666 − 0.15949744) rounds to 0.033726662, one step below V, so with R = 0.04
    // the "clipped" loss (V_clipped − R)² exceeds (V − R)² by rounding alone. TRL's torch.clamp leaves V as it is
    // and counts nothing; so must we (counting l2 > l1 alone gave clipFrac 1 here).
    const [vo, v] = [0.1594974398612976, 0.03372666612267494];
    expect(Math.fround(vo + Math.fround(v - vo))).not.toBe(v); // the case in question
    const vPred = tf.tensor2d([[v]]);
    const vOld = tf.tensor2d([[vo]]);
    const returns = tf.tensor2d([[0.04]]);
    const mask = tf.tensor2d([[1]]);
    const r = await readAll(valueLoss(vPred, vOld, returns, mask, 0.2));
    expect(r.clipFrac).toBe(0);
    // The loss is ½·max of the two, which differ here by that rounding alone (relative ~1e-6).
    const want = 0.5 * (v - 0.04) ** 2;
    expect(Math.abs(r.loss - want) / want).toBeLessThan(2e-6);
    tf.dispose([vPred, vOld, returns, mask]);
  });
});

function logSoftmaxLoop(row: number[], T: number): number[] {
  const z = row.map((x) => x / T);
  const m = Math.max(...z);
  const lse = m + Math.log(z.reduce((s, x) => s + Math.exp(x - m), 0));
  return z.map((x) => x - lse);
}

function randomMatrix(M: number, V: number, seed: number): number[][] {
  let s = seed;
  const next = () => ((s = (s * 16807) % 2147483647) / 2147483647) * 6 - 3;
  return Array.from({ length: M }, () => Array.from({ length: V }, next));
}

describe('logprobsFromLogits and entropy', () => {
  it('matches a plain-loop log-softmax with temperature', async () => {
    const rows = randomMatrix(5, 11, 42);
    const tokens = [0, 10, 3, 7, 3];
    for (const T of [1, 0.7, 2]) {
      const out = logprobsFromLogits(tf.tensor2d(rows), tokens, T);
      expect(out.shape).toEqual([5]);
      const got = Array.from(await out.data());
      got.forEach((v, i) => expect(v).toBeCloseTo(logSoftmaxLoop(rows[i], T)[tokens[i]], 5));
      out.dispose();
    }
  });

  it('its gradient is (onehot − softmax)/T', async () => {
    const rows = randomMatrix(2, 4, 7);
    const T = 0.5;
    const g = tf.grad((x: tf.Tensor) =>
      tf.sum(logprobsFromLogits(x as tf.Tensor2D, tf.tensor1d([2, 0], 'int32'), T)),
    )(tf.tensor2d(rows));
    const got = Array.from(await g.data());
    const want = rows.flatMap((r, i) =>
      logSoftmaxLoop(r, T).map((lp, j) => ((j === [2, 0][i] ? 1 : 0) - Math.exp(lp)) / T),
    );
    got.forEach((v, i) => expect(v).toBeCloseTo(want[i], 5));
  });

  it('entropy: uniform = ln V; random [N,R,V] matches a loop, masked', async () => {
    expect(await read(entropyFromLogits(tf.zeros([3, 4]), tf.ones([3])))).toBeCloseTo(Math.log(4), 5);
    const rows = randomMatrix(6, 5, 3);
    const mask = [1, 1, 0, 1, 0, 0];
    const T = 0.8;
    const H = rows.map((r) => -logSoftmaxLoop(r, T).reduce((s, lp) => s + Math.exp(lp) * lp, 0));
    const want = (H[0] + H[1] + H[3]) / 3;
    const got = await read(
      entropyFromLogits(
        tf.tensor3d([rows.slice(0, 3), rows.slice(3)]),
        tf.tensor2d([mask.slice(0, 3), mask.slice(3)]),
        T,
      ),
    );
    expect(got).toBeCloseTo(want, 5);
  });

  it('maskedMeanT', async () => {
    expect(
      await read(
        maskedMeanT(
          tf.tensor2d([
            [1, 2],
            [3, 4],
          ]),
          tf.tensor2d([
            [1, 0],
            [1, 1],
          ]),
        ),
      ),
    ).toBeCloseTo(8 / 3, 5);
    expect(await read(maskedMeanT(tf.tensor1d([5]), tf.tensor1d([0])))).toBe(0);
  });
});

describe('memory', () => {
  it('no tensor leaks: inside tf.tidy, outside it, and through variableGrads', async () => {
    const { logpNew, logpOld, advantages, mask } = policyCase();
    const logits = tf.tensor2d(randomMatrix(6, 7, 9));
    const tokens = tf.tensor1d([1, 2, 3, 4, 5, 6], 'int32');
    const before = tf.memory().numTensors;

    tf.tidy(() => {
      policyLoss(logpNew, logpOld, advantages, mask, 0.2, 20);
      valueLoss(logpNew, logpOld, advantages, mask, 0.2);
      entropyFromLogits(logits, tf.ones([6]));
      logprobsFromLogits(logits, tokens, 0.7);
    });
    expect(tf.memory().numTensors).toBe(before);

    const kept = policyLoss(logpNew, logpOld, advantages, mask, 0.2, 20);
    expect(tf.memory().numTensors).toBe(before + 6);
    tf.dispose(kept);
    expect(tf.memory().numTensors).toBe(before);

    const w = tf.variable(tf.zeros([6, 7]));
    const afterVar = tf.memory().numTensors;
    const { value, grads } = tf.variableGrads(() => {
      const lp = tf.reshape(logprobsFromLogits(tf.add(logits, w) as tf.Tensor2D, tokens, 0.7), [2, 3]);
      const p = policyLoss(lp, logpOld, advantages, mask, 0.2, 20);
      return tf.add(p.loss, tf.mul(-0.01, entropyFromLogits(tf.add(logits, w), tf.ones([6])))) as tf.Scalar;
    });
    expect(Number.isFinite(await read(value))).toBe(true);
    tf.dispose([value, grads[w.name]]);
    expect(tf.memory().numTensors).toBe(afterVar);
    w.dispose();
    tf.dispose([logpNew, logpOld, advantages, mask, logits, tokens]);
  });
});
