/**
 * The fused linear on matMulFast's tile kernel (src/core/kernels/webgpu-linear.ts `setWebGpuLinearFastTiles`,
 * LinearTileProgram over kernels/webgpu-matmul.ts fastTileWgsl): the tiled products of a minibatch's scoring and
 * update — GPT-2's Conv1D forward, dz, dx and dW, the f16 base's x·Wᵀ and dy·W on packed words, the Llama/Qwen
 * linear with SwiGLU, LoRA and a residual at more rows than a decode step — with 8 × 8 outputs a thread on
 * 128 × 128 tiles (and the smaller tiles). On WebGPU in Node (SwiftShader): a float64 loop's values, the 64 × 64
 * tiles' values and gradients up to the order of summation, every tile and both load widths (vec4 quads where the
 * contiguous dimension is a multiple of 4, single elements elsewhere), and LoRA gradients of a Qwen3 (f16 base) and
 * a GPT-2 under LoRA.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { f16LinearNT, packF16, roundToF16 } from '../src/core/kernels/webgpu-f16';
import {
  fastTileApplies,
  linearNtDecodeWebGpu,
  linearWebGpu,
  setWebGpuLinearFastTiles,
  webGpuLinearFastTiles,
  webGpuLinearNtDecodeApplies,
  type LinearNtDecodeOptions,
} from '../src/core/kernels/webgpu-linear';
import { setWebGpuMatMulFastTiles, type MatMulFastTile } from '../src/core/kernels/webgpu-matmul';
import { GELU_K } from '../src/core/kernels/definitions';
import { Llama } from '../src/core/model/llama';
import { GPT2 } from '../src/core/model/gpt2';
import { gatherRows } from '../src/core/model/gather';
import { LoraAdapters } from '../src/core/model/lora';
import type { CausalLM } from '../src/core/model/lm';
import { hostWeights, liven, relDiff, seeded, tinyGpt2, tinyQwen3 } from './helpers/f16-base';

const adapter = await webGpuAdapter();

const T128: MatMulFastTile = { tm: 128, tn: 128, bk: 8 };
const TILES: MatMulFastTile[] = [
  T128,
  { tm: 64, tn: 128, bk: 8 },
  { tm: 128, tn: 64, bk: 8 },
  { tm: 64, tn: 64, bk: 16 },
];

describe('fastTileApplies (no GPU needed)', () => {
  afterEach(() => setWebGpuLinearFastTiles(null));

  it('off by default; on: every tiled product but the norm prologue and B in parts', () => {
    expect(webGpuLinearFastTiles()).toBeNull();
    expect(fastTileApplies({})).toBe(false);
    expect(setWebGpuLinearFastTiles(true)).toBeNull();
    expect(fastTileApplies({})).toBe(true);
    expect(fastTileApplies({ parts: 1 })).toBe(true);
    expect(fastTileApplies({ ln: true })).toBe(false);
    expect(fastTileApplies({ parts: 3 })).toBe(false);
    expect(setWebGpuLinearFastTiles(false)).toBe(true);
    expect(fastTileApplies({})).toBe(false);
  });
});

/** gelu_new as the kernels compute it (sigmoid form), in float64. */
const gelu = (v: number) => v / (1 + Math.exp(-GELU_K * (v + 0.044715 * v ** 3)));

describe('the fused linear on the tile kernel on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  /** Shader keys tfjs compiled so far (its pipeline cache). */
  const compiled = (): string[] =>
    Object.keys((tf.backend() as unknown as { pipelineCache: Record<string, unknown> }).pipelineCache);

  /**
   * `fn` with the tile kernel on (tile forced) and then off (the 64 × 64 tiles): its outputs both ways and the
   * shader keys the first run compiled.
   */
  async function bothWays(fn: () => tf.Tensor[], tile: MatMulFastTile) {
    const was = setWebGpuMatMulFastTiles({ tile });
    const run = async (on: boolean) => {
      setWebGpuLinearFastTiles(on);
      const ts = fn();
      const out: Float32Array[] = [];
      for (const t of ts) out.push((await t.data()) as Float32Array);
      tf.dispose(ts);
      return out;
    };
    try {
      const before = new Set(compiled());
      const fast = await run(true);
      const keys = compiled().filter((k) => !before.has(k));
      const tiles = await run(false);
      return { fast, tiles, keys };
    } finally {
      setWebGpuLinearFastTiles(null);
      setWebGpuMatMulFastTiles(was);
    }
  }

  it('Conv1D forward (gelu_new, LoRA term, residual) and backward: a float64 loop’s values; gradients as the 64 × 64 tiles', async () => {
    const cases: [number, number, number, MatMulFastTile[]][] = [
      [130, 72, 98, TILES], // N 98: B and the store one element at a time
      [136, 64, 128, [T128]], // every operand in vec4 quads
    ];
    for (const [M, K, N, tiles] of cases) {
      const xv = seeded(M * K, 1);
      const wv = seeded(K * N, 2, 0.2);
      const bv = seeded(N, 3);
      const ev = seeded(M * N, 4);
      const rv = seeded(M * N, 5);
      const dyv = seeded(M * N, 6);
      const scale = 0.5;
      const want = new Float64Array(M * N);
      for (let m = 0; m < M; m++)
        for (let n = 0; n < N; n++) {
          let s = 0;
          for (let k = 0; k < K; k++) s += xv[m * K + k] * wv[k * N + n];
          want[m * N + n] = gelu(s + bv[n] + scale * ev[m * N + n]) + rv[m * N + n];
        }
      const x = tf.tensor2d(xv, [M, K]);
      const w = tf.tensor2d(wv, [K, N]);
      const b = tf.tensor1d(bv);
      const e = tf.tensor2d(ev, [M, N]);
      const r = tf.tensor2d(rv, [M, N]);
      const dy = tf.tensor2d(dyv, [M, N]);
      for (const tile of tiles) {
        const got = await bothWays(() => {
          const f = (xi: tf.Tensor, wi: tf.Tensor, bi: tf.Tensor, ei: tf.Tensor, ri: tf.Tensor) =>
            linearWebGpu(xi as tf.Tensor2D, wi as tf.Tensor2D, bi as tf.Tensor1D, {
              gelu: true,
              extra: { t: ei as tf.Tensor2D, scale },
              residual: ri as tf.Tensor2D,
            });
          const y = f(x, w, b, e, r);
          const grads = tf.grads((xi, wi, bi, ei, ri) => tf.sum(tf.mul(f(xi, wi, bi, ei, ri), dy)))([
            x,
            w,
            b,
            e,
            r,
          ]);
          return [y, ...grads];
        }, tile);
        const what = `${M}×${K}·${K}×${N}, tile ${tile.tm}×${tile.tn}/${tile.bk}`;
        // The forward, dz and both products (dx = dz·Wᵀ, dW = xᵀ·dz) ran on the tile kernel.
        for (const kind of ['fwd_001', 'dz_001', 'mm_01', 'mm_10'])
          expect(
            got.keys.some((k) => k.startsWith(`perfLinearTile_${kind}`)),
            `${what}: ${kind}`,
          ).toBe(true);
        expect(got.keys.filter((k) => /^perfLinear_(fwd|dz|mm)/.test(k))).toEqual([]);
        expect(relDiff(got.fast[0], want), `${what}: forward vs float64`).toBeLessThan(2e-6);
        got.fast.forEach((g, i) =>
          expect(relDiff(g, got.tiles[i]), `${what}: output ${i} vs the 64 × 64 tiles`).toBeLessThan(1e-5),
        );
      }
      tf.dispose([x, w, b, e, r, dy]);
    }
    expect(await webGpuErrors()).toEqual([]);
  }, 300_000);

  it('the f16 base’s x·Wᵀ + b and its dx = dy·W on packed words: a float64 loop’s values (quads and single halves)', async () => {
    const M = 130;
    const N = 96;
    for (const K of [72, 70]) {
      const wv = roundToF16(seeded(N * K, 7, 0.2));
      const xv = seeded(M * K, 8);
      const bv = seeded(N, 9);
      const dyv = seeded(M * N, 10);
      const wantY = new Float64Array(M * N);
      const wantDx = new Float64Array(M * K);
      for (let m = 0; m < M; m++) {
        for (let n = 0; n < N; n++) {
          let s = bv[n];
          for (let k = 0; k < K; k++) s += xv[m * K + k] * wv[n * K + k];
          wantY[m * N + n] = s;
        }
        for (let k = 0; k < K; k++) {
          let s = 0;
          for (let n = 0; n < N; n++) s += dyv[m * N + n] * wv[n * K + k];
          wantDx[m * K + k] = s;
        }
      }
      const w = tf.tensor2d(packF16(wv), [N, K / 2], 'int32');
      const x = tf.tensor2d(xv, [M, K]);
      const b = tf.tensor1d(bv);
      const dy = tf.tensor2d(dyv, [M, N]);
      for (const tile of [T128, TILES[3]]) {
        const got = await bothWays(() => {
          const y = f16LinearNT(x, w, b);
          const dx = tf.grad((xi: tf.Tensor) => tf.sum(tf.mul(f16LinearNT(xi as tf.Tensor2D, w, b), dy)))(x);
          return [y, dx];
        }, tile);
        const what = `K ${K}, tile ${tile.tm}×${tile.tn}`;
        const vec = K % 4 === 0 ? 1 : 0;
        expect(
          got.keys.some((k) =>
            new RegExp(`^perfLinearTile_fwd_01\\w*_f16_\\d+x\\d+x\\d+_${vec}${vec}0_`).test(k),
          ),
          what,
        ).toBe(true);
        expect(
          got.keys.some((k) => /^perfLinearTile_mm_00\w*_f16_/.test(k)),
          what,
        ).toBe(true);
        expect(relDiff(got.fast[0], wantY), `${what}: x·Wᵀ + b vs float64`).toBeLessThan(2e-6);
        expect(relDiff(got.fast[1], wantDx), `${what}: dy·W vs float64`).toBeLessThan(2e-6);
        got.fast.forEach((g, i) =>
          expect(relDiff(g, got.tiles[i]), `${what}: ${i} vs tiles`).toBeLessThan(1e-6),
        );
      }
      tf.dispose([w, x, b, dy]);
    }
    expect(await webGpuErrors()).toEqual([]);
  }, 300_000);

  it('the Llama linear past a decode step’s rows: SwiGLU’s gate, LoRA’s up-projection, bias and residual, f32 and packed', async () => {
    const M = 70;
    const K = 64;
    const O = 72;
    const r = 4;
    const wv = roundToF16(seeded(O * K, 11, 0.2));
    const x = tf.tensor2d(seeded(M * K, 12), [M, K]);
    const gate = tf.tensor2d(seeded(M * O, 13), [M, O]);
    const res = tf.tensor2d(seeded(M * O, 14), [M, O]);
    const bias = tf.tensor1d(seeded(O, 15));
    const lora = [
      {
        a: tf.tensor2d(seeded(r * K, 16, 0.1), [r, K]),
        b: tf.tensor2d(seeded(O * r, 17, 0.1), [O, r]),
        scaling: 2,
      },
    ];
    for (const packed of [false, true]) {
      const w = packed ? tf.tensor2d(packF16(wv), [O, K / 2], 'int32') : tf.tensor2d(wv, [O, K]);
      const o: LinearNtDecodeOptions = { w: [w], bias, gate, residual: res, lora };
      expect(webGpuLinearNtDecodeApplies(x, o)).toBe(true);
      const got = await bothWays(() => [linearNtDecodeWebGpu(x, o)], T128);
      expect(got.keys.some((k) => /^perfLinearTile_fwd_01\w*_lora4\w*_swiglu/.test(k))).toBe(true);
      expect(relDiff(got.fast[0], got.tiles[0]), packed ? 'packed' : 'f32').toBeLessThan(1e-6);
      w.dispose();
    }
    tf.dispose([x, gate, res, bias, lora[0].a, lora[0].b]);
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);

  /** A weighted sum of next-token log-probs over 2 × 12 rows (the tiled route: more than 16 rows). */
  async function loraGrads(m: CausalLM, adapters: LoraAdapters, V: number) {
    const B = 2;
    const T = 12;
    const idv = Array.from({ length: B * T }, (_, i) => (i * 37 + 5) % (V - 3));
    const ids = tf.tensor2d(idv, [B, T], 'int32');
    const mask = tf.ones([B, T], 'int32') as tf.Tensor2D;
    const targets = tf.tensor1d(
      idv.map((v) => (v * 7 + 1) % (V - 3)),
      'int32',
    );
    const g = tf.variableGrads(() => {
      const logits = tf.reshape(m.logits(ids, mask), [B * T, V]) as tf.Tensor2D;
      const l = tf.sub(gatherRows(logits, targets), tf.logSumExp(logits, 1));
      return tf.sum(tf.mul(l, tf.range(1, B * T + 1))) as tf.Scalar;
    }, adapters.variables());
    const out = [g.value, ...adapters.variables().map((v) => g.grads[v.name])];
    tf.dispose([ids, mask, targets]);
    return out;
  }

  it('Qwen3 (base packed in f16) and GPT-2 under LoRA r 4: value and LoRA gradients as the 64 × 64 tiles', async () => {
    const before = tf.memory().numTensors;
    const qwen = Llama.fromArrays(tinyQwen3, hostWeights(tinyQwen3, 9, 0.08, true), false, 'q3t', {
      baseDtype: 'f16',
    });
    const qa = LoraAdapters.create(tinyQwen3, { lora: 4 }, 5);
    const gpt2 = GPT2.random(tinyGpt2, 3, false);
    const ga = LoraAdapters.create(tinyGpt2, { lora: 4 }, 5);
    liven(qa);
    liven(ga);
    try {
      for (const [name, m, a] of [
        ['Qwen3', qwen.withLora(qa), qa],
        ['GPT-2', gpt2.withLora(ga), ga],
      ] as const) {
        const was = setWebGpuMatMulFastTiles({ tile: T128 });
        const runs: Float32Array[][] = [];
        const keys: string[][] = [];
        try {
          for (const on of [true, false]) {
            setWebGpuLinearFastTiles(on);
            const k0 = compiled().length;
            const ts = await loraGrads(m, a, 300);
            const vals: Float32Array[] = [];
            for (const t of ts) vals.push((await t.data()) as Float32Array);
            tf.dispose(ts);
            runs.push(vals);
            keys.push(compiled().slice(k0));
          }
        } finally {
          setWebGpuLinearFastTiles(null);
          setWebGpuMatMulFastTiles(was);
        }
        expect(
          keys[0].some((k) => k.startsWith('perfLinearTile_')),
          name,
        ).toBe(true);
        expect(
          keys[1].some((k) => k.startsWith('perfLinearTile_')),
          name,
        ).toBe(false);
        expect(relDiff(runs[0][0], runs[1][0]), `${name}: value`).toBeLessThan(1e-6);
        runs[0].slice(1).forEach((g, i) => {
          expect(
            g.some((v) => v !== 0),
            `${name}: gradient ${i} not all zero`,
          ).toBe(true);
          expect(relDiff(g, runs[1][i + 1]), `${name}: LoRA gradient ${i}`).toBeLessThan(1e-5);
        });
      }
    } finally {
      qa.dispose();
      ga.dispose();
      qwen.dispose();
      gpt2.dispose();
    }
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  }, 300_000);
});
