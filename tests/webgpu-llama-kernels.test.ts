/**
 * The Llama family's fused WGSL kernels (RMSNorm, SwiGLU, grouped-query attention with the rotary embedding
 * inside, prefill and KV-cache decode: src/core/kernels/webgpu-{rmsnorm,swiglu,gqa,gqa-decode}.ts) against the
 * plain tfjs compositions they replace (model/ops.ts, model/attention.ts with the switches off), values and
 * gradients, on Node WebGPU (Dawn; SwiftShader here), with their dispatch counts; the attention (fused on WebGPU,
 * plain on the CPU) also against a float64 loop of transformers' semantics; then a tiny random Llama with
 * every fused kernel on against all off: the trunk's values and parameter gradients, the greedy tokens with the
 * KV cache, and the dispatches of one layer forward (docs/tfjs.md). On the CPU backend none of them applies.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  LLAMA_FUSED_KERNEL_CHECKS,
  checkGqaDecodeQkvInPlaceOnCurrentBackend,
  checkGqaAttentionOnCurrentBackend,
  checkGqaDecodeOnCurrentBackend,
  checkRmsNormOnCurrentBackend,
  checkSwigluOnCurrentBackend,
  relDiff,
  ropeRowsForCheck,
  setWebGpuFusedKernels,
} from '../src/core/backend/webgpu-fused';
import { causalPaddingBias, gqaSelfAttention } from '../src/core/model/attention';
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

/**
 * Float64 loop of grouped-query causal attention with the rotary embedding (transformers' semantics, as the plain
 * path computes them): q, k rotated per row (x·cos + rotate_half(x)·sin), query head h with KV head h / (nh/nkv),
 * key j allowed for query i when j ≤ i and mask[j] = 1, a row with no allowed key weighting all T keys 1/T.
 * y [B·T, nh·hs] and, for upstream dy, dq, dk, dv in the unrotated inputs' frame (the rotation's transpose).
 */
function gqaReference(
  B: number,
  T: number,
  nh: number,
  nkv: number,
  hs: number,
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  cos: ArrayLike<number>,
  sin: ArrayLike<number>,
  mask: number[],
  dy: ArrayLike<number>,
) {
  const half = hs / 2;
  const scale = 1 / Math.sqrt(hs);
  const rot = (x: ArrayLike<number>, heads: number) => {
    const out = new Float64Array(x.length);
    for (let r = 0; r < B * T; r++)
      for (let h = 0; h < heads; h++)
        for (let d = 0; d < hs; d++) {
          const o = (r * heads + h) * hs;
          const rh = d < half ? -x[o + d + half] : x[o + d - half];
          out[o + d] = x[o + d] * cos[r * hs + d] + rh * sin[r * hs + d];
        }
    return out;
  };
  /** The rotation's transpose applied to g (a gradient w.r.t. rotated rows). */
  const rotT = (g: Float64Array, heads: number) => {
    const out = new Float64Array(g.length);
    for (let r = 0; r < B * T; r++)
      for (let h = 0; h < heads; h++)
        for (let d = 0; d < hs; d++) {
          const o = (r * heads + h) * hs;
          const p = d < half ? d + half : d - half;
          const t = d < half ? g[o + p] * sin[r * hs + p] : -g[o + p] * sin[r * hs + p];
          out[o + d] = g[o + d] * cos[r * hs + d] + t;
        }
    return out;
  };
  const qr = rot(q, nh);
  const kr = rot(k, nkv);
  const y = new Float64Array(B * T * nh * hs);
  const dqr = new Float64Array(qr.length);
  const dkr = new Float64Array(kr.length);
  const dv = new Float64Array(v.length);
  const qAt = (b: number, t: number, h: number) => ((b * T + t) * nh + h) * hs;
  const kAt = (b: number, t: number, h: number) => ((b * T + t) * nkv + h) * hs;
  for (let b = 0; b < B; b++)
    for (let h = 0; h < nh; h++) {
      const hk = Math.floor(h / (nh / nkv));
      for (let i = 0; i < T; i++) {
        const allowed = Array.from({ length: T }, (_, j) => j <= i && mask[b * T + j] === 1);
        const p = new Float64Array(T);
        if (allowed.some(Boolean)) {
          const sc = Array.from({ length: T }, (_, j) => {
            let a = 0;
            for (let d = 0; d < hs; d++) a += qr[qAt(b, i, h) + d] * kr[kAt(b, j, hk) + d];
            return a * scale;
          });
          const m = Math.max(...sc.filter((_, j) => allowed[j]));
          let sum = 0;
          for (let j = 0; j < T; j++) sum += p[j] = allowed[j] ? Math.exp(sc[j] - m) : 0;
          for (let j = 0; j < T; j++) p[j] /= sum;
        } else p.fill(1 / T);
        const dp = new Float64Array(T);
        let D = 0;
        for (let j = 0; j < T; j++) {
          for (let d = 0; d < hs; d++) {
            y[qAt(b, i, h) + d] += p[j] * v[kAt(b, j, hk) + d];
            dp[j] += dy[qAt(b, i, h) + d] * v[kAt(b, j, hk) + d];
            dv[kAt(b, j, hk) + d] += p[j] * dy[qAt(b, i, h) + d];
          }
          D += p[j] * dp[j];
        }
        for (let j = 0; j < T; j++) {
          const ds = p[j] * (dp[j] - D) * scale;
          for (let d = 0; d < hs; d++) {
            dqr[qAt(b, i, h) + d] += ds * kr[kAt(b, j, hk) + d];
            dkr[kAt(b, j, hk) + d] += ds * qr[qAt(b, i, h) + d];
          }
        }
      }
    }
  return { y, dq: rotT(dqr, nh), dk: rotT(dkr, nkv), dv };
}

/**
 * gqaSelfAttention on the current backend (fused must say whether the fused path applies there) against
 * gqaReference: B 2, T 21, 6 query heads over 2 KV heads, hs 8, batch row 0 real from token 5, row 1 padding only.
 * The worst relative differences of y, dq, dk and dv.
 */
async function gqaAgainstLoop(fused: boolean): Promise<Record<string, number>> {
  const [B, T, nh, nkv, hs] = [2, 21, 6, 2, 8];
  const mask = Array.from({ length: B * T }, (_, i) => (i < T && i >= 5 ? 1 : 0));
  const rope = ropeRowsForCheck(mask, B, T, hs);
  const both = tf.concat([rope.cos, rope.sin], 1);
  const maskF = tf.tensor2d(mask, [B, T]);
  const bias = tf.tidy(() => causalPaddingBias(maskF));
  const q = tf.randomNormal([B * T, nh * hs], 0, 1, 'float32', 81) as tf.Tensor2D;
  const k = tf.randomNormal([B * T, nkv * hs], 0, 1, 'float32', 82) as tf.Tensor2D;
  const v = tf.randomNormal([B * T, nkv * hs], 0, 1, 'float32', 83) as tf.Tensor2D;
  const dy = tf.randomNormal([B * T, nh * hs], 0, 1, 'float32', 84);
  const rows = { ...rope, both };
  expect(webGpuGqaApplies(q, k, v, rope.cos, maskF, nh, nkv)).toBe(fused);
  const op = (a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) =>
    gqaSelfAttention(a as tf.Tensor2D, b as tf.Tensor2D, c as tf.Tensor2D, rows, maskF, bias, nh, nkv);
  const y = tf.tidy(() => op(q, k, v));
  const g = tf.grads(op)([q, k, v], dy);
  const [qd, kd, vd, cd, sd, dyd] = await Promise.all([q, k, v, rope.cos, rope.sin, dy].map((t) => t.data()));
  const want = gqaReference(B, T, nh, nkv, hs, qd, kd, vd, cd, sd, mask, dyd);
  const got = [y, ...g];
  const names = ['y', 'dq', 'dk', 'dv'] as const;
  const diffs: Record<string, number> = {};
  for (let i = 0; i < 4; i++) diffs[names[i]] = await relDiff(got[i], want[names[i]]);
  tf.dispose([...got, both, maskF, bias, q, k, v, dy, rope.cos, rope.sin]);
  return diffs;
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

  it('the plain GQA attention with RoPE (the fused kernel reference) equals the float64 loop', async () => {
    const diffs = await gqaAgainstLoop(false);
    for (const [n, d] of Object.entries(diffs)) expect(d, n).toBeLessThan(1e-5);
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

  it('GQA attention with RoPE inside equals a float64 loop: y, dq, dk, dv (left padding, a padding-only row, 6 heads over 2)', async () => {
    const diffs = await gqaAgainstLoop(true);
    console.log(`GQA attention (fused) vs float64 loop: ${JSON.stringify(diffs)}`);
    for (const [n, d] of Object.entries(diffs)) expect(d, n).toBeLessThan(1e-5);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('LLAMA_FUSED_KERNEL_CHECKS lists the eight checks', () => {
    expect(Object.keys(LLAMA_FUSED_KERNEL_CHECKS)).toHaveLength(8);
  });

  it.each(['bias', 'norm'] as const)(
    'GQA decode from q|k|v (%s), the cache written in place by the attention: y and both caches equal the plain ops within 1e-5; 1 dispatch',
    async (kind) => {
      const r = await checkGqaDecodeQkvInPlaceOnCurrentBackend(kind);
      console.log(`GQA decode from q|k|v in place (${kind}): ${JSON.stringify(r)}`);
      expect(r.maxRelValue).toBeLessThan(1e-5);
      expect(r.dispatchesFwd).toBe(1);
      expect(await webGpuErrors()).toEqual([]);
    },
  );

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
