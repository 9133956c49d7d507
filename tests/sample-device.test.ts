/**
 * Token sampling on the device (issue #22): src/core/model/sample-op.ts's `sampleTokens`, the fused WGSL kernel
 * (src/core/kernels/webgpu-sample.ts) on WebGPU through Node's Dawn and the JavaScript path on CPU and WASM.
 *
 * - Goodness of fit: 20 000 draws (uniforms from a fixed-seed Rng, so every run draws the same numbers and the
 *   outcome is deterministic) over a 24-token vocabulary, for T ∈ {0.7, 1, 1.5} × (k, p) ∈ {(0, 1), (5, 1),
 *   (0, 0.9), (5, 0.9)}, against softmax(logits / T) renormalised over the kept set (a float64 plain-loop
 *   reference with Hugging Face's top-k-then-top-p thresholds, by sorting). Pearson's χ², cells with expected
 *   count < 5 pooled; the fit is rejected at p < 1e-3. The same test rejects a deliberately wrong sampler
 *   (draws at T = 1 or without top-k, scored against T = 1.5 or k = 5): it can fail.
 * - Never a token outside the kept set; log-probs equal the float64 renormalised (and unfiltered) log-probs within
 *   1e-5; T = 0 is tf.argMax exactly (ties to the lowest index); same uniforms → same tokens, bit for bit.
 * - The same tokens as generate()'s pickTokens at the same uniforms (away from CDF boundaries), and its log-probs:
 *   what swapping it in for pickTokens would change.
 * - On WebGPU: the kernel against the JavaScript path on the same uniforms (equal except where the uniform is
 *   within 1e-5 of a CDF boundary), a 3000-token vocabulary (256 lanes, not a multiple of them), u at 0 and just
 *   below 1, one kernel dispatch and no TopK / Cumsum / Softmax, no leaked tensors, no WebGPU errors.
 *   Skipped, with a test named after what to install, where no WebGPU adapter exists.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { sampleTokens } from '../src/core/model/sample-op';
import { SAMPLE_KERNEL, sampleWorkgroupFor } from '../src/core/kernels/webgpu-sample';
import { filterLogits, pickTokens } from '../src/core/model/sampling';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import { Rng } from '../src/core/base/rng';

const adapter = await webGpuAdapter();

// ---------- χ² by hand: the incomplete gamma by series and continued fraction (Numerical Recipes), checked ----------
// ---------- against table values in the first test ----------

/** ln Γ(a) for a a positive integer or half-integer (the χ² degrees of freedom halved): Γ(a + 1) = a·Γ(a). */
function lnGamma(a: number): number {
  if (!Number.isInteger(2 * a) || a <= 0)
    throw new Error(`lnGamma: a must be a positive multiple of 1/2, got ${a}`);
  let r = Number.isInteger(a) ? 0 : 0.5 * Math.log(Math.PI); // Γ(1) = 1, Γ(1/2) = √π
  for (let b = Number.isInteger(a) ? 1 : 0.5; b < a; b++) r += Math.log(b);
  return r;
}

/** Q(a, x) = Γ(a, x)/Γ(a), the regularised upper incomplete gamma function. */
function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  if (x < a + 1) {
    let sum = 1 / a;
    let del = sum;
    for (let n = 1; n < 1000; n++) {
      del *= x / (a + n);
      sum += del;
      if (Math.abs(del) < Math.abs(sum) * 1e-15) break;
    }
    return 1 - sum * Math.exp(-x + a * Math.log(x) - lnGamma(a));
  }
  let b = x + 1 - a;
  let c = 1e300;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (Math.abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return Math.exp(-x + a * Math.log(x) - lnGamma(a)) * h;
}

/** Pearson's χ² of counts against probabilities (cells with expected < 5 pooled), its df and p-value. */
function chiSquare(counts: number[], probs: number[]): { stat: number; df: number; p: number } {
  const n = counts.reduce((a, b) => a + b, 0);
  let stat = 0;
  let cells = 0;
  let poolO = 0;
  let poolE = 0;
  probs.forEach((p, j) => {
    const e = n * p;
    if (e < 5) {
      poolO += counts[j];
      poolE += e;
      return;
    }
    stat += (counts[j] - e) ** 2 / e;
    cells++;
  });
  if (poolE > 0 || poolO > 0) {
    // Draws where the expected count is 0: impossible under the hypothesis.
    if (poolE === 0) return { stat: Infinity, df: cells, p: 0 };
    stat += (poolO - poolE) ** 2 / poolE;
    cells++;
  }
  const df = cells - 1;
  return { stat, df, p: gammaQ(df / 2, stat / 2) };
}

// ---------- the float64 reference distribution (sorting: an independent formulation of the thresholds) ----------

/** Renormalised kept-set probabilities (0 outside it) and the unfiltered log-softmax, per token. */
function reference(
  x: ArrayLike<number>,
  T: number,
  K: number,
  P: number,
): { p: number[]; logAll: number[]; margin: number } {
  const V = x.length;
  const z = Array.from(x, (v) => Math.fround(v / T));
  const m = Math.max(...z);
  const e = z.map((v) => Math.exp(v - m));
  const sAll = e.reduce((a, b) => a + b, 0);
  const order = z.map((_, j) => j).sort((a, b) => z[b] - z[a] || a - b);
  let keep = new Set(order);
  let margin = Infinity; // how far the top-p threshold is from a tie between two choices (mass fraction)
  if (K > 0 && K < V) {
    const kth = z[order[K - 1]];
    keep = new Set(order.filter((j) => z[j] >= kth));
  }
  if (P < 1) {
    const kept = order.filter((j) => keep.has(j));
    const sk = kept.reduce((a, j) => a + e[j], 0);
    let before = 0;
    let thr = Infinity;
    for (const j of kept) {
      if (before < P * sk) thr = z[j];
      margin = Math.min(margin, Math.abs(before - P * sk) / sk);
      before += e[j];
    }
    keep = new Set(kept.filter((j) => z[j] >= thr));
  }
  const s = [...keep].reduce((a, j) => a + e[j], 0);
  return {
    p: e.map((v, j) => (keep.has(j) ? v / s : 0)),
    logAll: z.map((v) => v - m - Math.log(sAll)),
    margin,
  };
}

/** The test's 24-token logits: distinct values spread over [−2.4, 2.1] (no ties, no near-ties). */
const V = 24;
const LOGITS = Array.from({ length: V }, (_, j) =>
  Math.fround(1.6 * Math.sin(j * 1.3 + 0.4) + 0.03 * j - 0.2),
);

/**
 * Draws per configuration: 20 000 on CPU and WASM; 4 000 on WebGPU, where Dawn runs on SwiftShader here and each
 * workgroup barrier costs tens of microseconds (20 000 rows of top-k + top-p take ≈ 50 s there; on a real GPU a
 * fraction of a millisecond). 4 000 still rejects the wrong samplers below by χ² in the hundreds.
 */
const drawsOn = (backend: string): number => (backend === 'webgpu' ? 4000 : 20000);
const CONFIGS: [number, number, number][] = [];
for (const T of [0.7, 1, 1.5])
  for (const [K, P] of [
    [0, 1],
    [5, 1],
    [0, 0.9],
    [5, 0.9],
  ])
    CONFIGS.push([T, K, P]);

async function draw(
  row: number[],
  n: number,
  T: number,
  K: number,
  P: number,
  seed: number,
  impl: 'auto' | 'host' = 'auto',
): Promise<{ u: Float32Array; tokens: Int32Array; lp: Float32Array; lpAll: Float32Array }> {
  const rng = new Rng(seed);
  const u = Float32Array.from({ length: n }, () => rng.next());
  const before = tf.memory().numTensors;
  const logits = tf.tidy(() => tf.tile(tf.tensor2d(row, [1, row.length]), [n, 1])) as tf.Tensor2D;
  const uT = tf.tensor1d(u);
  const r = sampleTokens(logits, { temperature: T, topK: K, topP: P, uniforms: uT, impl });
  expect(r.tokens.dtype).toBe('int32');
  const out = {
    u,
    tokens: (await r.tokens.data()) as Int32Array,
    lp: (await r.logprobs.data()) as Float32Array,
    lpAll: (await r.fullLogprobs.data()) as Float32Array,
  };
  tf.dispose([logits, uT, r.tokens, r.logprobs, r.fullLogprobs]);
  expect(tf.memory().numTensors).toBe(before);
  return out;
}

const histogram = (tokens: ArrayLike<number>, V: number) => {
  const c = new Array<number>(V).fill(0);
  for (let i = 0; i < tokens.length; i++) c[tokens[i]]++;
  return c;
};

/** Largest |a − b| of each draw's log-prob against the reference's. */
function maxLogErr(tokens: Int32Array, got: Float32Array, ref: number[]): number {
  let worst = 0;
  for (let i = 0; i < tokens.length; i++) worst = Math.max(worst, Math.abs(got[i] - ref[tokens[i]]));
  return worst;
}

const measured: string[] = [];

function suite(name: 'cpu' | 'wasm' | 'webgpu', setup: () => Promise<unknown>): void {
  describe(`sampleTokens on ${name}${name === 'webgpu' ? ' (the WGSL kernel, Dawn in Node)' : ' (the JavaScript path)'}`, () => {
    if (name === 'webgpu' && !adapter) return skipWithoutAdapter();
    beforeAll(setup);

    it('χ² and p-value by hand match table values', () => {
      // Critical values: P(χ²_1 > 10.828) = 0.001, P(χ²_10 > 29.588) = 0.001, P(χ²_4 > 9.488) = 0.05,
      // P(χ²_30 > 59.703) = 0.001, P(χ²_2 > 2) = e^{−1}.
      expect(gammaQ(0.5, 10.828 / 2)).toBeCloseTo(0.001, 5);
      expect(gammaQ(5, 29.588 / 2)).toBeCloseTo(0.001, 5);
      expect(gammaQ(2, 9.488 / 2)).toBeCloseTo(0.05, 4);
      expect(gammaQ(15, 59.703 / 2)).toBeCloseTo(0.001, 5);
      expect(gammaQ(1, 1)).toBeCloseTo(Math.exp(-1), 12);
    });

    CONFIGS.forEach(([T, K, P], i) => {
      it(`T ${T}, top-k ${K || 'off'}, top-p ${P === 1 ? 'off' : P}: χ² fit at p ≥ 1e-3, kept set only, log-probs within 1e-5`, async () => {
        const ref = reference(LOGITS, T, K, P);
        // The configuration is well posed: no cumulative kept mass within 1e-4 of P (a threshold on a knife edge).
        expect(ref.margin).toBeGreaterThan(1e-4);
        const d = await draw(LOGITS, drawsOn(name), T, K, P, 1000 + i);
        const counts = histogram(d.tokens, V);
        for (let j = 0; j < V; j++)
          if (ref.p[j] === 0) expect(counts[j], `token ${j} is outside the kept set`).toBe(0);
        const fit = chiSquare(counts, ref.p);
        measured.push(
          `${name} T ${T} k ${K} p ${P}: χ² ${fit.stat.toFixed(2)}, df ${fit.df}, p ${fit.p.toFixed(4)}`,
        );
        expect(fit.p, `χ² ${fit.stat} on ${fit.df} df`).toBeGreaterThanOrEqual(1e-3);
        expect(maxLogErr(d.tokens, d.lp, ref.p.map(Math.log))).toBeLessThan(1e-5);
        expect(maxLogErr(d.tokens, d.lpAll, ref.logAll)).toBeLessThan(1e-5);
      });
    });

    it('rejects a wrong distribution: draws at T 1 scored against T 1.5, and without top-k against k 5', async () => {
      const wrongT = await draw(LOGITS, drawsOn(name), 1, 0, 1, 77);
      const fitT = chiSquare(histogram(wrongT.tokens, V), reference(LOGITS, 1.5, 0, 1).p);
      measured.push(
        `${name} wrong T (1 vs 1.5): χ² ${fitT.stat.toFixed(1)}, df ${fitT.df}, p ${fitT.p.toExponential(2)}`,
      );
      expect(fitT.p).toBeLessThan(1e-3);
      const wrongK = await draw(LOGITS, drawsOn(name), 1, 0, 1, 78);
      const fitK = chiSquare(histogram(wrongK.tokens, V), reference(LOGITS, 1, 5, 1).p);
      measured.push(`${name} wrong k (off vs 5): χ² ${fitK.stat}, p ${fitK.p}`);
      expect(fitK.p).toBeLessThan(1e-3);
      // And the right one, from the same draws, passes.
      expect(chiSquare(histogram(wrongT.tokens, V), reference(LOGITS, 1, 0, 1).p).p).toBeGreaterThanOrEqual(
        1e-3,
      );
    });

    it('T 0 is tf.argMax exactly, ties to the lowest index; log p_all is log softmax(logits)', async () => {
      const rows = [
        [1, 5, 5, 2, -1, 0, 5, 3],
        [-3, -3, -3, -3, -3, -3, -3, -3],
        [0.5, 0.25, 0.75, 0.75000006, 0.1, 0.2, 0.3, 0.4],
        [-1e30, -2, -1e30, -2, 7, 7, -1e30, 0],
      ];
      const logits = tf.tensor2d(rows);
      const r = sampleTokens(logits, { temperature: 0, topK: 3, topP: 0.5, uniforms: null });
      const am = tf.argMax(logits, 1);
      expect(Array.from(await r.tokens.data())).toEqual(Array.from(await am.data()));
      expect(Array.from(await r.tokens.data())).toEqual([1, 0, 3, 4]);
      expect(Array.from(await r.logprobs.data())).toEqual([0, 0, 0, 0]);
      const lpAll = await r.fullLogprobs.data();
      rows.forEach((row, b) => {
        const ref = reference(row, 1, 0, 1).logAll;
        expect(Math.abs(lpAll[b] - ref[[1, 0, 3, 4][b]])).toBeLessThan(1e-5);
      });
      tf.dispose([logits, am, r.tokens, r.logprobs, r.fullLogprobs]);
    });

    it('same uniforms → the same tokens and log-probs, bit for bit; other uniforms → other tokens', async () => {
      const a = await draw(LOGITS, 2000, 0.9, 5, 0.9, 5);
      const b = await draw(LOGITS, 2000, 0.9, 5, 0.9, 5);
      const c = await draw(LOGITS, 2000, 0.9, 5, 0.9, 6);
      expect(Array.from(b.tokens)).toEqual(Array.from(a.tokens));
      expect(Array.from(new Uint32Array(b.lp.buffer))).toEqual(Array.from(new Uint32Array(a.lp.buffer)));
      expect(Array.from(c.tokens)).not.toEqual(Array.from(a.tokens));
    });

    it('ties at the top-k threshold are all kept; u 0 and just below 1 give the first and last kept tokens', async () => {
      // z: 3 at 0, 2 at 1, 2 at 2, 2 at 5; k 2 keeps {0, 1, 2, 5} (the threshold 2 is tied three ways).
      const row = [3, 2, 2, 1, 0, 2, -1, 1.5];
      const n = 4000;
      const u = Float32Array.from({ length: n }, (_, i) => (i + 0.5) / n);
      u[0] = 0;
      u[n - 1] = 1 - 2 ** -24;
      const logits = tf.tidy(() => tf.tile(tf.tensor2d(row, [1, 8]), [n, 1])) as tf.Tensor2D;
      const r = sampleTokens(logits, { temperature: 1, topK: 2, uniforms: u });
      const tok = (await r.tokens.data()) as Int32Array;
      expect(tok[0]).toBe(0);
      expect(tok[n - 1]).toBe(5);
      expect([...new Set(tok)].sort()).toEqual([0, 1, 2, 5]);
      const fit = chiSquare(histogram(tok, 8), reference(row, 1, 2, 1).p);
      expect(fit.p).toBeGreaterThanOrEqual(1e-3);
      tf.dispose([logits, r.tokens, r.logprobs, r.fullLogprobs]);
    });

    it('a 3000-token vocabulary (not a multiple of the lanes), 64 different rows: kept set and log-probs', async () => {
      const B = 64;
      const VV = 3000;
      const rng = new Rng(9);
      const x = Float32Array.from({ length: B * VV }, () => 6 * (rng.next() - 0.5));
      const u = Float32Array.from({ length: B }, () => rng.next());
      u[0] = 0;
      u[1] = 1 - 2 ** -24;
      const logits = tf.tensor2d(x, [B, VV]);
      for (const [T, K, P] of [
        [0.8, 50, 0.9],
        [1.2, 0, 0.5],
        [1, 200, 1],
        [0.6, 1, 1],
      ]) {
        const r = sampleTokens(logits, { temperature: T, topK: K, topP: P, uniforms: u });
        const [tok, lp, lpAll] = await Promise.all([
          r.tokens.data(),
          r.logprobs.data(),
          r.fullLogprobs.data(),
        ]);
        for (let b = 0; b < B; b++) {
          const ref = reference(x.subarray(b * VV, (b + 1) * VV), T, K, P);
          expect(
            ref.p[tok[b]],
            `row ${b}: token ${tok[b]} outside the kept set (T ${T} k ${K} p ${P})`,
          ).toBeGreaterThan(0);
          expect(Math.abs(lp[b] - Math.log(ref.p[tok[b]]))).toBeLessThan(1e-5);
          expect(Math.abs(lpAll[b] - ref.logAll[tok[b]])).toBeLessThan(1e-5);
          const kept = ref.p.flatMap((p, j) => (p > 0 ? [j] : []));
          if (b === 0) expect(tok[b]).toBe(kept[0]);
          if (b === 1) expect(tok[b]).toBe(kept[kept.length - 1]);
        }
        tf.dispose([r.tokens, r.logprobs, r.fullLogprobs]);
      }
      tf.dispose(logits);
    });

    if (name === 'cpu')
      it("the kept sets are filterLogits' (sampling.ts) on the CPU backend", async () => {
        const rng = new Rng(4);
        const B = 16;
        const VV = 300;
        const x = Float32Array.from({ length: B * VV }, () => 5 * (rng.next() - 0.5));
        for (const [T, K, P] of [
          [0.8, 20, 0.8],
          [1.3, 0, 0.6],
          [1, 7, 1],
        ]) {
          const kept = tf.tidy(() =>
            tf.greater(filterLogits(tf.div(tf.tensor2d(x, [B, VV]), T) as tf.Tensor2D, K, P), -1e29),
          );
          const mask = await kept.data();
          kept.dispose();
          for (let b = 0; b < B; b++) {
            const ref = reference(x.subarray(b * VV, (b + 1) * VV), T, K, P);
            for (let j = 0; j < VV; j++)
              expect(ref.p[j] > 0, `row ${b} token ${j}`).toBe(mask[b * VV + j] === 1);
          }
        }
      });

    if (name === 'webgpu') {
      it('the kernel equals the JavaScript path on the same uniforms (away from CDF boundaries)', async () => {
        for (const [T, K, P] of [
          [0.7, 0, 1],
          [1.5, 5, 0.9],
          [1, 0, 0.9],
        ]) {
          const k = await draw(LOGITS, 5000, T, K, P, 31);
          const h = await draw(LOGITS, 5000, T, K, P, 31, 'host');
          const ref = reference(LOGITS, T, K, P);
          const cdf: number[] = [];
          ref.p.reduce((a, p) => (cdf.push(a + p), a + p), 0);
          let compared = 0;
          for (let i = 0; i < k.u.length; i++) {
            if (cdf.some((c) => Math.abs(c - k.u[i]) < 1e-5)) continue;
            compared++;
            expect(k.tokens[i], `draw ${i}, u ${k.u[i]}`).toBe(h.tokens[i]);
            expect(Math.abs(k.lp[i] - h.lp[i])).toBeLessThan(1e-5);
          }
          expect(compared).toBeGreaterThan(4990);
        }
      });

      it('one kernel dispatch: no TopK, Cumsum, Softmax or readback', async () => {
        const logits = tf.tensor2d(
          Array.from({ length: 4 * 70 }, (_, i) => Math.sin(i)),
          [4, 70],
        );
        const u = tf.tensor1d([0.1, 0.5, 0.9, 0.3]);
        const prof = await tf.profile(() => {
          const r = sampleTokens(logits, { temperature: 0.8, topK: 10, topP: 0.9, uniforms: u });
          return [r.tokens, r.logprobs, r.fullLogprobs];
        });
        expect(prof.kernelNames.filter((n) => n === SAMPLE_KERNEL)).toHaveLength(1);
        for (const bad of ['TopK', 'Cumsum', 'Softmax', 'Max', 'Exp'])
          expect(prof.kernelNames).not.toContain(bad);
        expect(sampleWorkgroupFor(70)).toBe(32);
        // Dispatches and readbacks of one sampling step at [8, 2100]: the kernel, 3 column slices and the cast of the
        // ids (no readback), against generate()'s pickTokens (softmax, two TopK sorts, cumsum, masks…).
        const big = tf.tensor2d(
          Float32Array.from({ length: 8 * 2100 }, (_, i) => 4 * Math.sin(i * 0.37)),
          [8, 2100],
        );
        const u8 = tf.tensor2d([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [8, 1]);
        const ours = await countDispatches(() => {
          const r = sampleTokens(big, { temperature: 0.8, topK: 40, topP: 0.9, uniforms: u8 });
          return [r.tokens, r.logprobs, r.fullLogprobs];
        });
        const theirs = await countDispatches(() => {
          const r = pickTokens(big, 0.8, 40, 0.9, u8);
          return [r.tokens, r.logprobs];
        });
        measured.push(
          `webgpu dispatches per step at [8, 2100], T 0.8 k 40 p 0.9: sampleTokens ${ours.dispatches} ` +
            `(${ours.readbacks} readbacks), pickTokens ${theirs.dispatches} (${theirs.readbacks} readbacks)`,
        );
        expect(ours.dispatches).toBeLessThanOrEqual(5);
        expect(ours.readbacks).toBe(0);
        expect(theirs.dispatches).toBeGreaterThan(ours.dispatches);
        tf.dispose([big, u8, ...ours.result, ...theirs.result]);

        tf.dispose([logits, u, ...(prof.result as tf.Tensor[])]);
        expect(await webGpuErrors()).toEqual([]);
      });
    }

    it("the same tokens as generate()'s pickTokens at the same uniforms (away from CDF boundaries), its log-probs", async () => {
      // What swapping pickTokens for sampleTokens in generate() changes: nothing but a draw within 1e-5 of a CDF
      // boundary (sums in another order), so a seeded run keeps its tokens.
      const n = 1000;
      for (const [T, K, P] of [
        [0.7, 0, 1],
        [1.5, 5, 0.9],
        [1, 0, 0.9],
      ]) {
        const rng = new Rng(41);
        const u = Float32Array.from({ length: n }, () => rng.next());
        const logits = tf.tidy(() => tf.tile(tf.tensor2d(LOGITS, [1, V]), [n, 1])) as tf.Tensor2D;
        const uT = tf.tensor2d(u, [n, 1]);
        const a = sampleTokens(logits, { temperature: T, topK: K, topP: P, uniforms: uT });
        const b = pickTokens(logits, T, K, P, uT);
        const [ta, la, tb, lb] = await Promise.all([
          a.tokens.data(),
          a.fullLogprobs.data(),
          b.tokens.data(),
          b.logprobs.data(),
        ]);
        const ref = reference(LOGITS, T, K, P);
        const cdf: number[] = [];
        ref.p.reduce((acc, p) => (cdf.push(acc + p), acc + p), 0);
        let compared = 0;
        for (let i = 0; i < n; i++) {
          if (cdf.some((c) => Math.abs(c - u[i]) < 1e-5)) continue;
          compared++;
          expect(ta[i], `draw ${i}, u ${u[i]}, T ${T} k ${K} p ${P}`).toBe(tb[i]);
          expect(Math.abs(la[i] - lb[i])).toBeLessThan(1e-5);
        }
        expect(compared).toBeGreaterThan(990);
        tf.dispose([logits, uT, a.tokens, a.logprobs, a.fullLogprobs, b.tokens, b.logprobs]);
      }
    });

    it('uniforms exactly on CDF boundaries (64 equal kept masses, u = i/64, top-k 64 of 3000): a kept token', async () => {
      // The kept tokens' masses are exactly 1/64 of the kept total, so u·S lands exactly on a CDF value, where a
      // count-based walk over a float32 cumsum can land on a filtered (zero-mass) token.
      const VV = 3000;
      const row = Float32Array.from({ length: VV }, (_, j) => (j % 47 === 5 ? 2 : Math.sin(j)));
      const keptIdx = Array.from(row).flatMap((v, j) => (v === 2 ? [j] : []));
      expect(keptIdx.length).toBe(64);
      const u = Float32Array.from({ length: 64 }, (_, i) => i / 64);
      const logits = tf.tidy(() => tf.tile(tf.tensor2d(row, [1, VV]), [64, 1])) as tf.Tensor2D;
      const r = sampleTokens(logits, { temperature: 0.9, topK: 64, uniforms: u });
      const tok = Array.from(await r.tokens.data());
      for (const t of tok) expect(keptIdx, `token ${t}`).toContain(t);
      // u = i/64 sits on the boundary after the i-th kept token: strictly greater takes the next one.
      expect(tok).toEqual(keptIdx);
      tf.dispose([logits, r.tokens, r.logprobs, r.fullLogprobs]);
    });

    it('a NaN row gives a token in range, not a crash', async () => {
      const logits = tf.tensor2d([
        [NaN, NaN, NaN, NaN],
        [0, 1, 2, 3],
      ]);
      const r = sampleTokens(logits, { temperature: 1, topK: 2, topP: 0.9, uniforms: [0.5, 0.5] });
      const tok = Array.from(await r.tokens.data());
      expect(tok[0]).toBeGreaterThanOrEqual(0);
      expect(tok[0]).toBeLessThan(4);
      expect([2, 3]).toContain(tok[1]);
      tf.dispose([logits, r.tokens, r.logprobs, r.fullLogprobs]);
    });

    it('refuses bad options in words', () => {
      const logits = tf.tensor2d([[0, 1]]);
      expect(() => sampleTokens(logits, { temperature: -1, uniforms: [0.5] })).toThrow(/temperature must be/);
      expect(() => sampleTokens(logits, { temperature: 1, topK: 1.5, uniforms: [0.5] })).toThrow(
        /topK must be/,
      );
      expect(() => sampleTokens(logits, { temperature: 1, topP: 0, uniforms: [0.5] })).toThrow(
        /topP must be/,
      );
      expect(() => sampleTokens(logits, { temperature: 1, uniforms: [0.5, 0.2] })).toThrow(
        /2 uniforms for 1 rows/,
      );
      expect(() => sampleTokens(logits, { temperature: 1, uniforms: null })).toThrow(/uniforms are required/);
      logits.dispose();
    });

    // The χ² statistics measured, printed for the log (the checks are the cases above).
    afterAll(() => {
      console.log(measured.filter((l) => l.startsWith(name)).join('\n'));
    });
  });
}

suite('cpu', async () => {
  tf.env().set('PROD', true);
  await tf.setBackend('cpu');
  await tf.ready();
});
suite('wasm', async () => {
  registerWasmExtraKernels();
  tf.env().set('PROD', true);
  await tf.setBackend('wasm');
  await tf.ready();
});
suite('webgpu', useNodeWebGpu);
