/**
 * A decode step's KV-cache write on the WASM backend. The plain ops write a new key (or value) into a zero-padded
 * cache [B, n, S, d] as `cache + x ⊗ slotOneHot`: the new rows split into heads (a transpose), multiplied by the
 * one-hot over S (a tensor of the cache's size) and added (another): three kernels and two full passes over the
 * cache per layer, key and value, every token. GPT-2 124M at batch 8 spent ~10% of a decode step there
 * (scripts/profile-decode-wasm.ts). This kernel copies the cache once (a memcpy on the heap) and adds x into the
 * slot's rows: every element the plain ops' float32 value — `cache + x·1` at the slot, `cache + x·0 = cache`
 * elsewhere — as long as x is finite (a non-finite x, where x·0 is NaN, and a slotOneHot that is not exactly one-hot
 * take the plain formula, element by element). The one difference: a −0 in the cache beside a positive x stays −0
 * where the plain ops make it +0, which no later sum or product can tell apart.
 * Used by model/attention.ts (writeSlot) when the backend is WASM; tested against the plain ops in
 * tests/wasm-kv.test.ts.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { WasmBackendLike } from './wasm-simd';

/** The kernel's name (inputs: cache [B, n, S, d], x [B, n·d], slot [S]; output: the new cache). */
export const WRITE_SLOT_KERNEL = 'PpoWriteSlot';

/** Calls that took the copy-and-add route, and those that fell back to the formula (the tests read them). */
export const writeSlotStats = { fast: 0, formula: 0 };

/** The index of the one 1 in `oh` when every other value is 0, else -1. */
function oneHotIndex(oh: Float32Array): number {
  let at = -1;
  for (let s = 0; s < oh.length; s++) {
    const v = oh[s];
    if (v === 0) continue;
    if (v !== 1 || at >= 0) return -1;
    at = s;
  }
  return at;
}

function allFinite(x: Float32Array): boolean {
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) return false;
  return true;
}

function writeSlotWasm({
  inputs,
  backend,
}: {
  inputs: tf.NamedTensorInfoMap;
  backend: unknown;
}): tf.TensorInfo {
  const { cache, x, slot } = inputs as { cache: tf.TensorInfo; x: tf.TensorInfo; slot: tf.TensorInfo };
  const bk = backend as WasmBackendLike;
  const [B, n, S, d] = cache.shape;
  const out = bk.makeOutput(cache.shape, 'float32');
  // Views made after makeOutput: an allocation may grow the heap and detach earlier views.
  const c = bk.typedArrayFromHeap(cache) as Float32Array;
  const xs = bk.typedArrayFromHeap(x) as Float32Array;
  const oh = bk.typedArrayFromHeap(slot) as Float32Array;
  const o = bk.typedArrayFromHeap(out) as Float32Array;
  const at = oneHotIndex(oh);
  if (at >= 0 && allFinite(xs)) {
    writeSlotStats.fast++;
    o.set(c);
    for (let bh = 0; bh < B * n; bh++) {
      const row = (bh * S + at) * d;
      const src = bh * d;
      for (let j = 0; j < d; j++) o[row + j] = c[row + j] + xs[src + j];
    }
    return out;
  }
  writeSlotStats.formula++;
  for (let bh = 0; bh < B * n; bh++) {
    for (let s = 0; s < S; s++) {
      const row = (bh * S + s) * d;
      const w = oh[s];
      for (let j = 0; j < d; j++) o[row + j] = c[row + j] + Math.fround(xs[bh * d + j] * w);
    }
  }
  return out;
}

/** Register the kernel for 'wasm' (idempotent; needs the WASM backend package loaded). */
export function registerWasmWriteSlot(): void {
  if (tf.getKernel(WRITE_SLOT_KERNEL, 'wasm')) return;
  tf.registerKernel({
    kernelName: WRITE_SLOT_KERNEL,
    backendName: 'wasm',
    kernelFunc: writeSlotWasm as unknown as tf.KernelFunc,
  });
}

/** Whether writeSlot runs this kernel here: the WASM backend with the kernel registered, float32 operands. */
export function wasmWriteSlotApplies(cache: tf.Tensor, x: tf.Tensor, slot: tf.Tensor): boolean {
  return (
    tf.getBackend() === 'wasm' &&
    !!tf.getKernel(WRITE_SLOT_KERNEL, 'wasm') &&
    cache.rank === 4 &&
    x.rank === 2 &&
    cache.dtype === 'float32' &&
    x.dtype === 'float32' &&
    slot.dtype === 'float32' &&
    x.shape[0] === cache.shape[0] &&
    x.shape[1] === cache.shape[1]! * cache.shape[3]! &&
    slot.size === cache.shape[2]
  );
}
