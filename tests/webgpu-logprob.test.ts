/**
 * The fused token log-prob and entropy kernels (src/core/kernels/webgpu-logprob.ts) on WebGPU in Node (Dawn;
 * tests/helpers/webgpu-node.ts), tiny shapes: values and gradients against a float64 loop, against the plain ops on
 * the same backend (setWebGpuLogprobFused(false)) and against the CPU backend; vocabularies that are not a multiple
 * of the workgroup (both workgroup sizes), temperature ≠ 1, logits at ±80; the dispatch counts; no tensor leaks.
 * Skipped, with a test named after what to install, where no WebGPU adapter exists.
 */
import { describe, it, expect, beforeAll, afterEach } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { entropyFromLogits, logprobsFromLogits } from '../src/core/ppo/losses';
import {
  ENTROPY_BWD,
  ENTROPY_FWD,
  LOGPROB_BWD,
  LOGPROB_FWD,
  entropyRowsWebGpu,
  setWebGpuLogprobFused,
  webGpuLogprobApplies,
  workgroupFor,
} from '../src/core/kernels/webgpu-logprob';
import { checkLogprobOnCurrentBackend } from '../src/core/backend/webgpu-fused';
import { countDispatches } from '../src/bench/webgpu-dispatch';

const adapter = await webGpuAdapter();

/** Logits in [−3, 3] from a sine hash, with every `spikeEvery`-th row holding one entry at ±80. */
function makeLogits(M: number, V: number, seed: number, spikes: boolean): Float32Array {
  const x = Float32Array.from(
    { length: M * V },
    (_, i) => 3 * Math.sin(seed * 12.9898 + i * 78.233) * Math.cos(i * 0.37 + seed),
  );
  if (spikes)
    for (let r = 0; r < M; r++) {
      x[r * V + ((r * 31 + seed) % V)] = r % 2 ? -80 : 80;
      if (r % 3 === 0) x[r * V + ((r * 17 + 5) % V)] = 79.5; // a near-tie with the +80 spike
    }
  return x;
}

/** float64 references: per row logp at the token, its gradient (onehot − p)/T, entropy H, its gradient −p(log p + H)/T. */
function reference(x: Float32Array, M: number, V: number, tok: number[], T: number) {
  const logp = new Float64Array(M);
  const ent = new Float64Array(M);
  const dLogp = new Float64Array(M * V); // per unit upstream
  const dEnt = new Float64Array(M * V);
  for (let r = 0; r < M; r++) {
    const z = Array.from(x.subarray(r * V, (r + 1) * V), (v) => v / T);
    const m = Math.max(...z);
    const s = z.reduce((a, v) => a + Math.exp(v - m), 0);
    const lse = m + Math.log(s);
    const lp = z.map((v) => v - lse);
    const H = -lp.reduce((a, l) => a + Math.exp(l) * l, 0);
    logp[r] = lp[tok[r]];
    ent[r] = H;
    for (let v = 0; v < V; v++) {
      const p = Math.exp(lp[v]);
      dLogp[r * V + v] = ((v === tok[r] ? 1 : 0) - p) / T;
      dEnt[r * V + v] = (-p * (lp[v] + H)) / T;
    }
  }
  return { logp, ent, dLogp, dEnt };
}

/** max |a − b| over the elements, and the largest |b| (the scale the float32 error is relative to). */
function diff(a: ArrayLike<number>, b: ArrayLike<number>): { abs: number; scale: number } {
  expect(a.length).toBe(b.length);
  let abs = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    abs = Number.isNaN(d) ? Infinity : Math.max(abs, d);
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return { abs, scale };
}

const rowsScaled = (g: ArrayLike<number>, w: number[], V: number) =>
  Float64Array.from({ length: g.length }, (_, i) => g[i] * w[Math.floor(i / V)]);

describe('fused token log-prob and entropy on Node WebGPU (src/core/kernels/webgpu-logprob.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  afterEach(() => setWebGpuLogprobFused(true));

  // V 37 (< 64 lanes), 133 (not a multiple of 64), 2100 (the 256-lane path, not a multiple of 256).
  for (const [M, V, T, spikes] of [
    [5, 37, 1, false],
    [6, 133, 0.7, true],
    [3, 2100, 1.3, true],
  ] as const) {
    it(`M ${M}, V ${V} (${workgroupFor(V)} lanes), T ${T}${spikes ? ', logits at ±80' : ''}: values and gradients`, async () => {
      const x = makeLogits(M, V, V, spikes);
      const tok = Array.from({ length: M }, (_, r) => (r === 0 ? 0 : r === 1 ? V - 1 : (r * 31 + V) % V));
      const w = Array.from({ length: M }, (_, r) => Math.cos(r * 1.7) + 0.2); // upstream gradient per row
      const ref = reference(x, M, V, tok, T);
      const logits = tf.tensor2d(x, [M, V]);
      const tokens = tf.tensor1d(tok, 'int32');
      const dy = tf.tensor1d(w);
      const mask = tf.ones([M]);
      const before = tf.memory().numTensors;
      const run = (fused: boolean) => {
        setWebGpuLogprobFused(fused);
        expect(webGpuLogprobApplies(logits)).toBe(fused);
        return tf.tidy(() => {
          const lp = (a: tf.Tensor) => logprobsFromLogits(a as tf.Tensor2D, tokens, T);
          const ent = (a: tf.Tensor) => tf.mul(entropyFromLogits(a, mask, T), M); // Σ_rows H
          return [lp(logits), tf.grad(lp)(logits, dy), ent(logits), tf.grad(ent)(logits)];
        });
      };
      const fused = await Promise.all(run(true).map(async (t) => [t, await t.data()] as const));
      const plain = await Promise.all(run(false).map(async (t) => [t, await t.data()] as const));
      const [lpF, gF, hF, ghF] = fused.map((p) => p[1]);
      const [lpP, gP, hP, ghP] = plain.map((p) => p[1]);
      const sumH = ref.ent.reduce((a, b) => a + b, 0);
      // Against float64. Values are O(max|z|) = 80/T (−230 at T 0.7): float32 rounds z itself by ~ulp(max|z|).
      const zMax = spikes ? 80 / T : 3 / T;
      const vTol = 6e-8 * Math.max(1, zMax) * 4;
      expect(diff(lpF, ref.logp).abs, 'fused logp').toBeLessThan(vTol);
      expect(diff(lpP, ref.logp).abs, 'plain logp').toBeLessThan(vTol);
      expect(Math.abs(hF[0] - sumH), 'fused Σ entropy').toBeLessThan(vTol * M);
      // Gradients are O(1/T); each p carries the relative error of exp(z − m) with z rounded (~ulp(max|z|)).
      const gTol = (4 * 6e-8 * Math.max(1, zMax)) / T;
      expect(diff(gF, rowsScaled(ref.dLogp, w, V)).abs, 'fused dlogp').toBeLessThan(gTol);
      expect(diff(gP, rowsScaled(ref.dLogp, w, V)).abs, 'plain dlogp').toBeLessThan(gTol);
      expect(diff(ghF, ref.dEnt).abs, 'fused dH').toBeLessThan(gTol * Math.max(1, zMax));
      // Fused against plain on the same backend: no worse than either against float64, both ways.
      expect(diff(lpF, lpP).abs).toBeLessThan(2 * vTol);
      expect(Math.abs(hF[0] - hP[0])).toBeLessThan(2 * vTol * M);
      expect(diff(gF, gP).abs).toBeLessThan(2 * gTol);
      expect(diff(ghF, ghP).abs).toBeLessThan(2 * gTol * Math.max(1, zMax));
      tf.dispose([...fused.map((p) => p[0]), ...plain.map((p) => p[0])]);
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);

      // The CPU backend's plain path agrees with the fused kernel (what a run on another backend computes).
      await tf.setBackend('cpu');
      const cpu = tf.tidy(() => {
        const [l, t, d] = [tf.tensor2d(x, [M, V]), tf.tensor1d(tok, 'int32'), tf.tensor1d(w)];
        const lp = (a: tf.Tensor) => logprobsFromLogits(a as tf.Tensor2D, t, T);
        return [lp(l), tf.grad(lp)(l, d)];
      });
      const [lpC, gC] = await Promise.all(cpu.map((t) => t.data()));
      tf.dispose(cpu);
      await useNodeWebGpu();
      expect(diff(lpF, lpC).abs, 'fused vs CPU logp').toBeLessThan(2 * vTol);
      expect(diff(gF, gC).abs, 'fused vs CPU dlogp').toBeLessThan(2 * gTol);
      tf.dispose([logits, tokens, dy, mask]);
    });
  }

  it('one dispatch forward and one backward, the kernels only: no cast, range, flat index or gather', async () => {
    const [M, V] = [4, 70];
    const logits = tf.tensor2d(makeLogits(M, V, 3, false), [M, V]);
    const tokens = tf.tensor1d([1, 69, 0, 33], 'int32');
    const dy = tf.tensor1d([0.5, -1, 2, 1]);
    const lp = (a: tf.Tensor) => logprobsFromLogits(a as tf.Tensor2D, tokens, 0.9);
    const ent = (a: tf.Tensor) => entropyRowsWebGpu(a as tf.Tensor2D, 0.9);
    // Kernels only (tf.customGrad's scopes also show by name), less the Identity tf.grad adds (a view, no dispatch:
    // the counts below are the dispatches).
    const kernels = (p: { kernelNames: string[] }) =>
      p.kernelNames.filter((n) => tf.getKernel(n, 'webgpu') && n !== 'Identity');
    const prof = await tf.profile(() => tf.tidy(() => tf.grad(lp)(logits, dy)));
    expect(kernels(prof)).toEqual([LOGPROB_FWD, LOGPROB_BWD]);
    tf.dispose(prof.result as tf.Tensor);
    const profE = await tf.profile(() => tf.tidy(() => tf.grad(ent)(logits, dy)));
    expect(kernels(profE)).toEqual([ENTROPY_FWD, ENTROPY_BWD]);
    tf.dispose(profE.result as tf.Tensor);
    const count = async (f: () => tf.Tensor) => {
      const c = await countDispatches(() => tf.tidy(f));
      c.result.dispose();
      return c.dispatches;
    };
    expect(await count(() => lp(logits))).toBe(1);
    expect(await count(() => tf.grad(lp)(logits, dy))).toBe(2);
    expect(await count(() => ent(logits))).toBe(1);
    expect(await count(() => tf.grad(ent)(logits, dy))).toBe(2);
    // The plain ops on the same backend, for scale (not asserted exactly: tfjs's choice of kernels).
    setWebGpuLogprobFused(false);
    expect(await count(() => lp(logits))).toBeGreaterThan(4);
    expect(await count(() => tf.grad(lp)(logits, dy))).toBeGreaterThan(10);
    tf.dispose([logits, tokens, dy]);
  });

  it('tensors stay flat over 3 forward + backward passes through variableGrads', async () => {
    const [M, V] = [6, 50];
    const w = tf.variable(tf.tensor2d(makeLogits(M, V, 5, true), [M, V]), true, 'lp_logits');
    const tokens = tf.tensor1d([0, 1, 2, 3, 4, 49], 'int32');
    const mask = tf.tensor1d([1, 1, 0, 1, 1, 1]);
    const counts: number[] = [];
    for (let k = 0; k < 3; k++) {
      const { value, grads } = tf.variableGrads(() =>
        tf.sub(tf.mean(logprobsFromLogits(w, tokens, 0.8)), tf.mul(0.01, entropyFromLogits(w, mask, 0.8))),
      );
      expect(Number.isFinite((await value.data())[0])).toBe(true);
      tf.dispose([value, grads.lp_logits]);
      counts.push(tf.memory().numTensors);
    }
    expect(new Set(counts).size).toBe(1);
    tf.dispose([w, tokens, mask]);
  });

  it('a token outside [0, V) gives NaN (its log-prob and its row’s gradient), not a wrong number', async () => {
    const logits = tf.tensor2d(makeLogits(3, 20, 7, false), [3, 20]);
    const tokens = tf.tensor1d([2, 20, -1], 'int32');
    const lp = (a: tf.Tensor) => logprobsFromLogits(a as tf.Tensor2D, tokens);
    const [v, g] = tf.tidy(() => [lp(logits), tf.grad(lp)(logits)]);
    const [vd, gd] = await Promise.all([v.data(), g.data()]);
    expect(Number.isFinite(vd[0])).toBe(true);
    expect(Number.isNaN(vd[1]) && Number.isNaN(vd[2])).toBe(true);
    expect(Array.from(gd.subarray(0, 20)).every(Number.isFinite)).toBe(true);
    expect(Array.from(gd.subarray(20)).every(Number.isNaN)).toBe(true);
    tf.dispose([v, g, logits, tokens]);
  });

  it('rows past 65535 workgroups (tfjs reshapes the dispatch to 2-D) are all computed', async () => {
    const [M, V] = [65600, 3];
    const x = Float32Array.from({ length: M * V }, (_, i) => (i % 7) - 3 + (i % 5) * 0.1);
    const tok = Array.from({ length: M }, (_, r) => r % V);
    const logits = tf.tensor2d(x, [M, V]);
    const tokens = tf.tensor1d(tok, 'int32');
    const out = logprobsFromLogits(logits, tokens);
    const got = await out.data();
    const ref = reference(x, M, V, tok, 1).logp;
    expect(diff(got, ref).abs).toBeLessThan(1e-5);
    tf.dispose([out, logits, tokens]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('checkLogprobOnCurrentBackend (what the Chromium page calls) agrees and counts 1 + 1 dispatches', async () => {
    const r = await checkLogprobOnCurrentBackend();
    expect(r.maxRelValue).toBeLessThan(1e-6);
    expect(r.maxRelGrad).toBeLessThan(1e-5);
    expect(r.entropy.maxRelValue).toBeLessThan(1e-5);
    expect(r.entropy.maxRelGrad).toBeLessThan(1e-4);
    expect([r.dispatchesFwd, r.dispatchesFwdBwd]).toEqual([1, 2]);
    expect([r.entropy.dispatchesFwd, r.entropy.dispatchesFwdBwd]).toEqual([1, 2]);
    expect(await webGpuErrors()).toEqual([]);
  });
});
