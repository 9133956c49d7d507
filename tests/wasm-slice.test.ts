/**
 * Slice and SplitV on WASM (src/core/kernels/wasm-extra.ts fastSlice: heap-to-heap copies instead of tfjs 4.22's
 * copy of the whole input per slice) and Sum over leading axes (fastSum: on the SIMD matmul kernel instead of a
 * transpose first) against the CPU backend: every rank to 5, partial and whole dimensions,
 * float32 / int32 / bool, splits along every axis, and gradients through split (concat) and slice (pad).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { registerWasmExtraKernels, sliceStats, sumStats } from '../src/core/kernels/wasm-extra';

type Dt = 'float32' | 'int32' | 'bool';

async function onBoth<T>(f: () => tf.Tensor | tf.Tensor[]): Promise<{ wasm: T; cpu: T }> {
  const run = async (b: string): Promise<T> => {
    await tf.setBackend(b);
    const r = f();
    const list = Array.isArray(r) ? r : [r];
    const out = await Promise.all(
      list.map(async (t) => ({ shape: t.shape, values: Array.from(await t.data()) })),
    );
    tf.dispose(list);
    return (Array.isArray(r) ? out : out[0]) as T;
  };
  const wasm = await run('wasm');
  const cpu = await run('cpu');
  await tf.setBackend('wasm');
  return { wasm, cpu };
}

function input(shape: number[], dtype: Dt): tf.Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const v = Array.from({ length: n }, (_, i) =>
    dtype === 'bool' ? i % 3 === 0 : dtype === 'int32' ? i * 7 - 50 : i * 0.5 - 3.25,
  );
  return tf.tensor(v as number[], shape, dtype);
}

/** Values whose float32 sums depend on the order they are added in. */
function noisy(shape: number[]): tf.Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return tf.tensor(
    Float32Array.from({ length: n }, (_, i) => (((i * 2654435761) % 1000003) / 1000003 - 0.5) * 3.7),
    shape,
  );
}

describe('WASM Slice and SplitV on the heap', () => {
  beforeAll(async () => {
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });

  const cases: { shape: number[]; begin: number[]; size: number[] }[] = [
    { shape: [10], begin: [3], size: [5] },
    { shape: [6, 9], begin: [1, 2], size: [4, 5] }, // partial rows
    { shape: [6, 9], begin: [2, 0], size: [3, 9] }, // whole rows: one run
    { shape: [6, 9], begin: [0, 8], size: [6, 1] }, // one column
    { shape: [3, 4, 5], begin: [1, 1, 0], size: [2, 2, 5] }, // trailing dim whole, middle partial
    { shape: [3, 4, 5], begin: [0, 0, 2], size: [3, 4, 3] },
    { shape: [2, 3, 4, 5], begin: [1, 0, 1, 1], size: [1, 3, 2, 3] },
    { shape: [2, 3, 2, 3, 4], begin: [0, 1, 0, 1, 2], size: [2, 2, 2, 2, 2] },
    { shape: [4, 5], begin: [1, 1], size: [0, 3] }, // empty
  ];
  for (const dtype of ['float32', 'int32', 'bool'] as Dt[])
    for (const c of cases)
      it(`slice ${dtype} ${JSON.stringify(c)} matches the CPU backend and runs on the heap`, async () => {
        const calls = sliceStats.calls;
        const r = await onBoth<{ shape: number[]; values: number[] }>(() =>
          tf.tidy(() => tf.slice(input(c.shape, dtype), c.begin, c.size)),
        );
        expect(r.wasm).toEqual(r.cpu);
        expect(r.wasm.shape).toEqual(c.size);
        if (c.size.every((s) => s > 0)) expect(sliceStats.calls).toBe(calls + 1);
      });

  it('split along every axis, equal and uneven, matches the CPU backend', async () => {
    for (const [shape, axis, split] of [
      [[384, 480], 1, 3],
      [[4, 6, 10], 1, [1, 2, 3]],
      [[4, 6, 10], 2, [5, 5]],
      [[4, 6, 10], 0, 2],
      [[3, 2, 4, 6], 3, [1, 4, 1]],
    ] as [number[], number, number | number[]][]) {
      const calls = sliceStats.calls;
      const r = await onBoth<{ shape: number[]; values: number[] }[]>(() =>
        tf.tidy(() => tf.split(input(shape, 'float32'), split, axis)),
      );
      expect(r.wasm).toEqual(r.cpu);
      expect(sliceStats.calls - calls).toBe(Array.isArray(split) ? split.length : split);
    }
  });

  it('gradients through split and slice match the CPU backend', async () => {
    const r = await onBoth<{ shape: number[]; values: number[] }>(() =>
      tf.tidy(() => {
        const x = input([5, 12], 'float32');
        return tf.grad((v: tf.Tensor) => {
          const [q, k, w] = tf.split(v, 3, 1);
          return tf.sum(tf.slice(tf.mul(tf.mul(q, k), w), [1, 1], [3, 2]));
        })(x);
      }),
    );
    expect(r.wasm).toEqual(r.cpu);
  });

  it('sum over the leading axes is a float32 plain loop over the rows, in order, and matches the CPU backend', async () => {
    for (const [shape, axis, keepDims] of [
      [[384, 640], 0, false],
      [[7, 13], [0], true],
      [[3, 5, 6], [0, 1], false],
      [[3, 5, 6], [1, 0], true],
      [[2, 3, 5], 0, false],
      [[1, 9], 0, false],
    ] as [number[], number | number[], boolean][]) {
      const calls = sumStats.calls;
      const r = await onBoth<{ shape: number[]; values: number[] }>(() =>
        tf.tidy(() => tf.sum(noisy(shape), axis, keepDims)),
      );
      expect(sumStats.calls).toBe(calls + 1);
      // The reference: rows added in increasing order in float32.
      const t = noisy(shape);
      const x = await t.data();
      t.dispose();
      const k = Array.isArray(axis) ? axis.length : 1;
      const rows = shape.slice(0, k).reduce((a, b) => a * b, 1);
      const cols = x.length / rows;
      const ref = Array.from({ length: cols }, (_, j) => {
        let acc = 0;
        for (let i = 0; i < rows; i++) acc = Math.fround(acc + x[i * cols + j]);
        return acc;
      });
      expect(r.wasm.values, JSON.stringify(shape)).toEqual(ref);
      expect(r.wasm.shape).toEqual(r.cpu.shape);
      // The CPU backend adds in float64: the same sums to float32 rounding.
      for (let j = 0; j < cols; j++) expect(Math.abs(r.wasm.values[j] - r.cpu.values[j])).toBeLessThan(1e-4);
    }
    // Not leading axes, all axes, or int32: tfjs's kernel, still right.
    for (const [shape, axis, dtype] of [
      [[4, 6], 1, 'float32'],
      [[4, 6], [0, 1], 'float32'],
      [[4, 6], 0, 'int32'],
    ] as [number[], number | number[], Dt][]) {
      const calls = sumStats.calls;
      const r = await onBoth<{ shape: number[]; values: number[] }>(() =>
        tf.tidy(() => tf.sum(input(shape, dtype), axis)),
      );
      expect(r.wasm).toEqual(r.cpu);
      expect(sumStats.calls).toBe(calls);
    }
  });

  it('leaves no buffers behind', async () => {
    const n0 = tf.memory().numTensors;
    const x = input([6, 9], 'float32');
    tf.dispose([tf.slice(x, [1, 1], [2, 2]), ...tf.split(x, 3, 1), tf.sum(x, 0)]);
    x.dispose();
    expect(tf.memory().numTensors).toBe(n0);
  });
});
