/**
 * The decode's slot writes in place (src/core/kernels/webgpu-inplace.ts; webgpu-gqa-decode.ts gqaDecodeQkvWebGpu
 * and webgpu-decode-attention.ts decodeAttentionWebGpu with `inPlace`): the new key and value written into the
 * cache tensors' own buffers, only the slot's rows, instead of two programs that copy both whole caches — by the
 * attention's own dispatch (default), or by one dispatch for both before it (setKvWriteInAttention(false)). On Node
 * WebGPU (SwiftShader, whose adapter offers 12 storage buffers a program: Qwen2's attention binds 10):
 * - Llama, Qwen2 (q/k/v biases), Qwen3 (q_norm / k_norm) and GPT-2: the attention's output and the new caches
 *   equal, to the bit, the copying programs' on the same inputs; 1 or 2 dispatches instead of 3; the given caches
 *   now hold the new values and the returned ones share their data; nothing left behind;
 * - a cache whose data another tensor shares (a clone) is not written: the copying programs run, and the clone
 *   keeps the old values; setKvWriteInPlace(false) turns it off;
 * - a replayed generation (model/decode-replay.ts) of a Qwen3 and of a GPT-2 carries the caches without copies: per
 *   replayed token the buffer copies are the logits and the two accumulators' rows, not 2 per layer more; one
 *   dispatch a layer fewer with the attention's writes than with the writes apart; the same tokens throughout.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import {
  freshAttentionBuffers,
  gqaDecodeQkvWebGpu,
  type DecodeQkv,
} from '../src/core/kernels/webgpu-gqa-decode';
import {
  kvWriteInPlaceApplies,
  runProgramInPlace,
  setKvWriteInAttention,
  setKvWriteInPlace,
} from '../src/core/kernels/webgpu-inplace';
import { capStorageBuffersPerProgram, storageBuffersPerProgram } from '../src/core/kernels/webgpu-common';
import { decodeAttentionWebGpu } from '../src/core/kernels/webgpu-decode-attention';
import { Llama, ropeTable } from '../src/core/model/llama';
import { generate } from '../src/core/model/sampling';
import {
  lastDecodeReplayStats,
  setDecodeReplay,
  setDecodeReplayFusedChoice,
} from '../src/core/model/decode-replay';
import { ReplayFrame } from '../src/core/kernels/webgpu-replay';
import { GPT2 } from '../src/core/model/gpt2';
import { hostWeights, maxAbsDiff, tinyGpt2, tinyQwen3 } from './helpers/f16-base';

const adapter = await webGpuAdapter();

describe('in-place KV slot writes of the Llama/Qwen decode on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  const B = 3;
  const nh = 4;
  const nkv = 2;
  const hs = 16;
  const S = 20;
  const slot = 13;

  /** A decode layer's inputs: q|k|v, biases, norms, caches filled below the slot, the one-hot, mask, cos / sin. */
  function inputs() {
    const table = ropeTable(10000, hs, 64);
    const positions = [13, 12, 40];
    return tf.tidy(() => {
      const below = tf.reshape(tf.cast(tf.less(tf.range(0, S, 1, 'int32'), slot), 'float32'), [1, 1, S, 1]);
      return {
        qkv: tf.mul(tf.randomNormal([B, (nh + 2 * nkv) * hs], 0, 1, 'float32', 1), 2) as tf.Tensor2D,
        bq: tf.randomNormal([nh * hs], 0, 0.5, 'float32', 2) as tf.Tensor1D,
        bk: tf.randomNormal([nkv * hs], 0, 0.5, 'float32', 3) as tf.Tensor1D,
        bv: tf.randomNormal([nkv * hs], 0, 0.5, 'float32', 4) as tf.Tensor1D,
        nq: tf.randomNormal([hs], 1, 0.3, 'float32', 5) as tf.Tensor1D,
        nk: tf.randomNormal([hs], 1, 0.3, 'float32', 6) as tf.Tensor1D,
        k: tf.mul(tf.randomNormal([B, nkv, S, hs], 0, 1, 'float32', 7), below) as tf.Tensor4D,
        v: tf.mul(tf.randomNormal([B, nkv, S, hs], 0, 1, 'float32', 8), below) as tf.Tensor4D,
        oh: tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([slot], 'int32'), S), [S]), 'float32'),
        mask: tf.tensor2d(
          Array.from({ length: B * S }, (_, i) => (i % S > slot || (i < S && i % S < 2) ? 0 : 1)),
          [B, S],
        ) as tf.Tensor2D,
        cos: tf.tensor2d(
          positions.flatMap((p) => Array.from(table.cos.subarray(p * hs, (p + 1) * hs))),
          [B, hs],
        ),
        sin: tf.tensor2d(
          positions.flatMap((p) => Array.from(table.sin.subarray(p * hs, (p + 1) * hs))),
          [B, hs],
        ),
      };
    });
  }

  for (const [what, withBias, withNorm] of [
    ['Llama', false, false],
    ['Qwen2 (q/k/v biases)', true, false],
    ['Qwen3 (q_norm / k_norm)', false, true],
  ] as const)
    for (const inAttention of [false, true])
      it(`${what}, ${inAttention ? 'written by the attention: 1 dispatch' : 'both writes apart: 2 dispatches'}; the copying programs' values to the bit, the given caches written`, async () => {
        const buffers = freshAttentionBuffers({ bias: withBias, norm: withNorm });
        // The attention's writes need the adapter's storage buffers above 8 for Qwen2 and Qwen3 (SwiftShader: 12).
        expect(storageBuffersPerProgram()).toBeGreaterThanOrEqual(buffers);
        const wasInAttention = setKvWriteInAttention(inAttention);
        const t = inputs();
        const src: DecodeQkv = {
          qkv: t.qkv,
          bias: withBias ? { q: t.bq, k: t.bk, v: t.bv } : null,
          norm: withNorm ? { q: t.nq, k: t.nk, eps: 1e-6 } : null,
        };
        const args = [{ cos: t.cos, sin: t.sin }, t.oh, t.mask] as const;
        // The copying programs on copies of the caches (their own data: tf.clone would share it).
        const copyK = tf.add(t.k, 0) as tf.Tensor4D;
        const copyV = tf.add(t.v, 0) as tf.Tensor4D;
        const ref = gqaDecodeQkvWebGpu(src, ...args, { k: copyK, v: copyV }, nh);
        const [refY, refK, refV] = await Promise.all([ref.y.data(), ref.kv.k.data(), ref.kv.v.data()]);
        const oldK = await t.k.data();
        const kv = { k: t.k, v: t.v };
        expect(kvWriteInPlaceApplies(kv)).toBe(true);
        const before = tf.memory().numTensors;
        const counted = await countDispatches(() =>
          gqaDecodeQkvWebGpu(src, ...args, kv, nh, { inPlace: true }),
        );
        const out = counted.result;
        setKvWriteInAttention(wasInAttention);
        expect(counted.dispatches).toBe(inAttention ? 1 : 2);
        // The returned caches share the given ones' data (clones); the given ones hold the new values.
        expect(out.kv.k.dataId).toBe(t.k.dataId);
        expect(out.kv.v.dataId).toBe(t.v.dataId);
        // Equal values (the copying program writes the masked rows' −0 as +0: compared as numbers, not by Object.is).
        expect(maxAbsDiff(await out.y.data(), refY)).toBe(0);
        expect(maxAbsDiff(await t.k.data(), refK)).toBe(0);
        expect(maxAbsDiff(await t.v.data(), refV)).toBe(0);
        // Only the slot's rows changed, and they did.
        let changedOff = 0;
        let changedAt = 0;
        const nowK = await t.k.data();
        for (let i = 0; i < nowK.length; i++)
          if (nowK[i] !== oldK[i]) {
            if (Math.floor(i / hs) % S === slot) changedAt++;
            else changedOff++;
          }
        expect(changedOff).toBe(0);
        expect(changedAt).toBeGreaterThan(B * nkv * hs * 0.9);
        tf.dispose([out.y, out.kv.k, out.kv.v]);
        expect(tf.memory().numTensors).toBe(before);
        tf.dispose([copyK, copyV, ref.y, ref.kv.k, ref.kv.v, ...Object.values(t)]);
        expect(await webGpuErrors()).toEqual([]);
      });

  for (const inAttention of [false, true])
    it(`GPT-2's decode attention, ${inAttention ? 'written by the attention: 1 dispatch' : 'both writes apart: 2 dispatches'}; the copying programs' values to the bit`, async () => {
      const gnh = 4;
      const C = gnh * hs;
      const t = inputs();
      const g = tf.tidy(() => {
        const below = tf.reshape(tf.cast(tf.less(tf.range(0, S, 1, 'int32'), slot), 'float32'), [1, 1, S, 1]);
        return {
          qkv: tf.randomNormal([B, 3 * C], 0, 1, 'float32', 11) as tf.Tensor2D,
          k: tf.mul(tf.randomNormal([B, gnh, S, hs], 0, 1, 'float32', 12), below) as tf.Tensor4D,
          v: tf.mul(tf.randomNormal([B, gnh, S, hs], 0, 1, 'float32', 13), below) as tf.Tensor4D,
        };
      });
      const copyK = tf.add(g.k, 0) as tf.Tensor4D;
      const copyV = tf.add(g.v, 0) as tf.Tensor4D;
      const ref = decodeAttentionWebGpu(g.qkv, t.oh, t.mask, { k: copyK, v: copyV }, gnh);
      const [refY, refK, refV] = await Promise.all([ref.y.data(), ref.kv.k.data(), ref.kv.v.data()]);
      const oldV = await g.v.data();
      const was = setKvWriteInAttention(inAttention);
      const counted = await countDispatches(() =>
        decodeAttentionWebGpu(g.qkv, t.oh, t.mask, { k: g.k, v: g.v }, gnh, { inPlace: true }),
      ).finally(() => setKvWriteInAttention(was));
      const out = counted.result;
      expect(counted.dispatches).toBe(inAttention ? 1 : 2);
      expect(out.kv.k.dataId).toBe(g.k.dataId);
      expect(out.kv.v.dataId).toBe(g.v.dataId);
      expect(maxAbsDiff(await out.y.data(), refY)).toBe(0);
      expect(maxAbsDiff(await g.k.data(), refK)).toBe(0);
      const nowV = await g.v.data();
      expect(maxAbsDiff(nowV, refV)).toBe(0);
      let changedOff = 0;
      for (let i = 0; i < nowV.length; i++)
        if (nowV[i] !== oldV[i] && Math.floor(i / hs) % S !== slot) changedOff++;
      expect(changedOff).toBe(0);
      tf.dispose([out.y, out.kv.k, out.kv.v, copyK, copyV, ref.y, ref.kv.k, ref.kv.v]);
      tf.dispose([...Object.values(g), ...Object.values(t)]);
      expect(await webGpuErrors()).toEqual([]);
    });

  it("the attention writes the slot where the device's storage buffers allow: Llama's binds 7, Qwen3's 9, Qwen2's 10 (Chromium's SwiftShader offers 10)", async () => {
    const capWas = capStorageBuffersPerProgram(8);
    try {
      for (const [cap, kind, want] of [
        [8, 'none', 1],
        [8, 'norm', 2],
        [9, 'norm', 1],
        [9, 'bias', 2],
        [10, 'bias', 1],
      ] as const) {
        capStorageBuffersPerProgram(cap);
        const t = inputs();
        const src: DecodeQkv = {
          qkv: t.qkv,
          bias: kind === 'bias' ? { q: t.bq, k: t.bk, v: t.bv } : null,
          norm: kind === 'norm' ? { q: t.nq, k: t.nk, eps: 1e-6 } : null,
        };
        const cs = tf.concat([t.cos, t.sin], 1);
        const counted = await countDispatches(() =>
          gqaDecodeQkvWebGpu(src, { cs }, t.oh, t.mask, { k: t.k, v: t.v }, nh, { inPlace: true }),
        );
        expect(counted.dispatches, `${kind} at ${cap}`).toBe(want);
        tf.dispose([counted.result.y, counted.result.kv.k, counted.result.kv.v, cs, ...Object.values(t)]);
      }
    } finally {
      capStorageBuffersPerProgram(capWas);
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it('the replayed token is chosen in one dispatch, stopped rows masked in it: the separate ops’ tokens and log-probs to the bit', async () => {
    const m = GPT2.random(tinyGpt2, 5);
    const prompts = [
      [5, 6, 7],
      [8, 9, 10, 11],
    ];
    try {
      setDecodeReplay(true);
      const run = async (fused: boolean, stopToken: number | null, temperature: number) => {
        const was = setDecodeReplayFusedChoice(fused);
        try {
          const r = await generate(m, prompts, {
            maxNewTokens: 8,
            temperature,
            topK: temperature ? 20 : 0,
            stopToken,
            padId: 0,
            rng: 3,
          });
          return { r, dispatches: lastDecodeReplayStats().dispatchesPerReplay };
        } finally {
          setDecodeReplayFusedChoice(was);
        }
      };
      for (const temperature of [0, 1]) {
        const free = await run(true, null, temperature);
        // The separate ops: the kernel, two column slices and a cast (3 more; sampling slices the kept set's
        // log-prob too, 4); with a stop id, the masking: the
        // stopped rows cast to bool, a fill, two selects, an equal and a logicalOr (6 more; tfjs casts bool back
        // to int32 without a dispatch).
        const freeOps = await run(false, null, temperature);
        const ops = temperature ? 4 : 3;
        expect(freeOps.dispatches - free.dispatches).toBe(ops);
        expect(freeOps.r).toEqual(free.r);
        // A stop id row 0 takes by its third token (row 1 goes on unless it takes it too): the rows' stops and pads.
        const stopId = free.r.tokens[0][2];
        const stopped = await run(true, stopId, temperature);
        const stoppedOps = await run(false, stopId, temperature);
        expect(stopped.dispatches).toBe(free.dispatches);
        expect(stoppedOps.dispatches - free.dispatches).toBe(ops + 6);
        expect(stopped.r).toEqual(stoppedOps.r);
        expect(stopped.r.tokens[0]).toEqual(free.r.tokens[0].slice(0, free.r.tokens[0].indexOf(stopId) + 1));
        // The unrecorded path agrees (tokens; log-probs within float rounding of its own ops).
        setDecodeReplay(false);
        const plain = await generate(m, prompts, {
          maxNewTokens: 8,
          temperature,
          topK: temperature ? 20 : 0,
          stopToken: stopId,
          padId: 0,
          rng: 3,
        });
        setDecodeReplay(true);
        expect(plain.tokens).toEqual(stopped.r.tokens);
        for (let b = 0; b < 2; b++)
          expect(maxAbsDiff(plain.logprobs[b], stopped.r.logprobs[b])).toBeLessThan(1e-5);
      }
    } finally {
      setDecodeReplay(true);
      m.dispose();
    }
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000); // 2–3 s alone; over 30 s (the fast tier's default) twice beside other SwiftShader files

  it('runProgramInPlace refuses, before compiling anything, a shader that does not declare an input as expected', async () => {
    class NoSuchInput {
      readonly variableNames = ['X'];
      readonly outputShape = [4];
      readonly shaderKey = 'zzInPlaceRefusal';
      readonly dispatchLayout = { x: [0] };
      readonly dispatch: [number, number, number] = [1, 1, 1];
      readonly workgroupSize: [number, number, number] = [64, 1, 1];
      getUserCode(): string {
        return 'fn main(index : i32) { if (index < 4) { result[index] = X[index]; } }';
      }
    }
    const out = tf.zeros([4]);
    const x = tf.ones([4]);
    const cache = (tf.backend() as unknown as { pipelineCache: Record<string, unknown> }).pipelineCache;
    const before = Object.keys(cache).length;
    // 'Y' is no input of the program: tfjs's shader has no declaration of it to make read_write.
    for (let i = 0; i < 2; i++)
      expect(() => runProgramInPlace(new NoSuchInput(), out, [x], [], ['Y'])).toThrow(
        /did not declare Y as expected/,
      );
    expect(Object.keys(cache).length).toBe(before);
    expect(Array.from(await out.data())).toEqual([0, 0, 0, 0]);
    tf.dispose([out, x]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a cache whose data is shared is not written in place; the switch turns it off', async () => {
    const t = inputs();
    const src: DecodeQkv = { qkv: t.qkv, bias: null, norm: null };
    const args = [{ cos: t.cos, sin: t.sin }, t.oh, t.mask] as const;
    const shared = tf.clone(t.k); // shares t.k's data
    const oldK = await t.k.data();
    const kv = { k: t.k, v: t.v };
    expect(kvWriteInPlaceApplies(kv)).toBe(false);
    const counted = await countDispatches(() => gqaDecodeQkvWebGpu(src, ...args, kv, nh, { inPlace: true }));
    expect(counted.dispatches).toBe(3);
    expect(counted.result.kv.k.dataId).not.toBe(t.k.dataId);
    expect(Array.from(await shared.data())).toEqual(Array.from(oldK));
    tf.dispose([counted.result.y, counted.result.kv.k, counted.result.kv.v, shared]);
    // Alone again: in place, unless switched off.
    expect(kvWriteInPlaceApplies(kv)).toBe(true);
    const was = setKvWriteInPlace(false);
    try {
      expect(kvWriteInPlaceApplies(kv)).toBe(false);
    } finally {
      setKvWriteInPlace(was);
    }
    tf.dispose(Object.values(t));
    expect(await webGpuErrors()).toEqual([]);
  });

  for (const family of ['Qwen3', 'GPT-2'] as const)
    it(`${family}: a replayed generation carries the caches without buffer copies, the attention writing them; the tokens are the copying path's`, async () => {
      const m =
        family === 'GPT-2'
          ? GPT2.random(tinyGpt2, 5)
          : Llama.fromArrays(tinyQwen3, hostWeights(tinyQwen3, 9, 0.08, true), false, 'kvin');
      const L = family === 'GPT-2' ? tinyGpt2.n_layer : tinyQwen3.num_hidden_layers;
      // Buffer copies encoded by the replays themselves (tfjs's own copies, readbacks among them, not counted).
      const proto = (globalThis as unknown as { GPUCommandEncoder: { prototype: Record<string, unknown> } })
        .GPUCommandEncoder.prototype;
      const copy = proto.copyBufferToBuffer as (...a: unknown[]) => unknown;
      const replay = ReplayFrame.prototype.replay;
      let inReplay = false;
      let copies = 0;
      proto.copyBufferToBuffer = function (this: unknown, ...a: unknown[]) {
        if (inReplay) copies++;
        return copy.apply(this, a);
      };
      ReplayFrame.prototype.replay = function (this: ReplayFrame, ...a: Parameters<ReplayFrame['replay']>) {
        inReplay = true;
        try {
          return replay.apply(this, a);
        } finally {
          inReplay = false;
        }
      };
      const run = async (n: number, inPlace: boolean, inAttention = true) => {
        const was = setKvWriteInPlace(inPlace);
        const wasA = setKvWriteInAttention(inAttention);
        copies = 0;
        try {
          const r = await generate(
            m,
            [
              [5, 6, 7],
              [8, 9, 10],
            ],
            {
              maxNewTokens: n,
              temperature: 0,
              stopToken: null,
              padId: 0,
              rng: 3,
            },
          );
          expect(lastDecodeReplayStats().replays).toBe(n - 2); // the first token records, the last only chooses
          return { r, copies, dispatches: lastDecodeReplayStats().dispatchesPerReplay };
        } finally {
          setKvWriteInPlace(was);
          setKvWriteInAttention(wasA);
        }
      };
      try {
        setDecodeReplay(true);
        // Copies per replayed token: 14 tokens, 12 of them replays.
        const perToken = async (inPlace: boolean, inAttention = true) => {
          const b = await run(14, inPlace, inAttention);
          return { copies: b.copies / 12, r: b.r, dispatches: b.dispatches };
        };
        const inPlace = await perToken(true);
        const apart = await perToken(true, false);
        const copying = await perToken(false);
        // The attention's own slot writes: one dispatch less per layer than the pair of writes apart, two less
        // than the copying programs; the same tokens and log-probs.
        expect(apart.dispatches - inPlace.dispatches).toBe(L);
        expect(copying.dispatches - inPlace.dispatches).toBe(2 * L);
        expect(apart.copies).toBe(3);
        expect(inPlace.r.tokens).toEqual(apart.r.tokens);
        for (let b = 0; b < 2; b++)
          for (let i = 0; i < 14; i++)
            expect(Math.abs(inPlace.r.logprobs[b][i] - apart.r.logprobs[b][i])).toBeLessThan(1e-6);
        console.log(
          `buffer copies per replayed token: in place ${inPlace.copies}, copying ${copying.copies} (${L} layers)`,
        );
        // The next step's token ids and the token's and its log-prob's accumulator rows: 3 (without a stop token no
        // row stops: the stopped rows are not carried); copying, 2 per layer more.
        expect(inPlace.copies).toBe(3);
        expect(copying.copies).toBe(3 + 2 * L);
        expect(inPlace.r.tokens).toEqual(copying.r.tokens);
        for (let b = 0; b < 2; b++)
          for (let i = 0; i < 14; i++)
            expect(Math.abs(inPlace.r.logprobs[b][i] - copying.r.logprobs[b][i])).toBeLessThan(1e-6);
      } finally {
        proto.copyBufferToBuffer = copy;
        ReplayFrame.prototype.replay = replay;
        m.dispose();
      }
      expect(await webGpuErrors()).toEqual([]);
    }, 120_000);
});
