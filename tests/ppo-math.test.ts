import { describe, expect, it } from 'vitest';
import {
  explainedVariance,
  gae,
  klEstimate,
  maskedMean,
  maskedVar,
  maskedWhiten,
  perTokenRewards,
} from '../src/core/ppo/math';

/** Small deterministic PRNG (mulberry32) so the random cases are the same on every run. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomBatch(seed: number, N: number, R: number) {
  const r = rng(seed);
  const rows = () => Array.from({ length: N }, () => Array.from({ length: R }, () => r() * 4 - 2));
  const lengths = Array.from({ length: N }, () => 1 + Math.floor(r() * R));
  const mask = lengths.map((L) => Array.from({ length: R }, (_, t) => (t < L ? 1 : 0)));
  return { rewards: rows(), values: rows(), mask, lengths };
}

describe('gae', () => {
  it('matches a plain double loop (forward sums of discounted deltas) on random data', () => {
    const gamma = 0.97;
    const lam = 0.9;
    const { rewards, values, mask, lengths } = randomBatch(7, 6, 9);
    const { advantages, returns } = gae(rewards, values, mask, gamma, lam);
    for (let i = 0; i < rewards.length; i++) {
      const L = lengths[i];
      const V = (t: number) => (t < L ? values[i][t] : 0);
      for (let t = 0; t < 9; t++) {
        let expected = 0;
        if (t < L) {
          for (let l = 0; t + l < L; l++) {
            const delta = rewards[i][t + l] + gamma * V(t + l + 1) - V(t + l);
            expected += (gamma * lam) ** l * delta;
          }
        }
        expect(advantages[i][t]).toBeCloseTo(expected, 10);
        expect(returns[i][t]).toBeCloseTo(t < L ? expected + values[i][t] : 0, 10);
      }
    }
  });

  it('hand-worked 3-token case', () => {
    // γ = 0.9, λ = 0.5, γλ = 0.45
    // t=2: δ = 1 + 0 − 0.7 = 0.3;             A = 0.3
    // t=1: δ = 0 + 0.9·0.7 − 0.6 = 0.03;      A = 0.03 + 0.45·0.3 = 0.165
    // t=0: δ = 0 + 0.9·0.6 − 0.5 = 0.04;      A = 0.04 + 0.45·0.165 = 0.11425
    const { advantages, returns } = gae([[0, 0, 1]], [[0.5, 0.6, 0.7]], [[1, 1, 1]], 0.9, 0.5);
    expect(advantages[0][0]).toBeCloseTo(0.11425, 12);
    expect(advantages[0][1]).toBeCloseTo(0.165, 12);
    expect(advantages[0][2]).toBeCloseTo(0.3, 12);
    expect(returns[0][0]).toBeCloseTo(0.61425, 12);
    expect(returns[0][1]).toBeCloseTo(0.765, 12);
    expect(returns[0][2]).toBeCloseTo(1.0, 12);
  });

  it('ignores padding after EOS: bootstraps 0 after the last counted token, 0 advantage at padding', () => {
    const padded = gae([[0, 0, 1, 50, -50]], [[0.5, 0.6, 0.7, 99, 99]], [[1, 1, 1, 0, 0]], 0.9, 0.5);
    expect(padded.advantages[0].slice(0, 3).map((x) => +x.toFixed(10))).toEqual([0.11425, 0.165, 0.3]);
    expect(padded.advantages[0].slice(3)).toEqual([0, 0]);
    expect(padded.returns[0].slice(3)).toEqual([0, 0]);
  });

  it('γ = λ = 1 gives returns = sum of future rewards and A = return − V', () => {
    const { advantages, returns } = gae([[1, 2, 3]], [[0.5, 0.5, 0.5]], [[1, 1, 1]], 1, 1);
    expect(returns[0]).toEqual([6, 5, 3]);
    expect(advantages[0]).toEqual([5.5, 4.5, 2.5]);
  });

  it('accepts Float32Array rows and ragged (unpadded) rows', () => {
    const { advantages } = gae(
      [new Float32Array([0, 1]), new Float32Array([2])],
      [new Float32Array([0, 0]), new Float32Array([0])],
      [[1, 1], [1]],
      1,
      1,
    );
    expect(advantages).toEqual([[1, 1], [2]]);
  });
});

describe('masked statistics', () => {
  it('maskedMean hand-worked', () => {
    expect(
      maskedMean(
        [
          [1, 2],
          [3, 4],
        ],
        [
          [1, 0],
          [1, 1],
        ],
      ),
    ).toBeCloseTo(8 / 3, 12);
    expect(maskedMean([[5]], [[0]])).toBe(0);
  });

  it('maskedVar is unbiased (Bessel) like TRL masked_var', () => {
    // 1, 2, 3, 4: mean 2.5, Σ(x−m)² = 5, /3 = 5/3
    expect(
      maskedVar(
        [
          [1, 2],
          [3, 4],
          [9, 9],
        ],
        [
          [1, 1],
          [1, 1],
          [0, 0],
        ],
      ),
    ).toBeCloseTo(5 / 3, 12);
    expect(maskedVar([[1]], [[1]])).toBe(0);
  });

  it('maskedWhiten hand-worked, over the whole batch not per row', () => {
    // counted: 1, 2, 3 → mean 2, unbiased var 1 → −1, 0, 1
    const w = maskedWhiten(
      [
        [1, 2],
        [3, 100],
      ],
      [
        [1, 1],
        [1, 0],
      ],
    );
    expect(w[0][0]).toBeCloseTo(-1, 6);
    expect(w[0][1]).toBeCloseTo(0, 6);
    expect(w[1][0]).toBeCloseTo(1, 6);
    expect(w[1][1]).toBe(0);
    // 2, 4, 6, 8: mean 5, var 20/3 → (x − 5)/√(20/3)
    const s = Math.sqrt(20 / 3);
    const w2 = maskedWhiten(
      [
        [2, 4],
        [6, 8],
      ],
      [
        [1, 1],
        [1, 1],
      ],
    );
    expect(w2[0][0]).toBeCloseTo(-3 / s, 6); // row-wise whitening would give −0.707 here
    expect(w2[1][1]).toBeCloseTo(3 / s, 6);
    // shiftMean = false keeps the mean: (x − 2)/1 + 2 = x
    const kept = maskedWhiten(
      [
        [1, 2],
        [3, 100],
      ],
      [
        [1, 1],
        [1, 0],
      ],
      false,
    );
    expect(kept[0][0]).toBeCloseTo(1, 6);
    expect(kept[1][0]).toBeCloseTo(3, 6);
    expect(kept[1][1]).toBe(0);
  });

  it('maskedWhiten on random data: mean ≈ 0 and var ≈ 1 over counted entries, 0 elsewhere', () => {
    const { values, mask } = randomBatch(3, 8, 12);
    const scaled = values.map((r) => r.map((v) => 7 + 5 * v));
    const w = maskedWhiten(scaled, mask);
    expect(maskedMean(w, mask)).toBeCloseTo(0, 8);
    expect(maskedVar(w, mask)).toBeCloseTo(1, 6);
    w.forEach((row, i) => row.forEach((x, t) => mask[i][t] === 0 && expect(x).toBe(0)));
  });

  it('explainedVariance hand-worked', () => {
    // residual 0, 0, 1 → unbiased var 1/3; returns 1, 2, 3 → var 1
    expect(explainedVariance([[1, 2, 2]], [[1, 2, 3]], [[1, 1, 1]])).toBeCloseTo(2 / 3, 12);
    expect(explainedVariance([[1, 2, 3]], [[1, 2, 3]], [[1, 1, 1]])).toBe(1);
    expect(explainedVariance([[0, 0, 0]], [[1, 2, 3]], [[1, 1, 1]])).toBeCloseTo(0, 12);
    expect(explainedVariance([[0, 0]], [[2, 2]], [[1, 1]])).toBeNaN();
  });

  it('rejects mismatched shapes', () => {
    expect(() => maskedMean([[1, 2]], [[1]])).toThrow(/row 0/);
    expect(() => gae([[1]], [[1], [2]], [[1]], 1, 1)).toThrow(/rows/);
  });
});

describe('KL estimators and per-token rewards', () => {
  it('each estimator on hand-worked numbers', () => {
    // logp = −1, ref = −1.5: d = 0.5
    expect(klEstimate(-1, -1.5, 'k1')).toBeCloseTo(0.5, 12);
    expect(klEstimate(-1, -1.5, 'k2')).toBeCloseTo(0.125, 12);
    expect(klEstimate(-1, -1.5, 'k3')).toBeCloseTo(0.10653065971263342, 12); // e^−0.5 − 1 + 0.5
    // logp = −2, ref = −1: d = −1
    expect(klEstimate(-2, -1, 'k1')).toBeCloseTo(-1, 12);
    expect(klEstimate(-2, -1, 'k2')).toBeCloseTo(0.5, 12);
    expect(klEstimate(-2, -1, 'k3')).toBeCloseTo(0.7182818284590451, 12); // e − 1 − 1
    for (const k of ['k1', 'k2', 'k3'] as const) expect(klEstimate(-0.3, -0.3, k)).toBe(0);
  });

  it('perTokenRewards hand-worked (k1, klCoef 0.1): score at the last counted token', () => {
    const out = perTokenRewards(
      [2, -1],
      [
        [-1, -2, -3],
        [-1, -1, 0],
      ],
      [
        [-1.5, -1, -3],
        [-1, -2, 5],
      ],
      [
        [1, 1, 1],
        [1, 1, 0],
      ],
      0.1,
      'k1',
    );
    const round = (rows: number[][]) => rows.map((r) => r.map((x) => +x.toFixed(10)));
    expect(round(out.kl)).toEqual([
      [0.5, -1, 0],
      [0, 1, 0],
    ]);
    expect(round(out.nonScore)).toEqual([
      [-0.05, 0.1, 0],
      [0, -0.1, 0],
    ]);
    expect(round(out.rewards)).toEqual([
      [-0.05, 0.1, 2],
      [0, -1.1, 0],
    ]);
    expect(out.k1Sum.map((x) => +x.toFixed(10))).toEqual([-0.5, 1]);
    expect(out.nonScoreSum.map((x) => +x.toFixed(10))).toEqual([0.05, -0.1]);
  });

  it('perTokenRewards with k3: penalty from k3, k1Sum still k1', () => {
    const out = perTokenRewards([0], [[-1, -2]], [[-1.5, -1]], [[1, 1]], 1, 'k3');
    expect(out.kl[0][0]).toBeCloseTo(0.10653065971263342, 12);
    expect(out.kl[0][1]).toBeCloseTo(0.7182818284590451, 12);
    expect(out.rewards[0][1]).toBeCloseTo(-0.7182818284590451, 12);
    expect(out.k1Sum[0]).toBeCloseTo(-0.5, 12);
  });

  it('perTokenRewards refuses a sample with no counted token', () => {
    expect(() => perTokenRewards([1], [[0]], [[0]], [[0]], 0.1, 'k1')).toThrow(/sample 0/);
  });
});
