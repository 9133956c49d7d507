/**
 * Vector loads in the few-rows program (src/core/kernels/webgpu-linear.ts, `setWebGpuLinearVecRows`): nn.Linear's
 * W [out, in] read four f32 or eight packed halves at a time in the Llama/Qwen decode linear and the transB
 * product. On WebGPU in Node (SwiftShader) with the few-rows route forced (a software adapter would run the column
 * program): the values of a float64 loop, and of the one-element program up to the order of summation, with the
 * RMSNorm prologue, q | k | v in parts, LoRA, SwiGLU and a residual, f32 and packed f16, at 1 to 13 rows.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { packF16, roundToF16 } from '../src/core/kernels/webgpu-f16';
import { Llama } from '../src/core/model/llama';
import { GPT2 } from '../src/core/model/gpt2';
import { gatherRows } from '../src/core/model/gather';
import { LoraAdapters } from '../src/core/model/lora';
import { generate } from '../src/core/model/sampling';
import { hostWeights, liven, relDiff, seeded, tinyGpt2, tinyQwen2, tinyQwen3 } from './helpers/f16-base';
import {
  linearNtDecodeWebGpu,
  saveWebGpuLinearSmallRows,
  setWebGpuLinearColumns,
  setWebGpuLinearSmallRows,
  setWebGpuLinearVecRows,
  vecRowsWidth,
  webGpuLinearNtDecodeApplies,
  type LinearNtDecodeOptions,
} from '../src/core/kernels/webgpu-linear';

const adapter = await webGpuAdapter();

describe('vecRowsWidth (no GPU needed)', () => {
  afterEach(() => setWebGpuLinearVecRows(null));

  it('off by default; on: 4 f32 or 8 packed halves along K for W [out, in], where K is a multiple', () => {
    const nt = { transA: false, transB: true, packedB: false };
    expect(vecRowsWidth(nt, 1536)).toBe(0);
    expect(setWebGpuLinearVecRows(true)).toBeNull();
    expect(vecRowsWidth(nt, 1536)).toBe(4);
    expect(vecRowsWidth({ ...nt, packedB: true }, 1536)).toBe(8);
    expect(vecRowsWidth(nt, 1100)).toBe(4);
    expect(vecRowsWidth({ ...nt, packedB: true }, 1100)).toBe(0);
    expect(vecRowsWidth(nt, 1102)).toBe(0);
    // W [in, out] (GPT-2's Conv1D, dy·W) and Aᵀ (dW) are read across K: one element at a time.
    expect(vecRowsWidth({ ...nt, transB: false }, 1536)).toBe(0);
    expect(vecRowsWidth({ ...nt, transA: true }, 1536)).toBe(0);
    expect(setWebGpuLinearVecRows(false)).toBe(true);
    expect(vecRowsWidth(nt, 1536)).toBe(0);
  });
});

describe('vector loads in the few-rows program on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  /** Shader keys tfjs compiled so far (its pipeline cache). */
  const compiled = (): string[] =>
    Object.keys((tf.backend() as unknown as { pipelineCache: Record<string, unknown> }).pipelineCache);

  /** The decode linear with vector loads on and off (the few-rows route forced), and the keys it compiled. */
  async function bothWays(x: tf.Tensor2D, o: LinearNtDecodeOptions) {
    const restore = saveWebGpuLinearSmallRows();
    const columns = setWebGpuLinearColumns(false);
    setWebGpuLinearSmallRows(64);
    try {
      expect(webGpuLinearNtDecodeApplies(x, o)).toBe(true);
      setWebGpuLinearVecRows(true);
      const before = new Set(compiled());
      const v = linearNtDecodeWebGpu(x, o);
      const vec = await v.data();
      const keys = compiled().filter((k) => !before.has(k));
      setWebGpuLinearVecRows(false);
      const s = linearNtDecodeWebGpu(x, o);
      const scalar = await s.data();
      tf.dispose([v, s]);
      return { vec, scalar, keys, all: compiled() };
    } finally {
      setWebGpuLinearVecRows(null);
      setWebGpuLinearColumns(columns);
      restore();
    }
  }

  it('q | k | v in parts with the RMSNorm prologue and LoRA: a float64 loop’s values, f32 (4 a load) and packed (8)', async () => {
    const K = 136; // a multiple of 8 that is not one of 32 · 8: the lanes end unevenly
    const outs = [64, 16, 16];
    const N = outs.reduce((a, b) => a + b, 0);
    const r = 4;
    const scaling = 2;
    const eps = 1e-6;
    const ws = outs.map((o, p) => roundToF16(seeded(o * K, 10 + p, 0.2)));
    const gv = seeded(K, 21).map((v) => 1 + 0.1 * v);
    const loraHost = outs.map((o, p) => ({ a: seeded(r * K, 30 + p, 0.1), b: seeded(o * r, 40 + p, 0.1) }));
    for (const M of [1, 3, 8, 13]) {
      const xv = seeded(M * K, 20 + M);
      // float64: RMSNorm of each row, then per part x̂·Wᵀ + s·(x̂·Aᵀ)·Bᵀ.
      const want = new Float64Array(M * N);
      for (let m = 0; m < M; m++) {
        let ss = 0;
        for (let k = 0; k < K; k++) ss += xv[m * K + k] ** 2;
        const rstd = 1 / Math.sqrt(ss / K + eps);
        const xh = Array.from({ length: K }, (_, k) => xv[m * K + k] * rstd * gv[k]);
        let c0 = 0;
        outs.forEach((o, p) => {
          const down = Array.from({ length: r }, (_, j) =>
            xh.reduce((s, v, k) => s + v * loraHost[p].a[j * K + k], 0),
          );
          for (let c = 0; c < o; c++) {
            let s = 0;
            for (let k = 0; k < K; k++) s += xh[k] * ws[p][c * K + k];
            for (let j = 0; j < r; j++) s += scaling * down[j] * loraHost[p].b[c * r + j];
            want[m * N + c0 + c] = s;
          }
          c0 += o;
        });
      }
      const x = tf.tensor2d(xv, [M, K]);
      const g = tf.tensor1d(gv);
      const lora = outs.map((o, p) => ({
        a: tf.tensor2d(loraHost[p].a, [r, K]),
        b: tf.tensor2d(loraHost[p].b, [o, r]),
        scaling,
      }));
      for (const packed of [false, true]) {
        const w = ws.map((v, p) =>
          packed ? tf.tensor2d(packF16(v), [outs[p], K / 2], 'int32') : tf.tensor2d(v, [outs[p], K]),
        );
        const got = await bothWays(x, { w, rms: { g, eps }, lora });
        // The main product (x̂·Wᵀ: 3 parts) ran with vector loads at this M's row block (and LoRA's down-projection
        // x̂·Aᵀ over the parts' A's: f32 always). A row block's program is compiled by the first M that uses it.
        const rb = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
        // (`_lp`: the parts' LoRA B's bound apart, where the device's storage buffers allow.)
        const main = packed
          ? new RegExp(`^perfLinearRows_fwd_\\w*_p3_f16(_lp)?_${rb}x\\d+_v8_`)
          : new RegExp(`^perfLinearRows_fwd_\\w*_p3(_lp)?_${rb}x\\d+_v4_`);
        expect(got.all.filter((k) => main.test(k))).toHaveLength(1);
        if (!packed)
          expect(
            got.all.filter((k) => new RegExp(`^perfLinearRows_mm_\\w*_p3_${rb}x\\d+_v4_`).test(k)),
          ).toHaveLength(1);
        for (const v of got.vec) expect(Number.isFinite(v)).toBe(true);
        expect(relDiff(got.vec, want), `M ${M}, ${packed ? 'packed' : 'f32'}: vs float64`).toBeLessThan(2e-6);
        expect(relDiff(got.vec, got.scalar), `M ${M}: vs one element a load`).toBeLessThan(1e-6);
        tf.dispose(w);
      }
      tf.dispose([x, g, ...lora.flatMap((l) => [l.a, l.b])]);
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it('SwiGLU’s gate and a residual in the epilogue, K 1100 (f32 by 4; packed one at a time)', async () => {
    const M = 5;
    const K = 1100;
    const O = 40;
    const wv = roundToF16(seeded(O * K, 3, 0.05));
    const x = tf.tensor2d(seeded(M * K, 4), [M, K]);
    const gate = tf.tensor2d(seeded(M * O, 5), [M, O]);
    const res = tf.tensor2d(seeded(M * O, 6), [M, O]);
    const w32 = tf.tensor2d(wv, [O, K]);
    const w16 = tf.tensor2d(packF16(wv), [O, K / 2], 'int32');
    const f32 = await bothWays(x, { w: [w32], gate, residual: res });
    expect(f32.keys.some((k) => k.includes('_swiglu') && k.includes('_v4'))).toBe(true);
    expect(relDiff(f32.vec, f32.scalar)).toBeLessThan(1e-6);
    const f16 = await bothWays(x, { w: [w16], gate, residual: res });
    // 1100 is not a multiple of 8: the packed weight keeps the one-element loads (the same program both ways).
    expect(f16.keys.some((k) => k.includes('_v8'))).toBe(false);
    expect(Array.from(f16.vec)).toEqual(Array.from(f16.scalar));
    // Packed and f32 hold the same (f16) values.
    expect(relDiff(f16.vec, f32.vec)).toBeLessThan(1e-6);
    tf.dispose([x, gate, res, w32, w16]);
    expect(await webGpuErrors()).toEqual([]);
  });

  const models: [string, () => { base: Llama; adapters: LoraAdapters }][] = [
    [
      'Qwen2 under LoRA r 4, f32 base (q|k|v in parts with biases, SwiGLU)',
      () => ({
        base: Llama.fromArrays(tinyQwen2, hostWeights(tinyQwen2, 7, 0.08, false), false, 'q2'),
        adapters: LoraAdapters.create(tinyQwen2, { lora: 4 }, 5),
      }),
    ],
    [
      'Qwen3 under LoRA r 4, the base packed in f16 (tied head)',
      () => ({
        base: Llama.fromArrays(tinyQwen3, hostWeights(tinyQwen3, 9, 0.08, true), false, 'q3', {
          baseDtype: 'f16',
        }),
        adapters: LoraAdapters.create(tinyQwen3, { lora: 4 }, 5),
      }),
    ],
  ];
  for (const [name, make] of models) {
    it(`${name}: the replayed greedy decode gives the same tokens, log-probs within 1e-5`, async () => {
      const before = tf.memory().numTensors;
      const { base, adapters } = make();
      liven(adapters);
      const m = base.withLora(adapters);
      const restore = saveWebGpuLinearSmallRows();
      const columns = setWebGpuLinearColumns(false);
      setWebGpuLinearSmallRows(64);
      try {
        const run = async (vec: boolean) => {
          setWebGpuLinearVecRows(vec);
          const keys = compiled().length;
          const out = await generate(
            m,
            [
              [5, 9, 14, 3],
              [7, 2, 11],
            ],
            {
              maxNewTokens: 6,
              temperature: 0,
              padId: tinyQwen2.pad_token_id ?? 0,
              rng: 1,
            },
          );
          const added = compiled().slice(keys);
          const vecKeys = added.filter((k) => /_v[48]_/.test(k)).length;
          const scalarKeys = added.filter((k) => /^perfLinearRows_/.test(k) && !/_v[48]_/.test(k)).length;
          return { ...out, vecKeys, scalarKeys };
        };
        const v = await run(true);
        const s = await run(false);
        expect(v.vecKeys).toBeGreaterThan(0);
        // Each run compiled its own few-rows programs (no recording carried over from the other).
        expect(s.vecKeys).toBe(0);
        expect(s.scalarKeys).toBeGreaterThan(0);
        expect(v.tokens).toEqual(s.tokens);
        expect(relDiff(v.logprobs.flat(), s.logprobs.flat())).toBeLessThan(1e-5);
        expect(v.logprobs.flat().every(Number.isFinite)).toBe(true);
      } finally {
        setWebGpuLinearVecRows(null);
        setWebGpuLinearColumns(columns);
        restore();
        adapters.dispose();
        base.dispose();
      }
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);
    }, 120_000);
  }

  it('GPT-2 under LoRA r 4: the backward’s dx = dz·Wᵀ at 12 rows and the decode’s layer-normed LoRA down-projection', async () => {
    const before = tf.memory().numTensors;
    const base = GPT2.random(tinyGpt2, 3, false);
    const adapters = LoraAdapters.create(tinyGpt2, { lora: 4 }, 5);
    liven(adapters);
    const m = base.withLora(adapters);
    const restore = saveWebGpuLinearSmallRows();
    const columns = setWebGpuLinearColumns(false);
    setWebGpuLinearSmallRows(64);
    const B = 2;
    const T = 6;
    const ids = tf.tensor2d([5, 9, 14, 3, 8, 1, 7, 2, 11, 4, 6, 10], [B, T], 'int32');
    const mask = tf.ones([B, T], 'int32') as tf.Tensor2D;
    const targets = tf.tensor1d([9, 14, 3, 8, 1, 12, 2, 11, 4, 6, 10, 13], 'int32');
    try {
      const run = async (vec: boolean) => {
        setWebGpuLinearVecRows(vec);
        const keys = compiled().length;
        const g = tf.variableGrads(() => {
          const logits = tf.reshape(m.logits(ids, mask), [B * T, 300]) as tf.Tensor2D;
          const l = tf.sub(gatherRows(logits, targets), tf.logSumExp(logits, 1));
          return tf.sum(tf.mul(l, tf.range(1, B * T + 1))) as tf.Scalar;
        }, adapters.variables());
        const grads: Float32Array[] = [];
        for (const v of adapters.variables()) grads.push((await g.grads[v.name].data()) as Float32Array);
        const value = await g.value.data();
        tf.dispose([g.value, ...Object.values(g.grads)]);
        const gen = await generate(
          m,
          [
            [5, 9, 14, 3],
            [7, 2, 11],
          ],
          {
            maxNewTokens: 5,
            temperature: 0,
            padId: 299,
            rng: 1,
          },
        );
        const vecKeys = compiled()
          .slice(keys)
          .filter((k) => /_v4_/.test(k));
        return { grads, value, gen, vecKeys };
      };
      const v = await run(true);
      const s = await run(false);
      // dx = dz·Wᵀ of the Conv1Ds (mm, B transposed) and the down-projections LN(x)·Aᵀ (mm with the layer norm).
      expect(v.vecKeys.some((k) => /^perfLinearRows_mm_01000_\d+x\d+_v4_/.test(k))).toBe(true);
      expect(v.vecKeys.some((k) => /^perfLinearRows_mm_01000_ln_\d+x\d+_v4_/.test(k))).toBe(true);
      expect(relDiff(v.value, s.value)).toBeLessThan(1e-6);
      v.grads.forEach((g, i) => expect(relDiff(g, s.grads[i]), `LoRA gradient ${i}`).toBeLessThan(1e-5));
      expect(v.gen.tokens).toEqual(s.gen.tokens);
      expect(relDiff(v.gen.logprobs.flat(), s.gen.logprobs.flat())).toBeLessThan(1e-5);
    } finally {
      setWebGpuLinearVecRows(null);
      setWebGpuLinearColumns(columns);
      restore();
      tf.dispose([ids, mask, targets]);
      adapters.dispose();
      base.dispose();
    }
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);
});
