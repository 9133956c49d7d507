/**
 * A group's prompt run once (src/core/model/shared-prefix.ts) on Node WebGPU (Dawn; SwiftShader here), where the
 * attention is the fused kernels' and the linears the fused linear's: the compact rows' hidden states and LoRA
 * gradients equal the full layout's for GPT-2 and for Qwen3 with its base packed in f16 (with and without
 * recomputation); and GRPO steps with the update recorded and replayed give the same tokens, log-probs, metrics and
 * gradients with the share as without it, the share's index maps among the recording's inputs; a replayed
 * generation whose prefill runs once per distinct prompt gives the tokens and log-probs it gives without.
 */
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { hostWeights, liven, relDiff, tinyGpt2, tinyQwen3 } from './helpers/f16-base';
import {
  capturePolicyGrads,
  expectSameGrads,
  sharedPrefixBatch,
  trunkBothWays,
} from './helpers/shared-prefix';
import { makeTinyFolder } from './helpers/tiny';
import { meanByteReward, tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { prefixShare } from '../src/core/model/shared-prefix';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { LoraAdapters } from '../src/core/model/lora';
import { buildTrainer } from '../src/core/ppo/setup';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import type { CausalLM } from '../src/core/model/lm';
import { generate } from '../src/core/model/sampling';
import { decodeReplayCount } from '../src/core/model/decode-replay';
import { Rng } from '../src/core/base/rng';

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

  it('a replayed generation with its prefill shared: the same tokens and log-probs (Qwen3 f16, GPT-2)', async () => {
    const qa = LoraAdapters.create(tinyQwen3, { lora: 4 }, 5);
    const ga = LoraAdapters.create(tinyGpt2, { lora: 4 }, 5);
    liven(qa);
    liven(ga);
    const qwen = Llama.fromArrays(tinyQwen3, hostWeights(tinyQwen3, 9, 0.08, true), false, 'spfq3', {
      baseDtype: 'f16',
    });
    const gpt2 = GPT2.random(tinyGpt2, 3, false, 'spfg2');
    try {
      for (const [name, m] of [
        ['Qwen3', qwen.withLora(qa)],
        ['GPT-2', gpt2.withLora(ga)],
      ] as [string, CausalLM][]) {
        const a = [3, 9, 4, 1, 7];
        const b = [8, 2, 6];
        const prompts = [a, b, a, a, b, b];
        for (const temperature of [0, 1]) {
          const runs = [];
          for (const share of [true, false]) {
            const trunk = vi.spyOn(m, 'trunk');
            const replays = decodeReplayCount();
            runs.push(
              await generate(m, prompts, {
                maxNewTokens: 6,
                temperature,
                padId: 0,
                rng: prompts.map((_, i) => new Rng(40 + i)),
                sharePrompts: share,
              }),
            );
            expect(decodeReplayCount(), `${name}: replayed`).toBeGreaterThan(replays);
            expect(trunk.mock.calls.map((c) => c[0].shape)).toEqual([[share ? 2 : 6, 5]]);
            trunk.mockRestore();
          }
          const [on, off] = runs;
          expect(on.tokens, `${name}, temperature ${temperature}: tokens`).toEqual(off.tokens);
          expect(relDiff(on.logprobs.flat(), off.logprobs.flat())).toBeLessThan(1e-5);
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

  it.each([
    ['one minibatch', { batchSize: 4, groupSize: 2, miniBatches: 1 }],
    // Minibatches of 4 random rows of 2 groups of 4: 1 or 2 groups of 1–4 rows each, padded to one shape.
    ['two minibatches', { batchSize: 8, groupSize: 4, miniBatches: 2 }],
  ] as const)(
    'GRPO with the update replayed, %s: the same steps with and without the share',
    async (_n, over) => {
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
            ppoEpochs: 1,
            responseLength: 6,
            ...over,
          }),
          tinyResources(() => dir),
          meanByteReward,
        );
        t.sharedPrefix = shared;
        // The policy's forwards over the compact rows (responseHidden passes the share to the trunk): the runs
        // compared must really differ in taking the share.
        const trunk = vi.spyOn(t.models.policy, 'trunk');
        const capture = capturePolicyGrads(t);
        const steps = [];
        for (let s = 0; s < 2; s++) {
          steps.push(await t.trainStep());
          await capture.flush();
        }
        const sharedForwards = trunk.mock.calls.filter((c) => c[3]?.share).length;
        trunk.mockRestore();
        runs.push({
          steps,
          sharedForwards,
          grads: capture.updates,
          recorded: t.gradReplays.recorded,
          replayed: t.gradReplays.replayed,
        });
        t.disposeAll();
      }
      const [off, on] = runs;
      expect(off.sharedForwards).toBe(0);
      expect(on.sharedForwards).toBeGreaterThan(0);
      // One recording for every minibatch of both steps: the padded share keeps one shape.
      const minibatches = 2 * over.miniBatches;
      for (const r of [off, on]) {
        expect(r.recorded).toBe(1);
        expect(r.replayed).toBe(minibatches - 1);
      }
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
      expect(on.grads.length).toBe(minibatches);
      // The first update, on the same weights (after an Adam step the runs' weights differ in the last bits, which
      // Adam's first steps magnify where a gradient is rounding noise: later gradients are not compared).
      const first = 1;
      expectSameGrads(on.grads.slice(0, first), off.grads.slice(0, first), 1e-5, (ok, what) =>
        expect(ok, what).toBe(true),
      );
      expect(await webGpuErrors()).toEqual([]);
    },
    300_000,
  );
});
