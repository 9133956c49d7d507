/**
 * The faster CPU kernels (src/bench/perf/cpu-kernels.ts) against tfjs-backend-cpu's own: every transpose
 * combination and batch broadcast of BatchMatMul, UnsortedSegmentSum with rows, out-of-range ids and int32,
 * and the gradients that use them (gather and matMul backward).
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { useCpu } from './helpers/backend';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { registerFastCpuKernels, unregisterFastCpuKernels } from '../src/bench/perf/cpu-kernels';

/** Run f with tfjs's kernels and with ours; return both results as arrays. */
let onWasm = false;
const FAST_KERNELS = ['BatchMatMul', 'UnsortedSegmentSum'];

async function both(
  f: () => tf.Tensor,
): Promise<[Float32Array | Int32Array, Float32Array | Int32Array, number[], number[]]> {
  unregisterFastCpuKernels();
  const kernelOf = (name: string) => tf.getKernel(name, 'cpu')?.kernelFunc;
  const theirs = FAST_KERNELS.map(kernelOf);
  const ref = f();
  registerFastCpuKernels({ matmulOnWasm: onWasm });
  // Ours really replaced tfjs's (else the comparison would be tfjs against itself).
  FAST_KERNELS.forEach((name, i) => expect(kernelOf(name), name).not.toBe(theirs[i]));
  const got = f();
  const out: [Float32Array | Int32Array, Float32Array | Int32Array, number[], number[]] = [
    (await ref.data()) as Float32Array,
    (await got.data()) as Float32Array,
    ref.shape,
    got.shape,
  ];
  tf.dispose([ref, got]);
  return out;
}

function close(a: ArrayLike<number>, b: ArrayLike<number>, tol = 1e-5): void {
  expect(b.length).toBe(a.length);
  for (let i = 0; i < a.length; i++)
    expect(Math.abs(a[i] - b[i])).toBeLessThanOrEqual(tol * (1 + Math.abs(a[i])));
}

for (const wasmMatmul of [false, true])
  describe(`fast CPU kernels equal tfjs-backend-cpu${wasmMatmul ? ' (products on the WASM kernel)' : ''}`, () => {
    beforeAll(async () => {
      if (wasmMatmul) {
        registerWasmExtraKernels();
        await tf.setBackend('wasm'); // initialise it; the products run there from the CPU backend
      }
      await useCpu();
      onWasm = wasmMatmul;
      if (wasmMatmul)
        expect((tf.engine() as unknown as { registry: Record<string, unknown> }).registry.wasm).toBeTruthy();
    });
    afterAll(unregisterFastCpuKernels);

    const cases: [number[], number[], boolean, boolean][] = [
      [[5, 7], [7, 3], false, false],
      [[7, 5], [7, 3], true, false],
      [[5, 7], [3, 7], false, true],
      [[7, 5], [3, 7], true, true],
      [[2, 3, 4], [2, 4, 6], false, false],
      [[2, 3, 4], [1, 4, 6], false, false],
      [[1, 4, 3], [2, 6, 4], true, true],
      [[2, 2, 3, 4], [2, 2, 5, 4], false, true],
    ];
    for (const [sa, sb, ta, tb] of cases) {
      it(`BatchMatMul [${sa}]${ta ? 'ᵀ' : ''} · [${sb}]${tb ? 'ᵀ' : ''}`, async () => {
        const a = tf.randomNormal(sa, 0, 1, 'float32', 1);
        const b = tf.randomNormal(sb, 0, 1, 'float32', 2);
        const [ref, got, rs, gs] = await both(() => tf.matMul(a, b, ta, tb));
        expect(gs).toEqual(rs);
        close(ref, got);
        tf.dispose([a, b]);
      });
    }

    it('BatchMatMul gradients', async () => {
      const a = tf.randomNormal([3, 6, 5], 0, 1, 'float32', 3);
      const b = tf.randomNormal([5, 4], 0, 1, 'float32', 4);
      const g = (which: 0 | 1) =>
        tf.grads((x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.square(tf.matMul(tf.reshape(x, [18, 5]), y))))([
          a,
          b,
        ])[which];
      for (const w of [0, 1] as const) {
        const [ref, got] = await both(() => g(w));
        close(ref, got, 1e-4);
      }
      tf.dispose([a, b]);
    });

    it('UnsortedSegmentSum: rows, repeated and out-of-range ids, float and int', async () => {
      const x = tf.randomNormal([6, 3, 2], 0, 1, 'float32', 5);
      const ids = tf.tensor1d([4, 0, 4, -1, 9, 2], 'int32');
      const [ref, got, rs, gs] = await both(() => tf.unsortedSegmentSum(x, ids, 5));
      expect(gs).toEqual(rs);
      close(ref, got);
      const xi = tf.tensor2d(
        [
          [1, 2],
          [3, 4],
          [5, 6],
        ],
        [3, 2],
        'int32',
      );
      const [ri, gi] = await both(() => tf.unsortedSegmentSum(xi, tf.tensor1d([1, 1, 0], 'int32'), 3));
      expect(Array.from(gi)).toEqual(Array.from(ri));
      tf.dispose([x, ids, xi]);
    });

    it('gather gradient (the embedding and log-softmax backward)', async () => {
      const table = tf.randomNormal([50, 4], 0, 1, 'float32', 6);
      const idx = tf.tensor1d([3, 3, 49, 0, 7, 3], 'int32');
      const [ref, got] = await both(() =>
        tf.grad((t: tf.Tensor) => tf.sum(tf.mul(tf.gather(t, idx), tf.reshape(tf.range(1, 25), [6, 4]))))(
          table,
        ),
      );
      close(ref, got);
      tf.dispose([table, idx]);
    });
  });
