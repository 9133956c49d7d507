/**
 * The sharing WASM Identity (src/core/kernels/wasm-identity.ts) against tfjs-backend-wasm's copying one: clones keep
 * their values when the original goes, buffers are freed when the last reference goes, and gradients (which clone
 * every saved tensor) come out the same.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { registerWasmSharedIdentity, unregisterWasmSharedIdentity } from '../src/core/kernels/wasm-identity';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { lmLoss } from '../src/core/sft/sft';
import { adamFor, isSharedMemory } from '../src/core/kernels/wasm-simd';
import { adamUpdateArrays } from '../src/core/optim/fused-adam';

const buffers = (): number => (tf.backend() as unknown as { numDataIds(): number }).numDataIds();

describe('shared Identity on WASM', () => {
  beforeAll(async () => {
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
    registerWasmSharedIdentity();
  });
  afterAll(unregisterWasmSharedIdentity);

  it('a clone outlives its original and the buffer is freed with the last reference', async () => {
    const b0 = buffers();
    const a = tf.tensor1d([1, 2, 3]);
    const c = tf.clone(a);
    expect(buffers()).toBe(b0 + 1); // shared, not copied
    a.dispose();
    expect(Array.from(await c.data())).toEqual([1, 2, 3]);
    c.dispose();
    expect(buffers()).toBe(b0);
  });

  it('a variable assigned from a clone does not change the clone', async () => {
    const v = tf.tidy(() => tf.variable(tf.tensor1d([1, 2]), true, `idv_${Math.random()}`));
    const c = tf.clone(v);
    v.assign(tf.tidy(() => tf.tensor1d([5, 6])));
    expect(Array.from(await c.data())).toEqual([1, 2]);
    expect(Array.from(await v.data())).toEqual([5, 6]);
    tf.dispose([v, c]);
  });

  it('gives the same LM-loss gradients as the copying Identity', async () => {
    const config = parseGPT2Config({
      vocab_size: 258,
      n_positions: 16,
      n_embd: 16,
      n_layer: 2,
      n_head: 2,
      tokenizer: 'bytes',
      bos_token_id: 256,
      eos_token_id: 256,
    });
    const model = GPT2.random(config, 3);
    const w = tf.tensor2d(
      Array.from({ length: 2 * 9 }, (_, i) => (i * 31) % 256),
      [2, 9],
      'int32',
    );
    const grads = async (): Promise<Float32Array[]> => {
      const { value, grads: g } = tf.variableGrads(() => lmLoss(model, w), model.trainableVariables());
      const out = await Promise.all(Object.values(g).map((t) => t.data() as Promise<Float32Array>));
      tf.dispose([value, ...Object.values(g)]);
      return out;
    };
    const before = tf.memory().numTensors;
    const shared = await grads();
    unregisterWasmSharedIdentity();
    const copied = await grads();
    registerWasmSharedIdentity();
    expect(tf.memory().numTensors).toBe(before);
    expect(shared.length).toBe(copied.length);
    for (let i = 0; i < shared.length; i++) expect(Array.from(shared[i])).toEqual(Array.from(copied[i]));
    model.dispose();
    w.dispose();
  });
});

describe('the SIMD Adam kernel on a shared memory (the heap of tfjs’s threaded build)', () => {
  // 37 elements: pairs of float64 lanes and one leftover; gradients up to ±8, some moments zero.
  const n = 37;
  const vals = (seed: number, scale: number): Float32Array =>
    Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.7 + seed) * scale);
  const w = vals(1, 1);
  const m = vals(2, 0.1).map((x, i) => (i % 5 === 0 ? 0 : x));
  const v = vals(3, 0.01).map((x) => Math.abs(x));
  const g = vals(4, 8);
  const attrs: Parameters<typeof adamUpdateArrays>[7] = {
    lr: 3e-3,
    beta1: 0.9,
    beta2: 0.999,
    bc1: 1 - 0.9 ** 3,
    bc2: 1 - 0.999 ** 3,
    eps: 1e-8,
  };
  // The factor reaches the kernels as float32 (the controls tensor): the loop takes it rounded the same way.
  const gscale = Math.fround(0.7);

  /** Lay w, m, v, g and three outputs out in `mem`, run the kernel, return the outputs. */
  function run(mem: WebAssembly.Memory): Float32Array[] {
    const adam = adamFor(mem);
    if (!adam) throw new Error('no Adam kernel for this memory');
    const at = (k: number): number => 64 + k * n * 4;
    [w, m, v, g].forEach((x, k) => new Float32Array(mem.buffer, at(k), n).set(x));
    const { lr, beta1, beta2, bc1, bc2, eps } = attrs;
    adam(at(0), at(1), at(2), at(3), at(4), at(5), at(6), n, lr, beta1, beta2, bc1, bc2, eps, gscale);
    return [4, 5, 6].map((k) => new Float32Array(mem.buffer, at(k), n).slice());
  }

  it('is bit-identical to the plain-memory kernel and to the JS loop it replaces', () => {
    const shared = new WebAssembly.Memory({ initial: 1, maximum: 65536, shared: true });
    const plain = new WebAssembly.Memory({ initial: 1 });
    expect(isSharedMemory(shared)).toBe(true);
    const ref = [new Float32Array(n), new Float32Array(n), new Float32Array(n)];
    adamUpdateArrays(w, m, v, g, ref[0], ref[1], ref[2], attrs, { gscale, apply: true });
    const onShared = run(shared);
    const onPlain = run(plain);
    for (let k = 0; k < 3; k++) {
      expect(Array.from(onShared[k])).toEqual(Array.from(onPlain[k]));
      expect(Array.from(onShared[k])).toEqual(Array.from(ref[k]));
    }
    expect(onShared[0].some((x, i) => x !== w[i])).toBe(true); // the update did something
  });
});
