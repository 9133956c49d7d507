/**
 * The frozen base in f16 (config baseDtype "f16", issue #36, docs/models.md, "The frozen base in f16") on WebGPU in Node (SwiftShader): the
 * packing round trip, the kernels against f32 references, and 2-layer slices of the Qwen2.5-1.5B and Qwen3-1.7B
 * shapes (a 4096-id vocabulary instead of 151 936: every dimension of a block is the real one; the real vocabulary
 * is tested in tests/f16-base.slow.test.ts). The exact checks run a base whose weights are already f16 values:
 * then the f32 model and the packed model hold the same numbers, and log-probs, greedy tokens and LoRA gradients
 * must agree to float32 rounding of a different summation order (the kernels sum in f32).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  f16Bits,
  f16BitsToF32,
  f16Gather,
  f16LinearNT,
  f16MatMulNN,
  packF16,
  roundToF16,
  unpackF16,
} from '../src/core/kernels/webgpu-f16';
import {
  linearNtDecodeWebGpu,
  linearPackedNNWebGpu,
  saveWebGpuLinearSmallRows,
  setWebGpuLinearFused,
  setWebGpuLinearSmallRows,
  webGpuLinearNtDecodeApplies,
  webGpuLinearPackedNNApplies,
} from '../src/core/kernels/webgpu-linear';
import { Llama } from '../src/core/model/llama';
import { F16_HEAD_DECODE_ROWS, decodeLogits, headRowsLogits } from '../src/core/model/vocab-chunks';
import { chunkedTokenLogprobs } from '../src/core/ppo/chunked-logprob';
import { checkBaseDtype, isF16Matrix } from '../src/core/model/f16-base';
import {
  exactCheck,
  f16ExactFolder,
  hostWeights,
  relDiff,
  seeded,
  tinyQwen2,
  tinyQwen3,
} from './helpers/f16-base';
import { loadLM, lmSafetensorsStream, memoryFiles } from '../src/core/model/folder';
import { collectBytes, readSafetensors } from '../src/core/model/safetensors';
import { nodeFiles } from '../src/cli/files-node';

const adapter = await webGpuAdapter();

describe('f16 packing on the host', () => {
  it('rounds to nearest even like IEEE binary16, and round-trips', () => {
    expect(f16Bits(1)).toBe(0x3c00);
    expect(f16Bits(-2)).toBe(0xc000);
    expect(f16Bits(65504)).toBe(0x7bff);
    expect(f16Bits(65520)).toBe(0x7c00); // rounds up to Inf
    expect(f16Bits(2 ** -24)).toBe(1); // smallest subnormal
    expect(f16Bits(2 ** -25)).toBe(0); // tie → even (0)
    expect(f16Bits(3 * 2 ** -25)).toBe(2); // tie → even (2)
    expect(f16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie → even
    expect(f16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie → even (up)
    expect(f16Bits(NaN) & 0x7c00).toBe(0x7c00);
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00 && h & 0x3ff) continue; // NaNs
      expect(f16Bits(f16BitsToF32(h))).toBe(h);
    }
    const v = seeded(1000, 3, 5);
    const r = roundToF16(v);
    expect(unpackF16(packF16(v))).toEqual(r);
    for (let i = 0; i < v.length; i++)
      expect(Math.abs(r[i] - v[i])).toBeLessThanOrEqual(Math.abs(v[i]) * 2 ** -11);
  });
});

describe('f16 kernels on WebGPU (Node, Dawn)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('x·Wᵀ + b and its gradient to x equal the f32 ops on the same (f16) values', async () => {
    for (const [M, K, N] of [
      [5, 48, 70],
      [33, 130, 31],
      [64, 96, 64],
    ]) {
      const wv = roundToF16(seeded(N * K, 1));
      const x = tf.tensor2d(seeded(M * K, 2), [M, K]);
      const wp = tf.tensor2d(packF16(wv), [N, K / 2], 'int32');
      const w = tf.tensor2d(wv, [N, K]);
      const b = tf.tensor1d(seeded(N, 3));
      const dy = tf.tensor2d(seeded(M * N, 4), [M, N]);
      const before = tf.memory().numTensors;
      const got = tf.tidy(() => {
        const { value, grads } = tf.valueAndGrads((xi: tf.Tensor) => f16LinearNT(xi as tf.Tensor2D, wp, b))(
          [x],
          dy,
        );
        return [value, grads[0]];
      });
      const want = tf.tidy(() => {
        const { value, grads } = tf.valueAndGrads((xi: tf.Tensor) =>
          tf.add(tf.matMul(xi as tf.Tensor2D, w, false, true), b),
        )([x], dy);
        return [value, grads[0]];
      });
      expect(relDiff(await got[0].data(), await want[0].data())).toBeLessThan(1e-6);
      expect(relDiff(await got[1].data(), await want[1].data())).toBeLessThan(1e-6);
      tf.dispose([...got, ...want]);
      expect(tf.memory().numTensors).toBe(before);
      tf.dispose([x, wp, w, b, dy]);
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it("dy·W on packed words runs the fused linear's product (tiles and few rows), equal to a float64 loop and to PerfF16MatMul", async () => {
    const restore = saveWebGpuLinearSmallRows();
    try {
      for (const [M, N, K] of [
        [3, 70, 48],
        [33, 31, 130],
        [70, 96, 64],
      ]) {
        const wv = roundToF16(seeded(N * K, 11));
        const wp = tf.tensor2d(packF16(wv), [N, K / 2], 'int32') as tf.Tensor2D;
        const dyv = seeded(M * N, 12);
        const dy = tf.tensor2d(dyv, [M, N]);
        const want = new Float64Array(M * K);
        for (let m = 0; m < M; m++)
          for (let k = 0; k < K; k++) {
            let s = 0;
            for (let n = 0; n < N; n++) s += dyv[m * N + n] * wv[n * K + k];
            want[m * K + k] = s;
          }
        expect(webGpuLinearPackedNNApplies(dy, wp)).toBe(true);
        // The route: f16MatMulNN is the fused linear's product, bit for bit, on the tiles (a software adapter's
        // default) and on the few-rows program (what a GPU runs at up to 64 rows).
        for (const few of [false, true]) {
          if (few) setWebGpuLinearSmallRows(64);
          const got = f16MatMulNN(dy, wp);
          const fused = linearPackedNNWebGpu(dy, wp);
          const g = await got.data();
          expect(Array.from(g)).toEqual(Array.from(await fused.data()));
          // f32 sums of N products against the float64 loop: within N units of float32 rounding.
          expect(relDiff(g, want)).toBeLessThan(N * 2 ** -24);
          tf.dispose([got, fused]);
        }
        // With the fused path off, PerfF16MatMul's tiles: the same values up to the order of summation.
        const was = setWebGpuLinearFused(false);
        const fallback = f16MatMulNN(dy, wp);
        setWebGpuLinearFused(was);
        expect(webGpuLinearPackedNNApplies(dy, wp)).toBe(true);
        expect(relDiff(await fallback.data(), want)).toBeLessThan(N * 2 ** -24);
        tf.dispose([fallback, wp, dy]);
      }
      // Not a packed weight of dy's columns: the fallback's checks (and its error) stay in charge.
      const dy = tf.zeros([2, 8]);
      const wrongRows = tf.zeros([6, 4], 'int32');
      const notPacked = tf.zeros([8, 4]);
      expect(webGpuLinearPackedNNApplies(dy, wrongRows)).toBe(false);
      expect(webGpuLinearPackedNNApplies(dy, notPacked)).toBe(false);
      tf.dispose([dy, wrongRows, notPacked]);
    } finally {
      restore();
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it('the fused decode linear (RMSNorm prologue, q|k|v in parts, LoRA, SwiGLU) reads packed parts as their f32 values', async () => {
    const M = 3;
    const K = 64;
    const outs = [64, 32, 32];
    const r = 4;
    const ws = outs.map((o, p) => roundToF16(seeded(o * K, 10 + p, 0.2)));
    const x = tf.tensor2d(seeded(M * K, 20), [M, K]);
    const g = tf.tensor1d(seeded(K, 21).map((v) => 1 + 0.1 * v));
    const w32 = ws.map((w, p) => tf.tensor2d(w, [outs[p], K]));
    const w16 = ws.map((w, p) => tf.tensor2d(packF16(w), [outs[p], K / 2], 'int32'));
    const lora = outs.map((o, p) => ({
      a: tf.tensor2d(seeded(r * K, 30 + p, 0.1), [r, K]),
      b: tf.tensor2d(seeded(o * r, 40 + p, 0.1), [o, r]),
      scaling: 2,
    }));
    const N = outs.reduce((a, b) => a + b, 0);
    const gate = tf.tensor2d(seeded(M * N, 50), [M, N]);
    for (const o of [
      { rms: { g, eps: 1e-6 }, lora },
      { rms: { g, eps: 1e-6 }, lora: null },
    ]) {
      const packed = { w: w16, ...o };
      const plain = { w: w32, ...o };
      expect(webGpuLinearNtDecodeApplies(x, packed)).toBe(true);
      const a = linearNtDecodeWebGpu(x, packed);
      const b = linearNtDecodeWebGpu(x, plain);
      // The same program and order of summation: only the read differs, and it gives the same f32 values.
      expect(await a.data()).toEqual(await b.data());
      tf.dispose([a, b]);
    }
    // One part with SwiGLU's gate and a residual.
    const one = { w: [w16[1]], gate: tf.slice(gate, [0, 0], [M, 32]) as tf.Tensor2D, residual: null };
    const a = linearNtDecodeWebGpu(x, one);
    const b = linearNtDecodeWebGpu(x, { ...one, w: [w32[1]] });
    expect(await a.data()).toEqual(await b.data());
    tf.dispose([a, b, one.gate, x, g, gate, ...w32, ...w16, ...lora.flatMap((l) => [l.a, l.b])]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('gathers rows of a packed table (zero outside a chunk) as tf.gather does', async () => {
    const V = 37;
    const C = 24;
    const wv = roundToF16(seeded(V * C, 5));
    const wp = tf.tensor2d(packF16(wv), [V, C / 2], 'int32');
    const ids = tf.tensor1d([0, 5, 36, 12, 40, 3], 'int32');
    const got = f16Gather(wp, ids, 3);
    const host = await got.data();
    const idv = [0, 5, 36, 12, 40, 3];
    for (let i = 0; i < idv.length; i++) {
      const row = idv[i] - 3;
      for (let c = 0; c < C; c++) expect(host[i * C + c]).toBe(row >= 0 && row < V ? wv[row * C + c] : 0);
    }
    tf.dispose([wp, ids, got]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('vocabulary-chunked log-probs over packed head blocks equal those over the f32 blocks (values, dh)', async () => {
    // The update's log-probs at a real vocabulary (ppo/chunked-logprob.ts): the blocks arrive packed under
    // baseDtype "f16" (issue #36's GPU bench found the shape check refusing them: [V, C / 2] words).
    const C = 32;
    const rowsOf = [70, 45];
    const N = 6;
    const wv = rowsOf.map((r, i) => roundToF16(seeded(r * C, 11 + i)));
    const packed = wv.map((v, i) => tf.tensor2d(packF16(v), [rowsOf[i], C / 2], 'int32'));
    const plain = wv.map((v, i) => tf.tensor2d(v, [rowsOf[i], C]));
    const h = tf.tensor2d(seeded(N * C, 13), [N, C]);
    const tokens = tf.tensor1d([0, 69, 70, 114, 5, 100], 'int32');
    const opts = { chunkRows: 32, entropy: true, weightGrad: false, temperature: 0.7 };
    const run = (w: tf.Tensor2D[]) =>
      tf.valueAndGrad((x: tf.Tensor) => {
        const r = chunkedTokenLogprobs(x as tf.Tensor2D, w, tokens, opts);
        return tf.sum(tf.add(r.logprobs, tf.mul(r.entropy!, 0.1))) as tf.Scalar;
      })(h);
    const a = run(packed);
    const b = run(plain);
    expect(relDiff(await a.value.data(), await b.value.data())).toBeLessThan(1e-5);
    expect(relDiff(await a.grad.data(), await b.grad.data())).toBeLessThan(1e-5);
    expect(() => chunkedTokenLogprobs(h, packed, tokens, { ...opts, weightGrad: true })).toThrow(
      /packed-f16 W block is frozen; weightGrad must be false/,
    );
    expect(() => chunkedTokenLogprobs(tf.zeros([N, 16]) as tf.Tensor2D, packed, tokens, opts)).toThrow(
      /W block of shape \[70,32\] for hidden size 16/,
    );
    tf.dispose([...packed, ...plain, h, tokens, a.value, a.grad, b.value, b.grad]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a packed head block at a decode step goes through the decode linear, and its values stay those of x·Wᵀ', async () => {
    const V = 300; // rows of the head block
    const C = 40;
    const wv = roundToF16(seeded(V * C, 6));
    const wp = tf.tensor2d(packF16(wv), [V, C / 2], 'int32');
    const w = tf.tensor2d(wv, [V, C]);
    // Both programs of the decode linear: the 64 × 64 tiles (a software adapter's default) and the few-rows
    // program that a hardware adapter runs at a decode step's rows.
    const restore = saveWebGpuLinearSmallRows();
    for (const few of [false, true])
      for (const N of [1, 3, F16_HEAD_DECODE_ROWS, F16_HEAD_DECODE_ROWS + 1]) {
        if (few) setWebGpuLinearSmallRows(64);
        const h = tf.tensor2d(seeded(N * C, 7 + N), [N, C]);
        const want = tf.matMul(h, w, false, true);
        // A generation's head (decodeLogits): the decode linear at up to F16_HEAD_DECODE_ROWS rows, f16LinearNT
        // above; anywhere else (scoring: no tape either) f16LinearNT at every size.
        const got = decodeLogits({ lmHead: (x) => headRowsLogits(x, wp) }, h);
        expect(relDiff(await got.data(), await want.data())).toBeLessThan(1e-6);
        const route = N <= F16_HEAD_DECODE_ROWS ? linearNtDecodeWebGpu(h, { w: [wp] }) : f16LinearNT(h, wp);
        expect(Array.from(await got.data())).toEqual(Array.from(await route.data()));
        const scored = headRowsLogits(h, wp);
        const nt = f16LinearNT(h, wp);
        expect(Array.from(await scored.data())).toEqual(Array.from(await nt.data()));
        tf.dispose([route, scored, nt]);
        // Under a tape (training): the differentiable kernel, whose gradient to the hidden states is W's.
        const g = tf.grad((x: tf.Tensor) => tf.sum(headRowsLogits(x as tf.Tensor2D, wp)))(h);
        const gw = tf.grad((x: tf.Tensor) => tf.sum(tf.matMul(x as tf.Tensor2D, w, false, true)))(h);
        expect(relDiff(await g.data(), await gw.data())).toBeLessThan(1e-6);
        tf.dispose([h, want, got, g, gw]);
      }
    restore();
    const o = { w: [wp] };
    expect(webGpuLinearNtDecodeApplies(tf.zeros([1, C]) as tf.Tensor2D, o)).toBe(true);
    tf.dispose([wp, w]);
    expect(await webGpuErrors()).toEqual([]);
  });
});

describe('f16 base on small Qwen2 / Qwen3 models (WebGPU, Node)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('stores the matrices packed (half the bytes), norms and biases f32', () => {
    const arrays = hostWeights(tinyQwen2, 3, 0.05, true);
    const f32 = Llama.fromArrays(tinyQwen2, arrays, false, 'a');
    const f16 = Llama.fromArrays(tinyQwen2, arrays, false, 'b', { baseDtype: 'f16' });
    let bytes32 = 0;
    let bytes16 = 0;
    let matrices32 = 0;
    for (const [name, v] of f16.params) {
      expect(v.dtype).toBe(isF16Matrix(name) ? 'int32' : 'float32');
      if (isF16Matrix(name)) {
        expect(v.shape).toEqual([f32.p(name).shape[0], f32.p(name).shape[1]! / 2]);
        matrices32 += f32.p(name).size * 4;
      }
      bytes16 += v.size * 4;
      bytes32 += f32.p(name).size * 4;
    }
    expect(bytes32 - bytes16).toBe(matrices32 / 2);
    f32.dispose();
    f16.dispose();
  });

  for (const [name, config, opts] of [
    ['qwen3 (tied head)', tinyQwen3, {}],
    ['qwen2 (biases, untied head)', tinyQwen2, {}],
    // 300 rows of 64 f32 in chunks of 64 rows: the packed gather and head over 5 chunks.
    ['qwen3, vocabulary in 5 chunks', tinyQwen3, { maxBindingBytes: 64 * 64 * 4 }],
  ] as const) {
    it(`${name}: f16-representable weights give the f32 base's log-probs, LoRA gradients and greedy tokens`, async () => {
      const r = await exactCheck(config, opts, 6);
      // Same numbers in both; only the order of f32 summation differs (the packed kernel's tiles vs tfjs's matMul).
      expect(r.logprobRel).toBeLessThan(1e-5);
      expect(r.gradRel).toBeLessThan(1e-4);
      expect(r.tokens16).toEqual(r.tokens32);
      expect(await webGpuErrors()).toEqual([]);
    });
  }

  it("a checkpoint's frozen base goes in as F16 (half the matrices' bytes) and loads back packed, word for word", async () => {
    const dir = await f16ExactFolder();
    const files = nodeFiles(dir);
    const { model: base } = await loadLM(files, { trainable: false, label: 'base', baseDtype: 'f16' });
    // Vocabulary in 2 chunks of 256 rows of 16 words: the embedding's F16 words come chunk by chunk.
    const { model: chunked } = await loadLM(files, {
      trainable: false,
      label: 'base',
      baseDtype: 'f16',
      maxBindingBytes: 256 * 32 * 4,
    });
    try {
      for (const m of [base, chunked]) {
        const half = await collectBytes(lmSafetensorsStream(m, { keepF16: true }));
        const full = await collectBytes(lmSafetensorsStream(m));
        const h = readSafetensors(half, 'half');
        const f = readSafetensors(full, 'full');
        let matrixBytes = 0;
        for (const [name, t] of f.tensors) {
          const packed = isF16Matrix(name.replace(/^model\./, ''));
          expect(h.tensors.get(name)!.dtype, name).toBe(packed ? 'F16' : 'F32');
          expect(t.dtype).toBe('F32');
          // The same values (F16 widened exactly on reading).
          expect(Array.from(h.tensors.get(name)!.data as Float32Array), name).toEqual(
            Array.from(t.data as Float32Array),
          );
          if (packed) matrixBytes += (t.data as Float32Array).length * 4;
        }
        expect(matrixBytes).toBeGreaterThan(0);
        // The data after the headers: the matrices in half their bytes, the rest the same.
        const data = (b: Uint8Array) =>
          b.length - 8 - new DataView(b.buffer, b.byteOffset).getUint32(0, true);
        expect(data(full) - data(half)).toBe(matrixBytes / 2);
        // Restore's route: the F16 file read into a packed base holds the same words.
        const read = new Map<string, Uint8Array>();
        for (const name of [
          'config.json',
          'tokenizer.json',
          'tokenizer_config.json',
          'generation_config.json',
        ]) {
          const b = await files.read(name);
          if (b) read.set(name, b);
        }
        read.set('ref_model.safetensors', half);
        const { model: back } = await loadLM(memoryFiles('ckpt', read), {
          trainable: false,
          label: 'base',
          baseDtype: 'f16',
          file: 'ref_model.safetensors',
          maxBindingBytes: m === chunked ? 256 * 32 * 4 : undefined,
        });
        try {
          const words = async (x: typeof m) =>
            Promise.all(x.lazyArrays().map(async (t) => Array.from(await t.data())));
          expect(await words(back)).toEqual(await words(m));
          for (const [name, v] of (back as Llama).params) {
            expect(v.dtype, name).toBe((m as Llama).params.get(name)!.dtype);
            expect(Array.from(await v.data()), name).toEqual(
              Array.from(await (m as Llama).params.get(name)!.data()),
            );
          }
        } finally {
          back.dispose();
        }
      }
      expect(await webGpuErrors()).toEqual([]);
    } finally {
      base.dispose();
      chunked.dispose();
    }
  });

  it('refuses f16 where it cannot apply, saying what would', () => {
    const arrays = hostWeights(tinyQwen3, 3, 0.05, true);
    expect(() => Llama.fromArrays(tinyQwen3, arrays, true, 'x', { baseDtype: 'f16' })).toThrow(
      /"baseDtype" "f16" is for the frozen base of a LoRA model.*set "lora" to a rank ≥ 1, or "baseDtype" to "f32"/,
    );
    expect(() => checkBaseDtype('f16', { trainable: false, family: 'qwen3', backend: 'wasm' })).toThrow(
      /backend is "wasm"; use the webgpu backend, or set "baseDtype" to "f32"/,
    );
    expect(() => checkBaseDtype('f16', { trainable: false, family: 'gpt2' })).toThrow(
      /Llama \/ Qwen2 \/ Qwen3 families, not GPT-2/,
    );
    expect(() => checkBaseDtype('f32', { trainable: true, family: 'gpt2', backend: 'cpu' })).not.toThrow();
  });
});
