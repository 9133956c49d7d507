/**
 * Dispatches per layer of one KV-cache decode step (every row one token), counted as
 * GPUComputePassEncoder.dispatchWorkgroups calls (src/core/kernels/webgpu-count.ts) on Node WebGPU (Dawn;
 * SwiftShader where there is no GPU): (count at n_layer 8 − count at n_layer 2) / 6, as the GPU bench counts the
 * forward (src/bench/webgpu-dispatch.ts). Issue #22's target is ≤ 8 per layer per token: GPT-2 is at 7 (it was 9
 * before ln_1 and ln_2 moved into the prologue of c_attn's and c_fc's matmuls, kernels/webgpu-linear.ts
 * linearLayerNormWebGpu), the Llama/Qwen path at 17 (a bound here, not the target). The prologue is checked against
 * layerNorm then the Conv1D (two dispatches) and a float64 loop on both matmul programs, and a tiny GPT-2's greedy
 * generation with it against the two-dispatch norm and against recomputing without the cache.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { gpt2DecodeDispatches, llamaDecodeDispatches } from '../src/bench/webgpu-dispatch';
import { setWebGpuFusedKernels } from '../src/core/webgpu-fused';
import {
  linearLayerNormWebGpu,
  linearWebGpu,
  saveWebGpuLinearSmallRows,
  setWebGpuLinearNormPrologue,
  setWebGpuLinearSmallRows,
  webGpuLinearLayerNormApplies,
} from '../src/core/kernels/webgpu-linear';
import { layerNormWebGpu } from '../src/core/kernels/webgpu-layernorm';
import { GPT2 } from '../src/core/model/gpt2';
import { parseGPT2Config } from '../src/core/model/config';
import { generate } from '../src/core/model/sampling';
import { countDispatches } from '../src/bench/webgpu-dispatch';

/** GELU_K-free float64 gelu_new: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))). */
const geluNew64 = (x: number): number =>
  0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));

/** Float64 loop: act(LayerNorm(x; g, b, eps)·W + bias) + res, x [M, K], W [K, N]. */
function reference(
  M: number,
  K: number,
  N: number,
  x: ArrayLike<number>,
  g: ArrayLike<number>,
  b: ArrayLike<number>,
  w: ArrayLike<number>,
  bias: ArrayLike<number>,
  eps: number,
  gelu: boolean,
  res: ArrayLike<number> | null,
): Float64Array {
  const out = new Float64Array(M * N);
  for (let r = 0; r < M; r++) {
    let mean = 0;
    for (let k = 0; k < K; k++) mean += x[r * K + k];
    mean /= K;
    let v = 0;
    for (let k = 0; k < K; k++) v += (x[r * K + k] - mean) ** 2;
    const rstd = 1 / Math.sqrt(v / K + eps);
    const h = Array.from({ length: K }, (_, k) => (x[r * K + k] - mean) * rstd * g[k] + b[k]);
    for (let c = 0; c < N; c++) {
      let acc = bias[c];
      for (let k = 0; k < K; k++) acc += h[k] * w[k * N + c];
      out[r * N + c] = (gelu ? geluNew64(acc) : acc) + (res ? res[r * N + c] : 0);
    }
  }
  return out;
}

function maxAbs(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return Number.isNaN(m) ? Infinity : m;
}

const adapter = await webGpuAdapter();

describe('decode dispatches per layer per token (Node WebGPU)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  for (const program of ['tiles', 'few rows'] as const) {
    for (const [M, K, N, gelu, withRes] of [
      [70, 48, 40, true, false], // two tile rows (the second clamped), K not a multiple of 64
      [3, 130, 24, false, true], // few rows in a block of 4 (one clamped), K across two lane strides
      [1, 64, 9, true, true],
    ] as const) {
      it(`layer norm in the Conv1D's prologue (${program}, x [${M}, ${K}] · W [${K}, ${N}]${gelu ? ', gelu_new' : ''}${withRes ? ', residual' : ''}): one dispatch, equal to layerNorm then the Conv1D and to a float64 loop`, async () => {
        const restore = saveWebGpuLinearSmallRows();
        setWebGpuLinearSmallRows(program === 'tiles' ? 0 : 128);
        try {
          const t = tf.tidy(() => ({
            // Rows with an offset and a spread, as a residual stream has.
            x: tf.add(tf.mul(tf.randomNormal([M, K], 0, 1, 'float32', 1), 3), 0.7) as tf.Tensor2D,
            g: tf.randomNormal([K], 1, 0.2, 'float32', 2) as tf.Tensor1D,
            b: tf.randomNormal([K], 0, 0.2, 'float32', 3) as tf.Tensor1D,
            w: tf.randomNormal([K, N], 0, 0.2, 'float32', 4) as tf.Tensor2D,
            bias: tf.randomNormal([N], 0, 0.2, 'float32', 5) as tf.Tensor1D,
            res: tf.randomNormal([M, N], 0, 1, 'float32', 6) as tf.Tensor2D,
          }));
          const res = withRes ? t.res : null;
          const eps = 1e-5;
          expect(webGpuLinearLayerNormApplies(t.x, t.g, t.b, t.w, t.bias, res)).toBe(true);
          const fused = () =>
            linearLayerNormWebGpu(t.x, { g: t.g, b: t.b, eps }, t.w, t.bias, { gelu, residual: res });
          tf.dispose(fused());
          const before = tf.memory().numTensors;
          const counted = await countDispatches(fused);
          expect(counted.dispatches).toBe(1);
          const two = tf.tidy(() =>
            linearWebGpu(layerNormWebGpu(t.x, t.g, t.b, eps) as tf.Tensor2D, t.w, t.bias, {
              gelu,
              residual: res,
            }),
          );
          const got = await counted.result.data();
          const ref = reference(
            M,
            K,
            N,
            await t.x.data(),
            await t.g.data(),
            await t.b.data(),
            await t.w.data(),
            await t.bias.data(),
            eps,
            gelu,
            res ? await res.data() : null,
          );
          const vsTwo = maxAbs(got, await two.data());
          const vsLoop = maxAbs(got, ref);
          const scale = Math.max(1, ...Array.from(ref, Math.abs));
          console.log(
            `prologue ${program} [${M},${K}]·[${K},${N}]: vs two dispatches ${vsTwo}, vs loop ${vsLoop}`,
          );
          expect(vsTwo).toBeLessThan(1e-6 * scale);
          expect(vsLoop).toBeLessThan(1e-5 * scale);
          tf.dispose([counted.result, two]);
          expect(tf.memory().numTensors).toBe(before);
          tf.dispose(Object.values(t));
          expect(await webGpuErrors()).toEqual([]);
        } finally {
          restore();
        }
      });
    }
  }

  it('the off switch and mismatched norm weights keep two dispatches', () => {
    const x = tf.zeros([2, 8]);
    const w = tf.zeros([8, 4]);
    const bias = tf.zeros([4]);
    const g = tf.ones([8]);
    const bad = tf.ones([7]);
    expect(webGpuLinearLayerNormApplies(x, g, g, w, bias)).toBe(true);
    expect(webGpuLinearLayerNormApplies(x, bad, g, w, bias)).toBe(false);
    setWebGpuLinearNormPrologue(false);
    expect(webGpuLinearLayerNormApplies(x, g, g, w, bias)).toBe(false);
    setWebGpuLinearNormPrologue(true);
    tf.dispose([x, w, bias, g, bad]);
  });

  it('GPT-2 greedy generation with the prologue: tokens equal the two-dispatch norm and recomputing without the cache, logprobs within 1e-5', async () => {
    const config = parseGPT2Config({
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
    const m = GPT2.random(config, 3);
    // Larger weights so the logits vary and greedy tokens differ between rows and steps.
    for (const v of m.params.values()) if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 8)));
    const prompts = [[72, 101, 108, 108, 111], [87, 104, 121], [65]];
    const opts = { temperature: 0, padId: 257, rng: 1, maxNewTokens: 8 };
    const before = tf.memory().numTensors;
    const fused = await generate(m, prompts, opts);
    setWebGpuLinearNormPrologue(false);
    const two = await generate(m, prompts, opts).finally(() => setWebGpuLinearNormPrologue(true));
    const recompute = await generate(m, prompts, { ...opts, useCache: false });
    expect(tf.memory().numTensors).toBe(before);
    expect(new Set(fused.tokens.flat()).size).toBeGreaterThan(3);
    expect(fused.tokens).toEqual(two.tokens);
    expect(fused.tokens).toEqual(recompute.tokens);
    for (const other of [two, recompute])
      for (let b = 0; b < prompts.length; b++)
        for (let t = 0; t < other.logprobs[b].length; t++)
          expect(Math.abs(fused.logprobs[b][t] - other.logprobs[b][t])).toBeLessThan(1e-5);
    m.dispose();
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);

  it('GPT-2 decode step (fused kernels): measured', async () => {
    const fused = await gpt2DecodeDispatches();
    setWebGpuFusedKernels(false);
    const plain = await gpt2DecodeDispatches().finally(() => setWebGpuFusedKernels(true));
    console.log(`GPT-2 decode dispatches: fused ${JSON.stringify(fused)}, plain ${JSON.stringify(plain)}`);
    expect(Number.isInteger(fused.perLayer)).toBe(true);
    // ln_1 + c_attn, the two slot writes, the attention over the cache, c_proj + residual, ln_2 + c_fc + gelu_new,
    // c_proj + residual: 7 (9 before the layer norms moved into the matmuls' prologue). Issue #22's target: ≤ 8.
    expect(fused.perLayer).toBeLessThanOrEqual(7);
    expect(fused.perLayer).toBeLessThanOrEqual(8);
    expect(fused.perLayer).toBeLessThan(plain.perLayer);
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);

  it('Llama/Qwen3-style decode step (fused kernels): measured', async () => {
    const fused = await llamaDecodeDispatches();
    setWebGpuFusedKernels(false);
    const plain = await llamaDecodeDispatches().finally(() => setWebGpuFusedKernels(true));
    console.log(`Llama decode dispatches: fused ${JSON.stringify(fused)}, plain ${JSON.stringify(plain)}`);
    expect(Number.isInteger(fused.perLayer)).toBe(true);
    // A regression bound, not issue #22's target (≤ 8): 2 RMSNorms and 7 matmuls (q, k, v, o, gate, up, down), the
    // q/k norms, the 3 decode-attention kernels, SwiGLU and 2 residual adds are 17 dispatches; the norms are not
    // yet in the matmuls' prologue, nor q|k|v one matmul (model/llama.ts).
    expect(fused.perLayer).toBeLessThanOrEqual(17);
    expect(fused.perLayer).toBeLessThan(plain.perLayer);
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);
});
