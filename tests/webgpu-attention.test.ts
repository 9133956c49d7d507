/**
 * The fused causal self-attention (src/core/kernels/webgpu-attention.ts) against the plain ops of
 * src/core/model/attention.ts and against a float64 loop (the plain path's exact semantics: causal + key-padding
 * mask, and a query row with no allowed key averaging all T keys), values and dqkv, on Node WebGPU (Dawn;
 * tests/helpers/webgpu-node.ts), tiny shapes: heads 12, 32 and 64 wide, T below, across and not a multiple of the
 * tiles (16 keys, 64 rows), left padding, a padded prefix, right padding and a row of padding only. On the CPU
 * backend the plain path is checked against the same loop (nothing changes there).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { maxDiff } from './helpers/diff';
import { causalPaddingBias, causalSelfAttention } from '../src/core/model/attention';
import {
  ATTN_FWD,
  setWebGpuAttentionFused,
  webGpuAttentionApplies,
} from '../src/core/kernels/webgpu-attention';
import { checkAttentionOnCurrentBackend } from '../src/core/backend/webgpu-fused';
import { countDispatches } from '../src/bench/webgpu-dispatch';

const adapter = await webGpuAdapter();

interface Case {
  name: string;
  B: number;
  T: number;
  C: number;
  nh: number;
  /** Per batch row: [first real token, end of real tokens). */
  real: [number, number][];
}

const CASES: Case[] = [
  {
    name: 'hs 12 (n_embd 48, 4 heads), T 5, padded prefix and right padding',
    B: 2,
    T: 5,
    C: 48,
    nh: 4,
    real: [
      [2, 5],
      [0, 4],
    ],
  },
  {
    name: 'hs 32, T 70 (two row tiles), left padding and a row of padding only',
    B: 2,
    T: 70,
    C: 64,
    nh: 2,
    real: [
      [9, 70],
      [70, 70],
    ],
  },
  { name: 'hs 64, T 17, left padding 3', B: 1, T: 17, C: 128, nh: 2, real: [[3, 17]] },
];

function maskOf(c: Case): number[] {
  return Array.from({ length: c.B * c.T }, (_, k) => {
    const [b, t] = [Math.floor(k / c.T), k % c.T];
    return t >= c.real[b][0] && t < c.real[b][1] ? 1 : 0;
  });
}

/**
 * Float64 loop of the plain path: key j allowed for query i when j ≤ i and mask[j] = 1; a row with no allowed key
 * weights all T keys 1/T (its scores all round to −1e9 in float32). y and, for upstream dy, dqkv.
 */
function reference(
  c: Case,
  qkv: ArrayLike<number>,
  mask: number[],
  dy: ArrayLike<number>,
): { y: Float64Array; dqkv: Float64Array } {
  const { B, T, C, nh } = c;
  const hs = C / nh;
  const scale = 1 / Math.sqrt(hs);
  const y = new Float64Array(B * T * C);
  const dqkv = new Float64Array(B * T * 3 * C);
  const at = (b: number, t: number, part: number, h: number, d: number) =>
    (b * T + t) * 3 * C + part * C + h * hs + d;
  const yAt = (b: number, t: number, h: number, d: number) => (b * T + t) * C + h * hs + d;
  for (let b = 0; b < B; b++)
    for (let h = 0; h < nh; h++)
      for (let i = 0; i < T; i++) {
        const allowed = Array.from({ length: T }, (_, j) => j <= i && mask[b * T + j] === 1);
        const p = new Float64Array(T);
        if (allowed.some(Boolean)) {
          const s = Array.from({ length: T }, (_, j) => {
            let acc = 0;
            for (let d = 0; d < hs; d++) acc += qkv[at(b, i, 0, h, d)] * qkv[at(b, j, 1, h, d)];
            return acc * scale;
          });
          const m = Math.max(...s.filter((_, j) => allowed[j]));
          let sum = 0;
          for (let j = 0; j < T; j++) sum += p[j] = allowed[j] ? Math.exp(s[j] - m) : 0;
          for (let j = 0; j < T; j++) p[j] /= sum;
        } else p.fill(1 / T);
        const dp = new Float64Array(T);
        let D = 0;
        for (let j = 0; j < T; j++) {
          for (let d = 0; d < hs; d++) {
            y[yAt(b, i, h, d)] += p[j] * qkv[at(b, j, 2, h, d)];
            dp[j] += dy[yAt(b, i, h, d)] * qkv[at(b, j, 2, h, d)];
            dqkv[at(b, j, 2, h, d)] += p[j] * dy[yAt(b, i, h, d)];
          }
          D += p[j] * dp[j];
        }
        for (let j = 0; j < T; j++) {
          const ds = p[j] * (dp[j] - D) * scale;
          for (let d = 0; d < hs; d++) {
            dqkv[at(b, i, 0, h, d)] += ds * qkv[at(b, j, 1, h, d)];
            dqkv[at(b, j, 1, h, d)] += ds * qkv[at(b, i, 0, h, d)];
          }
        }
      }
  return { y, dqkv };
}

/** y and dqkv of causalSelfAttention on the current backend (upstream gradient dy). */
async function run(c: Case, qkv: tf.Tensor2D, maskF: tf.Tensor2D, dy: tf.Tensor) {
  const bias = tf.tidy(() => causalPaddingBias(maskF));
  const y = tf.tidy(() => causalSelfAttention(qkv, maskF, bias, c.nh));
  const [g] = tf.grads((x: tf.Tensor) => causalSelfAttention(x as tf.Tensor2D, maskF, bias, c.nh))([qkv], dy);
  const out = { y: await y.data(), dqkv: await g.data() };
  tf.dispose([bias, y, g]);
  return out;
}

/** Random qkv and dy; maskF as the model makes it (tf.cast of an int32 mask: on webgpu an int32 buffer) or not. */
function inputs(c: Case, seed: number, castMask = false) {
  const qkv = tf.randomNormal([c.B * c.T, 3 * c.C], 0, 1, 'float32', seed) as tf.Tensor2D;
  const maskF = castMask
    ? (tf.tidy(() => tf.cast(tf.tensor2d(maskOf(c), [c.B, c.T], 'int32'), 'float32')) as tf.Tensor2D)
    : tf.tensor2d(maskOf(c), [c.B, c.T], 'float32');
  const dy = tf.randomNormal([c.B * c.T, c.C], 0, 1, 'float32', seed + 1);
  return { qkv, maskF, dy };
}

describe('causal self-attention, plain path on the CPU backend (the reference the fused kernels keep)', () => {
  beforeAll(useCpu);

  it('equals the float64 loop, values and dqkv, fully masked rows included; the fused path does not apply', async () => {
    const c = CASES[0];
    const { qkv, maskF, dy } = inputs(c, 1);
    expect(webGpuAttentionApplies(qkv, maskF, c.nh)).toBe(false);
    const got = await run(c, qkv, maskF, dy);
    const ref = reference(c, await qkv.data(), maskOf(c), await dy.data());
    const dv = maxDiff(got.y, ref.y);
    expect(dv.abs).toBeLessThan(1e-5 * Math.max(1, dv.scale));
    const dg = maxDiff(got.dqkv, ref.dqkv);
    expect(dg.abs).toBeLessThan(1e-5 * Math.max(1, dg.scale));
    // Rows 0 and 1 of batch row 0 have no allowed key: the mean of v over all T = 5 keys, future ones included.
    const q = await qkv.data();
    for (const i of [0, 1])
      for (let d = 0; d < c.C; d++) {
        let mean = 0;
        for (let j = 0; j < c.T; j++) mean += q[j * 3 * c.C + 2 * c.C + d] / c.T;
        expect(got.y[i * c.C + d]).toBeCloseTo(mean, 5);
      }
    tf.dispose([qkv, maskF, dy]);
  });
});

describe('fused causal self-attention on Node WebGPU (src/core/kernels/webgpu-attention.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  for (const [k, c] of CASES.entries()) {
    it(`${c.name}${k === 0 ? ', mask cast from int32 as the model makes it' : ''}: y and dqkv equal the plain ops' and the float64 loop`, async () => {
      const { qkv, maskF, dy } = inputs(c, 10 * k + 3, k === 0);
      expect(webGpuAttentionApplies(qkv, maskF, c.nh)).toBe(true);
      const before = tf.memory().numTensors;
      const fused = await run(c, qkv, maskF, dy);
      setWebGpuAttentionFused(false);
      const plain = await run(c, qkv, maskF, dy).finally(() => setWebGpuAttentionFused(true));
      const ref = reference(c, await qkv.data(), maskOf(c), await dy.data());
      for (const [what, a, b] of [
        ['y vs plain', fused.y, plain.y],
        ['y vs loop', fused.y, ref.y],
        ['plain y vs loop', plain.y, ref.y],
        ['dqkv vs plain', fused.dqkv, plain.dqkv],
        ['dqkv vs loop', fused.dqkv, ref.dqkv],
        ['plain dqkv vs loop', plain.dqkv, ref.dqkv],
      ] as const) {
        const d = maxDiff(a, b);
        expect(d.abs, what).toBeLessThan(1e-5 * Math.max(1, d.scale));
      }
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);
      tf.dispose([qkv, maskF, dy]);
    });
  }

  it('is one kernel forward; 1 dispatch forward, 3 forward + backward; no tensor left over 3 runs', async () => {
    const c = CASES[1];
    const { qkv, maskF, dy } = inputs(c, 40);
    const bias = tf.tidy(() => causalPaddingBias(maskF));
    const attn = (x: tf.Tensor) => causalSelfAttention(x as tf.Tensor2D, maskF, bias, c.nh);
    const prof = await tf.profile(() => attn(qkv));
    expect(prof.kernelNames.filter(Boolean)).toEqual([ATTN_FWD]);
    tf.dispose(prof.result as tf.Tensor);
    const fwd = await countDispatches(() => attn(qkv));
    tf.dispose(fwd.result);
    expect(fwd.dispatches).toBe(1);
    const fwdBwd = await countDispatches(() => tf.grads(attn)([qkv], dy));
    tf.dispose(fwdBwd.result);
    expect(fwdBwd.dispatches).toBe(3);
    const before = tf.memory().numTensors;
    for (let n = 0; n < 3; n++) {
      const [g] = tf.grads(attn)([qkv], dy);
      await g.data();
      g.dispose();
      expect(tf.memory().numTensors).toBe(before);
    }
    // The plain path, for scale: what the fused kernels replace.
    setWebGpuAttentionFused(false);
    const plain = await countDispatches(() => tf.grads(attn)([qkv], dy)).finally(() =>
      setWebGpuAttentionFused(true),
    );
    tf.dispose(plain.result);
    expect(plain.dispatches).toBeGreaterThan(10);
    expect(await webGpuErrors()).toEqual([]);
    tf.dispose([qkv, maskF, dy, bias]);
  });

  it('checkAttentionOnCurrentBackend (the Chromium page calls it): float32-close, 1 and 3 dispatches', async () => {
    const before = tf.memory().numTensors;
    const r = await checkAttentionOnCurrentBackend();
    expect(r.maxRelValue).toBeLessThan(1e-5);
    expect(r.maxRelGrad).toBeLessThan(1e-5);
    expect(r.dispatchesFwd).toBe(1);
    expect(r.dispatchesFwdBwd).toBe(3);
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('the KV-cache prefill (collect) and an unsupported head width keep the plain ops', async () => {
    const c = CASES[0];
    const { qkv, maskF, dy } = inputs(c, 50);
    const bias = tf.tidy(() => causalPaddingBias(maskF));
    const collect: { k: tf.Tensor4D; v: tf.Tensor4D }[] = [];
    const prof = await tf.profile(() => causalSelfAttention(qkv, maskF, bias, c.nh, collect));
    expect(prof.kernelNames).not.toContain(ATTN_FWD);
    expect(collect).toHaveLength(1);
    expect(collect[0].k.shape).toEqual([c.B, c.nh, c.T, c.C / c.nh]);
    tf.dispose([prof.result as tf.Tensor, collect[0].k, collect[0].v]);
    // hs 96 > 64.
    const wide = tf.zeros([c.B * c.T, 3 * 96]);
    expect(webGpuAttentionApplies(wide, maskF, 1)).toBe(false);
    expect(webGpuAttentionApplies(wide, maskF, 2)).toBe(true);
    tf.dispose([qkv, maskF, dy, bias, wide]);
  });
});
