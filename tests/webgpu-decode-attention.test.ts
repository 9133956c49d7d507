/**
 * The fused KV-cache decode attention (src/core/kernels/webgpu-decode-attention.ts) against the plain ops of
 * src/core/model/attention.ts's decodeAttention and against a float64 loop (the plain path's semantics: the new key and
 * value written at the slot, additive key mask, a row with every key masked averaging all S keys), the new keys,
 * values and y, on Node WebGPU (Dawn; tests/helpers/webgpu-node.ts), tiny shapes: heads 12, 32 and 64 wide, S
 * below, across and not a multiple of the 64-thread tiles, left padding, padding in the middle, a row with every
 * key masked. Then a tiny GPT-2's greedy generation with the fused path against the plain path and against
 * recomputing (tokens identical, logprobs within 1e-5), with the dispatches per generated token. On the CPU backend
 * the plain path is checked against the same loop (nothing changes there).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { GPT2 } from '../src/core/model/gpt2';
import { decodeAttention } from '../src/core/model/attention';
import { MASKED, type LayerKV } from '../src/core/kernels/definitions';
import { generate } from '../src/core/model/sampling';
import { parseGPT2Config } from '../src/core/model/config';
import {
  DECODE_ATTN,
  DECODE_KV_WRITE,
  setWebGpuDecodeAttentionFused,
  webGpuDecodeAttentionApplies,
} from '../src/core/kernels/webgpu-decode-attention';
import { checkDecodeAttentionOnCurrentBackend } from '../src/core/backend/webgpu-fused';
import { countDispatches } from '../src/bench/webgpu-dispatch';

const adapter = await webGpuAdapter();

interface Case {
  name: string;
  B: number;
  S: number;
  C: number;
  nh: number;
  slot: number;
  /** Per batch row, the key mask over S (1 attend, 0 masked). */
  mask: (b: number, j: number) => number;
}

const CASES: Case[] = [
  {
    name: 'hs 12 (n_embd 48, 4 heads), S 19, slot 11: left padding 4, none, every key masked',
    B: 3,
    S: 19,
    C: 48,
    nh: 4,
    slot: 11,
    mask: (b, j) => (j <= 11 && j >= [4, 0, 99][b] ? 1 : 0),
  },
  {
    name: 'hs 64 (n_embd 128, 2 heads), S 70 (across the 64-thread tile), slot 69: left padding 9, padding in the middle',
    B: 2,
    S: 70,
    C: 128,
    nh: 2,
    slot: 69,
    mask: (b, j) => (b === 0 ? (j >= 9 ? 1 : 0) : j < 3 || j > 20 ? 1 : 0),
  },
  {
    name: 'hs 32 (n_embd 64, 2 heads), S 130 (256 slots of scores), slot 0, one real key',
    B: 1,
    S: 130,
    C: 64,
    nh: 2,
    slot: 0,
    mask: (_, j) => (j === 0 ? 1 : 0),
  },
];

function maskOf(c: Case): number[] {
  return Array.from({ length: c.B * c.S }, (_, i) => c.mask(Math.floor(i / c.S), i % c.S));
}

/**
 * Float64 loop: K' and V' = the caches with row `slot` of every (b, head) replaced by the token's k and v; y = the
 * softmax-weighted sum of V' over the keys the mask allows (scores (q·k)/√hs), or the mean of all S rows of V' when
 * the mask allows none.
 */
function reference(
  c: Case,
  qkv: ArrayLike<number>,
  kc: ArrayLike<number>,
  vc: ArrayLike<number>,
  mask: number[],
): { y: Float64Array; k: Float64Array; v: Float64Array } {
  const { B, S, C, nh, slot } = c;
  const hs = C / nh;
  const k = Float64Array.from(kc);
  const v = Float64Array.from(vc);
  const y = new Float64Array(B * C);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < nh; h++) {
      const row = (j: number) => ((b * nh + h) * S + j) * hs;
      for (let d = 0; d < hs; d++) {
        k[row(slot) + d] = qkv[b * 3 * C + C + h * hs + d];
        v[row(slot) + d] = qkv[b * 3 * C + 2 * C + h * hs + d];
      }
      const allowed = Array.from({ length: S }, (_, j) => mask[b * S + j] !== 0);
      const p = new Float64Array(S);
      if (allowed.some(Boolean)) {
        const s = Array.from({ length: S }, (_, j) => {
          let acc = 0;
          for (let d = 0; d < hs; d++) acc += qkv[b * 3 * C + h * hs + d] * k[row(j) + d];
          return acc / Math.sqrt(hs);
        });
        const m = Math.max(...s.filter((_, j) => allowed[j]));
        let sum = 0;
        for (let j = 0; j < S; j++) sum += p[j] = allowed[j] ? Math.exp(s[j] - m) : 0;
        for (let j = 0; j < S; j++) p[j] /= sum;
      } else p.fill(1 / S);
      for (let j = 0; j < S; j++) for (let d = 0; d < hs; d++) y[b * C + h * hs + d] += p[j] * v[row(j) + d];
    }
  return { y, k, v };
}

/** max |a − b| and the largest |b|. */
function diff(a: ArrayLike<number>, b: ArrayLike<number>): { abs: number; scale: number } {
  expect(a.length).toBe(b.length);
  let abs = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    abs = Math.max(abs, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return { abs, scale };
}

/**
 * Random qkv [B, 3C] and caches [B, nh, S, hs] holding random rows below the slot and zeros from it on (as
 * generate's cache: zero-padded); the slot one-hot [S] and the key mask [B, S] as generate makes them, or cast from
 * int32 (on webgpu a float32 tensor over an int32 buffer).
 */
function inputs(c: Case, seed: number, castFromInt = false) {
  return tf.tidy(() => {
    const hs = c.C / c.nh;
    const below = tf.reshape(tf.cast(tf.less(tf.range(0, c.S, 1, 'int32'), c.slot), 'float32'), [
      1,
      1,
      c.S,
      1,
    ]);
    const cache = (s: number) =>
      tf.mul(tf.randomNormal([c.B, c.nh, c.S, hs], 0, 1, 'float32', s), below) as tf.Tensor4D;
    const oh = Array.from({ length: c.S }, (_, j) => (j === c.slot ? 1 : 0));
    return {
      qkv: tf.randomNormal([c.B, 3 * c.C], 0, 1, 'float32', seed) as tf.Tensor2D,
      oh: castFromInt ? tf.cast(tf.tensor1d(oh, 'int32'), 'float32') : tf.tensor1d(oh, 'float32'),
      keyMask: (castFromInt
        ? tf.cast(tf.tensor2d(maskOf(c), [c.B, c.S], 'int32'), 'float32')
        : tf.tensor2d(maskOf(c), [c.B, c.S], 'float32')) as tf.Tensor2D,
      kv: { k: cache(seed + 1), v: cache(seed + 2) } as LayerKV,
    };
  });
}

type Inputs = ReturnType<typeof inputs>;

async function run(c: Case, x: Inputs) {
  const out = tf.tidy(() => decodeAttention(x.qkv, x.oh, x.keyMask, x.kv, c.nh));
  const res = { y: await out.y.data(), k: await out.kv.k.data(), v: await out.kv.v.data() };
  tf.dispose([out.y, out.kv.k, out.kv.v]);
  return res;
}

function disposeInputs(x: Inputs): void {
  tf.dispose([x.qkv, x.oh, x.keyMask, x.kv.k, x.kv.v]);
}

/**
 * Upload the inputs to the GPU (one fused run): tfjs's webgpu backend runs small element-wise ops, transposes and
 * slices on the CPU while all their inputs are still host data, so the plain path on fresh host tensors makes fewer
 * dispatches than in the model, where its inputs are kernel outputs on the GPU.
 */
async function onGpu(c: Case, x: Inputs, keyMask = x.keyMask): Promise<void> {
  const out = decodeAttention(x.qkv, x.oh, keyMask, x.kv, c.nh);
  await out.y.data();
  tf.dispose([out.y, out.kv.k, out.kv.v]);
}

describe('decode attention, plain path on the CPU backend (the reference the fused kernels keep)', () => {
  beforeAll(useCpu);

  it('equals the float64 loop (new keys, values and y, a row with every key masked included); the fused path does not apply', async () => {
    const c = CASES[0];
    const x = inputs(c, 1);
    expect(webGpuDecodeAttentionApplies(x.qkv, x.oh, x.keyMask, x.kv, c.nh)).toBe(false);
    const got = await run(c, x);
    const ref = reference(c, await x.qkv.data(), await x.kv.k.data(), await x.kv.v.data(), maskOf(c));
    for (const [what, a, b] of [
      ['y', got.y, ref.y],
      ['k', got.k, ref.k],
      ['v', got.v, ref.v],
    ] as const) {
      const d = diff(a, b);
      expect(d.abs, what).toBeLessThan(1e-5 * Math.max(1, d.scale));
    }
    disposeInputs(x);
  });
});

describe('fused decode attention on Node WebGPU (src/core/kernels/webgpu-decode-attention.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  for (const [n, c] of CASES.entries()) {
    it(`${c.name}${n === 0 ? ', one-hot and mask cast from int32' : ''}: new keys, values and y equal the plain ops' and the float64 loop`, async () => {
      const x = inputs(c, 10 * n + 3, n === 0);
      expect(webGpuDecodeAttentionApplies(x.qkv, x.oh, x.keyMask, x.kv, c.nh)).toBe(true);
      const before = tf.memory().numTensors;
      const fused = await run(c, x);
      setWebGpuDecodeAttentionFused(false);
      const plain = await run(c, x).finally(() => setWebGpuDecodeAttentionFused(true));
      const ref = reference(c, await x.qkv.data(), await x.kv.k.data(), await x.kv.v.data(), maskOf(c));
      for (const [what, a, b] of [
        ['y vs plain', fused.y, plain.y],
        ['y vs loop', fused.y, ref.y],
        ['plain y vs loop', plain.y, ref.y],
        ['k vs plain', fused.k, plain.k],
        ['k vs loop', fused.k, ref.k],
        ['v vs plain', fused.v, plain.v],
        ['v vs loop', fused.v, ref.v],
      ] as const) {
        const d = diff(a, b);
        expect(d.abs, what).toBeLessThan(1e-5 * Math.max(1, d.scale));
      }
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);
      disposeInputs(x);
    });
  }

  it('is two slot writes and one attention kernel, 3 dispatches (the plain ops: more than 10); no tensor left over 3 chained steps', async () => {
    const c = CASES[1];
    const x = inputs(c, 40);
    await onGpu(c, x);
    const prof = await tf.profile(() => decodeAttention(x.qkv, x.oh, x.keyMask, x.kv, c.nh));
    // Distinct kernel names (a Reshape of the one-hot makes no dispatch).
    expect(prof.kernelNames).toEqual(['Reshape', DECODE_KV_WRITE, DECODE_ATTN]);
    const r = prof.result as unknown as { y: tf.Tensor; kv: LayerKV };
    tf.dispose([r.y, r.kv.k, r.kv.v]);
    const fused = await countDispatches(() => decodeAttention(x.qkv, x.oh, x.keyMask, x.kv, c.nh));
    tf.dispose([fused.result.y, fused.result.kv.k, fused.result.kv.v]);
    expect(fused.dispatches).toBe(3);
    // As generate drives it: each step's new cache feeds the next, the caller disposes the old one.
    const before = tf.memory().numTensors;
    let kv: LayerKV = { k: tf.clone(x.kv.k), v: tf.clone(x.kv.v) };
    const start = tf.memory().numTensors;
    for (let n = 0; n < 3; n++) {
      const out = decodeAttention(x.qkv, x.oh, x.keyMask, kv, c.nh);
      await out.y.data();
      tf.dispose([out.y, kv.k, kv.v]);
      kv = out.kv;
      expect(tf.memory().numTensors).toBe(start);
    }
    tf.dispose([kv.k, kv.v]);
    expect(tf.memory().numTensors).toBe(before);
    // The plain path, for scale: what the fused kernels replace (its bias made once per step, outside).
    const bias = tf.tidy(() => tf.reshape(tf.mul(tf.sub(1, x.keyMask), MASKED), [c.B, 1, 1, c.S]));
    setWebGpuDecodeAttentionFused(false);
    const plain = await countDispatches(() =>
      tf.tidy(() => decodeAttention(x.qkv, x.oh, x.keyMask, x.kv, c.nh, () => bias)),
    ).finally(() => setWebGpuDecodeAttentionFused(true));
    tf.dispose([plain.result.y, plain.result.kv.k, plain.result.kv.v, bias]);
    expect(plain.dispatches).toBeGreaterThan(10);
    expect(await webGpuErrors()).toEqual([]);
    disposeInputs(x);
  });

  it('an unsupported head width, a mismatched cache and the off switch keep the plain ops', async () => {
    const c = CASES[0];
    const x = inputs(c, 50);
    expect(webGpuDecodeAttentionApplies(x.qkv, x.oh, x.keyMask, x.kv, 2)).toBe(false); // cache is 4 heads
    const wide = tf.zeros([c.B, 3 * 96]);
    const wideKv = { k: tf.zeros([c.B, 1, c.S, 96]), v: tf.zeros([c.B, 1, c.S, 96]) } as LayerKV;
    expect(webGpuDecodeAttentionApplies(wide, x.oh, x.keyMask, wideKv, 1)).toBe(false); // hs 96 > 64
    setWebGpuDecodeAttentionFused(false);
    expect(webGpuDecodeAttentionApplies(x.qkv, x.oh, x.keyMask, x.kv, c.nh)).toBe(false);
    setWebGpuDecodeAttentionFused(true);
    expect(webGpuDecodeAttentionApplies(x.qkv, x.oh, x.keyMask, x.kv, c.nh)).toBe(true);
    tf.dispose([wide, wideKv.k, wideKv.v]);
    disposeInputs(x);
  });

  it('checkDecodeAttentionOnCurrentBackend (the Chromium page calls it): float32-close, 3 dispatches, no gradient', async () => {
    const before = tf.memory().numTensors;
    const r = await checkDecodeAttentionOnCurrentBackend();
    expect(r.maxRelValue).toBeLessThan(1e-5);
    expect(r.maxRelGrad).toBe(0);
    expect(r.dispatchesFwd).toBe(3);
    expect(r.dispatchesFwdBwd).toBe(3);
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('GPT-2 (2 layers, hs 12) greedy generation: fused tokens equal the plain path and recomputing, logprobs within 1e-5; each generated token saves n_layer·(plain attention − 1) + 2 dispatches', async () => {
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
    const opts = { temperature: 0, padId: 257, rng: 1 };
    const gen = async (fused: boolean, N: number, useCache = true) => {
      setWebGpuDecodeAttentionFused(fused);
      try {
        return await countDispatches(() => generate(m, prompts, { ...opts, maxNewTokens: N, useCache }));
      } finally {
        setWebGpuDecodeAttentionFused(true);
      }
    };
    const before = tf.memory().numTensors;
    const fused = await gen(true, 8);
    const plain = await gen(false, 8);
    // Recomputing the whole sequence per token (the full forward's fused kernels): its first 5 tokens.
    const recompute = await gen(true, 5, false);
    expect(tf.memory().numTensors).toBe(before);
    expect(new Set(fused.result.tokens.flat()).size).toBeGreaterThan(3);
    expect(fused.result.tokens).toEqual(plain.result.tokens);
    expect(fused.result.tokens.map((row) => row.slice(0, 5))).toEqual(recompute.result.tokens);
    for (const other of [plain.result, recompute.result])
      for (let b = 0; b < prompts.length; b++)
        for (let t = 0; t < other.logprobs[b].length; t++)
          expect(Math.abs(fused.result.logprobs[b][t] - other.logprobs[b][t])).toBeLessThan(1e-5);
    // Dispatches per generated token: the difference between 8 and 4 new tokens, / 4.
    const fusedPerToken = (fused.dispatches - (await gen(true, 4)).dispatches) / 4;
    const plainPerToken = (plain.dispatches - (await gen(false, 4)).dispatches) / 4;
    // The plain layer's attention (bias given) and the bias it makes once per step.
    const small = { ...CASES[0], B: prompts.length, S: 13, slot: 6 };
    const x = inputs(small, 60);
    const keyMask = tf.ones([prompts.length, 13]) as tf.Tensor2D;
    await onGpu(small, x, keyMask);
    const plainBias = await countDispatches(() =>
      tf.tidy(() => tf.reshape(tf.mul(tf.sub(1, keyMask), MASKED), [prompts.length, 1, 1, 13])),
    );
    setWebGpuDecodeAttentionFused(false);
    const plainAttn = await countDispatches(() =>
      tf.tidy(() => decodeAttention(x.qkv, x.oh, keyMask, x.kv, config.n_head, () => plainBias.result)),
    ).finally(() => setWebGpuDecodeAttentionFused(true));
    tf.dispose([plainAttn.result.y, plainAttn.result.kv.k, plainAttn.result.kv.v, plainBias.result, keyMask]);
    disposeInputs(x);
    // The fused attention in generate: one dispatch per layer that also writes the new key and value into the
    // cache in place (kernels/webgpu-inplace.ts).
    expect(plainPerToken - fusedPerToken).toBe(
      config.n_layer * (plainAttn.dispatches - 1) + plainBias.dispatches,
    );
    console.log(
      `dispatches per generated token (n_layer 2): plain ${plainPerToken}, fused ${fusedPerToken}; ` +
        `decode attention per layer: plain ${plainAttn.dispatches} + ${plainBias.dispatches} per step, fused 1`,
    );
    m.dispose();
    expect(await webGpuErrors()).toEqual([]);
    // Seven generations on SwiftShader: about 10 s alone, past the fast tier's 30 s beside the other worker's files.
  }, 120_000);
});
