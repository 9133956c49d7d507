/**
 * The fused Adam (src/core/fused-adam.ts) against tfjs's plain Adam: same weights, same moments, same state
 * layout (so checkpoints are unchanged), on the CPU backend and on WASM (the CLI's backend). The WebGPU kernel is
 * checked against the plain path in Chromium by tests/perf-webgpu.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { useCpu } from './helpers/backend';
import { FusedAdamOptimizer, adamUpdateArrays, fusedAdamAvailable, registerFusedAdamKernels } from '../src/core/fused-adam';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';

const SHAPES = [[7, 5], [13], [3, 4, 2], [1]];

/** Two identical sets of variables, one per optimizer; random gradients per step (seeded). */
async function runBoth(steps: number, lr = 1e-2): Promise<{ plain: tf.Variable[]; fused: tf.Variable[]; p: tf.AdamOptimizer; f: FusedAdamOptimizer }> {
  const plain = SHAPES.map((s, i) => tf.tidy(() => tf.variable(tf.randomNormal(s, 0, 1, 'float32', 10 + i), true, `plain_${i}_${Math.random()}`)));
  const fused = plain.map((v, i) => tf.tidy(() => tf.variable(v.clone(), true, `fused_${i}_${Math.random()}`)));
  const p = tf.train.adam(lr);
  const f = new FusedAdamOptimizer(lr);
  for (let s = 0; s < steps; s++) {
    const grads = SHAPES.map((sh, i) => tf.randomNormal(sh, 0, 1 + s, 'float32', 100 * s + i));
    p.applyGradients(Object.fromEntries(plain.map((v, i) => [v.name, grads[i]])) as tf.NamedTensorMap as never);
    f.applyGradients(Object.fromEntries(fused.map((v, i) => [v.name, grads[i]])));
    tf.dispose(grads);
  }
  return { plain, fused, p, f };
}

async function maxRelDiff(a: tf.Tensor, b: tf.Tensor): Promise<number> {
  const [x, y] = await Promise.all([a.data(), b.data()]);
  let worst = 0;
  for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(x[i] - y[i]) / (1e-6 + Math.abs(x[i])));
  return worst;
}

function suite(backend: 'cpu' | 'wasm'): void {
  describe(`fused Adam on ${backend}`, () => {
    beforeAll(async () => {
      registerFusedAdamKernels();
      if (backend === 'cpu') await useCpu();
      else {
        registerWasmExtraKernels();
        await tf.setBackend('wasm');
        await tf.ready();
      }
    });

    it('has the kernel on this backend', () => {
      expect(tf.getBackend()).toBe(backend);
      expect(fusedAdamAvailable()).toBe(true);
    });

    it('matches tfjs Adam: weights and both moments after 6 steps', async () => {
      const { plain, fused, p, f } = await runBoth(6);
      expect(f.fusedCalls).toBe(6 * SHAPES.length);
      for (let i = 0; i < plain.length; i++) expect(await maxRelDiff(plain[i], fused[i])).toBeLessThan(2e-5);
      const [pw, fw] = [await p.getWeights(), await f.getWeights()];
      expect(fw.length).toBe(pw.length);
      expect(await fw[0].tensor.data()).toEqual(await pw[0].tensor.data()); // iteration count
      for (let i = 1; i < pw.length; i++) {
        expect(fw[i].name.endsWith(pw[i].name.slice(pw[i].name.lastIndexOf('/')))).toBe(true);
        expect(await maxRelDiff(pw[i].tensor, fw[i].tensor)).toBeLessThan(2e-5);
      }
      tf.dispose([...plain, ...fused, pw[0].tensor, fw[0].tensor]);
      p.dispose();
      f.dispose();
    });

    it('restores from setWeights and continues like tfjs Adam (checkpoint resume)', async () => {
      const { plain, fused, p, f } = await runBoth(3);
      const saved = await p.getWeights();
      const f2 = new FusedAdamOptimizer(1e-2);
      await f2.setWeights(saved.map((w) => ({ name: w.name, tensor: w.tensor.clone() })));
      const g = SHAPES.map((sh, i) => tf.randomNormal(sh, 0, 1, 'float32', 999 + i));
      const copies = plain.map((v, i) => tf.tidy(() => tf.variable(v.clone(), true, `copy_${i}_${Math.random()}`)));
      p.applyGradients(Object.fromEntries(plain.map((v, i) => [v.name, g[i]])) as never);
      f2.applyGradients(Object.fromEntries(copies.map((v, i) => [v.name, g[i]])));
      for (let i = 0; i < plain.length; i++) expect(await maxRelDiff(plain[i], copies[i])).toBeLessThan(2e-5);
      tf.dispose([...plain, ...fused, ...copies, ...g]);
      p.dispose();
      f.dispose();
      f2.dispose();
    });

    it('leaks no tensors per step', async () => {
      const v = [tf.tidy(() => tf.variable(tf.ones([64, 3]), true, `leak_${Math.random()}`))];
      const f = new FusedAdamOptimizer(1e-3);
      const step = () => tf.tidy(() => f.applyGradients({ [v[0].name]: tf.onesLike(v[0]) }));
      step();
      const before = tf.memory().numTensors;
      for (let i = 0; i < 5; i++) step();
      expect(tf.memory().numTensors).toBe(before);
      f.dispose();
      v[0].dispose();
    });
  });
}

suite('cpu');
suite('wasm');

describe('adamUpdateArrays', () => {
  it('is the textbook update (one element by hand)', () => {
    const [w, m, v] = [new Float32Array(1), new Float32Array(1), new Float32Array(1)];
    adamUpdateArrays([1], [0.5], [0.25], [2], w, m, v, { lr: 0.1, beta1: 0.9, beta2: 0.999, bc1: 1 - 0.9 ** 2, bc2: 1 - 0.999 ** 2, eps: 1e-8 });
    const m1 = 0.9 * 0.5 + 0.1 * 2;
    const v1 = 0.999 * 0.25 + 0.001 * 4;
    expect(m[0]).toBeCloseTo(m1, 6);
    expect(v[0]).toBeCloseTo(v1, 6);
    expect(w[0]).toBeCloseTo(1 - (0.1 * (m1 / (1 - 0.81))) / (Math.sqrt(v1 / (1 - 0.999 ** 2)) + 1e-8), 5);
  });
});
