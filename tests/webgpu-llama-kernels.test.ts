/**
 * The Llama family's fused WGSL kernels (RMSNorm, SwiGLU, grouped-query attention with the rotary embedding
 * inside, prefill and KV-cache decode: src/core/kernels/webgpu-{rmsnorm,swiglu,gqa,gqa-decode}.ts) against the
 * plain tfjs compositions they replace (model/ops.ts, model/attention.ts with the switches off), values and
 * gradients, on Node WebGPU (Dawn; SwiftShader here), with their dispatch counts; then a tiny random Llama with
 * every fused kernel on against all off: the trunk's values and parameter gradients, the greedy tokens with the
 * KV cache, and the dispatches of one layer forward (docs/tfjs.md). On the CPU backend none of them applies.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  LLAMA_FUSED_KERNEL_CHECKS,
  checkGqaAttentionOnCurrentBackend,
  checkGqaDecodeOnCurrentBackend,
  checkRmsNormOnCurrentBackend,
  checkSwigluOnCurrentBackend,
  relDiff,
  setWebGpuFusedKernels,
} from '../src/core/webgpu-fused';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import { setWebGpuRmsNormFused, webGpuRmsNormApplies } from '../src/core/kernels/webgpu-rmsnorm';
import { webGpuSwigluApplies } from '../src/core/kernels/webgpu-swiglu';
import { webGpuGqaApplies } from '../src/core/kernels/webgpu-gqa';
import { rmsNorm, swiglu } from '../src/core/model/ops';
import { Llama } from '../src/core/model/llama';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { generate } from '../src/core/model/sampling';

const adapter = await webGpuAdapter();

/** A tiny Qwen3-style config (q/k norms, GQA 4 over 2, head_dim 16) with `layers` layers. */
function tinyConfig(layers: number) {
  return parseLlamaConfig({
    model_type: 'qwen3',
    vocab_size: 97,
    hidden_size: 48,
    intermediate_size: 80,
    num_hidden_layers: layers,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    max_position_embeddings: 128,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    eos_token_id: 1,
  });
}

describe('Llama kernels on the CPU backend: the fused paths do not apply', () => {
  beforeAll(useCpu);
  it('rmsNorm, swiglu and the GQA attention take the plain ops', () => {
    const x = tf.ones([2, 8]);
    const w = tf.ones([8]);
    expect(webGpuRmsNormApplies(x, w)).toBe(false);
    expect(webGpuSwigluApplies(x, x)).toBe(false);
    const m = tf.ones([1, 2]);
    expect(webGpuGqaApplies(x, x, x, x, m, 1, 1)).toBe(false);
    // rmsNorm's values by hand: x = [3, 4] → rms = √12.5, y = x / rms · w.
    const y = tf.tidy(() => rmsNorm(tf.tensor2d([[3, 4]]), tf.tensor1d([1, 2]), 0));
    const r = Math.sqrt(12.5);
    expect(Array.from(y.dataSync())).toEqual([3 / r, (4 / r) * 2].map(Math.fround));
    const s = tf.tidy(() => swiglu(tf.tensor1d([0, 2]), tf.tensor1d([5, 3])));
    expect(s.dataSync()[0]).toBe(0);
    expect(s.dataSync()[1]).toBeCloseTo((2 / (1 + Math.exp(-2))) * 3, 5);
    tf.dispose([x, w, m, y, s]);
  });
});

describe('Llama fused kernels on Node WebGPU against the plain tfjs compositions', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
  });

  it('RMSNorm: values and dx, dw within 1e-5; 1 dispatch forward, 3 backward', async () => {
    const r = await checkRmsNormOnCurrentBackend();
    console.log(`RMSNorm: ${JSON.stringify(r)}`);
    expect(r.maxRelValue).toBeLessThan(1e-5);
    expect(r.maxRelGrad).toBeLessThan(1e-5);
    expect(r.dispatchesFwd).toBe(1);
    expect(r.dispatchesFwdBwd).toBe(4);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('RMSNorm with a frozen weight (the base under LoRA): dx equals the plain ops, no dw, 2 dispatches backward', async () => {
    const x = tf.randomNormal([5, 7, 24], 0, 1.5, 'float32', 71);
    const w = tf.variable(tf.randomNormal([24], 1, 0.3, 'float32', 72), false);
    const dy = tf.randomNormal([5, 7, 24], 0, 1, 'float32', 73);
    const run = (on: boolean) => {
      const was = setWebGpuRmsNormFused(on);
      try {
        return tf.tidy(() => tf.grads((a: tf.Tensor) => rmsNorm(a, w, 1e-6))([x], dy)[0]);
      } finally {
        setWebGpuRmsNormFused(was);
      }
    };
    const [fused, plain] = [run(true), run(false)];
    const d = await relDiff(fused, plain, 1);
    console.log(`RMSNorm, frozen weight: dx ${d}`);
    expect(d).toBeLessThan(1e-5);
    const c = await countDispatches(() =>
      tf.dispose(tf.grads((a: tf.Tensor) => rmsNorm(a, w, 1e-6))([x], dy)),
    );
    expect(c.dispatches).toBe(3); // forward 1, backward 2
    tf.dispose([x, w, dy, fused, plain]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('SwiGLU: values and d gate, d up within 1e-5 (σ saturated at ±30 included); 1 dispatch forward, 2 backward', async () => {
    const r = await checkSwigluOnCurrentBackend();
    console.log(`SwiGLU: ${JSON.stringify(r)}`);
    expect(r.maxRelValue).toBeLessThan(1e-5);
    expect(r.maxRelGrad).toBeLessThan(1e-5);
    expect(r.dispatchesFwd).toBe(1);
    expect(r.dispatchesFwdBwd).toBe(3);
    expect(await webGpuErrors()).toEqual([]);
  });

  it.each([false, true])(
    'GQA attention with RoPE inside (wide = hs 128: %s): y, dq, dk, dv within 1e-5 of scale; 1 dispatch forward, 4 backward',
    async (wide) => {
      const r = await checkGqaAttentionOnCurrentBackend(wide);
      console.log(`GQA attention (wide ${wide}): ${JSON.stringify(r)}`);
      expect(r.maxRelValue).toBeLessThan(1e-5);
      expect(r.maxRelGrad).toBeLessThan(1e-5);
      expect(r.dispatchesFwd).toBe(1);
      expect(r.dispatchesFwdBwd).toBe(5);
      expect(await webGpuErrors()).toEqual([]);
    },
    120_000,
  );

  it.each([false, true])(
    'GQA decode attention with RoPE inside (wide = hs 128: %s): y and the new cache within 1e-5; 3 dispatches',
    async (wide) => {
      const r = await checkGqaDecodeOnCurrentBackend(wide);
      console.log(`GQA decode (wide ${wide}): ${JSON.stringify(r)}`);
      expect(r.maxRelValue).toBeLessThan(1e-5);
      expect(r.dispatchesFwd).toBe(3);
      expect(await webGpuErrors()).toEqual([]);
    },
  );

  it('LLAMA_FUSED_KERNEL_CHECKS lists the six checks', () => {
    expect(Object.keys(LLAMA_FUSED_KERNEL_CHECKS)).toHaveLength(6);
  });

  it('a tiny Qwen3-style Llama: trunk values and parameter gradients (with and without block recompute) fused = plain within 1e-5; greedy tokens equal; dispatches per layer', async () => {
    const ids = tf.tensor2d(
      [
        [0, 0, 5, 17, 3, 44, 9, 60, 2],
        [7, 8, 9, 10, 11, 12, 13, 14, 15],
      ],
      undefined,
      'int32',
    );
    const mask = tf.tensor2d(
      [
        [0, 0, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1, 1, 1, 1],
      ],
      undefined,
      'int32',
    );
    const model = Llama.random(tinyConfig(2), 7);
    const vars = model.trainableVariables();
    const w = tf.randomNormal([18, 48], 0, 1, 'float32', 3);
    // recompute: the per-block recomputed backward (model/recompute.ts), which carries the rotary rows through.
    const both = (on: boolean, recompute = false) => {
      setWebGpuFusedKernels(on);
      try {
        const y = tf.tidy(() => model.trunk(ids, mask));
        const { grads } = tf.variableGrads(
          () => tf.sum(tf.mul(model.trunk(ids, mask, undefined, { recompute }), w)) as tf.Scalar,
          vars,
        );
        return { y, grads: vars.map((v) => grads[v.name]) };
      } finally {
        setWebGpuFusedKernels(true);
      }
    };
    try {
      const p = both(false);
      for (const recompute of [false, true]) {
        const f = both(true, recompute);
        const value = await relDiff(f.y, p.y);
        let grad = 0;
        for (let i = 0; i < vars.length; i++) grad = Math.max(grad, await relDiff(f.grads[i], p.grads[i]));
        console.log(
          `tiny Llama, fused vs plain (recompute ${recompute}): hidden ${value}, worst gradient ${grad}`,
        );
        expect(value).toBeLessThan(1e-5);
        expect(grad).toBeLessThan(1e-5);
        tf.dispose([f.y, ...f.grads]);
      }
      tf.dispose([p.y, ...p.grads]);

      const tokens = async (on: boolean) => {
        setWebGpuFusedKernels(on);
        try {
          const out = await generate(model, [[5, 17, 3], [9]], {
            maxNewTokens: 6,
            temperature: 0,
            rng: 1,
            padId: 0,
            stopToken: null,
            useCache: true,
          });
          return out.tokens;
        } finally {
          setWebGpuFusedKernels(true);
        }
      };
      expect(await tokens(true)).toEqual(await tokens(false));

      // No tensor outlives a fused forward + backward, with or without block recompute, nor a fused generation.
      for (const recompute of [false, true]) {
        const before = tf.memory().numTensors;
        const { value, grads } = tf.variableGrads(
          () => tf.sum(tf.mul(model.trunk(ids, mask, undefined, { recompute }), w)) as tf.Scalar,
          vars,
        );
        tf.dispose([value, ...Object.values(grads)]);
        expect(tf.memory().numTensors, `recompute ${recompute}`).toBe(before);
      }
      const before = tf.memory().numTensors;
      await tokens(true);
      expect(tf.memory().numTensors).toBe(before);

      // Dispatches of one layer: the 2-layer model's minus the 1-layer one's (same shapes), fused and plain, for
      // the trunk forward, forward + backward (parameter gradients of Σ w·hidden), and one KV-cache decode step.
      const one = Llama.random(tinyConfig(1), 7);
      const S = 12;
      const step = (m: Llama) => {
        const zero = () => tf.zeros([2, 2, S, 16]) as tf.Tensor4D;
        const cache = Array.from({ length: m.config.num_hidden_layers }, () => ({ k: zero(), v: zero() }));
        const keyMask = tf.tensor2d([Array(S).fill(1), [0, ...Array(S - 1).fill(1)]]);
        const out = m.decodeStep(
          tf.tensor1d([3, 4], 'int32'),
          tf.tensor1d([9, 8], 'int32'),
          tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([S - 1], 'int32'), S), [S]), 'float32'),
          keyMask as tf.Tensor2D,
          cache,
        );
        return [out.hidden, ...out.cache.flatMap((c) => [c.k, c.v])];
      };
      const kinds = {
        forward: (m: Llama) => tf.tidy(() => m.trunk(ids, mask)),
        'forward + backward': (m: Llama) => {
          const vs = m.trainableVariables();
          const { value, grads } = tf.variableGrads(
            () => tf.sum(tf.mul(m.trunk(ids, mask), w)) as tf.Scalar,
            vs,
          );
          return [value, ...Object.values(grads)];
        },
        'decode step': (m: Llama) => tf.tidy(() => step(m)),
      } as Record<string, (m: Llama) => tf.TensorContainer>;
      try {
        const count = async (m: Llama, on: boolean, f: (m: Llama) => tf.TensorContainer) => {
          setWebGpuFusedKernels(on);
          try {
            tf.dispose(f(m)); // warm: shaders compiled, tables on the device
            const c = await countDispatches(() => tf.dispose(f(m)));
            return c.dispatches;
          } finally {
            setWebGpuFusedKernels(true);
          }
        };
        const perLayer: Record<string, { plain: number; fused: number }> = {};
        for (const [name, f] of Object.entries(kinds)) {
          const fused = (await count(model, true, f)) - (await count(one, true, f));
          const plain = (await count(model, false, f)) - (await count(one, false, f));
          perLayer[name] = { plain, fused };
        }
        console.log(
          `one Qwen3-style layer (q/k norms, GQA 4 over 2), dispatches: ${JSON.stringify(perLayer)}`,
        );
        // Forward: 2 + 2 RMSNorms, 7 matmuls (q, k, v, o, gate, up, down), the attention, SwiGLU, 2 residual adds.
        expect(perLayer.forward.fused).toBe(15);
        expect(perLayer['decode step'].fused).toBeLessThan(perLayer['decode step'].plain);
        expect(perLayer['forward + backward'].fused).toBeLessThan(perLayer['forward + backward'].plain);
        expect(perLayer.forward.fused).toBeLessThan(perLayer.forward.plain);
      } finally {
        one.dispose();
      }
      expect(await webGpuErrors()).toEqual([]);
    } finally {
      model.dispose();
      tf.dispose([ids, mask, w]);
    }
  }, 300_000);
});
