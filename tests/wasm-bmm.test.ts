/**
 * The SIMD batched matmul (src/core/kernels/bmm.wat → bmm-wasm.ts, used by the WASM BatchMatMul wrapper in
 * wasm-extra.ts) against the CPU backend's matMul: batched, broadcast, transposed, shapes with leftover rows and
 * columns (M, N not multiples of 4), and the gradients of attention-shaped products. Also: the committed bytes
 * are exactly what scripts/build-wasm-kernels.ts assembles from the .wat, and the kernel's shared-memory variant
 * (tfjs's threaded build imports a shared heap) gives the same bits as the plain one and a float32 plain loop.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import {
  registerWasmExtraKernels,
  gatherStats,
  gemmBatchedStats,
  GEMM_BATCHED_MIN_ROWS,
  setGemmBatchedMinRows,
  swappedStats,
} from '../src/core/kernels/wasm-extra';
import { adamFor, bmmFor, bmmStats, heapMemory, isSharedMemory } from '../src/core/kernels/wasm-simd';
import { kernelModule, KERNELS, sharedVariant, SHARED_MEMORY_IMPORT } from '../scripts/build-wasm-kernels';
import { readFile } from 'node:fs/promises';
import { readdirSync, readFileSync } from 'node:fs';

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
      const { source } = await kernelModule(k);
      expect(await readFile(k.out, 'utf8'), k.name).toBe(source);
      expect(sharedVariant(await readFile(k.wat, 'utf8'))).toContain(SHARED_MEMORY_IMPORT);
    }
    const mem = heapMemory(
      (tf.backend() as unknown as { wasm: { asm: { memory: WebAssembly.Memory } } }).wasm,
    );
    expect(mem).toBeInstanceOf(WebAssembly.Memory);
    expect(isSharedMemory(mem!)).toBe(false); // Node runs tfjs's single-threaded SIMD build
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
  // Each case on both routes: gemm.wat per batch element (the default from GEMM_BATCHED_MIN_ROWS rows) and bmm.wat.
  for (const [sa, sb, ta, tb] of cases)
    for (const route of ['gemm.wat', 'bmm.wat'] as const)
      it(`${JSON.stringify(sa)}${ta ? 'ᵀ' : ''} · ${JSON.stringify(sb)}${tb ? 'ᵀ' : ''} on ${route} matches a plain loop`, async () => {
        const was = setGemmBatchedMinRows(route === 'gemm.wat' ? GEMM_BATCHED_MIN_ROWS : Infinity);
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
        const gemmCalls = gemmBatchedStats.calls;
        let got: tf.Tensor;
        try {
          got = tf.tidy(() =>
            tf.matMul(
              tf.tensor3d(av, sa as [number, number, number]),
              tf.tensor3d(bv, sb as [number, number, number]),
              ta,
              tb,
            ),
          );
        } finally {
          setGemmBatchedMinRows(was);
        }
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
        // The route's kernel ran: gemm.wat from GEMM_BATCHED_MIN_ROWS rows (an empty product returns before it);
        // else bmm.wat, except for one-row q·kᵀ (left to tfjs's loop, see wasm-extra.ts).
        const onGemm = route === 'gemm.wat' && M >= GEMM_BATCHED_MIN_ROWS;
        const oneRowQk = tb && !ta && sa[1] < 4;
        expect(gemmBatchedStats.calls - gemmCalls).toBe(onGemm ? 1 : 0);
        expect(bmmStats.calls - calls).toBe(onGemm || oneRowQk ? 0 : 1);
      });

  // The gemm.wat route runs its plain-SIMD build: each sum in k order, a multiply then an add, as bmm.wat: the same
  // bits, so moving attention to it changed no run's numbers. The cases it takes: those of at least
  // GEMM_BATCHED_MIN_ROWS rows (fewer, and the empty product, never reach gemm.wat).
  const gemmCases = cases.filter(([sa, , ta]) => (ta ? sa[2] : sa[1]) >= GEMM_BATCHED_MIN_ROWS);
  it('the bit-for-bit comparison below covers 9 of the 12 cases (those gemm.wat takes)', () =>
    expect(gemmCases.length).toBe(9));
  for (const [sa, sb, ta, tb] of gemmCases)
    it(`${JSON.stringify(sa)}${ta ? 'ᵀ' : ''} · ${JSON.stringify(sb)}${tb ? 'ᵀ' : ''}: gemm.wat = bmm.wat bit for bit`, async () => {
      const a = tf.tensor3d(
        rand(
          sa.reduce((x, y) => x * y, 1),
          31,
        ),
        sa as [number, number, number],
      );
      const b = tf.tensor3d(
        rand(
          sb.reduce((x, y) => x * y, 1),
          37,
        ),
        sb as [number, number, number],
      );
      const on = async (minRows: number): Promise<Float32Array> => {
        const was = setGemmBatchedMinRows(minRows);
        try {
          const c = tf.matMul(a, b, ta, tb);
          const d = (await c.data()) as Float32Array;
          c.dispose();
          return d;
        } finally {
          setGemmBatchedMinRows(was);
        }
      };
      // Each side ran its own kernel: gemm.wat once, then bmm.wat once.
      const calls = gemmBatchedStats.calls;
      const bmmCalls = bmmStats.calls;
      const viaGemm = await on(GEMM_BATCHED_MIN_ROWS);
      expect(gemmBatchedStats.calls - calls).toBe(1);
      expect(bmmStats.calls - bmmCalls).toBe(0);
      const viaBmm = await on(Infinity);
      expect(gemmBatchedStats.calls - calls).toBe(1);
      expect(bmmStats.calls - bmmCalls).toBe(1);
      expect(viaGemm.length).toBe(viaBmm.length);
      // Counted, not toEqual: a failing deep-equal of tens of thousands of floats takes Vitest minutes to diff.
      const differing = viaGemm.filter((x, i) => !Object.is(x, viaBmm[i])).length;
      expect(differing, 'elements whose bits differ').toBe(0);
      tf.dispose([a, b]);
    });

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

  for (const [label, sa, sb] of [
    ['an LM head (few rows · a tall B)', [5, 24], [301, 24]],
    ['rank 3, batch 1', [1, 3, 40], [1, 97, 40]],
  ] as const) {
    it(`A·Bᵀ with ${label} runs as (B·Aᵀ)ᵀ, which copies no transpose of B, and matches a plain loop`, async () => {
      const M = sa[sa.length - 2];
      const K = sa[sa.length - 1];
      const N = sb[sb.length - 2];
      expect(M * K + M * N).toBeLessThan(N * K); // the case the wrapper swaps
      const av = rand(M * K, 23);
      const bv = rand(N * K, 29);
      const before = tf.memory().numTensors;
      const calls = swappedStats.calls;
      const got = tf.tidy(() => tf.matMul(tf.tensor(av, [...sa]), tf.tensor(bv, [...sb]), false, true));
      expect(swappedStats.calls).toBe(calls + 1);
      expect(got.shape).toEqual([...sa.slice(0, -2), M, N]);
      const ref = reference(av, [1, M, K], bv, [1, N, K], false, true);
      const d = await got.data();
      let worst = 0;
      for (let i = 0; i < d.length; i++) worst = Math.max(worst, Math.abs(d[i] - ref[i]));
      expect(worst).toBeLessThan(1e-5);
      got.dispose();
      expect(tf.memory().numTensors).toBe(before);
    });
  }

  it('A·Bᵀ with a wide A (more rows than B) keeps the explicit transpose of B', async () => {
    const calls = swappedStats.calls;
    const got = tf.tidy(() => tf.matMul(tf.ones([50, 8]), tf.ones([3, 8]), false, true));
    expect(swappedStats.calls).toBe(calls);
    expect(Array.from(await got.data()).every((x) => x === 8)).toBe(true);
    got.dispose();
  });

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

/** C = A·B in float32 as a plain loop: every product and every partial sum rounded to float32, k in order. */
function referenceF32(
  a: Float32Array,
  b: Float32Array,
  nb: number,
  M: number,
  K: number,
  N: number,
  sa: number,
  sb: number,
): Float32Array {
  const out = new Float32Array(nb * M * N);
  for (let q = 0; q < nb; q++)
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = 0; k < K; k++)
          s = Math.fround(s + Math.fround(a[q * sa + i * K + k] * b[q * sb + k * N + j]));
        out[q * M * N + i * N + j] = s;
      }
  return out;
}

describe('SIMD batched matmul on a shared memory (the heap of tfjs’s threaded build)', () => {
  // As tfjs's threaded build makes its heap: shared, with a maximum (its is 65536 pages, 4 GiB).
  const shared = new WebAssembly.Memory({ initial: 8, maximum: 65536, shared: true });
  const plain = new WebAssembly.Memory({ initial: 8 });

  /** Write A and B at the start of `mem`, run the kernel, return C (a copy). */
  function run(
    mem: WebAssembly.Memory,
    av: Float32Array,
    bv: Float32Array,
    dims: number[],
    base = 0,
  ): Float32Array {
    const [nb, M, K, N, sa, sb] = dims;
    const bmm = bmmFor(mem);
    if (!bmm) throw new Error('no bmm kernel for this memory');
    const pa = base;
    const pb = pa + av.byteLength;
    const pc = pb + bv.byteLength;
    new Float32Array(mem.buffer, pa, av.length).set(av);
    new Float32Array(mem.buffer, pb, bv.length).set(bv);
    bmm(pa, pb, pc, nb, M, K, N, sa, sb);
    return new Float32Array(mem.buffer, pc, nb * M * N).slice();
  }

  it('every caller finds the heap through heapMemory (the threaded build has no asm.memory)', () => {
    const dir = 'src/core';
    const offenders: string[] = [];
    const walk = (d: string): void => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        const f = `${d}/${e.name}`;
        if (e.isDirectory()) walk(f);
        else if (/\.tsx?$/.test(e.name) && !f.endsWith('kernels/wasm-simd.ts')) {
          if (/asm\??\.memory/.test(readFileSync(f, 'utf8'))) offenders.push(f);
        }
      }
    };
    walk(dir);
    expect(offenders, 'use heapMemory(backend.wasm) from kernels/wasm-simd.ts').toEqual([]);
    const fake = new WebAssembly.Memory({ initial: 1, maximum: 2, shared: true });
    expect(heapMemory({ wasmMemory: fake })).toBe(fake);
    expect(heapMemory({ asm: { memory: plain }, wasmMemory: fake })).toBe(plain);
  });

  it('is picked by the memory’s buffer type, and the shared memory really is shared', () => {
    expect(isSharedMemory(shared)).toBe(true);
    expect(isSharedMemory(plain)).toBe(false);
    const fs = bmmFor(shared);
    const fp = bmmFor(plain);
    expect(fs).toBeTypeOf('function');
    expect(fp).toBeTypeOf('function');
    expect(fs).not.toBe(fp);
    expect(bmmFor(shared)).toBe(fs); // one instance per memory
  });

  // [nb, M, K, N, batch stride of A, of B]: leftover rows and columns, one row, broadcast on either side.
  const dims: number[][] = [
    [3, 5, 7, 6, 35, 42],
    [2, 8, 12, 8, 96, 96],
    [4, 1, 9, 3, 9, 27],
    [32, 12, 8, 12, 96, 96],
    [4, 6, 5, 7, 0, 35],
    [4, 6, 5, 7, 30, 0],
  ];
  for (const d of dims) {
    it(`[${d.join(', ')}]: bit-identical to the plain-memory kernel and a float32 plain loop`, () => {
      const [nb, M, K, N, sa, sb] = d;
      const av = rand((sa ? nb : 1) * M * K, 7 + M);
      const bv = rand((sb ? nb : 1) * K * N, 11 + N);
      const onShared = run(shared, av, bv, d);
      const onPlain = run(plain, av, bv, d);
      const ref = referenceF32(av, bv, nb, M, K, N, sa, sb);
      expect(Array.from(onShared)).toEqual(Array.from(onPlain));
      expect(Array.from(onShared)).toEqual(Array.from(ref));
    });
  }

  it('keeps working after the shared heap grows (same instance, pointers past the old end)', () => {
    const before = bmmFor(shared);
    const oldEnd = shared.buffer.byteLength;
    shared.grow(1);
    expect(bmmFor(shared)).toBe(before);
    const d = [2, 5, 6, 7, 30, 42];
    const av = rand(60, 3);
    const bv = rand(84, 5);
    expect(Array.from(run(shared, av, bv, d, oldEnd))).toEqual(
      Array.from(referenceF32(av, bv, 2, 5, 6, 7, 30, 42)),
    );
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
