/**
 * The fused Adam written in place on WebGPU (src/core/kernels/webgpu-adam-inplace.ts) against the tfjs-program path
 * it replaces (three programs per variable, new tensors assigned) and a float64 loop: the same weights and moments
 * bit for bit over steps with clipping, a skipped step (apply 0) and a live learning-rate change; a variable whose
 * data another tensor shares keeps the tfjs path; a value read back before is read fresh after; one dispatch per
 * variable; tensor counts flat. Node WebGPU (Dawn; SwiftShader here).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { FusedAdamOptimizer, setWebGpuAdamInPlace } from '../src/core/optim/fused-adam';
import { countDispatches } from '../src/core/kernels/webgpu-count';

const adapter = await webGpuAdapter();

/** Deterministic values in [-1, 1). */
const values = (n: number, seed: number) =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 12.9898 + i * 78.233) * 0.999);

const SHAPES: number[][] = [[8, 48], [48, 8], [3], [300, 257]];

function makeVars(tag: string) {
  return SHAPES.map((shape, k) => {
    const n = shape.reduce((a, b) => a * b, 1);
    return tf.tidy(() => tf.variable(tf.tensor(values(n, k + 1), shape), true, `${tag}_${k}`));
  });
}

async function run(inPlace: boolean, tag: string) {
  setWebGpuAdamInPlace(inPlace);
  try {
    const vars = makeVars(tag);
    const opt = new FusedAdamOptimizer(1e-2);
    const steps: [number, number, number][] = [
      [1, 1, 1e-2],
      [0.7, 1, 1e-2],
      [1, 0, 1e-2], // skipped on the device: nothing moves
      [0.5, 1, 3e-3], // a live learning-rate change
    ];
    let dispatches = 0;
    for (const [si, [scale, apply, lr]] of steps.entries()) {
      (opt as unknown as { learningRate: number }).learningRate = lr;
      const grads = vars.map((v, k) => ({
        name: v.name,
        tensor: tf.tensor(values(v.size, 10 * (k + 1) + si), v.shape),
      }));
      const controls = tf.tensor1d([scale, apply]);
      const c = await countDispatches(() => opt.applyControlled(grads, controls));
      dispatches += c.dispatches;
      tf.dispose([controls, ...grads.map((g) => g.tensor)]);
    }
    const weights = await Promise.all(vars.map((v) => v.data() as Promise<Float32Array>));
    const ws = await opt.getWeights();
    const isMoment = (name: string) => name.endsWith('/m') || name.endsWith('/v');
    const mv = await Promise.all(
      ws.filter((w) => isMoment(w.name)).map((w) => w.tensor.data() as Promise<Float32Array>),
    );
    tf.dispose(ws.filter((w) => !isMoment(w.name)).map((w) => w.tensor)); // the iteration count's scalar
    return { vars, opt, weights, mv, dispatches, calls: opt.fusedCalls };
  } finally {
    setWebGpuAdamInPlace(true);
  }
}

describe('fused Adam in place on WebGPU (Node, Dawn)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('equals the tfjs-program path bit for bit and a float64 loop within 1e-6, one dispatch per variable', async () => {
    const before = tf.memory().numTensors;
    const a = await run(true, 'inplace');
    const b = await run(false, 'programs');
    expect(a.calls).toBe(b.calls);
    expect(a.calls).toBe(SHAPES.length * 4);
    // In place: one dispatch per variable per step where the tfjs path has three (the rest — the moments' first
    // zeros, tfjs's β-powers — is the same in both).
    expect(b.dispatches - a.dispatches).toBe(2 * SHAPES.length * 4);
    for (let k = 0; k < SHAPES.length; k++)
      expect(Array.from(a.weights[k])).toEqual(Array.from(b.weights[k]));
    expect(a.mv.length).toBe(2 * SHAPES.length);
    for (let k = 0; k < a.mv.length; k++) expect(Array.from(a.mv[k])).toEqual(Array.from(b.mv[k]));
    // The float64 reference of the same four steps.
    const steps: [number, number, number][] = [
      [1, 1, 1e-2],
      [0.7, 1, 1e-2],
      [1, 0, 1e-2],
      [0.5, 1, 3e-3],
    ];
    for (let k = 0; k < SHAPES.length; k++) {
      const n = a.vars[k].size;
      const w = Float64Array.from(values(n, k + 1));
      const m = new Float64Array(n);
      const v = new Float64Array(n);
      let t = 0;
      steps.forEach(([scale, apply, lr], si) => {
        t++;
        if (!apply) return;
        const g = values(n, 10 * (k + 1) + si);
        const bc1 = 1 - Math.pow(0.9, t);
        const bc2 = 1 - Math.pow(0.999, t);
        for (let i = 0; i < n; i++) {
          const gi = g[i] * scale;
          m[i] = 0.9 * m[i] + 0.1 * gi;
          v[i] = 0.999 * v[i] + 0.001 * gi * gi;
          w[i] -= (lr * (m[i] / bc1)) / (Math.sqrt(v[i] / bc2) + 1e-7);
        }
      });
      let worst = 0;
      for (let i = 0; i < n; i++)
        worst = Math.max(worst, Math.abs(a.weights[k][i] - w[i]) / Math.max(1e-3, Math.abs(w[i])));
      expect(worst, `variable ${k}`).toBeLessThan(1e-5);
    }
    for (const r of [a, b]) {
      r.opt.dispose();
      tf.dispose(r.vars);
    }
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a variable whose data another tensor shares keeps the tfjs path; a value read back before is read fresh', async () => {
    const init = tf.tensor2d(values(64, 3), [8, 8]);
    const shared = tf.variable(init, true, 'shared_w'); // `init` still holds the same data
    const own = tf.tidy(() => tf.variable(tf.tensor2d(values(64, 4), [8, 8]), true, 'own_w'));
    const seen = Array.from(await own.data()); // tfjs keeps this copy on the host
    const opt = new FusedAdamOptimizer(0.1);
    const g = tf.tensor2d(values(64, 5), [8, 8]);
    const controls = tf.tensor1d([1, 1]);
    opt.applyControlled(
      [
        { name: 'shared_w', tensor: g },
        { name: 'own_w', tensor: g },
      ],
      controls,
    );
    expect(Array.from(await init.data())).toEqual(Array.from(values(64, 3))); // untouched by the step
    const after = Array.from(await own.data());
    expect(after).not.toEqual(seen);
    // Both paths took the same step from their own start: compare with the float64 first step of Adam.
    const expectStep = (w0: Float32Array, w1: number[]) => {
      for (let i = 0; i < 64; i++) {
        const gi = values(64, 5)[i];
        const want = w0[i] - (0.1 * gi) / (Math.abs(gi) + 1e-7);
        expect(Math.abs(w1[i] - want)).toBeLessThan(1e-5);
      }
    };
    expectStep(values(64, 4), after);
    expectStep(values(64, 3), Array.from(await shared.data()));
    tf.dispose([init, shared, own, g, controls]);
    opt.dispose();
    expect(await webGpuErrors()).toEqual([]);
  });
});
