/**
 * Grouped-query attention through the plain ops (model/attention.ts `attend` with g > 1: each KV head's g query
 * heads as the rows of one product, no repeat_kv copy), on the CPU backend: values against a float64 loop in which
 * query head h reads KV head ⌊h / g⌋ (transformers' repeat_kv), with a causal + padding bias and in the decode
 * step's shape (one query per row over a longer cache); gradients against the same attention over keys and values
 * repeated g times (tf.tile), the way the ops computed it before.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { attend, causalPaddingBias, keyPaddingBias } from '../src/core/model/attention';
import { MASKED } from '../src/core/kernels/definitions';

beforeAll(async () => {
  await tf.setBackend('cpu');
});

function seeded(n: number, seed: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 12.9898 + i * 78.233) * 1.5);
}

/** Float64 loop: y [B·Tq, nh·hs] with query head h on KV head ⌊h / g⌋; bias [B, Tq, Tk] (additive). */
function reference(
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  bias: Float32Array,
  B: number,
  nh: number,
  g: number,
  Tq: number,
  Tk: number,
  hs: number,
): Float64Array {
  const nkv = nh / g;
  const y = new Float64Array(B * Tq * nh * hs);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < nh; h++)
      for (let t = 0; t < Tq; t++) {
        const kv = Math.floor(h / g);
        const s = new Float64Array(Tk);
        for (let j = 0; j < Tk; j++) {
          let d = 0;
          for (let c = 0; c < hs; c++)
            d += q[((b * nh + h) * Tq + t) * hs + c] * k[((b * nkv + kv) * Tk + j) * hs + c];
          // Rounded to float32 as the ops add the bias: a fully masked row (a padded query) is then uniform.
          s[j] = Math.fround(d / Math.sqrt(hs) + bias[(b * Tq + t) * Tk + j]);
        }
        const m = Math.max(...s);
        const e = s.map((x) => Math.exp(x - m));
        const z = e.reduce((a, x) => a + x, 0);
        for (let c = 0; c < hs; c++) {
          let acc = 0;
          for (let j = 0; j < Tk; j++) acc += (e[j] / z) * v[((b * nkv + kv) * Tk + j) * hs + c];
          y[(b * Tq + t) * nh * hs + h * hs + c] = acc;
        }
      }
  return y;
}

/** The old route: keys and values repeated g times per KV head, then attention with one KV head per query head. */
function attendRepeated(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, bias: tf.Tensor, g = 1) {
  const rep = (x: tf.Tensor4D) => {
    const [B, nkv, S, d] = x.shape;
    return tf.reshape(tf.tile(tf.reshape(x, [B, nkv, 1, S * d]), [1, 1, g, 1]), [
      B,
      nkv * g,
      S,
      d,
    ]) as tf.Tensor4D;
  };
  return attend(q, rep(k), rep(v), bias);
}

const maxAbs = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
};

describe('grouped-query attention without repeat_kv copies (plain ops, CPU)', () => {
  // [name, B, nh, g, Tq, Tk]: a prefill with causal + padding masks, and decode steps over a longer cache.
  const cases: [string, number, number, number, number, number][] = [
    ['prefill, 6 heads over 2 KV heads, causal + left padding', 2, 6, 3, 5, 5],
    ['prefill, 4 heads over 4 KV heads (g = 1, plain multi-head)', 2, 4, 1, 4, 4],
    ['decode step, 14 heads over 2 KV heads (Qwen2.5-0.5B), one query over 9 cache slots', 3, 14, 7, 1, 9],
    ['decode step, 9 heads over 3 KV heads (SmolLM2), one query over 6 slots', 2, 9, 3, 1, 6],
  ];
  for (const [name, B, nh, g, Tq, Tk] of cases) {
    it(`${name}: values = float64 loop; q, k, v gradients = attention over repeated keys`, () => {
      const hs = 8;
      const nkv = nh / g;
      const hq = seeded(B * nh * Tq * hs, 1);
      const hk = seeded(B * nkv * Tk * hs, 2);
      const hv = seeded(B * nkv * Tk * hs, 3);
      const before = tf.memory().numTensors;
      const q = tf.tensor4d(hq, [B, nh, Tq, hs]);
      const k = tf.tensor4d(hk, [B, nkv, Tk, hs]);
      const v = tf.tensor4d(hv, [B, nkv, Tk, hs]);
      // Row 0 left-padded by one token.
      const maskRows = Array.from({ length: B }, (_, b) =>
        Array.from({ length: Tk }, (_, j) => (b === 0 && j === 0 ? 0 : 1)),
      );
      const maskF = tf.tensor2d(maskRows);
      const bias = tf.tidy(() => (Tq === Tk ? causalPaddingBias(maskF) : keyPaddingBias(maskF)));
      const hb = tf.tidy(() => tf.broadcastTo(bias, [B, 1, Tq, Tk]).dataSync() as Float32Array);
      const y = tf.tidy(() => attend(q, k, v, bias, g));
      expect(y.shape).toEqual([B * Tq, nh * hs]);
      // Fully masked rows (row 0's padded query in the prefill) are a uniform average in both; compared too.
      expect(maxAbs(y.dataSync(), reference(hq, hk, hv, hb, B, nh, g, Tq, Tk, hs))).toBeLessThan(2e-6);
      const dy = tf.tensor2d(seeded(B * Tq * nh * hs, 4), [B * Tq, nh * hs]);
      const grads = (f: typeof attend) =>
        tf.grads((a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) =>
          f(a as tf.Tensor4D, b as tf.Tensor4D, c as tf.Tensor4D, bias, g),
        )([q, k, v], dy);
      const grouped = grads(attend);
      const repeated = grads(attendRepeated);
      for (let i = 0; i < 3; i++) {
        expect(grouped[i].shape).toEqual(repeated[i].shape);
        expect(maxAbs(grouped[i].dataSync(), repeated[i].dataSync()), ['dq', 'dk', 'dv'][i]).toBeLessThan(
          1e-6,
        );
      }
      tf.dispose([q, k, v, maskF, bias, y, dy, ...grouped, ...repeated]);
      expect(tf.memory().numTensors).toBe(before);
      expect(MASKED).toBeLessThan(-1e8);
    });
  }
});
