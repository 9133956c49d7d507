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
  gemmStats,
  registerWasmExtraKernels,
  setWasmGemm,
  wasmGemmEnabled,
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
