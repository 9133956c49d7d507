/**
 * The chunked log-prob's gradient one-hot (tokenHit in src/core/ppo/chunked-logprob.ts, issue #24): tf.oneHot in
 * place of an `equal` / `logicalAnd` against a broadcast [1, depth] range, which tfjs-backend-wasm 4.22 runs at
 * ≈ 65 ns an element. Bit for bit the old comparison's result on CPU and WASM — tokens in and out of the piece,
 * the depth-1 last piece tf.oneHot refuses, a of either sign, −0, NaN and ±∞ — and on WASM several times faster
 * at the update's shape (a [192, 8192] piece).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import { tokenHit } from '../src/core/ppo/chunked-logprob';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';

/** The construction tokenHit replaces, as it was: cast(equal(local, cols) ∧ inPiece)·a. */
function oldHit(local: tf.Tensor1D, inPiece: tf.Tensor1D, a: tf.Tensor, depth: number): tf.Tensor2D {
  return tf.tidy(() => {
    const cols = tf.range(0, depth, 1, 'int32');
    const eq = tf.logicalAnd(tf.equal(tf.expandDims(local, 1), cols), tf.expandDims(inPiece, 1));
    return tf.mul(tf.cast(eq, 'float32'), a) as tf.Tensor2D;
  });
}

/** Deterministic uniform [0, 1) (mulberry32). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Bits of a float32 array, so −0 ≠ 0 and NaN = NaN compare as the bits they are. */
const bits = (x: Float32Array): number[] => Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length));

/** local (a valid column, 0 when out of the piece, as localTokens makes it), inPiece and a for N rows. */
function inputs(N: number, depth: number, seed: number, special: number[] = []) {
  const r = rng(seed);
  const inside = Array.from({ length: N }, () => r() < 0.7);
  const local = inside.map((i) => (i ? Math.floor(r() * depth) : 0));
  const a = Array.from({ length: N }, (_, i) => (i < special.length ? special[i] : (r() - 0.5) * 3));
  return {
    local: tf.tensor1d(local, 'int32'),
    inPiece: tf.tensor1d(inside, 'bool'),
    a: tf.tensor2d(a, [N, 1]),
  };
}

async function compare(N: number, depth: number, seed: number, special: number[] = []): Promise<void> {
  const { local, inPiece, a } = inputs(N, depth, seed, special);
  const before = tf.memory().numTensors;
  const got = tokenHit(local, inPiece, a, depth);
  expect(tf.memory().numTensors).toBe(before + 1); // only the result is left
  const want = oldHit(local, inPiece, a, depth);
  expect(got.shape).toEqual([N, depth]);
  expect(got.dtype).toBe('float32');
  const g = (await got.data()) as Float32Array;
  const w = (await want.data()) as Float32Array;
  expect(bits(g)).toEqual(bits(w));
  // And it is the one-hot it should be: a at the token's column of an in-piece row (hand check of row 0..N).
  const loc = await local.data();
  const inn = await inPiece.data();
  const av = await a.data();
  for (let i = 0; i < N; i++)
    for (let c = 0; c < depth; c++) {
      const want1 = inn[i] && loc[i] === c ? av[i] : 0 * av[i];
      expect(
        Object.is(g[i * depth + c], Math.fround(want1)) || (isNaN(g[i * depth + c]) && isNaN(want1)),
      ).toBe(true);
    }
  tf.dispose([local, inPiece, a, got, want]);
}

const special = [0, -0, NaN, Infinity, -Infinity, -1.5, 2.25, 1e-40];

for (const backend of ['cpu', 'wasm'] as const) {
  describe(`tokenHit on ${backend}`, () => {
    beforeAll(async () => {
      if (backend === 'wasm') registerWasmExtraKernels();
      tf.env().set('PROD', true);
      await tf.setBackend(backend);
      await tf.ready();
    });

    it('equals the broadcast comparison bit for bit, at depths 2, 7 and 300', async () => {
      await compare(16, 2, 1, special);
      await compare(16, 7, 2, special);
      await compare(24, 300, 3, special);
    });

    it('a depth-1 piece (which tf.oneHot refuses): the [N, 1] column, bit for bit', async () => {
      await compare(16, 1, 4, special);
    });

    it('a row out of the piece is all zeros (its a·0), even where its local column is 0', async () => {
      const local = tf.tensor1d([0, 0, 2], 'int32');
      const inPiece = tf.tensor1d([false, true, false], 'bool');
      const a = tf.tensor2d([5, 6, 7], [3, 1]);
      const h = tokenHit(local, inPiece, a, 3);
      expect(Array.from(await h.data())).toEqual([0, 0, 0, 6, 0, 0, 0, 0, 0]);
      tf.dispose([local, inPiece, a, h]);
    });
  });
}

describe('tokenHit on WASM: speed at the update shape', () => {
  beforeAll(async () => {
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });

  it('a [192, 8192] piece: several times faster than the broadcast comparison', async () => {
    const N = 192;
    const depth = 8192;
    const { local, inPiece, a } = inputs(N, depth, 9);
    const time = (f: () => tf.Tensor): number => {
      f().dispose(); // warm; then the best of 7 (on a loaded machine one of 3 was not enough once)
      let best = Infinity;
      for (let k = 0; k < 7; k++) {
        const t0 = performance.now();
        const out = f();
        out.dataSync();
        best = Math.min(best, performance.now() - t0);
        out.dispose();
      }
      return best;
    };
    const tNew = time(() => tokenHit(local, inPiece, a, depth));
    const tOld = time(() => oldHit(local, inPiece, a, depth));
    // Measured ≈ 4 against ≈ 200 ms on a 2-core Xeon; 5× leaves room for a loaded machine.
    expect(tOld / tNew, `old ${tOld.toFixed(1)} ms, new ${tNew.toFixed(1)} ms`).toBeGreaterThan(5);
    tf.dispose([local, inPiece, a]);
  });
});
