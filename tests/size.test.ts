/**
 * src/core/model/size.ts: parameter counts exactly as the built models hold them, and the run's memory estimate
 * against the peak of live tensor bytes (tf.memory().numBytes, the peak of a whole PPO step measured by
 * tf.profile, as src/bench/perf/memory.ts measures it) on the WASM backend, for shapes the activation constants
 * were not fitted on. numBytes counts tensors, not a backend's buffers: the CPU backend measured the same peaks,
 * byte for byte, for every case here (checked 2026-11-29), in 100 s of this file's time against 6 s on WASM.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { setNodeBackend } from '../src/cli/backend-node';
import { wasmFusedBlocksHere } from '../src/core/kernels/wasm-activations';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import { validateConfig } from '../src/common/config';
import { parseGPT2Config, type GPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { LLAMA_SHAPES, parseLlamaConfig, type LlamaConfig } from '../src/core/model/llama-config';
import { ScalarModel } from '../src/core/model/heads';
import { LoraAdapters, LLAMA_LORA_TARGETS, LORA_TARGETS } from '../src/core/model/lora';
import {
  PpoTrainer,
  bucket,
  chunksVocabulary,
  vocabChunking,
  VOCAB_CHUNK,
  type RewardSource,
} from '../src/core/ppo/trainer';
import { tokenizerFor } from '../src/core/tokenizer';
import { bytesModulo } from './helpers/trainer-fixture';
import { lmLoss } from '../src/core/sft/sft';
import { clippedStep } from '../src/core/optim/optim';
import { FusedAdamOptimizer } from '../src/core/optim/fused-adam';
import {
  ACT_LORA_PER_OUT,
  estimateGenerateMemory,
  estimateRunMemory,
  estimateSequenceTrainingMemory,
  fixedBytes,
  formatEstimate,
  loraParamCount,
  paramCount,
  scalarParamCount,
  runShapeOf,
  phaseFloats,
  AUTO_MICRO_BATCH_BYTES,
  LOGITS_CHUNK_UPDATE,
  LOGITS_UPDATE,
  LOGITS_UPDATE_FUSED,
  updateVocabChunk,
  type RunMemoryOptions,
  withPackedWeights,
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

beforeAll(() => setNodeBackend('wasm'));

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
    // 12·768 per token outside the blocks) + 21 floats per response logit (4 × 8 × 50257) + 4 wte-sized tensors
    // (the gather's and the tied head's kept copies of wte, and their two gradients of it: 50257 × 768).
    const forward = 12 * 64 * (42 * 768 + 6 * 12 * 16) + 12 * 64 * 768;
    expect(e.parts.activations).toBe(4 * (3 * forward + 21 * 4 * 8 * 50257 + 4 * 50257 * 768));
    expect(e.total).toBe(Object.values(e.parts).reduce((a, b) => a + b, 0));
    expect(formatEstimate(e)).toBe(
      '≈ 5.5 GB: policy 0.50, reference 0.50, value 0.50, Adam 1.99, gradients 1.00, activations 1.07 GB',
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
    // Activations: the update's, as full fine-tuning's (3 forwards over 4 × 16 tokens, 21 floats per response
    // logit, wte's two kept copies, no wte gradients), plus LoRA's: the kept copy of every block's four Conv1D
    // weights (12 · 768² per layer) and 6 floats per token per layer per adapted output feature
    // (3C + C + 4C + C = 9 · 768 of them per layer).
    const forward = 12 * 64 * (42 * 768 + 6 * 12 * 16) + 12 * 64 * 768;
    const loraTerms = 12 * 12 * 768 * 768 + ACT_LORA_PER_OUT * 64 * 12 * 9 * 768;
    expect(e.peakPhase).toBe('update');
    expect(e.parts.activations).toBe(4 * (3 * forward + 21 * 4 * 8 * 50257 + 2 * 50257 * 768 + loraTerms));
    // Weights and optimiser state: one base and a reward model against four models and two full Adams.
    expect(fixedBytes(e)).toBeLessThan(fixedBytes(full) / 2.5);
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
      const trainer = new PpoTrainer(
        () => cfg,
        { policy, ref, value, reward },
        tokenizerFor(config),
        cfg.prompts!,
      );
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
        const opts: RunMemoryOptions = {
          valueModel: 'separate',
          rewardModel: k.rewardModel,
          fusedBlocks: wasmFusedBlocksHere(),
        };
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
        trainer.disposeOptimizers();
        policy.dispose();
        ref.dispose();
        value.dispose();
        rm?.dispose();
      }
    }, 120_000);
  }
});

// ---------------------------------------------------------------------------------------------------------
// Large vocabularies: the logits (B·T·V) and the wte-sized tensors of the backward dominate. The constants were
// fitted on 1-layer models of width 16 and 64, 2 heads, vocabularies 2048 and 8192 (the slope in V of the
// measured peak); these shapes (2 layers of width 32 with 4 heads and 2 minibatches; 1 layer of width 48 with 3
// heads, a 12288 vocabulary and 10 response tokens) were not among them.
//
// The random models sample ids past the byte tokenizer's 258: decoded modulo 256 (the text is only for the
// reward, which counts tokens).
const wideVocab = (V: number, L: number, C: number, H: number): GPT2Config =>
  parseGPT2Config({
    vocab_size: V,
    n_positions: 64,
    n_embd: C,
    n_layer: L,
    n_head: H,
    tokenizer: 'bytes',
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });

const within25 = (estimate: number, measured: number) =>
  expect(
    Math.abs(estimate - measured) / measured,
    `estimate ${estimate} vs measured ${measured}`,
  ).toBeLessThan(0.25);

describe('the estimate with a large vocabulary (measured on WASM, within 25%)', () => {
  const shapes = [
    {
      name: 'V 8192, 2 layers, width 32, 4 heads',
      V: 8192,
      L: 2,
      C: 32,
      H: 4,
      B: 4,
      mbs: 2,
      R: 6,
      sft: [2, 24],
    },
    {
      name: 'V 12288, 1 layer, width 48, 3 heads',
      V: 12288,
      L: 1,
      C: 48,
      H: 3,
      B: 2,
      mbs: 1,
      R: 10,
      sft: [1, 32],
    },
  ];
  for (const k of shapes) {
    for (const lora of [false, true]) {
      it(`a ${lora ? 'LoRA (r 4, shared value model)' : 'full fine-tuning'} PPO step: ${k.name}`, async () => {
        const config = wideVocab(k.V, k.L, k.C, k.H);
        const cfg = validateConfig(
          {
            model: 'random',
            task: null,
            prompts: ['the movie was really', 'a film that i thought', 'this story is quite'],
            reward: 'length',
            batchSize: k.B,
            miniBatches: k.mbs,
            ppoEpochs: 1,
            responseLength: k.R,
            stopToken: null,
            seed: 3,
            ...(lora ? { lora: 4 } : {}),
          },
          'size test',
        );
        const base = tf.memory().numBytes;
        let policy: GPT2, ref: GPT2, value: ScalarModel;
        if (lora) {
          // As buildTrainer builds it: the frozen base is the reference; policy and value are views with adapters.
          ref = GPT2.random(config, 1, false, 'base');
          policy = ref.withLora(LoraAdapters.create(config, cfg, 3, 'policy'), 'policy');
          value = ScalarModel.onSharedBase(
            policy.base,
            LoraAdapters.create(config, cfg, 4, 'value'),
            'value',
          );
        } else {
          policy = GPT2.random(config, 1, true, 'policy');
          ref = policy.clone(false, 'ref');
          value = ScalarModel.fromTrunk(policy, true, 'value');
        }
        const reward: RewardSource = { kind: 'fn', fn: (s) => s.responseTokens.length, label: 'tokens' };
        const trainer = new PpoTrainer(
          () => cfg,
          { policy, ref, value, reward },
          bytesModulo(),
          cfg.prompts!,
        );
        try {
          await trainer.trainStep(); // Adam's moments exist from here on
          const prof = await tf.profile(async () => {
            await trainer.trainStep();
            return [];
          });
          const promptLength = bucket(
            Math.max(...trainer.promptTokens.map((p) => p.length)),
            config.n_positions - k.R,
          );
          const opts: RunMemoryOptions = lora
            ? {
                lora: { r: 4, targets: cfg.loraTargets },
                valueModel: 'shared',
                rewardModel: false,
                fusedBlocks: wasmFusedBlocksHere(),
              }
            : { valueModel: 'separate', rewardModel: false, fusedBlocks: wasmFusedBlocksHere() };
          // The shape the trainer runs (its micro-batch, recompute and vocabulary chunk), as the preflight sees it.
          const chunk = chunksVocabulary(k.R, k.V) ? VOCAB_CHUNK : 0;
          const run = runShapeOf(config, cfg, promptLength, opts, chunk);
          expect(run.microBatchSize).toBe(trainer.stepPlan(cfg).microBatchSize);
          const e = estimateRunMemory(config, run, opts);
          expect(e.peakPhase).toBe('update');
          within25(e.total, prof.peakBytes - base);
        } finally {
          trainer.disposeOptimizers();
          policy.dispose();
          ref.dispose();
          value.dispose();
        }
      }, 60_000);
    }

    it(`an SFT step (batch ${k.sft[0]}, ${k.sft[1]} tokens): ${k.name}`, async () => {
      const config = wideVocab(k.V, k.L, k.C, k.H);
      const [B, T] = k.sft;
      const base = tf.memory().numBytes;
      const model = GPT2.random(config, 1, true, 'policy');
      const opt = new FusedAdamOptimizer(1e-3, 0.9, 0.95, 1e-8);
      const vars = model.trainableVariables();
      // Windows of T + 1 tokens (inputs and next-token targets), as trainSft builds them.
      const windows = tf.randomUniform([B, T + 1], 0, k.V, 'int32', 7) as tf.Tensor2D;
      const step = () => {
        const r = clippedStep(opt, vars, () => [lmLoss(model, windows)], 1);
        tf.dispose([r.scalars, r.gradNorm]);
      };
      try {
        step(); // Adam's moments exist from here on
        const prof = await tf.profile(async () => {
          step();
          return [];
        });
        const measured = prof.peakBytes - base - windows.size * 4;
        const e = estimateSequenceTrainingMemory(config, { sequences: B, seqLen: T, head: 'lm' });
        within25(e.total, measured);
      } finally {
        windows.dispose();
        opt.dispose();
        model.dispose();
      }
    }, 60_000);
  }
});

// ---------------------------------------------------------------------------------------------------------
// LoRA on the WASM backend (the path GPT-2 LoRA runs take in Node and in the browser without WebGPU): the same
// tensors as on the CPU backend (numBytes counts tensors, not the backend's buffers), and what LoRA's backward
// holds beyond full fine-tuning's forwards: the kept copy of every Conv1D weight and the adapters' own tensors
// (LORA_WEIGHT_TAPE_COPIES, ACT_LORA_PER_OUT). Without them the estimate grew by 9.8 MB per layer where the peak
// grows by 13.9 MB (width 128, 120 tokens per minibatch), and GPT-2 124M's LoRA PPO read 2.96 GB against 3.79.
describe('the estimate with LoRA on the WASM backend (V 8192, within 25%)', () => {
  beforeAll(async () => {
    registerWasmExtraKernels();
    registerFusedAdamKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });
  afterAll(() => setNodeBackend('wasm'));

  /** The measured peak of a second LoRA step (after Adam's moments exist) and its estimate. */
  async function loraStep(k: {
    L: number;
    C: number;
    H: number;
    B: number;
    R: number;
    algorithm: 'ppo' | 'grpo';
  }): Promise<{ measured: number; estimate: number }> {
    const config = wideVocab(8192, k.L, k.C, k.H);
    const cfg = validateConfig(
      {
        model: 'random',
        task: null,
        prompts: ['the movie was really', 'a film that i thought', 'this story is quite'],
        reward: 'length',
        batchSize: k.B,
        miniBatches: 1,
        ppoEpochs: 1,
        responseLength: k.R,
        stopToken: null,
        seed: 3,
        lora: 4,
        algorithm: k.algorithm,
        ...(k.algorithm === 'ppo' ? { valueModel: 'shared' } : { groupSize: 2 }),
      },
      'size test',
    );
    const base = tf.memory().numBytes;
    // As buildTrainer builds it: the frozen base is the reference; policy (and value) are views with adapters.
    const ref = GPT2.random(config, 1, false, 'base');
    const policy = ref.withLora(LoraAdapters.create(config, cfg, 3, 'policy'), 'policy');
    const value =
      k.algorithm === 'ppo'
        ? ScalarModel.onSharedBase(policy.base, LoraAdapters.create(config, cfg, 4, 'value'), 'value')
        : null;
    const reward: RewardSource = { kind: 'fn', fn: (s) => s.responseTokens.length, label: 'tokens' };
    const trainer = new PpoTrainer(
      () => cfg,
      { policy, ref, value: value as ScalarModel, reward },
      bytesModulo(),
      cfg.prompts!,
    );
    try {
      await trainer.trainStep(); // Adam's moments exist from here on
      const prof = await tf.profile(async () => {
        await trainer.trainStep();
        return [];
      });
      const promptLength = bucket(
        Math.max(...trainer.promptTokens.map((p) => p.length)),
        config.n_positions - k.R,
      );
      const e = estimateRunMemory(
        config,
        { batchSize: k.B, miniBatches: 1, promptLength, responseLength: k.R },
        {
          lora: { r: 4, targets: cfg.loraTargets },
          valueModel: k.algorithm === 'ppo' ? 'shared' : 'none',
          rewardModel: false,
          fusedBlocks: wasmFusedBlocksHere(),
        },
      );
      expect(e.peakPhase).toBe('update');
      return { measured: prof.peakBytes - base, estimate: e.total };
    } finally {
      trainer.disposeOptimizers();
      policy.dispose();
      ref.dispose();
      value?.dispose();
    }
  }

  it('PPO with a shared value model, 1 and 3 layers of width 128: the peaks, and their growth per layer', async () => {
    const k = { C: 128, H: 4, B: 4, R: 6, algorithm: 'ppo' as const };
    const one = await loraStep({ ...k, L: 1 });
    const three = await loraStep({ ...k, L: 3 });
    within25(one.estimate, one.measured);
    within25(three.estimate, three.measured);
    // The layers' share alone (the vocabulary's terms cancel): what LoRA's backward adds per layer.
    within25(three.estimate - one.estimate, three.measured - one.measured);
  }, 60_000);

  it('GRPO (no value model), 2 layers of width 96, 3 heads', async () => {
    const r = await loraStep({ L: 2, C: 96, H: 3, B: 4, R: 8, algorithm: 'grpo' });
    within25(r.estimate, r.measured);
  }, 60_000);
});

describe('the automatic plan (microBatchSize 0, recompute "auto")', () => {
  const plan = (config: GPT2Config, over: Partial<Parameters<typeof validateConfig>[0]> = {}) => {
    const cfg = validateConfig({ model: 'x', task: 'sentiment', ...over }, 'test');
    const opts = {
      lora: cfg.lora > 0 ? { r: cfg.lora, targets: cfg.loraTargets } : undefined,
      valueModel: cfg.lora > 0 ? ('shared' as const) : ('separate' as const),
      rewardModel: false,
    };
    return runShapeOf(
      config,
      cfg,
      13,
      opts,
      chunksVocabulary(cfg.responseLength, config.vocab_size) ? VOCAB_CHUNK : 0,
    );
  };

  it('GPT-2 124M LoRA at batch 16 × 24: micro-batches of 4 with recompute (not 1: slower per sample)', () => {
    const s = plan(gpt2, { lora: 8, batchSize: 16, responseLength: 24, miniBatches: 2 });
    expect(s.microBatchSize).toBe(4);
    expect(s.recompute).toBe(true);
  });

  it('generation is planned apart: GPT-2 124M at batch 16 generates all 16 at once (what 16 rows add fits the budget: the prompt is read one block at a time), the update in micro-batches of 4; at batch 64, in slices of 22', () => {
    const s = plan(gpt2, { lora: 8, batchSize: 16, responseLength: 24, miniBatches: 2 });
    expect(s.microBatchSize).toBe(4);
    expect(s.generateMicroBatchSize).toBe(16);
    // Hand-checkable from phaseFloats at 1, 2 and n rows: what n rows add beyond the part no slice changes.
    const models = {
      scorers: 2,
      wteTrains: false,
      lora: { r: 8, targets: validateConfig({ model: 'x' }, 'test').loraTargets },
    };
    const at = (m: number) =>
      phaseFloats(
        gpt2,
        { ...s, microBatchSize: m, generateMicroBatchSize: undefined, recompute: false },
        models,
      );
    const [p1, p2] = [at(1), at(2)];
    const adds = (m: number, k: 'generate' | 'update') => (at(m)[k] - (2 * p1[k] - p2[k])) * 4;
    expect(adds(16, 'generate')).toBeLessThanOrEqual(AUTO_MICRO_BATCH_BYTES);
    expect(adds(8, 'update')).toBeGreaterThan(AUTO_MICRO_BATCH_BYTES);
    // At batch 64, 64 rows of generation add more than the budget: slices, each within it.
    const big = plan(gpt2, { lora: 8, batchSize: 64, responseLength: 24, miniBatches: 8 });
    const atBig = (g: number) =>
      phaseFloats(gpt2, { ...big, microBatchSize: g, generateMicroBatchSize: g, recompute: false }, models)
        .generate;
    const addsBig = (g: number) => (atBig(g) - (2 * atBig(1) - atBig(2))) * 4;
    expect(addsBig(31)).toBeLessThanOrEqual(AUTO_MICRO_BATCH_BYTES);
    expect(addsBig(32)).toBeGreaterThan(AUTO_MICRO_BATCH_BYTES);
    // The largest fitting slice (31) evened out over the batch: 64 as 22 + 21 + 21.
    expect([big.microBatchSize, big.generateMicroBatchSize]).toEqual([4, 22]);
    // The estimate counts generation at its own slice: 8 rows hold more than 4; absent, the micro-batch.
    const gen = (g: number | undefined) =>
      phaseFloats(gpt2, { ...s, generateMicroBatchSize: g }, models).generate;
    expect(gen(16)).toBeGreaterThan(gen(4));
    expect(gen(undefined)).toBe(gen(4));
  });

  it('a set microBatchSize is the generation slice too (what the person asked for, in every phase)', () => {
    const s = plan(gpt2, { lora: 8, batchSize: 16, responseLength: 24, microBatchSize: 2 });
    expect(s.generateMicroBatchSize).toBe(2);
  });

  it('a vocabulary so large that 16 rows of generation logits exceed the budget generates in even slices, never below the micro-batch', () => {
    const big = { ...gpt2, vocab_size: 4_000_000 };
    const s = plan(big, { lora: 8, batchSize: 16, responseLength: 24, miniBatches: 1 });
    expect(s.generateMicroBatchSize).toBeLessThan(16);
    expect(s.generateMicroBatchSize).toBeGreaterThanOrEqual(s.microBatchSize!);
    expect(
      16 % s.generateMicroBatchSize! === 0 ||
        Math.ceil(16 / Math.ceil(16 / s.generateMicroBatchSize!)) === s.generateMicroBatchSize,
    ).toBe(true);
  });

  it('a small model runs its whole minibatch at once, without recompute', () => {
    const s = plan(bytesShape(2, 64, 2), { batchSize: 16, responseLength: 24, miniBatches: 2 });
    expect(s.microBatchSize).toBe(8);
    expect(s.recompute).toBe(false);
  });

  it('micro-batches are evened out: no 6 + 2 where 4 + 4 takes as many', () => {
    for (const batchSize of [8, 14, 20]) {
      const s = plan(gpt2, { lora: 8, batchSize, responseLength: 24, miniBatches: 1 });
      const mb = batchSize;
      const k = Math.ceil(mb / s.microBatchSize!);
      // The size is the even split of the minibatch into its k micro-batches.
      expect(s.microBatchSize).toBe(Math.ceil(mb / k));
    }
  });

  it('recompute "auto" with a set micro-batch: on when that micro-batch would not fit without it', () => {
    // GPT-2 124M: four samples of the update's activations without recompute exceed the budget; a tiny model's do not.
    expect(plan(gpt2, { lora: 8, batchSize: 16, responseLength: 24, microBatchSize: 4 }).recompute).toBe(
      true,
    );
    expect(
      plan(bytesShape(2, 64, 2), { batchSize: 16, responseLength: 24, microBatchSize: 4 }).recompute,
    ).toBe(false);
    expect(
      plan(gpt2, { lora: 8, batchSize: 16, responseLength: 24, microBatchSize: 4, recompute: 'off' })
        .recompute,
    ).toBe(false);
  });

  it('an explicit microBatchSize is kept (capped at the batch)', () => {
    expect(plan(gpt2, { lora: 8, batchSize: 16, responseLength: 24, microBatchSize: 2 }).microBatchSize).toBe(
      2,
    );
    expect(plan(gpt2, { lora: 8, batchSize: 4, responseLength: 8, microBatchSize: 64 }).microBatchSize).toBe(
      4,
    );
  });
});

// ---------------------------------------------------------------------------------------------------------
// The Llama families (llama, qwen2, qwen3): their own activation terms (LLAMA_ACT_*: q/k/v/o widths from the heads ×
// head_dim, the KV heads repeated for grouped-query attention, the SwiGLU MLP's three intermediate_size-wide
// matrices, qwen2's q/k/v bias, qwen3's q_norm/k_norm, the rotary rows), the KV cache of the KV heads, and the
// untied lm_head (a second [V, C] matrix held by every model that copies the trunk, trained by the policy only).
const llamaShape = (k: {
  fam: 'llama' | 'qwen2' | 'qwen3';
  V: number;
  C: number;
  I: number;
  L: number;
  nh: number;
  nkv: number;
  d?: number;
  tied: boolean;
}): LlamaConfig =>
  parseLlamaConfig({
    model_type: k.fam,
    vocab_size: k.V,
    hidden_size: k.C,
    intermediate_size: k.I,
    num_hidden_layers: k.L,
    num_attention_heads: k.nh,
    num_key_value_heads: k.nkv,
    ...(k.d ? { head_dim: k.d } : {}),
    max_position_embeddings: 64,
    tie_word_embeddings: k.tied,
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });
const qwen25 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-0.5b'] });

describe('the estimate for the Llama families: hand-worked parts', () => {
  it('Qwen2.5-0.5B: 494,032,768 parameters (tied head), and the untied head adds V·C', () => {
    const { vocab_size: V, hidden_size: C, intermediate_size: I, num_hidden_layers: L } = qwen25;
    // Per layer: q [896, 896] + bias, k and v [128, 896] + bias (2 KV heads × 64), o [896, 896], gate/up/down
    // [4864, 896] / [896, 4864], two norms.
    const perLayer = 896 * 896 + 896 + 2 * (128 * 896 + 128) + 896 * 896 + 3 * I * C + 2 * C;
    expect(V * C + L * perLayer + C).toBe(494_032_768);
    expect(paramCount(qwen25)).toBe(494_032_768);
    expect(paramCount({ ...qwen25, tie_word_embeddings: false } as LlamaConfig)).toBe(494_032_768 + V * C);
  });

  it('the KV cache holds the KV heads (n_kv · head_dim), and grouped-query attention their repeats', () => {
    // One more position of generation adds, per row per layer, keys and values at n_kv · head_dim = 2 · 64 = 128:
    // the old cache, the new one and the new key/value spread over the slots (6 · 128), and for the repeated heads a
    // view of the cache (2 · 128), the tile and its view and the attention's copies (6 · nh · d = 6 · 896).
    const gen = (n: number, c: LlamaConfig) =>
      estimateGenerateMemory(c, { batchSize: 3, promptLength: 16, maxNewTokens: n }).total;
    expect(gen(116, qwen25) - gen(16, qwen25)).toBe(4 * 3 * 24 * 100 * (6 * 128 + 2 * 128 + 6 * 896));
    // Without grouping (n_kv = nh): no repeat, 6 · nh · d.
    const mha = llamaShape({ fam: 'llama', V: 512, C: 64, I: 128, L: 2, nh: 4, nkv: 4, tied: true });
    expect(gen(40, mha) - gen(20, mha)).toBe(4 * 3 * 2 * 20 * 6 * 64);
    // GPT-2's is unchanged: 2 · 2 · rows · L · T · C.
    expect(
      estimateGenerateMemory(gpt2, { batchSize: 3, promptLength: 16, maxNewTokens: 116 }).total -
        estimateGenerateMemory(gpt2, { batchSize: 3, promptLength: 16, maxNewTokens: 16 }).total,
    ).toBe(4 * 2 * 2 * 3 * 12 * 100 * 768);
  });

  it('on WebGPU (written in place, no repeated heads) the cache is held once: 2 · n_kv · d, GPT-2 2 · C', () => {
    const gen = (n: number, c: LlamaConfig | GPT2Config) =>
      estimateGenerateMemory(c, { batchSize: 3, promptLength: 16, maxNewTokens: n }, { inPlaceCache: true })
        .total;
    expect(gen(116, qwen25) - gen(16, qwen25)).toBe(4 * 3 * 24 * 100 * 2 * 128);
    expect(gen(116, gpt2) - gen(16, gpt2)).toBe(4 * 2 * 3 * 12 * 100 * 768);
    // The run's generation phase the same way (16 rows of 56 + 64 positions): the cache's part alone changes.
    const run = { batchSize: 16, miniBatches: 1, promptLength: 56, responseLength: 64 };
    const cpu = phaseFloats(qwen25, run, { scorers: 2 }).generate;
    const gpu = phaseFloats(qwen25, run, { scorers: 2, inPlaceCache: true }).generate;
    expect(cpu - gpu).toBe(16 * 24 * 120 * (6 * 128 + 2 * 128 + 6 * 896 - 2 * 128));
    // And the estimate takes it from its options (a plan whose peak is generation: micro-batches of 1).
    const opts: RunMemoryOptions = {
      lora: { r: 8, targets: ['q_proj'] },
      valueModel: 'none',
      rewardModel: false,
    };
    const small = {
      ...run,
      microBatchSize: 1,
      generateMicroBatchSize: 16,
      recompute: true,
      vocabChunk: 8192,
    };
    const plain = estimateRunMemory(qwen25, small, opts);
    expect(plain.peakPhase).toBe('generate');
    const inPlace = estimateRunMemory(qwen25, small, { ...opts, inPlaceCache: true });
    expect(inPlace.parts.activations).toBeLessThan(plain.parts.activations);
  });

  it('an untied head: the value model holds lm_head but trains neither it nor its Adam moments', () => {
    const run = { batchSize: 4, miniBatches: 1, promptLength: 8, responseLength: 8 };
    const opts: RunMemoryOptions = { valueModel: 'separate', rewardModel: false };
    const untied = { ...qwen25, tie_word_embeddings: false } as LlamaConfig;
    const P = paramCount(untied);
    const VC = qwen25.vocab_size * qwen25.hidden_size;
    const e = estimateRunMemory(untied, run, opts);
    expect(e.parts.value).toBe(4 * (P + 896));
    expect(e.trainableParams).toBe(P + (P + 896 - VC));
    expect(e.parts.adam).toBe(4 * 2 * (2 * P + 896 - VC));
    // The tied model's count is the plain one.
    expect(estimateRunMemory(qwen25, run, opts).trainableParams).toBe(2 * paramCount(qwen25) + 896);
  });
});

describe('the WASM heap estimate (RunMemoryOptions.heap "wasm"): hand-worked against the tensor-byte one', () => {
  it('Qwen2.5-0.5B LoRA GRPO: the tape copies of the embedding leave, XNNPACK packs each block matrix once', () => {
    const run = {
      batchSize: 4,
      miniBatches: 1,
      promptLength: 40,
      responseLength: 16,
      microBatchSize: 2,
      recompute: true,
    };
    const opts: RunMemoryOptions = {
      valueModel: 'none',
      rewardModel: false,
      lora: { r: 8, targets: [...LORA_TARGETS] },
    };
    const bytes = estimateRunMemory(qwen25, run, opts);
    const heap = estimateRunMemory(qwen25, run, { ...opts, heap: 'wasm' });
    const { vocab_size: V, hidden_size: C, intermediate_size: I, num_hidden_layers: L } = qwen25;
    // The block matrices: q and o [896, 896], k and v [128, 896], gate/up/down 4864 × 896, 24 layers.
    const blocks = L * (2 * 896 * 896 + 2 * 128 * 896 + 3 * I * C);
    expect(blocks).toBe(357_826_560);
    expect(heap.parts.packed).toBe(4 * blocks);
    expect(bytes.parts.packed).toBe(0);
    // Both peak in the update; with recompute the LoRA tape copies are one layer's matrices.
    expect(bytes.peakPhase).toBe('update');
    expect(heap.peakPhase).toBe('update');
    expect(bytes.parts.activations - heap.parts.activations).toBe(
      4 * (2 * V * C + blocks / L), // WTE_TAPE_COPIES · V·C + LORA_WEIGHT_TAPE_COPIES · one layer
    );
    for (const k of ['base', 'adapters', 'adam', 'gradients'] as const)
      expect(heap.parts[k]).toBe(bytes.parts[k]);
    // And the heap's growth step past the allocator's high-water mark: 96 MiB (20% of this heap is more).
    expect(heap.parts.heapGrowth).toBe(100663296);
    expect(bytes.parts.heapGrowth).toBe(0);
    expect(heap.total).toBe(bytes.total - 4 * (2 * V * C + blocks / L) + 4 * blocks + 100663296);
  });

  it('full copies with a separate value model pack three trunks (policy, reference, value); LoRA one', () => {
    const run = { batchSize: 4, miniBatches: 1, promptLength: 8, responseLength: 8 };
    const c = llamaShape({ fam: 'llama', V: 512, C: 64, I: 128, L: 2, nh: 4, nkv: 2, tied: true });
    const blocks = 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64);
    const full = estimateRunMemory(c, run, { valueModel: 'separate', rewardModel: false, heap: 'wasm' });
    expect(full.parts.packed).toBe(4 * 3 * blocks);
    const withRm = estimateRunMemory(c, run, { valueModel: 'separate', rewardModel: true, heap: 'wasm' });
    expect(withRm.parts.packed).toBe(4 * 4 * blocks);
    const lora = estimateRunMemory(c, run, {
      valueModel: 'shared',
      rewardModel: false,
      lora: { r: 4, targets: [...LORA_TARGETS] },
      heap: 'wasm',
    });
    expect(lora.parts.packed).toBe(4 * blocks);
    expect(
      withPackedWeights(estimateGenerateMemory(c, { batchSize: 1, promptLength: 8, maxNewTokens: 8 }), c)
        .parts.packed,
    ).toBe(4 * blocks);
  });
});

describe('the estimate for the Llama families (measured on WASM, within 25%)', () => {
  type Case = Parameters<typeof llamaShape>[0] & {
    mode: 'full' | 'lora' | 'grpo';
    B: number;
    R: number;
    mbs?: number;
    /** The config's recompute (default 'auto'). */
    recompute?: 'blocks' | 'off';
    /**
     * Rows sharing a prompt run it once (PpoTrainer.sharedPrefix). Default false: the estimate counts every row in
     * full, and these cases check that count; the prompts here repeat across the batch, so the share would apply.
     */
    shared?: boolean;
  };

  /** The measured peak of a second step (Adam's moments exist) and its estimate, as size.ts counts the run. */
  async function llamaStep(k: Case): Promise<{ measured: number; estimate: number }> {
    const config = llamaShape(k);
    const lora = k.mode !== 'full';
    const algorithm = k.mode === 'grpo' ? 'grpo' : 'ppo';
    const cfg = validateConfig(
      {
        model: 'random',
        task: null,
        prompts: ['the movie was really', 'a film that i thought', 'this story is quite'],
        reward: 'length',
        batchSize: k.B,
        miniBatches: k.mbs ?? 1,
        ppoEpochs: 1,
        responseLength: k.R,
        stopToken: null,
        seed: 3,
        algorithm,
        ...(k.recompute ? { recompute: k.recompute } : {}),
        ...(lora ? { lora: 4 } : {}),
        ...(algorithm === 'grpo' ? { groupSize: 2 } : lora ? { valueModel: 'shared' } : {}),
      },
      'size test',
    );
    const base = tf.memory().numBytes;
    let policy: Llama, ref: Llama;
    let value: ScalarModel | null = null;
    if (lora) {
      // As buildTrainer builds it: the frozen base is the reference; policy (and value) are views with adapters.
      ref = Llama.random(config, 1, false, 'base');
      policy = ref.withLora(LoraAdapters.create(config, cfg, 3, 'policy'), 'policy');
      if (algorithm === 'ppo') {
        value = ScalarModel.onSharedBase(policy.base, LoraAdapters.create(config, cfg, 4, 'value'), 'value');
      }
    } else {
      policy = Llama.random(config, 1, true, 'policy');
      ref = policy.clone(false, 'ref');
      value = ScalarModel.fromTrunk(policy, true, 'value');
    }
    const reward: RewardSource = { kind: 'fn', fn: (s) => s.responseTokens.length, label: 'tokens' };
    const trainer = new PpoTrainer(
      () => cfg,
      { policy, ref, value: value as ScalarModel, reward },
      bytesModulo(),
      cfg.prompts!,
    );
    trainer.sharedPrefix = k.shared ?? false;
    try {
      await trainer.trainStep(); // Adam's moments exist from here on
      const prof = await tf.profile(async () => {
        await trainer.trainStep();
        return [];
      });
      const promptLength = bucket(
        Math.max(...trainer.promptTokens.map((p) => p.length)),
        config.n_positions - k.R,
      );
      const opts: RunMemoryOptions = lora
        ? {
            lora: { r: 4, targets: cfg.loraTargets },
            valueModel: algorithm === 'ppo' ? 'shared' : 'none',
            rewardModel: false,
          }
        : { valueModel: 'separate', rewardModel: false };
      const chunk = chunksVocabulary(k.R, k.V) ? VOCAB_CHUNK : 0;
      const run = runShapeOf(config, cfg, promptLength, opts, chunk);
      expect(run.microBatchSize).toBe(trainer.stepPlan(cfg).microBatchSize);
      if (k.recompute) expect(run.recompute).toBe(k.recompute === 'blocks');
      const e = estimateRunMemory(config, run, opts);
      expect(e.peakPhase).toBe('update');
      return { measured: prof.peakBytes - base, estimate: e.total };
    } finally {
      trainer.disposeOptimizers();
      policy.dispose();
      ref.dispose();
      value?.dispose();
    }
  }

  const cases: (Case & { name: string })[] = [
    {
      name: 'PPO, full copies: llama, tied, GQA (4 heads, 2 KV heads)',
      ...{ fam: 'llama', V: 4096, C: 64, I: 160, L: 2, nh: 4, nkv: 2, tied: true, mode: 'full', B: 4, R: 8 },
    },
    {
      name: 'PPO, full copies: llama, untied, GQA',
      ...{ fam: 'llama', V: 4096, C: 64, I: 160, L: 2, nh: 4, nkv: 2, tied: false, mode: 'full', B: 4, R: 8 },
    },
    {
      name: 'PPO, full copies: qwen3, untied, head_dim 32 ≠ 96 / 4, 2 minibatches',
      ...{ fam: 'qwen3', V: 2048, C: 96, I: 256, L: 3, nh: 4, nkv: 4, d: 32, tied: false, mode: 'full' },
      ...{ B: 6, R: 10, mbs: 2 },
    },
    {
      name: 'PPO, LoRA r 4 (shared value model): qwen2, tied, GQA (6 heads, 2 KV heads)',
      ...{ fam: 'qwen2', V: 2048, C: 96, I: 192, L: 3, nh: 6, nkv: 2, tied: true, mode: 'lora', B: 4, R: 12 },
    },
    {
      name: 'PPO, LoRA r 4 (shared value model): llama, untied, no GQA (8 heads)',
      ...{
        fam: 'llama',
        V: 2048,
        C: 128,
        I: 256,
        L: 2,
        nh: 8,
        nkv: 8,
        tied: false,
        mode: 'lora',
        B: 4,
        R: 16,
      },
    },
    {
      name: 'GRPO, LoRA r 4: qwen3, tied, GQA, head_dim 32, batch 8',
      ...{ fam: 'qwen3', V: 2048, C: 64, I: 192, L: 2, nh: 4, nkv: 2, d: 32, tied: true, mode: 'grpo' },
      ...{ B: 8, R: 8 },
    },
    {
      name: 'GRPO, LoRA r 4, recompute "blocks": llama, tied, GQA, 6 layers',
      ...{
        fam: 'llama',
        V: 2048,
        C: 128,
        I: 256,
        L: 6,
        nh: 4,
        nkv: 2,
        tied: true,
        mode: 'grpo',
        B: 4,
        R: 16,
      },
      recompute: 'blocks',
    },
    {
      name: 'GRPO, LoRA r 4: qwen2, untied, one KV head, V 12288 (the vocabulary-chunked log-prob)',
      ...{
        fam: 'qwen2',
        V: 12288,
        C: 64,
        I: 128,
        L: 1,
        nh: 4,
        nkv: 1,
        tied: false,
        mode: 'grpo',
        B: 4,
        R: 10,
      },
    },
  ];
  for (const k of cases) {
    it(
      k.name,
      async () => {
        const r = await llamaStep(k);
        console.log(`${k.name}: estimate ${r.estimate}, measured ${r.measured}`);
        within25(r.estimate, r.measured);
      },
      60_000,
    );
  }

  it('GRPO LoRA, 1 and 2 layers (qwen3, GQA): the peaks, and their growth per layer', async () => {
    const k: Case = {
      ...{ fam: 'qwen3', V: 2048, C: 64, I: 192, nh: 4, nkv: 2, d: 32, tied: true, mode: 'grpo', B: 4, R: 8 },
      L: 1,
    };
    const one = await llamaStep(k);
    const two = await llamaStep({ ...k, L: 2 });
    within25(one.estimate, one.measured);
    within25(two.estimate, two.measured);
    // One layer's share alone (the vocabulary's terms cancel): the block's activations and LoRA's.
    within25(two.estimate - one.estimate, two.measured - one.measured);
  }, 60_000);

  it("GRPO LoRA with each group's prompt once: a lower peak, still within the estimate", async () => {
    const k: Case = {
      ...{ fam: 'qwen3', V: 2048, C: 64, I: 192, L: 2, nh: 4, nkv: 2, d: 32, tied: true, mode: 'grpo' },
      ...{ B: 8, R: 8 },
    };
    const full = await llamaStep(k);
    const shared = await llamaStep({ ...k, shared: true });
    console.log(`shared prefix: measured ${shared.measured} against ${full.measured} in full`);
    // (One estimate for both: estimateRunMemory is not told of the shared prefix. The checks are the peaks.)
    expect(shared.measured).toBeLessThan(0.9 * full.measured);
    expect(shared.measured).toBeLessThanOrEqual(shared.estimate);
  }, 60_000);
});

describe("the update's vocabulary chunk in the estimate follows the trainer's per micro-batch", () => {
  it('on WebGPU whole logits up to 128 MB a micro-batch, chunks above; elsewhere chunks whenever V > 8192', () => {
    const R = 64;
    for (const backend of ['webgpu', 'wasm', 'cpu']) {
      for (const V of [258, 8192, 8193, 50257, 151936]) {
        const rule = vocabChunking(V, backend);
        for (const rows of [1, 2, 3, 4, 8, 16, 64]) {
          const run = { batchSize: 64, miniBatches: 1, promptLength: 8, responseLength: R, ...rule };
          // The trainer's update decides with chunksVocabulary(rows · R, V) (ppo/trainer.ts).
          expect(updateVocabChunk(run, rows, V) > 0, `${backend}, V ${V}, ${rows} rows`).toBe(
            chunksVocabulary(rows * R, V, backend),
          );
        }
      }
    }
    // Worked by hand: 3 rows × 64 × 151936 × 4 B = 116.7 MB ≤ 128 MB (whole), 4 rows 155.6 MB (chunks of 8192).
    const rule = vocabChunking(151936, 'webgpu');
    const run = { batchSize: 16, miniBatches: 1, promptLength: 56, responseLength: 64, ...rule };
    expect(updateVocabChunk(run, 3, 151936)).toBe(0);
    expect(updateVocabChunk(run, 4, 151936)).toBe(VOCAB_CHUNK);
  });

  it("issue #36's Qwen2.5-1.5B GRPO at micro-batches of 4 on WebGPU: the update counts one chunk, not whole logits", () => {
    const c = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-1.5b'] });
    const opts: RunMemoryOptions = {
      lora: { r: 8, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] },
      valueModel: 'none',
      rewardModel: false,
      baseDtype: 'f16',
    };
    const shape = {
      batchSize: 16,
      miniBatches: 1,
      promptLength: 56,
      responseLength: 64,
      microBatchSize: 4,
      generateMicroBatchSize: 16,
      recompute: true,
    };
    const whole = phaseFloats(c, shape, { scorers: 2, lora: opts.lora });
    const chunked = phaseFloats(
      c,
      { ...shape, ...vocabChunking(c.vocab_size, 'webgpu') },
      { scorers: 2, lora: opts.lora },
    );
    // The difference is the logits' terms alone: 4 · 64 rows × (21 · V whole − 4 · 8192 in a chunk) floats.
    expect(whole.update - chunked.update).toBe(
      4 * 64 * (LOGITS_UPDATE * 151936 - LOGITS_CHUNK_UPDATE * VOCAB_CHUNK),
    );
    expect(chunked.generate).toBe(whole.generate);
    expect(chunked.score).toBe(whole.score);
  });
});

it("on WebGPU the update's whole logits count LOGITS_UPDATE_FUSED floats an entry (the fused kernels)", () => {
  const run = { batchSize: 8, miniBatches: 1, promptLength: 16, responseLength: 16 };
  const lora = { r: 4, targets: ['q_proj' as const] };
  const c = llamaShape({ fam: 'qwen3', V: 16384, C: 128, I: 384, L: 2, nh: 4, nkv: 2, d: 32, tied: true });
  const plain = phaseFloats(c, run, { scorers: 2, lora });
  const fused = phaseFloats(c, run, { scorers: 2, lora, fusedLogprob: true });
  expect(plain.update - fused.update).toBe(8 * 16 * 16384 * (LOGITS_UPDATE - LOGITS_UPDATE_FUSED));
  expect(fused.score).toBe(plain.score);
  // In vocabulary chunks nothing changes (the chunked log-prob is tfjs's ops on every backend).
  const chunked = { ...run, vocabChunk: 8192 };
  expect(phaseFloats(c, chunked, { scorers: 2, lora, fusedLogprob: true }).update).toBe(
    phaseFloats(c, chunked, { scorers: 2, lora }).update,
  );
});

describe('the estimate on WebGPU (RunMemoryOptions.webgpuActivations): hand-worked', () => {
  // Llama: C 128, q = 4 heads × 32 = 128, kv = 2 × 32 = 64, I 384, 2 layers, V 2048; 8 rows × (16 + 16) tokens.
  const c = llamaShape({ fam: 'llama', V: 2048, C: 128, I: 384, L: 2, nh: 4, nkv: 2, d: 32, tied: true });
  const lora = { r: 4, targets: ['q_proj' as const, 'v_proj' as const] };
  const run = { batchSize: 8, miniBatches: 1, promptLength: 16, responseLength: 16 };
  const N = 8 * 32;
  const gpu = { scorers: 2, lora, fusedLogprob: true, inPlaceCache: true, webgpu: true, wteTrains: false };

  it('the update: per token per layer 4 · (C + q + kv) + 10.5 · I + 2.5 · nh · T, 32 · C outside, the logits and wte apart', () => {
    const all = phaseFloats(c, run, { ...gpu, lora: { r: 4, targets: [...LLAMA_LORA_TARGETS] } });
    const perLayerAll = 4 * (128 + 128 + 64) + 10.5 * 384 + 2.5 * 4 * 32; // 1280 + 4032 + 320 = 5632
    const logits = LOGITS_UPDATE_FUSED * 8 * 16 * 2048; // 1 310 720
    const wte = 2 * 2048 * 128; // the f32 base's two kept copies of the embedding (WTE_TAPE_COPIES)
    expect(all.update).toBe(2 * N * perLayerAll + 32 * N * 128 + logits + wte); // 2 883 584 + 1 048 576 + …
    // GPT-2's four names (the config's default) mean all seven; full fine-tuning is counted as all seven too.
    expect(phaseFloats(c, run, { ...gpu, lora: { r: 4, targets: [...LORA_TARGETS] } }).update).toBe(
      all.update,
    );
    expect(phaseFloats(c, run, { ...gpu, lora: null }).update).toBe(all.update);
    // LoRA on q_proj and v_proj only: k_proj and o_proj hold 1 float less per output feature (kv 64, C 128),
    // gate_proj and up_proj 2 per intermediate feature each, down_proj 1.5.
    const saved = 1 * (64 + 128) + 2 * 2 * 384 + 1.5 * 384; // 192 + 1536 + 576 = 2304
    const perLayer = perLayerAll - saved; // 3328
    const p = phaseFloats(c, run, gpu);
    expect(p.update).toBe(2 * N * perLayer + 32 * N * 128 + logits + wte);
    // With recompute: one block's update at a time, and 4 · C per token per layer of saved inputs.
    const r = phaseFloats(c, { ...run, recompute: true }, gpu);
    expect(r.update).toBe(N * perLayer + 32 * N * 128 + 4 * 2 * N * 128 + logits + wte);
    // GPT-2 (C 64): c_attn alone leaves out attn.c_proj (0), c_fc (5 · C) and mlp.c_proj (4 · C).
    const g = bytesShape(2, 64, 4);
    expect(phaseFloats(g, run, { ...gpu, lora: { r: 4, targets: ['c_attn'] } }).update).toBe(
      phaseFloats(g, run, { ...gpu, lora: { r: 4, targets: [...LORA_TARGETS] } }).update - 2 * N * 9 * 64,
    );
  });

  it('scoring: one block at a time, 8 · C + 3 · (q + kv) + 3.5 · I + 2 · nh · T per token, 1.5 floats a response logit', () => {
    const p = phaseFloats(c, run, gpu);
    const perToken = 8 * 128 + 3 * (128 + 64) + 3.5 * 384 + 2 * 4 * 32; // 1024 + 576 + 1344 + 256 = 3200
    expect(p.score).toBe(N * perToken + 1.5 * 8 * 16 * 2048);
    // GPT-2: 24 · C + 2 · nh · T per token.
    const g = bytesShape(2, 64, 4);
    expect(phaseFloats(g, run, { ...gpu, lora: null }).score).toBe(
      N * (24 * 64 + 2 * 4 * 32) + 1.5 * 8 * 16 * g.vocab_size,
    );
    // Generation is counted as before (the in-place cache): the flag leaves it alone.
    expect(p.generate).toBe(phaseFloats(c, run, { ...gpu, webgpu: false }).generate);
  });

  it('an update recorded whole is held through generation and scoring: the peak adds it to the larger of the two', () => {
    const opts: RunMemoryOptions = {
      lora,
      valueModel: 'none',
      rewardModel: false,
      inPlaceCache: true,
      fusedLogprob: true,
      webgpuActivations: true,
    };
    const p = phaseFloats(c, run, gpu);
    const whole = estimateRunMemory(c, run, opts);
    const trainable = whole.trainableParams;
    // The recording keeps its outputs, the gradients, too: counted once, as their own part (parts.gradients).
    expect(whole.parts.activations).toBe((p.update + Math.max(p.generate, p.score)) * 4);
    expect(whole.parts.gradients).toBe(trainable * 4);
    // updateReplay off, or the recordings dropped after the device ran out: nothing held, the largest phase.
    const unrecorded = estimateRunMemory(c, { ...run, updateRecorded: false }, opts);
    expect(unrecorded.parts.activations).toBe(
      (Math.max(p.generate, p.score, p.update + trainable) - trainable) * 4,
    );
    expect(whole.peakPhase).toBe(p.score > p.generate ? 'score' : 'generate');
    // In micro-batches of 4 the update runs through tfjs (no recording): the largest phase alone, as before.
    const micro = { ...run, microBatchSize: 4 };
    const pm = phaseFloats(c, micro, gpu);
    const sliced = estimateRunMemory(c, micro, opts);
    const largest = Math.max(pm.generate, pm.score, pm.update + 2 * trainable);
    expect(sliced.parts.activations).toBe((largest - trainable) * 4);
    // PPO: the value model's update is a recording of its own, its blocks held beside the policy's.
    const ppo = estimateRunMemory(c, run, { ...opts, valueModel: 'shared' });
    // On the shared base the value model's adapters are on the policy's layers (q and v): the same savings.
    const value = 2 * N * (4 * (128 + 128 + 64) + 10.5 * 384 + 2.5 * 4 * 32 - 2304) + 32 * N * 128;
    expect(ppo.parts.activations).toBe((p.update + value + Math.max(p.generate, p.score)) * 4);
    // A separate value model trains every weight of its own trunk: counted in full.
    const separate = estimateRunMemory(c, run, { ...opts, valueModel: 'separate' });
    const full = value + 2 * N * 2304;
    expect(separate.parts.activations).toBe((p.update + full + Math.max(p.generate, p.score)) * 4);
  });
});
