/**
 * The WGSL kernels on WebGPU in Node (Dawn; tests/helpers/webgpu-node.ts), tiny shapes: the fused Adam
 * (src/core/optim/fused-adam.ts) against a float64 loop and against tfjs's Adam; AddN of many tensors
 * (src/core/kernels/webgpu-addn.ts); the fused layer norm (src/core/kernels/webgpu-layernorm.ts) against the
 * plain ops, values and gradients. Skipped, with a test named after what to install, where no WebGPU adapter
 * exists.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { layerNorm, layerNormPlain } from '../src/core/model/ops';
import { LN_FWD, LN_DX } from '../src/core/kernels/webgpu-layernorm';
import { countDispatches } from '../src/bench/webgpu-dispatch';
import {
  FUSED_ADAM_KERNEL,
  FusedAdamOptimizer,
  adamUpdateArrays,
  fusedAdamAvailable,
  registerFusedAdamKernels,
} from '../src/core/optim/fused-adam';

const adapter = await webGpuAdapter();

/** max |a − b| / max(floor, |b|) over the elements. */
function maxRel(a: ArrayLike<number>, b: ArrayLike<number>, floor = 1e-3): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++)
    worst = Math.max(worst, Math.abs(a[i] - b[i]) / Math.max(floor, Math.abs(b[i])));
  return worst;
}

function seeded(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  return Float32Array.from(
    { length: n },
    (_, i) => lo + (hi - lo) * Math.abs(Math.sin(seed * 12.9898 + i * 78.233)),
  );
}

describe('fused Adam on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    registerFusedAdamKernels();
    await useNodeWebGpu();
  });

  it('runs on the webgpu backend with the kernel registered', () => {
    expect(tf.getBackend()).toBe('webgpu');
    expect(fusedAdamAvailable()).toBe(true);
  });

  it('one update (odd length, gradient scale) equals the float64 loop to float32 rounding', async () => {
    const n = 67; // one full workgroup of 64 and a partial one
    const [w, m, g] = [seeded(n, 1), seeded(n, 2), seeded(n, 3, -3, 3)];
    const v = seeded(n, 4, 0.001, 0.05);
    const attrs = {
      lr: 1e-2,
      beta1: 0.9,
      beta2: 0.999,
      bc1: 1 - 0.9 ** 3,
      bc2: 1 - 0.999 ** 3,
      eps: 1e-7,
    };
    const ref = [new Float32Array(n), new Float32Array(n), new Float32Array(n)] as const;
    adamUpdateArrays(w, m, v, g, ...ref, attrs, { gscale: Math.fround(0.37), apply: true });
    const before = tf.memory().numTensors;
    const ins = {
      w: tf.tensor2d(w, [1, n]),
      m: tf.tensor2d(m, [1, n]),
      v: tf.tensor2d(v, [1, n]),
      g: tf.tensor2d(g, [1, n]),
      s: tf.tensor1d([0.37, 1]), // [gradient factor, apply]
    };
    const outs = tf.engine().runKernel(FUSED_ADAM_KERNEL, ins, attrs as never) as tf.Tensor[];
    for (const o of outs) expect(o.shape).toEqual([1, n]);
    const got = await Promise.all(outs.map((o) => o.data()));
    expect(maxRel(got[0], ref[0]), 'w').toBeLessThan(2e-6);
    expect(maxRel(got[1], ref[1]), 'm').toBeLessThan(2e-6);
    expect(maxRel(got[2], ref[2]), 'v').toBeLessThan(2e-6);
    // The update moved every weight (a kernel that copied w would fail above only through the tolerance).
    for (let i = 0; i < n; i++) expect(got[0][i]).not.toBe(w[i]);
    tf.dispose([...outs, ...Object.values(ins)]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('FusedAdamOptimizer matches tf.train.adam over 4 steps: weights and both moments', async () => {
    const shapes = [[5, 3], [7], [2, 2, 3]];
    const plain = shapes.map((s, i) =>
      tf.variable(tf.tensor(seeded(tf.util.sizeFromShape(s), 10 + i), s), true, `wgpu_plain_${i}`),
    );
    const fused = shapes.map((s, i) =>
      tf.variable(tf.tensor(seeded(tf.util.sizeFromShape(s), 10 + i), s), true, `wgpu_fused_${i}`),
    );
    const p = tf.train.adam(1e-2);
    const f = new FusedAdamOptimizer(1e-2);
    for (let step = 0; step < 4; step++) {
      const grads = shapes.map((s, i) =>
        tf.tensor(seeded(tf.util.sizeFromShape(s), 100 * step + i, -1 - step, 1 + step), s),
      );
      p.applyGradients(
        Object.fromEntries(plain.map((v, i) => [v.name, grads[i]])) as tf.NamedTensorMap as never,
      );
      f.applyGradients(Object.fromEntries(fused.map((v, i) => [v.name, grads[i]])));
      tf.dispose(grads);
    }
    expect(f.fusedCalls).toBe(4 * shapes.length);
    // Weights are O(1) and some pass near 0, where a relative error means nothing: absolute error, a few
    // float32 roundings of the ~1e-2 steps (tfjs's Adam is 14 f32 ops on the GPU, the fused one uses host β^t).
    for (let i = 0; i < shapes.length; i++)
      expect(maxRel(await fused[i].data(), await plain[i].data(), 1), `weight ${i}`).toBeLessThan(1e-6);
    const [pw, fw] = [await p.getWeights(), await f.getWeights()];
    expect(fw.map((x) => x.name)).toEqual(pw.map((x) => x.name.replace('plain', 'fused')));
    for (let i = 1; i < pw.length; i++)
      expect(maxRel(await fw[i].tensor.data(), await pw[i].tensor.data()), pw[i].name).toBeLessThan(2e-5);
    p.dispose();
    f.dispose();
    tf.dispose([...plain, ...fused]);
  });
});

describe('AddN on Node WebGPU (src/core/kernels/webgpu-addn.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('sums 2 to 40 tensors exactly, with no invalid pipeline (tfjs alone: >7 inputs read back stale memory)', async () => {
    const before = tf.memory().numTensors;
    for (const n of [2, 7, 8, 9, 16, 40]) {
      // Integers: exact in float32 whatever the grouping.
      const xs = Array.from({ length: n }, (_, i) => tf.tensor1d([i, 2 * i, -i, 1]));
      const s = tf.addN(xs);
      const want = [(n * (n - 1)) / 2, n * (n - 1), (-n * (n - 1)) / 2, n];
      expect(Array.from(await s.data()), `n = ${n}`).toEqual(want);
      tf.dispose([s, ...xs]);
    }
    expect(await webGpuErrors()).toEqual([]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('a gradient norm over 16 variables (the trainer’s addN of Σg²) equals the host value', async () => {
    const vs = Array.from({ length: 16 }, (_, i) => tf.tensor1d([i + 1, -(i % 3)]));
    const norm = tf.tidy(() => tf.sqrt(tf.addN(vs.map((g) => tf.sum(tf.square(g))))));
    const host = Math.sqrt(
      Array.from({ length: 16 }, (_, i) => (i + 1) ** 2 + (i % 3) ** 2).reduce((a, b) => a + b),
    );
    expect((await norm.data())[0]).toBeCloseTo(host, 4);
    tf.dispose([norm, ...vs]);
    expect(await webGpuErrors()).toEqual([]);
  });
});

describe('fused layer norm on Node WebGPU (src/core/kernels/webgpu-layernorm.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  /** max |a − b| and the largest |b|. */
  async function diff(a: tf.Tensor, b: tf.Tensor): Promise<{ abs: number; scale: number }> {
    expect(a.shape).toEqual(b.shape);
    const [x, y] = await Promise.all([a.data(), b.data()]);
    let abs = 0;
    let scale = 0;
    for (let i = 0; i < x.length; i++) {
      abs = Math.max(abs, Math.abs(x[i] - y[i]));
      scale = Math.max(scale, Math.abs(y[i]));
    }
    return { abs, scale };
  }

  // C = 24 (fewer columns than the 64 lanes), 100 (not a multiple of 64), 160 (the tiny model's width).
  for (const [name, shape, spread] of [
    ['2-D rows, C 24', [7, 24], 3],
    ['3-D, tiny variance, C 100', [2, 5, 100], 1e-3],
    ['3-D, C 160', [2, 3, 160], 1],
  ] as const) {
    it(`${name}: values and dx, dg, db equal the plain ops'`, async () => {
      const C = shape[shape.length - 1];
      const x = tf.tidy(() => tf.add(tf.randomNormal([...shape], 0, spread, 'float32', 1), 4));
      const g = tf.randomNormal([C], 1, 0.3, 'float32', 2);
      const b = tf.randomNormal([C], 0, 0.3, 'float32', 3);
      const dy = tf.randomNormal([...shape], 0, 1, 'float32', 4);
      const eps = 1e-5;
      const before = tf.memory().numTensors;
      // It is the fused path: the forward is the one kernel, one dispatch.
      const prof = await tf.profile(() => layerNorm(x, g, b, eps));
      expect(prof.kernelNames.filter(Boolean)).toEqual([LN_FWD]);
      tf.dispose(prof.result as tf.Tensor);
      const counted = await countDispatches(() => layerNorm(x, g, b, eps));
      expect(counted.dispatches).toBe(1);
      tf.dispose(counted.result);
      const v1 = tf.tidy(() => layerNorm(x, g, b, eps));
      const v2 = tf.tidy(() => layerNormPlain(x, g, b, eps));
      const d0 = await diff(v1, v2);
      expect(d0.abs).toBeLessThan(1e-5 * Math.max(1, d0.scale));
      const grads = (f: typeof layerNorm) =>
        tf.grads((a: tf.Tensor, c: tf.Tensor, e: tf.Tensor) => tf.sum(tf.mul(f(a, c, e, eps), dy)))([
          x,
          g,
          b,
        ]);
      const mine = grads(layerNorm);
      const ref = grads(layerNormPlain);
      for (let i = 0; i < 3; i++) {
        const d = await diff(mine[i], ref[i]);
        // dx of a tiny-variance row is large (r ≈ 1/σ): the bound scales with the gradient's size.
        expect(d.abs, ['dx', 'dg', 'db'][i]).toBeLessThan(2e-5 * Math.max(1, d.scale));
      }
      tf.dispose([v1, v2, ...mine, ...ref]);
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);
      tf.dispose([x, g, b, dy]);
    });
  }

  it('the backward runs the fused kernels (stats, dx, dg and db: 4 dispatches), not the ops', async () => {
    const x = tf.randomNormal([3, 8], 0, 1, 'float32', 9);
    const g = tf.ones([8]);
    const b = tf.zeros([8]);
    const prof = await tf.profile(() =>
      tf.tidy(() => tf.grads((a: tf.Tensor) => tf.sum(layerNorm(a, g, b, 1e-5)))([x])),
    );
    expect(prof.kernelNames).toContain(LN_DX);
    expect(prof.kernelNames).not.toContain('Rsqrt');
    // Counted with dy given (no sum and its gradient): the forward's one dispatch, then the backward's four.
    const dy = tf.randomNormal([3, 8], 0, 1, 'float32', 10);
    const counted = await countDispatches(() =>
      tf.tidy(() =>
        tf.grads((a: tf.Tensor, c: tf.Tensor, e: tf.Tensor) => layerNorm(a, c, e, 1e-5))([x, g, b], dy),
      ),
    );
    expect(counted.dispatches).toBe(1 + 4);
    tf.dispose([...(prof.result as tf.Tensor[]), ...counted.result, x, g, b, dy]);
  });
});

describe('dispatch counting (src/bench/webgpu-dispatch.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('counts one dispatch per kernel and one readback per data(), and restores the prototypes', async () => {
    // 1000 elements: tfjs-webgpu runs tiny ops on host data on the CPU (no dispatch at all).
    const n = 1000;
    const a = tf.tensor1d(Float32Array.from({ length: n }, (_, i) => i));
    const b = tf.tensor1d(Float32Array.from({ length: n }, () => 4));
    const dispatch = GPUComputePassEncoder.prototype.dispatchWorkgroups;
    const r = await countDispatches(async () => {
      const c = tf.add(a, b);
      const d = tf.mul(c, c);
      const v = await d.data();
      tf.dispose([c, d]);
      return Array.from(v.subarray(0, 3));
    });
    expect(r.result).toEqual([16, 25, 36]);
    expect(r.dispatches).toBe(2);
    expect(r.readbacks).toBe(1);
    expect(GPUComputePassEncoder.prototype.dispatchWorkgroups).toBe(dispatch);
    tf.dispose([a, b]);
  });
});
