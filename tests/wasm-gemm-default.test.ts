/**
 * gemm.wat is the WASM backend's route for 2-D float32 products by default (issue #35; docs/tfjs.md): registering
 * the kernels turns it on unless WASM_GEMM=0, and a product then goes through it; setWasmGemm(false) turns it off.
 * That an explicit setWasmGemm(false) made before the kernels are first registered stands is what
 * tests/wasm-gemm-training.slow.test.ts's first (XNNPACK) run relies on.
 */
import { describe, it, expect } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import {
  GEMM_BT_MIN_ROWS,
  GEMM_MIN_XNNPACK_THREADS,
  GEMM_NT_MAX_ROWS,
  gemmNtStats,
  gemmStats,
  registerWasmExtraKernels,
  swappedStats,
  setWasmGemm,
  wasmGemmEnabled,
  whileGenerating,
} from '../src/core/kernels/wasm-extra';

describe('the gemm.wat route by default', () => {
  it('is on once the kernels are registered, and a 2-D product takes it', async () => {
    expect(process.env.WASM_GEMM, 'this test reads the default').toBeUndefined();
    expect(wasmGemmEnabled()).toBe(false); // nothing registered yet in this file's worker
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
    expect(wasmGemmEnabled()).toBe(true);
    const calls = gemmStats.calls;
    const a = tf.tensor2d([1, 2, 3, 4, 5, 6], [2, 3]);
    const b = tf.tensor2d([1, 0, 0, 1, 1, 1], [3, 2]);
    const c = tf.matMul(a, b);
    expect(Array.from(await c.data())).toEqual([4, 5, 10, 11]);
    expect(gemmStats.calls).toBe(calls + 1);
    tf.dispose([a, b, c]);
  });

  it('dy·Wᵀ takes it from GEMM_BT_MIN_ROWS rows; fewer keep the swap, or while generating gemm_nt', async () => {
    // dy [M, 768] · W [200, 768]ᵀ (Conv1D's input gradient: W [in, out]) against a float64 loop: M·K + M·N < N·K
    // below 159 rows. While generating, fewer than 64 rows run on gemm_nt instead of the swap.
    const cases = [
      { M: GEMM_BT_MIN_ROWS, K: 768, N: 200, route: 'gemm', gen: false },
      { M: GEMM_BT_MIN_ROWS - 1, K: 768, N: 200, route: 'swap', gen: false },
      { M: GEMM_NT_MAX_ROWS, K: 768, N: 200, route: 'nt', gen: true },
      { M: GEMM_BT_MIN_ROWS, K: 768, N: 200, route: 'gemm', gen: true },
    ] as const;
    expect(GEMM_NT_MAX_ROWS).toBe(GEMM_BT_MIN_ROWS - 1);
    for (const { M, K, N, route, gen } of cases) {
      const W = tf.randomNormal([N, K], 0, 1, 'float32', 3);
      const dy = tf.randomNormal([M, K], 0, 1, 'float32', M);
      const w = (await W.data()) as Float32Array;
      const d = (await dy.data()) as Float32Array;
      const want = new Float64Array(M * N);
      for (let i = 0; i < M; i++)
        for (let j = 0; j < N; j++) {
          let s = 0;
          for (let k = 0; k < K; k++) s += d[i * K + k] * w[j * K + k];
          want[i * N + j] = s;
        }
      const g0 = gemmStats.calls;
      const s0 = swappedStats.calls;
      const n0 = gemmNtStats.calls;
      const c = gen
        ? await whileGenerating(async () => tf.matMul(dy, W, false, true))
        : tf.matMul(dy, W, false, true);
      const got = await c.data();
      let err = 0;
      let scale = 0;
      for (let i = 0; i < got.length; i++) {
        err = Math.max(err, Math.abs(got[i] - want[i]));
        scale = Math.max(scale, Math.abs(want[i]));
      }
      expect(err / scale, `M ${M}`).toBeLessThan(1e-6);
      expect(gemmStats.calls - g0, `M ${M}`).toBe(route === 'gemm' ? 1 : 0);
      expect(gemmNtStats.calls - n0, `M ${M}`).toBe(route === 'nt' ? 1 : 0);
      expect(swappedStats.calls - s0, `M ${M}`).toBe(route === 'swap' ? 1 : 0);
      tf.dispose([W, dy, c]);
    }
  });

  it('on a backend of GEMM_MIN_XNNPACK_THREADS threads or more products stay on XNNPACK, as with the route off', async () => {
    // Node's tfjs-backend-wasm runs one thread; the threaded build's count (a browser's isolated page) is stood in
    // for by the module's own getThreadsCount, put back afterwards.
    const module = (tf.backend() as unknown as { wasm: { tfjs: { getThreadsCount: () => number } } }).wasm
      .tfjs;
    const real = module.getThreadsCount;
    expect(real()).toBe(1);
    const A = tf.randomNormal([96, 80], 0, 1, 'float32', 5);
    const B = tf.randomNormal([80, 72], 0, 1, 'float32', 6);
    const W = tf.randomNormal([72, 80], 0, 1, 'float32', 7); // A·Wᵀ: 96 rows, from GEMM_BT_MIN_ROWS
    const A4 = tf.slice(A, [0, 0], [4, 80]); // 4 rows: gemm_nt while generating
    const run = async () => {
      const g0 = gemmStats.calls;
      const n0 = gemmNtStats.calls;
      const c1 = tf.matMul(A, B);
      const c2 = tf.matMul(A, W, false, true);
      const c3 = await whileGenerating(async () => tf.matMul(A4, W, false, true));
      const out = [await c1.data(), await c2.data(), await c3.data()].map((x) => Array.from(x));
      tf.dispose([c1, c2, c3]);
      return { out, gemm: gemmStats.calls - g0, nt: gemmNtStats.calls - n0 };
    };
    try {
      module.getThreadsCount = () => GEMM_MIN_XNNPACK_THREADS - 1;
      const ours = await run();
      expect(ours.gemm).toBe(2);
      expect(ours.nt).toBe(1);
      module.getThreadsCount = () => GEMM_MIN_XNNPACK_THREADS;
      const threaded = await run();
      expect(threaded.gemm).toBe(0);
      expect(threaded.nt).toBe(0);
      module.getThreadsCount = real;
      setWasmGemm(false);
      const xnnpack = await run();
      expect(threaded.out).toEqual(xnnpack.out); // the same kernels, bit for bit
      expect(threaded.out).not.toEqual(ours.out); // gemm.wat rounds otherwise: the routes did differ
    } finally {
      module.getThreadsCount = real;
      setWasmGemm(true);
      tf.dispose([A, A4, B, W]);
    }
  });

  it('setWasmGemm(false) keeps XNNPACK', async () => {
    setWasmGemm(false);
    registerWasmExtraKernels();
    expect(wasmGemmEnabled()).toBe(false);
    const calls = gemmStats.calls;
    const a = tf.tensor2d([1, 2, 3, 4], [2, 2]);
    const c = tf.matMul(a, a);
    expect(Array.from(await c.data())).toEqual([7, 10, 15, 22]);
    expect(gemmStats.calls).toBe(calls);
    tf.dispose([a, c]);
    setWasmGemm(true);
  });
});
