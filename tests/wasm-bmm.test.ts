/**
 * The SIMD batched matmul (src/core/kernels/bmm.wat → bmm-wasm.ts, used by the WASM BatchMatMul wrapper in
 * wasm-extra.ts) against the CPU backend's matMul: batched, broadcast, transposed, shapes with leftover rows and
 * columns (M, N not multiples of 4), and the gradients of attention-shaped products. Also: the committed bytes
 * are exactly what scripts/build-wasm-kernels.ts assembles from the .wat.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { registerWasmExtraKernels, gatherStats } from '../src/core/kernels/wasm-extra';
import { adamFor, bmmFor, bmmStats } from '../src/core/kernels/wasm-simd';
import { assemble, moduleSource, KERNELS } from '../scripts/build-wasm-kernels';
import { readFile } from 'node:fs/promises';

/** Plain-loop reference: C[b] = op(A[b]) · op(B[b]) with broadcast batches. */
function reference(
  a: Float32Array,
  sa: number[],
  b: Float32Array,
  sb: number[],
  ta: boolean,
  tb: boolean,
): Float32Array {
  const [ba, ra, ca] = sa;
  const [bb, rb, cb] = sb;
  const M = ta ? ca : ra;
  const K = ta ? ra : ca;
  const N = tb ? rb : cb;
  const nb = Math.max(ba, bb);
  const out = new Float32Array(nb * M * N);
  for (let q = 0; q < nb; q++) {
    const ao = (ba > 1 ? q : 0) * ra * ca;
    const bo = (bb > 1 ? q : 0) * rb * cb;
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = 0; k < K; k++)
          s += a[ao + (ta ? k * ca + i : i * ca + k)] * b[bo + (tb ? j * cb + k : k * cb + j)];
        out[q * M * N + i * N + j] = s;
      }
    }
  }
  return out;
}

const rand = (n: number, seed: number): Float32Array => {
  let x = seed;
  return Float32Array.from({ length: n }, () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);
};

describe('SIMD batched matmul on WASM', () => {
  beforeAll(async () => {
    tf.env().set('IS_TEST', true);
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });

  it("the committed modules are what the .wat files assemble to, and they run on the backend's heap", async () => {
    for (const k of KERNELS) {
      const bytes = await assemble(k.wat);
      expect(await readFile(k.out, 'utf8'), k.name).toBe(moduleSource(bytes, k.name, k.constName));
    }
    const mem = (tf.backend() as unknown as { wasm: { asm: { memory: WebAssembly.Memory } } }).wasm.asm
      .memory;
    expect(bmmFor(mem)).toBeTypeOf('function');
    expect(adamFor(mem)).toBeTypeOf('function');
  });

  const cases: [number[], number[], boolean, boolean][] = [
    [[3, 5, 7], [3, 7, 6], false, false], // leftover rows (5 = 4 + 1) and columns (6 = 4 + 2)
    [[2, 8, 12], [2, 12, 8], false, false],
    [[4, 1, 9], [4, 9, 3], false, false], // one row, fewer columns than a SIMD group
    [[32, 48, 40], [32, 48, 40], false, true], // q·kᵀ
    [[32, 48, 48], [32, 48, 40], false, false], // att·v
    [[32, 48, 48], [32, 48, 40], true, false], // gradient shapes
    [[32, 48, 40], [32, 48, 40], true, false],
    [[6, 2, 40], [6, 46, 40], false, true], // two query rows against a cache
    [[1, 6, 5], [4, 5, 7], false, false], // broadcast a
    [[4, 6, 5], [1, 5, 7], false, false], // broadcast b
    [[4, 5, 6], [1, 7, 5], true, true],
    [[2, 0, 3], [2, 3, 4], false, false], // empty
  ];
  for (const [sa, sb, ta, tb] of cases) {
    it(`${JSON.stringify(sa)}${ta ? 'ᵀ' : ''} · ${JSON.stringify(sb)}${tb ? 'ᵀ' : ''} matches a plain loop`, async () => {
      const av = rand(
        sa.reduce((x, y) => x * y, 1),
        7,
      );
      const bv = rand(
        sb.reduce((x, y) => x * y, 1),
        11,
      );
      const before = tf.memory().numTensors;
      const calls = bmmStats.calls;
      const got = tf.tidy(() =>
        tf.matMul(
          tf.tensor3d(av, sa as [number, number, number]),
          tf.tensor3d(bv, sb as [number, number, number]),
          ta,
          tb,
        ),
      );
      const ref = reference(av, sa, bv, sb, ta, tb);
      const M = ta ? sa[2] : sa[1];
      const N = tb ? sb[1] : sb[2];
      expect(got.shape).toEqual([Math.max(sa[0], sb[0]), M, N]);
      const d = await got.data();
      expect(d.length).toBe(ref.length);
      let worst = 0;
      for (let i = 0; i < d.length; i++) worst = Math.max(worst, Math.abs(d[i] - ref[i]));
      // float32 sums of ≤ 48 products of numbers in [−1, 1]: rounding well under 1e-5.
      expect(worst).toBeLessThan(1e-5);
      got.dispose();
      expect(tf.memory().numTensors).toBe(before);
      // The SIMD kernel ran, except for one-row q·kᵀ (left to tfjs's loop, see wasm-extra.ts).
      const oneRowQk = tb && !ta && sa[1] < 4;
      expect(bmmStats.calls - calls).toBe(oneRowQk ? 0 : 1);
    });
  }

  for (const [ta, tb] of [
    [true, false],
    [false, true],
    [true, true],
  ]) {
    it(`2-D products with transposeA=${ta}, transposeB=${tb} (explicit transpose, then XNNPACK) match a plain loop`, async () => {
      const [M, K, N] = [13, 9, 6];
      const sa = ta ? [K, M] : [M, K];
      const sb = tb ? [N, K] : [K, N];
      const av = rand(M * K, 17);
      const bv = rand(K * N, 19);
      const before = tf.memory().numTensors;
      const got = tf.tidy(() =>
        tf.matMul(tf.tensor2d(av, sa as [number, number]), tf.tensor2d(bv, sb as [number, number]), ta, tb),
      );
      const ref = reference(av, [1, ...sa], bv, [1, ...sb], ta, tb);
      expect(got.shape).toEqual([M, N]);
      const d = await got.data();
      let worst = 0;
      for (let i = 0; i < d.length; i++) worst = Math.max(worst, Math.abs(d[i] - ref[i]));
      expect(worst).toBeLessThan(1e-5);
      got.dispose();
      expect(tf.memory().numTensors).toBe(before);
    });
  }

  it("attention-shaped gradients equal the CPU backend's", async () => {
    const q = rand(8 * 12 * 8, 3);
    const k = rand(8 * 12 * 8, 5);
    const v = rand(8 * 12 * 8, 9);
    const grads = (): Promise<Float32Array[]> => {
      const [tq, tk, tv] = [q, k, v].map((x) => tf.tensor3d(x, [8, 12, 8]));
      const f = (a: tf.Tensor, b: tf.Tensor, c: tf.Tensor): tf.Scalar =>
        tf.sum(
          tf.square(
            tf.matMul(
              tf.softmax(tf.matMul(a as tf.Tensor3D, b as tf.Tensor3D, false, true)),
              c as tf.Tensor3D,
            ),
          ),
        );
      const g = tf.grads(f)([tq, tk, tv]);
      const out = Promise.all(g.map((t) => t.data() as Promise<Float32Array>));
      void out.then(() => tf.dispose([...g, tq, tk, tv]));
      return out;
    };
    const onWasm = await grads();
    await tf.setBackend('cpu');
    const onCpu = await grads();
    await tf.setBackend('wasm');
    for (let i = 0; i < 3; i++) {
      let worst = 0;
      for (let j = 0; j < onCpu[i].length; j++) worst = Math.max(worst, Math.abs(onCpu[i][j] - onWasm[i][j]));
      expect(worst).toBeLessThan(1e-4);
    }
  });
});

describe('row-copy GatherV2 on WASM', () => {
  beforeAll(async () => {
    tf.env().set('IS_TEST', true);
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });

  const cases: {
    name: string;
    x: number[];
    idx: number[];
    idxShape?: number[];
    dtype?: 'float32' | 'int32';
    axis?: number;
  }[] = [
    { name: 'rows of a 2-D table (an embedding lookup)', x: [5, 3], idx: [4, 0, 0, 2, 1] },
    { name: 'a 1-D gather (the flat logprob gather)', x: [11], idx: [10, 3, 3, 0] },
    { name: '3-D table with 2-D indices', x: [4, 2, 3], idx: [3, 1, 0, 2, 2, 2], idxShape: [2, 3] },
    { name: 'int32 values', x: [6, 2], idx: [5, 1], dtype: 'int32' },
    { name: "axis 1 (left to tfjs's kernel)", x: [3, 4], idx: [3, 0], axis: 1 },
    { name: 'no indices', x: [3, 2], idx: [] },
  ];
  for (const c of cases) {
    it(`${c.name} matches the CPU backend`, async () => {
      const n = c.x.reduce((a, b) => a * b, 1);
      const vals = Array.from({ length: n }, (_, i) => (c.dtype === 'int32' ? i * 7 - 20 : Math.sin(i) * 3));
      const run = (): tf.Tensor =>
        tf.tidy(() =>
          tf.gather(
            tf.tensor(vals, c.x, c.dtype ?? 'float32'),
            tf.tensor(c.idx, c.idxShape ?? [c.idx.length], 'int32'),
            c.axis ?? 0,
          ),
        );
      const calls = gatherStats.calls;
      const w = run();
      const fast = gatherStats.calls - calls;
      const got = { shape: w.shape, data: Array.from(await w.data()) };
      w.dispose();
      await tf.setBackend('cpu');
      const r = run();
      const ref = { shape: r.shape, data: Array.from(await r.data()) };
      r.dispose();
      await tf.setBackend('wasm');
      expect(got).toEqual(ref);
      expect(fast).toBe((c.axis ?? 0) === 0 ? 1 : 0);
    });
  }

  it("an index out of range is refused with tfjs's message, and nothing leaks", () => {
    const before = tf.memory().numTensors;
    expect(() =>
      tf.tidy(() => tf.gather(tf.tensor2d([1, 2, 3, 4], [2, 2]), tf.tensor1d([0, 2], 'int32'))),
    ).toThrow(/index value 2 is not in \[0, 1\]/);
    expect(tf.memory().numTensors).toBe(before);
  });
});
