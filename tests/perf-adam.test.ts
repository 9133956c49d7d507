/**
 * The fused Adam (src/core/optim/fused-adam.ts) against tfjs's plain Adam: same weights, same moments, same state
 * layout (so checkpoints are unchanged), on the CPU backend and on WASM (the CLI's backend). The WebGPU kernel is
 * checked against the plain path in Chromium by tests/perf-webgpu.slow.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { useCpu } from './helpers/backend';
import { maxRelDiffOf } from './helpers/diff';
import {
  FusedAdamOptimizer,
  FUSED_ADAM_KERNEL,
  wasmAdamStats,
  hasScaledApply,
  adamUpdateArrays,
  fusedAdamAvailable,
  registerFusedAdamKernels,
} from '../src/core/optim/fused-adam';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { clipScale } from '../src/core/optim/optim';
import { jointGuardedStep } from '../src/core/ppo/update';

const SHAPES = [[7, 5], [13], [3, 4, 2], [1]];

/** Two identical sets of variables, one per optimizer; random gradients per step (seeded). */
async function runBoth(
  steps: number,
  lr = 1e-2,
): Promise<{ plain: tf.Variable[]; fused: tf.Variable[]; p: tf.AdamOptimizer; f: FusedAdamOptimizer }> {
  const plain = SHAPES.map((s, i) =>
    tf.tidy(() =>
      tf.variable(tf.randomNormal(s, 0, 1, 'float32', 10 + i), true, `plain_${i}_${Math.random()}`),
    ),
  );
  const fused = plain.map((v, i) =>
    tf.tidy(() => tf.variable(v.clone(), true, `fused_${i}_${Math.random()}`)),
  );
  const p = tf.train.adam(lr);
  const f = new FusedAdamOptimizer(lr);
  for (let s = 0; s < steps; s++) {
    const grads = SHAPES.map((sh, i) => tf.randomNormal(sh, 0, 1 + s, 'float32', 100 * s + i));
    p.applyGradients(
      Object.fromEntries(plain.map((v, i) => [v.name, grads[i]])) as tf.NamedTensorMap as never,
    );
    f.applyGradients(Object.fromEntries(fused.map((v, i) => [v.name, grads[i]])));
    tf.dispose(grads);
  }
  return { plain, fused, p, f };
}

/** The fused Adam's tensor against tfjs's (the reference), element by element, relative to each value. */
const relToPlain = (fused: tf.Tensor, plain: tf.Tensor) => maxRelDiffOf(fused, plain, 1e-6);

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

    if (backend === 'wasm') {
      it('runs the SIMD kernel (adam.wat), odd lengths too, bit-identical to the JS loop', async () => {
        const n = 1031; // 4·257 + 3: the leftover-element path as well
        const mk = (seed: number, lo = 0) =>
          Float32Array.from(
            { length: n },
            (_, i) => lo + Math.abs(Math.sin(seed * 7.1 + i * 1.3)) * (lo ? 1 : 2) - (lo ? 0 : 1),
          );
        const [w, m, g] = [mk(1), mk(2), mk(3)];
        const v = mk(4, 0.01);
        const attrs = {
          lr: 1e-2,
          beta1: 0.9,
          beta2: 0.999,
          bc1: 0.271,
          bc2: 0.002997,
          eps: 1e-7,
        };
        const ref = [new Float32Array(n), new Float32Array(n), new Float32Array(n)] as const;
        // The controls reach the kernel as float32: the loop takes the same rounded factor.
        adamUpdateArrays(w, m, v, g, ...ref, attrs, { gscale: Math.fround(0.37), apply: true });
        const before = wasmAdamStats.simd;
        const outs = tf.engine().runKernel(
          FUSED_ADAM_KERNEL,
          {
            w: tf.tensor1d(w),
            m: tf.tensor1d(m),
            v: tf.tensor1d(v),
            g: tf.tensor1d(g),
            s: tf.tensor1d([0.37, 1]),
          },
          attrs as never,
        ) as tf.Tensor[];
        expect(wasmAdamStats.simd).toBe(before + 1);
        for (let k = 0; k < 3; k++) {
          // The same float64 operations in the same order, rounded where the loop rounds: bit-identical.
          expect(Array.from(await outs[k].data()), ['w', 'm', 'v'][k]).toEqual(Array.from(ref[k]));
        }
        tf.dispose(outs);
      });
    }

    it('matches tfjs Adam: weights and both moments after 6 steps', async () => {
      const { plain, fused, p, f } = await runBoth(6);
      expect(f.fusedCalls).toBe(6 * SHAPES.length);
      for (let i = 0; i < plain.length; i++) expect(await relToPlain(fused[i], plain[i])).toBeLessThan(2e-5);
      const [pw, fw] = [await p.getWeights(), await f.getWeights()];
      expect(fw.length).toBe(pw.length);
      expect(await fw[0].tensor.data()).toEqual(await pw[0].tensor.data()); // iteration count
      for (let i = 1; i < pw.length; i++) {
        expect(fw[i].name.endsWith(pw[i].name.slice(pw[i].name.lastIndexOf('/')))).toBe(true);
        expect(await relToPlain(fw[i].tensor, pw[i].tensor)).toBeLessThan(2e-5);
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
      const copies = plain.map((v, i) =>
        tf.tidy(() => tf.variable(v.clone(), true, `copy_${i}_${Math.random()}`)),
      );
      p.applyGradients(Object.fromEntries(plain.map((v, i) => [v.name, g[i]])) as never);
      f2.applyGradients(Object.fromEntries(copies.map((v, i) => [v.name, g[i]])));
      for (let i = 0; i < plain.length; i++) expect(await relToPlain(copies[i], plain[i])).toBeLessThan(2e-5);
      tf.dispose([...plain, ...fused, ...copies, ...g]);
      p.dispose();
      f.dispose();
      f2.dispose();
    });

    it('applyScaled(g, scale) equals tfjs Adam on scale·g (clipping by a host-side factor), kernel or fallback', async () => {
      const make = (tag: string) =>
        SHAPES.map((sh, i) =>
          tf.tidy(() =>
            tf.variable(tf.randomNormal(sh, 0, 1, 'float32', 40 + i), true, `${tag}_${i}_${Math.random()}`),
          ),
        );
      const [plain, fused] = [make('ps'), make('fs')];
      const p = tf.train.adam(1e-2);
      const f = new FusedAdamOptimizer(1e-2);
      for (let s = 0; s < 3; s++) {
        const scale = [0.25, 1, 0.7][s];
        const grads = SHAPES.map((sh, i) => tf.randomNormal(sh, 0, 3, 'float32', 500 + 10 * s + i));
        tf.tidy(() =>
          p.applyGradients(
            Object.fromEntries(plain.map((v, i) => [v.name, tf.mul(grads[i], scale)])) as never,
          ),
        );
        f.applyScaled(Object.fromEntries(fused.map((v, i) => [v.name, grads[i]])), scale);
        tf.dispose(grads);
      }
      expect(f.fusedCalls).toBe(3 * SHAPES.length);
      for (let i = 0; i < plain.length; i++) expect(await relToPlain(fused[i], plain[i])).toBeLessThan(2e-5);
      tf.dispose([...plain, ...fused]);
      p.dispose();
      f.dispose();
    });

    it('the guarded update with the fused Adam (clip factor on the host) follows a float64 loop of clipped Adam', async () => {
      // loss = 10·Σw², so g = 20·w; the global norm is ≫ 1, so every step clips to maxGradNorm 1.
      const w0 = [0.5, -1, 2, 0.25, -0.75, 1.5];
      const fused = [tf.variable(tf.tensor1d(w0), true, `fg_${Math.random()}`)];
      const plain = [tf.variable(tf.tensor1d(w0), true, `pg_${Math.random()}`)];
      const f = new FusedAdamOptimizer(1e-2);
      const p = tf.train.adam(1e-2);
      const step = (optimizer: tf.Optimizer, vars: tf.Variable[]) =>
        jointGuardedStep(
          [
            {
              optimizer,
              vars,
              objective: () => ({ loss: tf.sum(tf.mul(tf.square(vars[0]), 10)) as tf.Scalar, stats: {} }),
            },
          ],
          1,
        );
      const w = [...w0];
      const m = w.map(() => 0);
      const v = w.map(() => 0);
      for (let t = 1; t <= 4; t++) {
        const r = await step(f, fused);
        const q = await step(p, plain);
        expect(r.applied).toBe(true);
        expect(q.applied).toBe(true);
        const g = w.map((x) => 20 * x);
        const sc = Math.min(1, 1 / (Math.hypot(...g) + 1e-6));
        expect(sc).toBeLessThan(0.1);
        for (let i = 0; i < w.length; i++) {
          const gi = g[i] * sc;
          m[i] = 0.9 * m[i] + 0.1 * gi;
          v[i] = 0.999 * v[i] + 0.001 * gi * gi;
          w[i] -= (1e-2 * (m[i] / (1 - 0.9 ** t))) / (Math.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-7);
        }
      }
      expect(f.fusedCalls).toBe(4);
      const got = await fused[0].data();
      const ref = await plain[0].data();
      for (let i = 0; i < w.length; i++) {
        // float32 weights: within a few ulps of the float64 loop.
        expect(Math.abs(got[i] - w[i])).toBeLessThan(2e-7 * Math.max(1, Math.abs(w[i])));
        // tfjs's own Adam (op-by-op float32, clip factor on the device) is the same algorithm: it drifts from the
        // loop by ~2e-5 in 4 steps (its float32 ops, not ours), well apart from a different update (≥ 1e-3 here).
        expect(Math.abs(ref[i] - w[i])).toBeLessThan(1e-4);
      }
      tf.dispose([...fused, ...plain]);
      f.dispose();
      p.dispose();
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

describe('hasScaledApply', () => {
  it("tells the fused Adam from tfjs's (which passes `instanceof FusedAdamOptimizer`: tfjs duck-types instanceof)", () => {
    const plain = tf.train.adam(1e-3);
    const fused = new FusedAdamOptimizer(1e-3);
    expect(hasScaledApply(fused)).toBe(true);
    expect(hasScaledApply(plain)).toBe(false);
    plain.dispose();
    fused.dispose();
  });
});

describe('clipScale', () => {
  it('is min(1, max / (norm + 1e-6)) and 1 when clipping is off', () => {
    expect(clipScale(4, 1)).toBeCloseTo(0.25, 6);
    expect(clipScale(0.5, 1)).toBe(1);
    expect(clipScale(123, 0)).toBe(1);
  });
});

describe('adamUpdateArrays', () => {
  it('gscale multiplies the gradient first (one element by hand: g = 4 scaled by 0.5 is the update for g = 2)', () => {
    const out = () => [new Float32Array(1), new Float32Array(1), new Float32Array(1)] as const;
    const a = out();
    const b = out();
    const attrs = { lr: 0.1, beta1: 0.9, beta2: 0.999, bc1: 0.1, bc2: 0.001, eps: 1e-8 };
    adamUpdateArrays([1], [0.5], [0.25], [4], ...a, attrs, { gscale: 0.5, apply: true });
    adamUpdateArrays([1], [0.5], [0.25], [2], ...b, attrs, { gscale: 1, apply: true });
    expect(a.map((x) => x[0])).toEqual(b.map((x) => x[0]));
  });

  it('apply false copies weight and moments unchanged, even with a NaN gradient', () => {
    const [w, m, v] = [new Float32Array(2), new Float32Array(2), new Float32Array(2)];
    const attrs = { lr: 0.1, beta1: 0.9, beta2: 0.999, bc1: 0.1, bc2: 0.001, eps: 1e-8 };
    adamUpdateArrays([1, -2], [0.5, 0.1], [0.25, 0.3], [NaN, 3], w, m, v, attrs, { gscale: 0, apply: false });
    expect([Array.from(w), Array.from(m), Array.from(v)]).toEqual([
      [1, -2],
      [0.5, Math.fround(0.1)],
      [0.25, Math.fround(0.3)],
    ]);
  });

  it('is the textbook update (one element by hand)', () => {
    const [w, m, v] = [new Float32Array(1), new Float32Array(1), new Float32Array(1)];
    adamUpdateArrays(
      [1],
      [0.5],
      [0.25],
      [2],
      w,
      m,
      v,
      {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        bc1: 1 - 0.9 ** 2,
        bc2: 1 - 0.999 ** 2,
        eps: 1e-8,
      },
      { gscale: 1, apply: true },
    );
    const m1 = 0.9 * 0.5 + 0.1 * 2;
    const v1 = 0.999 * 0.25 + 0.001 * 4;
    expect(m[0]).toBeCloseTo(m1, 6);
    expect(v[0]).toBeCloseTo(v1, 6);
    expect(w[0]).toBeCloseTo(1 - (0.1 * (m1 / (1 - 0.81))) / (Math.sqrt(v1 / (1 - 0.999 ** 2)) + 1e-8), 5);
  });
});
