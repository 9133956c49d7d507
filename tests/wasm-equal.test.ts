/**
 * The WASM Equal wrapper (src/core/kernels/wasm-extra.ts fastEqual) against a plain loop of IEEE equality: a last
 * axis broadcast either way round (tfjs's Max gradient compares [rows, vocabulary] with [rows, 1]), equal shapes,
 * NaN, ±0 and ±Infinity, and shapes it leaves to tfjs's kernel (still right, not counted).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { equalStats } from '../src/core/kernels/wasm-extra';

/** a == b elementwise with tfjs's broadcasting, as a plain loop over the output's index. */
function reference(
  a: Float32Array,
  sa: number[],
  b: Float32Array,
  sb: number[],
): { data: number[]; shape: number[] } {
  const r = Math.max(sa.length, sb.length);
  const pa = [...Array(r - sa.length).fill(1), ...sa];
  const pb = [...Array(r - sb.length).fill(1), ...sb];
  const shape = pa.map((d, i) => Math.max(d, pb[i]));
  const n = shape.reduce((x, y) => x * y, 1);
  const at = (s: number[], idx: number[]) => idx.reduce((o, v, i) => o * s[i] + (s[i] === 1 ? 0 : v), 0);
  const data: number[] = [];
  for (let f = 0; f < n; f++) {
    const idx: number[] = [];
    let rest = f;
    for (let i = r - 1; i >= 0; i--) {
      idx.unshift(rest % shape[i]);
      rest = Math.floor(rest / shape[i]);
    }
    data.push(a[at(pa, idx)] === b[at(pb, idx)] ? 1 : 0);
  }
  return { data, shape };
}

/** Values with many repeats (so equality is common), NaN, ±0 and ±Infinity. */
function values(n: number, seed: number): Float32Array {
  const specials = [NaN, 0, -0, Infinity, -Infinity];
  return Float32Array.from({ length: n }, (_, i) => {
    const k = (i * 7919 + seed * 104729) % 23;
    return k < specials.length ? specials[k] : (k % 4) - 1.5;
  });
}

describe('WASM Equal', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
  });

  const cases: [number[], number[], boolean][] = [
    [[192, 258], [192, 1], true],
    [[192, 1], [192, 258], true],
    [[2, 3, 5], [2, 3, 1], true],
    [[7, 9], [7, 9], true],
    [[5], [5], true],
    [[4, 1], [1, 5], false],
    [[3, 4], [4], false],
  ];
  for (const [sa, sb, fast] of cases) {
    it(`[${sa}] == [${sb}]${fast ? '' : " (tfjs's kernel)"}`, () => {
      const a = values(
        sa.reduce((x, y) => x * y, 1),
        1,
      );
      // b holds some of a's values (a row's maximum, as in the Max gradient) and its own.
      const b = values(
        sb.reduce((x, y) => x * y, 1),
        1,
      ).map((v, i) => (i % 3 === 0 ? 42 : v));
      const want = reference(a, sa, b, sb);
      const before = equalStats.calls;
      const t = tf.equal(tf.tensor(a, sa), tf.tensor(b, sb));
      expect(equalStats.calls - before).toBe(fast ? 1 : 0);
      expect(t.dtype).toBe('bool');
      expect(t.shape).toEqual(want.shape);
      const got = Array.from(t.dataSync());
      expect(got.filter((v, i) => v !== want.data[i]).length).toBe(0);
      expect(got.some((v) => v === 1)).toBe(true);
      expect(got.some((v) => v === 0)).toBe(true);
      t.dispose();
    });
  }
});
