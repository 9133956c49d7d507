/**
 * The f32 LM head at decode through the few-rows program (model/vocab-chunks.ts headRowsLogits with
 * setWebGpuHeadRows; docs/gpu.md, "The f32 LM head at decode") on Node WebGPU (SwiftShader), against tfjs's matMul:
 * - inside a generation's scope (decodeLogits) at up to 64 rows: one few-rows program (tf.profile's kernel names)
 *   whose logits are tfjs matMul's within 1e-5 relative; outside it (scoring, training), above 64 rows, or with the
 *   tape on (a backward needs the head's gradient), tfjs's matMul whatever the setting, its values to the bit;
 * - a replayed greedy generation (GPT-2, Qwen2, Qwen3) gives the same tokens and log-probs within 1e-5 either way,
 *   and its recorded step runs the few-rows program for the head where tfjs's matMul ran before (the replay's profile
 *   names the programs), with the same number of dispatches.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import type { CausalLM } from '../src/core/model/lm';
import { generate } from '../src/core/model/sampling';
import { decodeLogits, headRowsLogits } from '../src/core/model/vocab-chunks';
import { setDecodeReplay, setDecodeReplayProbe } from '../src/core/model/decode-replay';
import {
  LIN_NT,
  saveWebGpuLinearSmallRows,
  setWebGpuHeadRows,
  setWebGpuLinearColumns,
  setWebGpuLinearSmallRows,
} from '../src/core/kernels/webgpu-linear';
import { profileReplayFrame, type ReplayProfile } from '../src/core/kernels/webgpu-replay-profile';
import { relDiff, tinyGpt2, tinyQwen2, tinyQwen3 } from './helpers/f16-base';

const adapter = await webGpuAdapter();

describe('the f32 LM head at decode through the few-rows program on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  afterEach(() => {
    setWebGpuHeadRows(null);
  });

  it('in a generation: one few-rows dispatch, tfjs matMul’s logits within 1e-5; elsewhere tfjs’s matMul itself', async () => {
    /** The kernels a call runs (tf.profile), and its values. */
    const run = async (f: () => tf.Tensor) => {
      let out: tf.Tensor | null = null;
      const info = await tf.profile(() => {
        out = f();
        return out;
      });
      const t = out! as tf.Tensor;
      const values = await t.data();
      t.dispose();
      return { kernels: info.kernelNames, values };
    };
    for (const [C, V] of [
      [48, 300],
      [64, 1000],
    ]) {
      const w = tf.randomNormal([V, C], 0, 0.05, 'float32', 3) as tf.Tensor2D;
      const head = { lmHead: (h: tf.Tensor2D) => headRowsLogits(h, w) };
      for (const M of [1, 16, 64, 65]) {
        const h = tf.randomNormal([M, C], 0, 1, 'float32', 4 + M) as tf.Tensor2D;
        setWebGpuHeadRows(false);
        const plain = await run(() => decodeLogits(head, h));
        expect(plain.kernels).toEqual(['BatchMatMul']);
        setWebGpuHeadRows(true);
        const fewRows = await run(() => decodeLogits(head, h));
        const outside = await run(() => head.lmHead(h)); // scoring, training: not a generation
        expect(outside.kernels, `[${M}, ${C}]`).toEqual(['BatchMatMul']);
        expect(outside.values).toEqual(plain.values);
        if (M <= 64) {
          expect(fewRows.kernels, `[${M}, ${C}] · [${V}, ${C}]ᵀ`).toEqual([LIN_NT]);
          expect(fewRows.values.length).toBe(M * V);
          expect(relDiff(fewRows.values, plain.values)).toBeLessThanOrEqual(1e-5);
        } else {
          // Above a decode's rows: tfjs's matMul whatever the setting, the same values to the bit.
          expect(fewRows.kernels).toEqual(['BatchMatMul']);
          expect(fewRows.values).toEqual(plain.values);
        }
        h.dispose();
      }
      // A backward through the head (inside a generation's scope too): tfjs's matMul and its gradient.
      const h = tf.randomNormal([4, C], 0, 1, 'float32', 9) as tf.Tensor2D;
      const loss = (x: tf.Tensor) => tf.sum(tf.square(decodeLogits(head, x as tf.Tensor2D)));
      setWebGpuHeadRows(true);
      const g1 = tf.grads(loss)([h]);
      setWebGpuHeadRows(false);
      const g0 = tf.grads(loss)([h]);
      expect(await g1[0].data()).toEqual(await g0[0].data());
      tf.dispose([...g0, ...g1, h, w]);
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a replayed greedy generation: the same tokens, log-probs within 1e-5, the head on the few-rows program', async () => {
    const restore = saveWebGpuLinearSmallRows();
    // The few-rows route as a GPU takes it (SwiftShader's default sends few rows to the column program).
    setWebGpuLinearColumns(false);
    setWebGpuLinearSmallRows(64);
    setDecodeReplay(true);
    const models: [string, CausalLM][] = [
      ['gpt2', GPT2.random(tinyGpt2, 21)],
      ['qwen2', Llama.random(tinyQwen2, 22)],
      ['qwen3', Llama.random(tinyQwen3, 23)],
    ];
    try {
      for (const [name, m] of models) {
        const prompts = [
          [5, 6, 7],
          [8, 9, 10, 11],
        ];
        const run = async (on: boolean) => {
          const was = setWebGpuHeadRows(on);
          let p: ReplayProfile | null = null;
          setDecodeReplayProbe(async (frame) => {
            p = await profileReplayFrame(frame, { reps: 1 });
          });
          try {
            const r = await generate(m, prompts, {
              maxNewTokens: 4,
              temperature: 0,
              topK: 0,
              stopToken: null,
              padId: 0,
              rng: 1,
            });
            return { r, p: p! as ReplayProfile };
          } finally {
            setDecodeReplayProbe(null);
            setWebGpuHeadRows(was);
          }
        };
        const off = await run(false);
        const on = await run(true);
        expect(on.r.tokens, name).toEqual(off.r.tokens);
        const lpOff = off.r.logprobs.flat();
        const lpOn = on.r.logprobs.flat();
        for (let i = 0; i < lpOff.length; i++)
          expect(Math.abs(lpOn[i] - lpOff[i]), name).toBeLessThanOrEqual(1e-5);
        expect(on.p.dispatches, name).toBe(off.p.dispatches);
        const labels = (p: ReplayProfile) => p.byProgram.map((g) => g.label);
        // tfjs's matMul programs ran only for the head: gone with the setting on.
        expect(
          labels(off.p).some((l) => /^MatMul/.test(l)),
          `${name}: ${labels(off.p).join(', ')}`,
        ).toBe(true);
        expect(
          labels(on.p).some((l) => /^MatMul/.test(l)),
          `${name}: ${labels(on.p).join(', ')}`,
        ).toBe(false);
      }
    } finally {
      for (const [, m] of models) m.dispose();
      restore();
      setWebGpuLinearColumns(null);
    }
    expect(await webGpuErrors()).toEqual([]);
  }, 120_000);
});
