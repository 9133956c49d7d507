/**
 * What the tests of the fused WASM kernels (tests/wasm-gelu, wasm-swiglu and wasm-layernorm) share: comparing two
 * float32 arrays bit for bit, values spread over magnitudes with signed zeros, and running with some kernels
 * unregistered (so the ops they replace run instead).
 */
import { expect } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { normals } from './f16-base';

/** Elements whose bits differ (NaN equals NaN). */
export function bitsDiffering(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (ua[i] !== ub[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) n++;
  return n;
}

/** Each tensor of `a` equal bit for bit to the one at its index in `b` (the same count); `names` label them. */
export function expectSameBits(a: tf.Tensor[], b: tf.Tensor[], names?: string[]): void {
  expect(a.length).toBe(b.length);
  a.forEach((t, i) =>
    expect(
      bitsDiffering(t.dataSync() as Float32Array, b[i].dataSync() as Float32Array),
      names?.[i] ?? `tensor ${i}`,
    ).toBe(0),
  );
}

/** n values over magnitudes from 1e-4 to 1e4 (normals times a power of ten), both signs, +0 and −0 first. */
export function spreadValues(n: number, seed: number): Float32Array {
  const v = normals(n, seed, 1);
  const scale = normals(n, seed + 1, 1);
  for (let i = 0; i < n; i++) v[i] *= Math.pow(10, Math.round(scale[i] * 2));
  if (n > 2) {
    v[0] = 0;
    v[1] = -0;
  }
  return v;
}

/** `f` with the WASM kernels `names` unregistered, registered again after. */
export function withoutWasmKernels<T>(names: string[], f: () => T): T {
  const kept = names.map((n) => tf.getKernel(n, 'wasm')!);
  names.forEach((n) => tf.unregisterKernel(n, 'wasm'));
  try {
    return f();
  } finally {
    for (const k of kept) tf.registerKernel(k);
  }
}
