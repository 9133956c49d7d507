/**
 * pickTokens' inverse-CDF walk on the host (src/core/model/sampling.ts, issue #24): on WASM and CPU the sampled
 * rows' probabilities are read back and the CDF walked in JavaScript instead of tfjs-backend-wasm 4.22's slow
 * broadcasting LessEqual and Tile. It must choose the token the device path chooses, bit for bit, so seeded runs
 * stay the same: the float32 cumsum equals tf.cumsum's on both backends, and the tokens and log-probs of both
 * walks agree on random logits (temperature, top-k, top-p), at uniforms 0 and just below 1, at targets that land
 * exactly on a CDF value, on a leading zero-probability token and on a NaN row; `auto` takes the host walk on
 * these backends (no LessEqual or Tile kernel runs) and is several times faster at GPT-2's [8, 50257]. Top-k /
 * top-p's comparisons against a [B, 1] threshold (lessThanColumn: (x − t) < 0 there) give tf.less's answer for
 * every kind of float32, and filterLogits the old formulation's logits, bit for bit.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import {
  cumsumFloat32,
  filterLogits,
  inverseCdfTokens,
  lessThanColumn,
  pickTokens,
  type CdfWalk,
} from '../src/core/model/sampling';
import { gatherRows } from '../src/core/model/gather';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { Rng } from '../src/core/base/rng';

const largestBelowOne = 1 - 2 ** -24;

async function pick(
  logits: tf.Tensor2D,
  u: number[],
  walk: CdfWalk,
  temperature = 1,
  topK = 0,
  topP = 1,
): Promise<{ tokens: number[]; logprobs: Float32Array }> {
  const uT = tf.tensor2d(u, [u.length, 1]);
  const r = pickTokens(logits, temperature, topK, topP, uT, walk);
  const out = {
    tokens: Array.from(await r.tokens.data()),
    logprobs: (await r.logprobs.data()) as Float32Array,
  };
  expect(r.tokens.dtype).toBe('int32');
  tf.dispose([uT, r.tokens, r.logprobs]);
  return out;
}

const bits = (x: Float32Array): number[] => Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length));

async function bothWalks(
  logits: tf.Tensor2D,
  u: number[],
  temperature = 1,
  topK = 0,
  topP = 1,
): Promise<number[]> {
  const before = tf.memory().numTensors;
  const host = await pick(logits, u, 'host', temperature, topK, topP);
  const device = await pick(logits, u, 'device', temperature, topK, topP);
  expect(tf.memory().numTensors).toBe(before);
  expect(host.tokens).toEqual(device.tokens);
  expect(bits(host.logprobs)).toEqual(bits(device.logprobs));
  return host.tokens;
}

for (const backend of ['cpu', 'wasm'] as const) {
  describe(`pickTokens' host CDF walk on ${backend}`, () => {
    beforeAll(async () => {
      if (backend === 'wasm') registerWasmExtraKernels();
      tf.env().set('PROD', true);
      await tf.setBackend(backend);
      await tf.ready();
    });

    it("the float32 cumsum is tf.cumsum's, bit for bit, over GPT-2's vocabulary", async () => {
      const B = 4;
      const V = 50257;
      const rng = new Rng(3);
      const logits = tf.tensor2d(
        Float32Array.from({ length: B * V }, () => 6 * (rng.next() - 0.5)),
        [B, V],
      );
      const probs = tf.softmax(logits);
      const cum = tf.cumsum(probs, 1);
      const p = (await probs.data()) as Float32Array;
      const want = (await cum.data()) as Float32Array;
      const row = new Float32Array(V);
      for (let b = 0; b < B; b++) {
        cumsumFloat32(p, b * V, V, row);
        expect(bits(row)).toEqual(bits(want.subarray(b * V, (b + 1) * V)));
      }
      tf.dispose([logits, probs, cum]);
    });

    it('both walks choose the same tokens on random logits: plain, temperature, top-k, top-p', async () => {
      const B = 64;
      const V = 300;
      const rng = new Rng(11);
      const logits = tf.tensor2d(
        Float32Array.from({ length: B * V }, () => 5 * (rng.next() - 0.5)),
        [B, V],
      );
      const us = [
        Array.from({ length: B }, () => rng.next()),
        Array.from({ length: B }, () => 0),
        Array.from({ length: B }, () => largestBelowOne),
      ];
      const seen = new Set<number>();
      for (const u of us) {
        for (const [t, k, p] of [
          [1, 0, 1],
          [0.7, 0, 1],
          [1, 20, 1],
          [1.3, 0, 0.9],
          [1, 50, 0.5],
        ])
          (await bothWalks(logits, u, t, k, p)).forEach((x) => seen.add(x));
      }
      expect(seen.size).toBeGreaterThan(50); // the walks were compared over many different tokens
      tf.dispose(logits);
    });

    it('hand-worked: [0.5, 0.25, 0.25, 0]; a target on a CDF value goes past it; u = 0 skips a leading zero', async () => {
      const hand = tf.tensor2d([[Math.log(0.5), Math.log(0.25), Math.log(0.25), -1e4]]);
      const got: number[] = [];
      for (const u of [0, 0.49, 0.5, 0.51, 0.74, 0.75, 0.76, largestBelowOne])
        got.push(...(await bothWalks(hand, [u])));
      // u = 0.5 and 0.75 land exactly on cdf 0.5 and 0.75: the first cdf strictly above is the next token.
      expect(got).toEqual([0, 0, 1, 1, 1, 2, 2, 2]);
      const lead = tf.tensor2d([[-1e4, 0, 0]]);
      expect(await bothWalks(lead, [0])).toEqual([1]);
      // A diverged row: token 0, a valid id, from both.
      const nanRow = tf.tensor2d([
        [NaN, NaN, NaN],
        [0, 1, 2],
      ]);
      expect((await bothWalks(nanRow, [0.3, 0.99]))[0]).toBe(0);
      tf.dispose([hand, lead, nanRow]);
    });

    it('lessThanColumn is tf.less against a [B, 1] column for every kind of float32: ties, ±0, subnormals, ±∞, NaN, extremes', async () => {
      const vals = [
        0,
        -0,
        1,
        -1,
        1.5,
        2 ** -149,
        -(2 ** -149),
        2 ** -126,
        3 * 2 ** -149,
        3.4e38,
        -3.4e38,
        Infinity,
        -Infinity,
        NaN,
        0.1,
        Math.fround(0.1) + 2 ** -27,
        1e-30,
        7,
      ];
      const V = vals.length;
      const x = tf.tensor2d(
        vals.flatMap(() => vals),
        [V, V],
      ); // every value against every column value
      const col = tf.tensor2d(vals, [V, 1]);
      const got = lessThanColumn(x, col);
      const want = tf.less(x, col);
      expect(Array.from(await got.data())).toEqual(Array.from(await want.data()));
      tf.dispose([x, col, got, want]);
    });

    it('filterLogits (top-k, top-p, both) is what the tf.less formulation gives, bit for bit', async () => {
      const FILTERED = -1e30;
      const oldFilter = (scaled: tf.Tensor2D, topK: number, topP: number): tf.Tensor2D =>
        tf.tidy(() => {
          const V = scaled.shape[1];
          let out = scaled;
          if (topK > 0 && topK < V) {
            const kth = tf.slice(tf.topk(out, topK).values, [0, topK - 1], [-1, 1]);
            out = tf.where(tf.less(out, kth), tf.fill(out.shape, FILTERED), out) as tf.Tensor2D;
          }
          if (topP < 1) {
            const sorted = tf.topk(out, V).values;
            const probs = tf.softmax(sorted, -1);
            const before = tf.sub(tf.cumsum(probs, 1), probs);
            const keep = tf.sum(tf.cast(tf.less(before, topP), 'int32'), 1);
            const thr = tf.reshape(
              gatherRows(sorted, tf.sub(keep, tf.scalar(1, 'int32')) as tf.Tensor1D),
              [-1, 1],
            );
            out = tf.where(tf.less(out, thr), tf.fill(out.shape, FILTERED), out) as tf.Tensor2D;
          }
          return out;
        });
      const B = 32;
      const V = 200;
      const rng = new Rng(21);
      // Logits on a coarse grid, so rows hold ties at the k-th value and at the top-p threshold.
      const logits = tf.tensor2d(
        Float32Array.from({ length: B * V }, () => Math.round(8 * (rng.next() - 0.5) * 4) / 4),
        [B, V],
      );
      for (const [k, p] of [
        [10, 1],
        [1, 1],
        [0, 0.9],
        [0, 0.3],
        [25, 0.8],
      ]) {
        const got = filterLogits(logits, k, p);
        const want = oldFilter(logits, k, p);
        expect(bits((await got.data()) as Float32Array)).toEqual(bits((await want.data()) as Float32Array));
        tf.dispose([got, want]);
      }
      tf.dispose(logits);
    });

    it('inverseCdfTokens by hand: below, the cap at the last positive probability, NaN', () => {
      // cdf [0.25, 0.75, 0.75, 1]; target 0.75 ⇒ below 3 (indices 0..2 are ≤ 0.75), capped at lastPositive 3.
      const p = Float32Array.from([0.25, 0.5, 0, 0.25, 0.5, 0.5, 0, 0, NaN, NaN, NaN, NaN]);
      expect(Array.from(inverseCdfTokens(p, [0.75, 1, 0.5], 3, 4))).toEqual([3, 1, 0]);
    });
  });
}

describe('pickTokens on WASM: auto takes the host walk, and it is faster', () => {
  beforeAll(async () => {
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });

  it('auto runs no LessEqual or Tile kernel, and equals the device walk at [8, 50257]', async () => {
    const B = 8;
    const V = 50257;
    const rng = new Rng(5);
    const logits = tf.tensor2d(
      Float32Array.from({ length: B * V }, () => 8 * (rng.next() - 0.5)),
      [B, V],
    );
    const u = Array.from({ length: B }, () => rng.next());
    const uT = tf.tensor2d(u, [B, 1]);
    const names = new Set<string>();
    const prof = await tf.profile(() => {
      const r = pickTokens(logits, 1, 0, 1, uT);
      return [r.tokens, r.logprobs];
    });
    prof.kernels.forEach((k) => names.add(k.name));
    expect(names.has('LessEqual')).toBe(false);
    expect(names.has('Tile')).toBe(false);
    expect((await pick(logits, u, 'auto')).tokens).toEqual((await pick(logits, u, 'device')).tokens);

    const once = (walk: CdfWalk): number => {
      const t0 = performance.now();
      const r = pickTokens(logits, 1, 0, 1, uT, walk);
      r.tokens.dataSync();
      const ms = performance.now() - t0;
      tf.dispose([r.tokens, r.logprobs]);
      return ms;
    };
    // Best of 6 each, the two walks taking turns: a burst of load from the other test worker then slows both
    // rather than one walk's rounds (timed one walk after the other, the host walk once took 19.4 ms here).
    let tHost = Infinity;
    let tDevice = Infinity;
    for (let k = 0; k < 6; k++) {
      tHost = Math.min(tHost, once('auto'));
      tDevice = Math.min(tDevice, once('device'));
    }
    // Measured ≈ 6 against ≈ 85 ms on a 2-core Xeon; 3× leaves room for a loaded machine.
    expect(tDevice / tHost, `device ${tDevice.toFixed(1)} ms, host ${tHost.toFixed(1)} ms`).toBeGreaterThan(
      3,
    );
    tf.dispose([logits, uT]);
  });
});
