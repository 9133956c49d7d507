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
import { lmLoss } from '../src/core/sft';

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
