/**
 * A model's weights written as a stream (lmSafetensorsStream: one weight at a time, wte in pieces of 8192 rows)
 * are the same bytes as the whole-file writer's, for one wte tensor and for wte held in vocabulary chunks, with
 * and without LoRA adapters (merged into the weights as they are read), GPT-2 and Llama, on the CPU backend and on
 * WASM (where the pieces are copied out of the heap into the stream's one scratch array: kernels/wasm-read.ts).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { Llama } from '../src/core/model/llama';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { TINY_QWEN2_JSON } from './helpers/f16-base';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { LoraAdapters } from '../src/core/model/lora';
import { lmSafetensors, lmSafetensorsStream } from '../src/core/model/folder';
import { collectBytes } from '../src/core/model/safetensors';
import { validateConfig } from '../src/common/config';

// A vocabulary over two pieces of 8192 rows (the last one short), so the pieces path is exercised.
const config = parseGPT2Config({
  vocab_size: 9000,
  n_positions: 16,
  n_embd: 8,
  n_layer: 1,
  n_head: 2,
  tokenizer: 'gpt2-bpe',
});

describe.each(['cpu', 'wasm'] as const)('lmSafetensorsStream on %s', (backend) => {
  beforeAll(() => setNodeBackend(backend));

  for (const maxBindingBytes of [undefined, 3000 * 8 * 4]) {
    it(`equals lmSafetensors byte for byte (wte ${maxBindingBytes ? 'in vocabulary chunks' : 'one tensor'})`, async () => {
      const m = GPT2.random(config, 3, true, 'stream', maxBindingBytes ? { maxBindingBytes } : {});
      try {
        const stream = lmSafetensorsStream(m);
        const whole = await lmSafetensors(m);
        expect(stream.byteLength).toBe(whole.length);
        expect(Buffer.from(await collectBytes(stream)).equals(Buffer.from(whole))).toBe(true);
      } finally {
        m.dispose();
      }
    });
  }

  it('a LoRA view streams its merged weights, the same bytes as lmSafetensors', async () => {
    const base = GPT2.random(config, 4, false, 'base');
    const cfg = validateConfig({ model: 'x', task: 'sentiment', lora: 2 }, 'test');
    const adapters = LoraAdapters.create(config, cfg, 7, 'ad');
    // Non-zero B, so the merge changes the weights.
    for (const v of adapters.variables()) tf.tidy(() => v.assign(tf.add(v, 0.01)));
    const view = base.withLora(adapters, 'view');
    try {
      const a = await collectBytes(lmSafetensorsStream(view));
      const b = await lmSafetensors(view);
      expect(Buffer.from(a).equals(Buffer.from(b))).toBe(true);
      expect(Buffer.from(a).equals(Buffer.from(await lmSafetensors(base)))).toBe(false);
    } finally {
      view.dispose();
      base.dispose();
    }
  });

  it('a Llama LoRA view (Qwen2-shaped, a vocabulary over two pieces) streams the bytes of lmSafetensors', async () => {
    // The small Qwen2 of the f16 tests with a vocabulary over two pieces of 8192 rows.
    const llama = parseLlamaConfig({ ...TINY_QWEN2_JSON, vocab_size: 9000 });
    const base = Llama.random(llama, 5, false, 'base');
    const cfg = validateConfig({ model: 'x', task: 'sentiment', lora: 2 }, 'test');
    const adapters = LoraAdapters.create(llama, cfg, 8, 'ad');
    for (const v of adapters.variables()) tf.tidy(() => v.assign(tf.add(v, 0.01)));
    const view = base.withLora(adapters, 'view');
    try {
      const a = await collectBytes(lmSafetensorsStream(view));
      expect(Buffer.from(a).equals(Buffer.from(await lmSafetensors(view)))).toBe(true);
      expect(Buffer.from(a).equals(Buffer.from(await lmSafetensors(base)))).toBe(false);
    } finally {
      view.dispose();
      base.dispose();
    }
  });
});
