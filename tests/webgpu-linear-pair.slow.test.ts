/**
 * gate_proj | up_proj as one program in the Llama/Qwen decode (src/core/kernels/webgpu-linear.ts
 * linearNtDecodeWebGpu with `pair`): silu(RMSNorm(x)·W_gᵀ + LoRA_g)·(RMSNorm(x)·W_uᵀ + LoRA_u) in one dispatch (two
 * with LoRA: one down-projection for both pairs), on Node WebGPU (SwiftShader) through the column program, the
 * few-rows program and its vector loads, f32 and packed f16, at 1 to 13 rows: against a float64 loop, and against
 * the two programs it replaces (gate_proj's, then up_proj's with SwiGLU in its epilogue), whose arithmetic it
 * repeats. Then where it must not apply.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import { packF16, roundToF16 } from '../src/core/kernels/webgpu-f16';
import {
  linearNtDecodeWebGpu,
  saveWebGpuLinearSmallRows,
  setWebGpuLinearColumns,
  setWebGpuLinearSmallRows,
  setWebGpuLinearVecRows,
  webGpuLinearNtDecodeApplies,
  type DecodeLowRank,
  type LinearNtDecodeOptions,
} from '../src/core/kernels/webgpu-linear';
import { maxAbsDiff, seeded } from './helpers/f16-base';

const adapter = await webGpuAdapter();

const silu64 = (g: number): number => g / (1 + Math.exp(-g));

/** Float64 loop: h = RMSNorm(x; g), out[r, c] = silu(h·W_g[c] + s·(h·A_g)·B_g[c])·(h·W_u[c] + s·(h·A_u)·B_u[c]). */
function pairReference(
  M: number,
  K: number,
  N: number,
  x: Float32Array,
  g: Float32Array,
  eps: number,
  w: [Float32Array, Float32Array],
  lora: { a: Float32Array[]; b: Float32Array[]; r: number; s: number } | null,
): Float64Array {
  const out = new Float64Array(M * N);
  for (let r = 0; r < M; r++) {
    const row = Array.from(x.subarray(r * K, (r + 1) * K));
    const rstd = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / K + eps);
    const h = row.map((v, k) => v * rstd * g[k]);
    const lin = (p: number, c: number) => {
      let acc = 0;
      for (let k = 0; k < K; k++) acc += h[k] * w[p][c * K + k];
      if (lora)
        for (let j = 0; j < lora.r; j++) {
          let d = 0;
          for (let k = 0; k < K; k++) d += h[k] * lora.a[p][j * K + k];
          acc += lora.s * d * lora.b[p][c * lora.r + j];
        }
      return acc;
    };
    for (let c = 0; c < N; c++) out[r * N + c] = silu64(lin(0, c)) * lin(1, c);
  }
  return out;
}

type Route = 'columns' | 'few rows' | 'few rows, vector loads';

/** Run `f` with the decode linear on `route` (the column program, or the few-rows program with or without vec). */
async function onRoute<T>(route: Route, f: () => Promise<T>): Promise<T> {
  const restore = saveWebGpuLinearSmallRows();
  const columns = setWebGpuLinearColumns(route === 'columns');
  if (route !== 'columns') setWebGpuLinearSmallRows(64);
  setWebGpuLinearVecRows(route === 'few rows, vector loads');
  try {
    return await f();
  } finally {
    setWebGpuLinearVecRows(null);
    setWebGpuLinearColumns(columns);
    restore();
  }
}

describe('the gate|up pair of the decode linear on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  // [M, K, N, LoRA r]: K a multiple of 8 (vector loads of packed halves), N across several strips of 8 columns.
  const shapes = [
    [1, 72, 40, 0],
    [3, 72, 40, 4],
    [13, 64, 24, 3], // two row blocks of 8
  ] as const;
  const routes: Route[] = ['columns', 'few rows', 'few rows, vector loads'];
  for (const route of routes)
    for (const packed of [false, true])
      for (const [M, K, N, r] of shapes) {
        const what = `${route}, ${packed ? 'f16 base' : 'f32'}, x [${M}, ${K}], out ${N}${r ? `, LoRA r ${r}` : ''}`;
        it(`${what}: ${r ? 2 : 1} dispatch(es), the float64 loop's values and the gate-then-up programs'`, async () => {
          const eps = 1e-6;
          const wv = [0, 1].map((p) => roundToF16(seeded(N * K, 10 + p, 0.2))) as [
            Float32Array,
            Float32Array,
          ];
          const xv = seeded(M * K, 1, 2);
          const gv = seeded(K, 2, 0.3).map((v) => 1 + v);
          const av = [0, 1].map((p) => seeded(Math.max(r, 1) * K, 20 + p, 0.3));
          const bv = [0, 1].map((p) => seeded(N * Math.max(r, 1), 30 + p, 0.3));
          const t = {
            x: tf.tensor2d(xv, [M, K]),
            g: tf.tensor1d(gv),
            w: wv.map((v) =>
              packed ? tf.tensor2d(packF16(v), [N, K / 2], 'int32') : tf.tensor2d(v, [N, K]),
            ),
            a: av.map((v) => tf.tensor2d(v, [Math.max(r, 1), K])),
            b: bv.map((v) => tf.tensor2d(v, [N, Math.max(r, 1)])),
          };
          try {
            const lora: DecodeLowRank[] | null = r
              ? [0, 1].map((p) => ({ a: t.a[p], b: t.b[p], scaling: 1.5 }))
              : null;
            const rms = { g: t.g, eps };
            const o: LinearNtDecodeOptions = { w: t.w, rms, lora, pair: true };
            await onRoute(route, async () => {
              expect(webGpuLinearNtDecodeApplies(t.x, o)).toBe(true);
              // The B's are uploaded by a first run (a host tensor would be read on the CPU, not dispatched).
              tf.dispose(linearNtDecodeWebGpu(t.x, o));
              const before = tf.memory().numTensors;
              const counted = await countDispatches(() => linearNtDecodeWebGpu(t.x, o));
              expect(counted.result.shape).toEqual([M, N]);
              expect(counted.dispatches).toBe(r ? 2 : 1);
              const got = await counted.result.data();
              // The programs the pair replaces: gate_proj's, then up_proj's with that gate in its epilogue.
              const two = tf.tidy(() => {
                const gate = linearNtDecodeWebGpu(t.x, { w: [t.w[0]], rms, lora: lora && [lora[0]] });
                return linearNtDecodeWebGpu(t.x, { w: [t.w[1]], rms, lora: lora && [lora[1]], gate });
              });
              const ref = pairReference(M, K, N, xv, gv, eps, wv, r ? { a: av, b: bv, r, s: 1.5 } : null);
              const scale = Math.max(1, ...Array.from(ref, Math.abs));
              const vsTwo = maxAbsDiff(got, await two.data());
              const vsLoop = maxAbsDiff(got, ref);
              console.log(`pair, ${what}: vs gate-then-up ${vsTwo}, vs float64 ${vsLoop} (scale ${scale})`);
              expect(vsLoop).toBeLessThan(1e-5 * scale);
              // The same sums in the same order, then the same epilogue: equal to the bit (here, on SwiftShader).
              expect(vsTwo).toBe(0);
              tf.dispose([counted.result, two]);
              expect(tf.memory().numTensors).toBe(before);
            });
          } finally {
            tf.dispose([t.x, t.g, ...t.w, ...t.a, ...t.b]);
          }
          expect(await webGpuErrors()).toEqual([]);
        }, 120_000);
      }

  it('applies only to two parts of equal rows with nothing but the norm and LoRA, at few rows', async () => {
    const K = 16;
    const x = tf.zeros([2, K]) as tf.Tensor2D;
    const big = tf.zeros([200, K]) as tf.Tensor2D;
    const w = tf.zeros([8, K]) as tf.Tensor2D;
    const w2 = tf.zeros([6, K]) as tf.Tensor2D;
    const bias = tf.zeros([16]) as tf.Tensor1D;
    const res = tf.zeros([2, 8]) as tf.Tensor2D;
    const a = tf.zeros([2, K]) as tf.Tensor2D;
    const b = tf.zeros([8, 2]) as tf.Tensor2D;
    const pair = { a, b, scaling: 1 };
    try {
      await onRoute('few rows', async () => {
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w], pair: true })).toBe(true);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w], pair: true, lora: [pair, pair] })).toBe(true);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w], pair: true })).toBe(false);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w, w], pair: true })).toBe(false);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w2], pair: true })).toBe(false);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w], bias, pair: true })).toBe(false);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w], residual: res, pair: true })).toBe(false);
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w], gate: res, pair: true })).toBe(false);
        // LoRA on one of the two: refused (every part or none).
        expect(webGpuLinearNtDecodeApplies(x, { w: [w, w], lora: [pair], pair: true })).toBe(false);
        // 200 rows run the tiles, which have no pair: refused (the caller runs gate then up).
        expect(webGpuLinearNtDecodeApplies(big, { w: [w, w], pair: true })).toBe(false);
      });
    } finally {
      tf.dispose([x, big, w, w2, bias, res, a, b]);
    }
  });
});
