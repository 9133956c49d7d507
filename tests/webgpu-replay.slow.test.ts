/**
 * The recorded-and-replayed decode (src/core/kernels/webgpu-replay.ts, src/core/model/decode-replay.ts; issue #31) on
 * Node WebGPU (Dawn; SwiftShader where there is no GPU): a frame replays what tfjs computed, reads its inputs'
 * new values, notices when a buffer it read is released; `generate` with the replayed decode gives the unrecorded
 * path's tokens exactly and its log-probs within 1e-5 for GPT-2, Llama, Qwen2 and Qwen3, plain and under LoRA,
 * greedy and sampled, and across an update of the adapters; no tensor or frame outlives a generation.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  ReplayFrame,
  flushTfjs,
  liveReplayFrames,
  replayBackend,
  replayHeldBytes,
} from '../src/core/kernels/webgpu-replay';
import { lastDecodeReplayStats, setDecodeReplay } from '../src/core/model/decode-replay';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { LoraAdapters } from '../src/core/model/lora';
import { parseGPT2Config } from '../src/core/model/config';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { generate, type SampleOptions } from '../src/core/model/sampling';
import type { CausalLM } from '../src/core/model/lm';
import type { LMConfig } from '../src/core/model/config';

const adapter = await webGpuAdapter();

const gpt2Config = () =>
  parseGPT2Config({
    vocab_size: 258,
    n_positions: 40,
    n_embd: 48,
    n_layer: 2,
    n_head: 4,
    tokenizer: 'bytes',
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });

const llamaConfig = (family: 'llama' | 'qwen2' | 'qwen3') =>
  parseLlamaConfig({
    model_type: family,
    vocab_size: 97,
    hidden_size: 64,
    intermediate_size: 80,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    max_position_embeddings: 128,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    eos_token_id: 1,
  });

/** A random model of the family with larger weights, so that greedy tokens vary between rows and steps. */
function makeModel(family: 'gpt2' | 'llama' | 'qwen2' | 'qwen3'): { base: CausalLM; config: LMConfig } {
  if (family === 'gpt2') {
    const config = gpt2Config();
    const base = GPT2.random(config, 3);
    for (const v of base.params.values()) if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 8)));
    return { base, config };
  }
  const config = llamaConfig(family);
  const base = Llama.random(config, 3);
  for (const [key, v] of base.params) {
    if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 6)));
    else if (key.endsWith('.bias')) v.assign(tf.tidy(() => tf.randomNormal(v.shape, 0, 0.1, 'float32', 11)));
    else v.assign(tf.tidy(() => tf.randomNormal(v.shape, 1, 0.3, 'float32', 12)));
  }
  return { base, config };
}

function withAdapters(
  base: CausalLM,
  config: LMConfig,
  seed: number,
): { m: CausalLM; adapters: LoraAdapters } {
  const adapters = LoraAdapters.create(config, { lora: 4 }, 5);
  for (const mod of adapters.modules.values())
    mod.b.assign(tf.tidy(() => tf.randomNormal(mod.b.shape, 0, 0.5, 'float32', seed)));
  return { m: (base as GPT2).withLora(adapters) as CausalLM, adapters };
}

async function unrecorded(m: CausalLM, prompts: number[][], opts: SampleOptions) {
  setDecodeReplay(false);
  try {
    return await generate(m, prompts, opts);
  } finally {
    setDecodeReplay(true);
  }
}

function worstLogprobDiff(a: { logprobs: number[][] }, b: { logprobs: number[][] }): number {
  let worst = 0;
  for (let r = 0; r < a.logprobs.length; r++)
    for (let t = 0; t < a.logprobs[r].length; t++)
      worst = Math.max(worst, Math.abs(a.logprobs[r][t] - b.logprobs[r][t]));
  return worst;
}

describe('replayed decode on WebGPU (Node, Dawn)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('a frame replays its programs with new input values, and goes stale when a buffer it read is released', async () => {
    const backend = replayBackend();
    expect(backend).not.toBeNull();
    const w0 = tf.tensor2d([1, 2, 3, 4, 5, 6], [3, 2]);
    const w = tf.variable(w0);
    w0.dispose(); // the variable alone holds the buffer
    const x = tf.tensor2d([1, 0, 2, -1, 0.5, 3], [2, 3]);
    const step = () => tf.tidy(() => tf.relu(tf.sub(tf.matMul(x, w), 1)));
    const { frame, result } = ReplayFrame.record(backend!, step, [x]);
    expect(Array.from(await result.data())).toEqual([10, 13, 14.5, 17]);
    expect(frame.size).toBeGreaterThanOrEqual(2);
    // New values in the input's buffer; the replay writes the recorded output's buffer.
    frame.write(0, new Float32Array([0, 1, 0, 1, 1, 1]));
    frame.replay();
    const after = tf.tidy(() => tf.add(result, 0)); // a fresh tensor (tfjs caches what it has read)
    const expected = tf.tidy(() => tf.relu(tf.sub(tf.matMul(tf.tensor2d([0, 1, 0, 1, 1, 1], [2, 3]), w), 1)));
    expect(Array.from(await after.data())).toEqual(Array.from(await expected.data()));
    expect(frame.valid).toBe(true);
    w.assign(tf.zeros([3, 2])); // the weight's old buffer goes back to tfjs's pool
    expect(frame.valid).toBe(false);
    expect(() => frame.replay()).toThrow(/stale/);
    frame.dispose();
    expect(liveReplayFrames()).toBe(0);
    tf.dispose([w, x, result, after, expected]);
    // A readback inside a recording is refused in words.
    const y = tf.tensor1d([1, 2]);
    expect(() =>
      ReplayFrame.record(
        backend!,
        () => {
          tf.add(y, 1)
            .data()
            .catch(() => {});
          return null;
        },
        [y],
      ),
    ).toThrow(/readback inside a recorded step/);
    y.dispose();
    expect(liveReplayFrames()).toBe(0);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a buffer one frame reads and another recording released makes the first stale when the second lets it go', async () => {
    const backend = replayBackend()!;
    const w0 = tf.tensor2d([1, 2, 3, 4, 5, 6], [3, 2]);
    const w = tf.variable(w0);
    w0.dispose();
    const x = tf.tensor2d([1, 0, 2, -1, 0.5, 3], [2, 3]);
    const a = ReplayFrame.record(backend, () => tf.tidy(() => tf.matMul(x, w)), [x]);
    // Frame B's step replaces the weight: its old buffer (which frame A reads) is released while B records, so
    // B keeps it out of tfjs's pool and A may still replay.
    const b = ReplayFrame.record(backend, () => {
      tf.tidy(() => w.assign(tf.fill([3, 2], 2)));
      return tf.tidy(() => tf.add(x, 1));
    }, [x]);
    expect(a.frame.valid).toBe(true);
    a.frame.replay();
    const replayed = tf.tidy(() => tf.add(a.result, 0)); // a fresh tensor (tfjs caches what it has read)
    expect(Array.from(await replayed.data())).toEqual([11, 14, 15.5, 18]); // x · the old w
    replayed.dispose();
    // B gives the buffer back to tfjs: anything may be written there next, so A must not replay it.
    b.frame.dispose();
    expect(a.frame.valid).toBe(false);
    expect(() => a.frame.replay()).toThrow(/stale/);
    // The same through a recording that fails after the release.
    const c = ReplayFrame.record(backend, () => tf.tidy(() => tf.matMul(x, w)), [x]);
    expect(() =>
      ReplayFrame.record(backend, () => {
        tf.tidy(() => w.assign(tf.fill([3, 2], 3)));
        flushTfjs(backend); // the old buffer's release reaches the recording before the step fails
        throw new Error('the step failed');
      }, [x]),
    ).toThrow(/the step failed/);
    expect(c.frame.valid).toBe(false);
    a.frame.dispose();
    c.frame.dispose();
    tf.dispose([w, x, a.result, b.result, c.result]);
    expect(liveReplayFrames()).toBe(0);
    expect(await webGpuErrors()).toEqual([]);
  });

  it("a frame keeps its live intermediates, not each one's buffer, and frames share them; uploads stay its own", async () => {
    const backend = replayBackend()!;
    const N = 4096; // 16 kB a tensor
    const bytes = N * 4;
    const scale = Float32Array.from({ length: N }, (_, i) => 1 + (i % 7) / 8);
    // Ten elementwise steps over [N], each input disposed once used, tfjs's commands submitted between steps so that
    // the released buffers reach the recording. A constant made from host values in the middle (an upload) and
    // disposed before the step after it: its buffer must not be given to a later output (the replay does not
    // write it again).
    const chain = (x: tf.Tensor) => {
      let h = tf.mul(x, 2);
      for (let i = 0; i < 10; i++) {
        let next: tf.Tensor;
        if (i === 4) {
          const c = tf.tensor1d(scale);
          next = tf.mul(h, c);
          c.dispose();
        } else next = tf.tidy(() => tf.add(tf.mul(h, 0.5), i));
        h.dispose();
        h = next;
        flushTfjs(backend);
      }
      return h;
    };
    const plain = (v: Float32Array) => tf.tidy(() => chain(tf.tensor1d(v)));
    const v1 = Float32Array.from({ length: N }, (_, i) => Math.sin(i));
    const v2 = Float32Array.from({ length: N }, (_, i) => Math.cos(i) * 3);
    const before = replayHeldBytes();
    const x = tf.tensor1d(v1);
    const a = ReplayFrame.record(backend, () => chain(x), [x]);
    // About 20 intermediates of 16 kB went through the recording (the products and the sums); it keeps a few.
    const held1 = replayHeldBytes() - before;
    expect(a.frame.heldBytes).toBe(held1);
    expect(held1).toBeLessThanOrEqual(4 * bytes);
    // A second frame of the same shapes uses the first one's intermediates: it adds only its own buffers, the
    // uploaded constant (16 kB) and its uniforms.
    const y = tf.tensor1d(v2);
    const b = ReplayFrame.record(backend, () => chain(y), [y]);
    const held2 = replayHeldBytes() - before;
    console.log(`frame 1 holds ${held1} B, frame 2 adds ${held2 - held1} B (a tensor: ${bytes} B)`);
    expect(held2 - held1).toBeGreaterThanOrEqual(bytes);
    expect(held2 - held1).toBeLessThan(bytes + 2048);
    // Replays, interleaved, with new inputs: each frame's output is what the plain ops give.
    for (const [fa, fb] of [
      [v2, v1],
      [v1, v2],
    ]) {
      a.frame.write(0, fa);
      a.frame.replay();
      b.frame.write(0, fb);
      b.frame.replay();
      const want = [plain(fa), plain(fb)];
      const got = [tf.tidy(() => tf.add(a.result, 0)), tf.tidy(() => tf.add(b.result, 0))];
      for (let k = 0; k < 2; k++)
        expect(Array.from(await got[k].data())).toEqual(Array.from(await want[k].data()));
      tf.dispose([...want, ...got]);
    }
    a.frame.dispose();
    expect(b.frame.valid).toBe(true);
    b.frame.dispose();
    expect(replayHeldBytes()).toBe(before);
    tf.dispose([x, y, a.result, b.result]);
    expect(await webGpuErrors()).toEqual([]);
  });

  const prompts = {
    gpt2: [[72, 101, 108, 108, 111], [87, 104, 121], [65]],
    llama: [[5, 17, 33, 40, 2], [7, 8, 9], [60]],
  };
  const cases = [
    ['gpt2', false, [0, 1]],
    ['gpt2', true, [0]],
    ['llama', false, [0]],
    ['qwen2', true, [0]],
    ['qwen3', false, [0]],
    ['qwen3', true, [0, 0.9]],
  ] as const;
  for (const [family, lora, temps] of cases) {
    it(`${family}${lora ? ' under LoRA r 4' : ''}: the replayed decode gives the unrecorded path's tokens and log-probs within 1e-5 (temperature ${temps.join(', ')})`, async () => {
      const { base, config } = makeModel(family);
      const { m } = lora ? withAdapters(base, config, 9) : { m: base };
      const ps = family === 'gpt2' ? prompts.gpt2 : prompts.llama;
      const stop = family === 'gpt2' ? 256 : 1;
      for (const temperature of temps) {
        const opts: SampleOptions = {
          temperature,
          topK: temperature > 0 ? 20 : 0,
          padId: 0,
          rng: 7,
          maxNewTokens: 7,
          stopToken: temperature > 0 ? null : stop,
          stopCheckEvery: 3,
        };
        await generate(m, ps, opts); // warm: shaders compiled
        const before = tf.memory().numTensors;
        const replayed = await generate(m, ps, opts);
        const stats = lastDecodeReplayStats();
        const plain = await unrecorded(m, ps, opts);
        expect(tf.memory().numTensors).toBe(before);
        expect(liveReplayFrames()).toBe(0);
        expect(stats.recordings).toBe(1);
        expect(stats.replays).toBeGreaterThanOrEqual(4);
        expect(stats.dispatchesPerReplay).toBeGreaterThan(10);
        expect(new Set(replayed.tokens.flat()).size).toBeGreaterThan(3);
        expect(replayed.tokens).toEqual(plain.tokens);
        const worst = worstLogprobDiff(replayed, plain);
        console.log(
          `${family}${lora ? ' LoRA' : ''} T=${temperature}: ${stats.replays} replays of ${stats.dispatchesPerReplay} dispatches, tokens equal, worst logprob difference ${worst}`,
        );
        expect(worst).toBeLessThan(1e-5);
      }
      if (m !== base) m.dispose();
      base.dispose();
      expect(await webGpuErrors()).toEqual([]);
    }, 180_000);
  }

  it('across an update of the LoRA adapters, the next generation replays the new adapters (Qwen2)', async () => {
    const { base, config } = makeModel('qwen2');
    const { m, adapters } = withAdapters(base, config, 9);
    const opts: SampleOptions = { temperature: 0, padId: 0, rng: 1, maxNewTokens: 6 };
    const before = await generate(m, prompts.llama, opts);
    // An optimizer step replaces the adapters' values (assign: new buffers, the old ones released).
    for (const mod of adapters.modules.values())
      mod.b.assign(tf.tidy(() => tf.add(mod.b, tf.randomNormal(mod.b.shape, 0, 0.5, 'float32', 21))));
    const replayed = await generate(m, prompts.llama, opts);
    expect(lastDecodeReplayStats().replays).toBeGreaterThan(0);
    const plain = await unrecorded(m, prompts.llama, opts);
    expect(replayed.tokens).not.toEqual(before.tokens); // the update changed what is generated
    expect(replayed.tokens).toEqual(plain.tokens);
    expect(worstLogprobDiff(replayed, plain)).toBeLessThan(1e-5);
    m.dispose();
    base.dispose();
    expect(await webGpuErrors()).toEqual([]);
  }, 180_000);
});
