/**
 * src/core/model/size.ts: parameter counts exactly as the built models hold them, and the run's memory estimate
 * against the peak of live tensor bytes (tf.memory().numBytes, the peak of a whole PPO step measured by
 * tf.profile, as src/bench/perf/memory.ts measures it) on the CPU backend, for shapes the activation constants
 * were not fitted on.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { validateConfig } from '../src/core/config';
import { parseGPT2Config, type GPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { ScalarModel } from '../src/core/model/heads';
import { LoraAdapters, LORA_TARGETS } from '../src/core/model/lora';
import { PpoTrainer, bucket, type RewardSource } from '../src/core/ppo/trainer';
import { tokenizerFor } from '../src/core/tokenizer';
import {
  estimateRunMemory,
  formatEstimate,
  loraParamCount,
  paramCount,
  scalarParamCount,
  type RunMemoryOptions,
} from '../src/core/model/size';

const bytesShape = (L: number, C: number, H: number): GPT2Config =>
  parseGPT2Config({
    vocab_size: 258,
    n_positions: 64,
    n_embd: C,
    n_layer: L,
    n_head: H,
    tokenizer: 'bytes',
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });
const gpt2 = parseGPT2Config({ vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12 });
const sizeOf = (vars: tf.Variable[]): number => vars.reduce((n, v) => n + v.size, 0);

beforeAll(useCpu);

describe('parameter counts', () => {
  it('GPT-2 124M: 124,439,808 with the tied head, the plain formula V·C + P·C + L·(12C² + 13C) + 2C', () => {
    const { vocab_size: V, n_positions: P, n_embd: C, n_layer: L } = gpt2;
    expect(V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C).toBe(124_439_808);
    expect(paramCount(gpt2)).toBe(124_439_808);
    expect(scalarParamCount(gpt2)).toBe(124_439_808 + 768);
  });

  it('equals the variables of built models (LM, scalar model, LoRA adapters)', () => {
    const c = bytesShape(3, 24, 3);
    const lm = GPT2.random(c, 1);
    const scalar = ScalarModel.random(c, 2);
    const lora = LoraAdapters.create(c, { lora: 4, loraTargets: ['c_attn', 'mlp.c_proj'] }, 3);
    try {
      expect(paramCount(c)).toBe(sizeOf(lm.trainableVariables()));
      expect(scalarParamCount(c)).toBe(sizeOf(scalar.trainableVariables()));
      // A [r, in] + B [out, r] per module: c_attn (24 → 72), mlp.c_proj (96 → 24), 3 blocks.
      expect(loraParamCount(c, { r: 4, targets: ['c_attn', 'mlp.c_proj'] })).toBe(
        3 * 4 * (24 + 72 + 96 + 24),
      );
      let adapterVars = 0;
      for (const m of lora.modules.values()) adapterVars += m.a.size + m.b.size;
      expect(loraParamCount(c, { r: 4, targets: ['c_attn', 'mlp.c_proj'] })).toBe(adapterVars);
    } finally {
      lm.dispose();
      scalar.dispose();
      lora.dispose();
    }
  });
});

describe('the run estimate', () => {
  it('GPT-2 124M full copies, batch 4, responseLength 8: the parts, hand-worked', () => {
    const run = { batchSize: 4, miniBatches: 1, promptLength: 8, responseLength: 8 };
    const e = estimateRunMemory(gpt2, run, { valueModel: 'separate', rewardModel: false });
    const P = 124_439_808;
    const S = P + 768;
    expect(e.parts.base).toBe(4 * P);
    expect(e.parts.reference).toBe(4 * P);
    expect(e.parts.value).toBe(4 * S);
    expect(e.parts.rewardModel).toBe(0);
    expect(e.parts.adapters).toBe(0);
    expect(e.parts.adam).toBe(4 * 2 * (P + S));
    expect(e.parts.gradients).toBe(4 * (P + S));
    expect(e.trainableParams).toBe(P + S);
    expect(e.peakPhase).toBe('update');
    // Update: 3 forwards kept over 4 × 16 tokens (12 layers, 42·768 + 6·12·16 floats per token and layer, and
    // 12·768 per token outside the blocks) + 9 floats per response logit (4 × 8 × 50257).
    const forward = 12 * 64 * (42 * 768 + 6 * 12 * 16) + 12 * 64 * 768;
    expect(e.parts.activations).toBe(4 * (3 * forward + 9 * 4 * 8 * 50257));
    expect(e.total).toBe(Object.values(e.parts).reduce((a, b) => a + b, 0));
    expect(formatEstimate(e)).toBe(
      '≈ 4.9 GB: policy 0.50, reference 0.50, value 0.50, Adam 1.99, gradients 1.00, activations 0.37 GB',
    );
  });

  it('LoRA: one base, no reference copy, Adam and gradients on the adapters only; critic-free: no value model', () => {
    const run = { batchSize: 4, miniBatches: 1, promptLength: 8, responseLength: 8 };
    const lora = { r: 8, targets: LORA_TARGETS };
    const full = estimateRunMemory(gpt2, run, { valueModel: 'separate', rewardModel: false });
    const e = estimateRunMemory(gpt2, run, { lora, valueModel: 'shared', rewardModel: true });
    const A = loraParamCount(gpt2, lora); // 12 blocks × 8 × (768+2304 + 768+768 + 768+3072 + 3072+768)
    expect(A).toBe(12 * 8 * (3072 + 1536 + 3840 + 3840));
    expect(e.parts.base).toBe(4 * 124_439_808);
    expect(e.parts.reference).toBe(0);
    expect(e.parts.adapters).toBe(4 * 2 * A);
    expect(e.parts.value).toBe(4 * 768);
    expect(e.parts.rewardModel).toBe(4 * (124_439_808 + 768));
    expect(e.trainableParams).toBe(2 * A + 768);
    expect(e.parts.adam).toBe(4 * 2 * (2 * A + 768));
    expect(e.parts.gradients).toBe(4 * (2 * A + 768));
    expect(e.total).toBeLessThan(full.total / 2.5);
    const criticFree = estimateRunMemory(gpt2, run, { valueModel: 'none', rewardModel: false });
    expect(criticFree.parts.value).toBe(0);
    expect(criticFree.trainableParams).toBe(124_439_808);
  });

  // Shapes unlike the ones the constants were fitted on (2–4 layers of width 64–128, 4–8 heads, bytes vocabulary).
  const cases: {
    name: string;
    config: () => GPT2Config;
    batchSize: number;
    miniBatches: number;
    responseLength: number;
    rewardModel: boolean;
  }[] = [
    {
      name: '1 layer, width 48, 3 heads, 2 minibatches',
      config: () => bytesShape(1, 48, 3),
      batchSize: 6,
      miniBatches: 2,
      responseLength: 10,
      rewardModel: false,
    },
    {
      name: '3 layers, width 32, 4 heads, a learned reward model',
      config: () => bytesShape(3, 32, 4),
      batchSize: 4,
      miniBatches: 1,
      responseLength: 12,
      rewardModel: true,
    },
    {
      name: '2 layers, width 40, 5 heads, 4 minibatches, 24 response tokens',
      config: () => bytesShape(2, 40, 5),
      batchSize: 8,
      miniBatches: 4,
      responseLength: 24,
      rewardModel: false,
    },
  ];
  for (const k of cases) {
    it(`within 25% of the measured peak of a PPO step: ${k.name}`, async () => {
      const config = k.config();
      const cfg = validateConfig(
        {
          model: 'random',
          task: null,
          prompts: ['the movie was really', 'a film that i thought', 'this story is quite'],
          reward: 'length',
          batchSize: k.batchSize,
          miniBatches: k.miniBatches,
          ppoEpochs: 1,
          responseLength: k.responseLength,
          stopToken: null,
          seed: 3,
        },
        'size test',
      );
      const base = tf.memory().numBytes;
      const policy = GPT2.random(config, 1, true, 'policy');
      const ref = policy.clone(false, 'ref');
      const value = ScalarModel.fromTrunk(policy, true, 'value');
      const rm = k.rewardModel ? ScalarModel.random(config, 5, false, 'reward') : null;
      const reward: RewardSource = rm
        ? { kind: 'model', model: rm, label: 'rm', mean: null }
        : { kind: 'fn', fn: (s) => s.response.length, label: 'length' };
      const trainer = new PpoTrainer(cfg, { policy, ref, value, reward }, tokenizerFor(config), cfg.prompts!);
      try {
        await trainer.trainStep(); // Adam's moments exist from here on
        const prof = await tf.profile(async () => {
          await trainer.trainStep();
          return [];
        });
        const measured = prof.peakBytes - base;
        const promptLength = bucket(
          Math.max(...trainer.promptTokens.map((p) => p.length)),
          config.n_positions - k.responseLength,
        );
        const opts: RunMemoryOptions = { valueModel: 'separate', rewardModel: k.rewardModel };
        const e = estimateRunMemory(
          config,
          {
            batchSize: k.batchSize,
            miniBatches: k.miniBatches,
            promptLength,
            responseLength: k.responseLength,
          },
          opts,
        );
        expect(
          Math.abs(e.total - measured) / measured,
          `estimate ${e.total} vs measured ${measured}`,
        ).toBeLessThan(0.25);
      } finally {
        trainer.dispose();
        policy.dispose();
        ref.dispose();
        value.dispose();
        rm?.dispose();
      }
    }, 120_000);
  }
});
