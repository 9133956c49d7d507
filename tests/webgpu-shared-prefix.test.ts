/**
 * A group's prompt run once (src/core/model/shared-prefix.ts) on Node WebGPU (Dawn; SwiftShader here), where the
 * attention is the fused kernels' and the linears the fused linear's: the compact rows' hidden states and LoRA
 * gradients equal the full layout's for GPT-2 and for Qwen3 with its base packed in f16 (with and without
 * recomputation); and GRPO steps with the update recorded and replayed give the same tokens, log-probs, metrics and
 * gradients with the share as without it, the share's index maps among the recording's inputs.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { hostWeights, liven, relDiff, tinyGpt2, tinyQwen3 } from './helpers/f16-base';
import { sharedPrefixBatch, trunkBothWays } from './helpers/shared-prefix';
import { makeTinyFolder } from './helpers/tiny';
import { meanByteReward, tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { prefixShare } from '../src/core/model/shared-prefix';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { LoraAdapters } from '../src/core/model/lora';
import { buildTrainer } from '../src/core/ppo/setup';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import type { CausalLM } from '../src/core/model/lm';

const adapter = await webGpuAdapter();

describe('shared prefix on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  let dir = '';
  beforeAll(async () => {
    await useNodeWebGpu();
    registerFusedAdamKernels();
    dir = await makeTinyFolder();
  });

  it('GPT-2 and Qwen3 (f16 base) under LoRA: the compact rows equal the full layout', async () => {
    const qa = LoraAdapters.create(tinyQwen3, { lora: 4 }, 5);
    const ga = LoraAdapters.create(tinyGpt2, { lora: 4 }, 5);
    liven(qa);
    liven(ga);
    const qwen = Llama.fromArrays(tinyQwen3, hostWeights(tinyQwen3, 9, 0.08, true), false, 'spq3', {
      baseDtype: 'f16',
    });
    const gpt2 = GPT2.random(tinyGpt2, 3, false, 'spg2');
    try {
      for (const [name, m, a] of [
        ['Qwen3', qwen.withLora(qa), qa],
        ['GPT-2', gpt2.withLora(ga), ga],
      ] as [string, CausalLM, LoraAdapters][]) {
        const batch = sharedPrefixBatch(m.config.vocab_size);
        const share = prefixShare(batch.ids, batch.attn, batch.n, batch.T, batch.Tq)!;
        for (const rc of [false, true]) {
          const [full, shared] = await trunkBothWays(m, a.variables(), batch, share, rc);
          expect(relDiff(shared.hidden, full.hidden), `${name}: hidden`).toBeLessThan(1e-5);
          full.grads.forEach((g, i) => {
            expect(
              g.some((v) => v !== 0),
              `${name}: gradient ${i} not all zero`,
            ).toBe(true);
            expect(relDiff(shared.grads[i], g), `${name}, recompute ${rc}: LoRA gradient ${i}`).toBeLessThan(
              1e-5,
            );
          });
        }
      }
    } finally {
      qa.dispose();
      ga.dispose();
      qwen.dispose();
      gpt2.dispose();
    }
    expect(await webGpuErrors()).toEqual([]);
  }, 300_000);

  it('GRPO with the update replayed: the same steps with and without the share', async () => {
    const runs = [];
    for (const shared of [false, true]) {
      const t = await buildTrainer(
        tinyConfig({
          algorithm: 'grpo',
          lora: 4,
          loraAlpha: 8,
          klCoef: 0.05,
          learningRate: 1e-2,
          prompts: ['Hello', 'The day was'],
          batchSize: 4,
          groupSize: 2,
          miniBatches: 1,
          ppoEpochs: 1,
          responseLength: 6,
        }),
        tinyResources(() => dir),
        meanByteReward,
      );
      t.sharedPrefix = shared;
      const grads: Float32Array[][] = [];
      const opt = t.policyOpt as unknown as { applyScaled: (g: unknown, scale: number) => void };
      const apply = opt.applyScaled.bind(opt);
      opt.applyScaled = (g, scale) => {
        const list = Object.entries(g as tf.NamedTensorMap).sort(([a], [b]) => (a < b ? -1 : 1));
        grads.push(list.map(([, x]) => (x.dataSync() as Float32Array).map((v) => v * scale)));
        apply(g, scale);
      };
      const steps = [];
      for (let s = 0; s < 2; s++) steps.push(await t.trainStep());
      runs.push({ steps, grads, replayed: t.gradReplays.replayed });
      t.disposeAll();
    }
    const [off, on] = runs;
    expect(on.replayed).toBeGreaterThan(0);
    expect(off.replayed).toBeGreaterThan(0);
    on.steps.forEach((s, i) => {
      const o = off.steps[i];
      expect(s.rollout.responses).toEqual(o.rollout.responses);
      expect(relDiff(s.rollout.logprobs.flat(), o.rollout.logprobs.flat())).toBeLessThan(1e-5);
      for (const k of ['policyLoss', 'kl', 'entropy', 'gradNorm', 'reward'] as const) {
        const x = o.metrics[k]!;
        expect(Math.abs(s.metrics[k]! - x), `${k} at step ${i}`).toBeLessThanOrEqual(
          1e-5 * Math.max(1, Math.abs(x)),
        );
      }
    });
    on.grads.forEach((step, s) =>
      step.forEach((g, i) =>
        expect(relDiff(g, off.grads[s][i]), `gradient ${i} at update ${s}`).toBeLessThan(1e-5),
      ),
    );
    expect(await webGpuErrors()).toEqual([]);
  }, 300_000);
});
