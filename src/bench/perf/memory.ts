/**
 * Tensor memory of the four-model PPO (policy, reference, value, learned reward model of the same shape, and the
 * two Adam optimizers) at a given GPT-2 shape with random weights, after one PPO step and optionally after many.
 * Counts `tf.memory().numBytes` (the engine's bytes of live tensors: the same on every backend) relative to
 * the count before the models were built, and on WebGPU the backend's buffer pool (`numBytesAllocatedInGPU`,
 * which never shrinks: docs/tfjs.md trap 3).
 */
import * as tf from '@tensorflow/tfjs-core';
import { TfjsAdam } from '../../core/optim/fused-adam';
import { validateConfig, type TrainConfig } from '../../common/config';
import { parseGPT2Config, type GPT2Config } from '../../core/model/config';
import { GPT2 } from '../../core/model/gpt2';
import { ScalarModel } from '../../core/model/heads';
import { LoraAdapters, LORA_DEFAULTS } from '../../core/model/lora';
import { estimateRunMemory, paramCount } from '../../core/model/size';
import { buildTrainer, type Resources } from '../../core/ppo/setup';
import type { Tokenizer } from '../../core/tokenizer/types';
import type { PpoTrainer } from '../../core/ppo/trainer';

/** The shapes of the issue. `tiny` is read from the shipped model's config by the caller when it can. */
export const SHAPES: Record<'distilgpt2' | 'gpt2' | 'gpt2-medium', Record<string, unknown>> = {
  distilgpt2: {
    vocab_size: 50257,
    n_positions: 1024,
    n_embd: 768,
    n_layer: 6,
    n_head: 12,
    tokenizer: 'gpt2-bpe',
    bos_token_id: 50256,
    eos_token_id: 50256,
  },
  gpt2: {
    vocab_size: 50257,
    n_positions: 1024,
    n_embd: 768,
    n_layer: 12,
    n_head: 12,
    tokenizer: 'gpt2-bpe',
    bos_token_id: 50256,
    eos_token_id: 50256,
  },
  // gpt2-medium (355M): 24 layers, width 1024, 16 heads.
  'gpt2-medium': {
    vocab_size: 50257,
    n_positions: 1024,
    n_embd: 1024,
    n_layer: 24,
    n_head: 16,
    tokenizer: 'gpt2-bpe',
    bos_token_id: 50256,
    eos_token_id: 50256,
  },
};

export function shapeConfig(raw: Record<string, unknown>): GPT2Config {
  return parseGPT2Config(raw, 'bench shape');
}

/** Parameters of one GPT-2 trunk (with the tied head): src/core/model/size.ts. */
export const gpt2Params = (c: GPT2Config): number => paramCount(c);

/**
 * What the four models and two optimizers hold after a step (src/core/model/size.ts without gradients or
 * activations, which are gone by then): policy, reference, value and reward models, Adam's m and v for the
 * policy and the value model, float32.
 */
export function expectedFourModelBytes(c: GPT2Config): number {
  const { parts } = estimateRunMemory(
    c,
    { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 },
    { valueModel: 'separate', rewardModel: true },
  );
  return parts.base + parts.reference + parts.value + parts.rewardModel + parts.adam;
}

/** What the weights, adapters and optimizer moments of a setup take (no gradients or activations). */
export function expectedSetupBytes(c: GPT2Config, setup: MemorySetup): number {
  if (setup === 'four-model') return expectedFourModelBytes(c);
  const { parts } = estimateRunMemory(
    c,
    { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 },
    {
      lora: { r: MEMORY_LORA_RANK, targets: LORA_DEFAULTS.loraTargets },
      valueModel: setup === 'grpo-lora' ? 'none' : 'shared',
      rewardModel: false,
    },
  );
  return parts.base + parts.reference + parts.value + parts.rewardModel + parts.adapters + parts.adam;
}

export interface GpuMemory {
  numBytesInGPU: number;
  numBytesAllocatedInGPU: number;
}

/** WebGPU's buffer-manager counters (tfjs-backend-webgpu's `memory()`), or null on other backends. */
export function gpuMemory(): GpuMemory | null {
  const m = tf.memory() as tf.MemoryInfo & Partial<GpuMemory>;
  if (typeof m.numBytesAllocatedInGPU !== 'number') return null;
  return { numBytesInGPU: m.numBytesInGPU ?? 0, numBytesAllocatedInGPU: m.numBytesAllocatedInGPU };
}

/**
 * What is built: 'four-model' (full fine-tuning: policy, reference, value and learned reward model of the same
 * shape, two Adams), 'lora-ppo' (PPO with LoRA r 8 on one frozen base, the value model shared with its own
 * adapters, a reward function), 'grpo-lora' (GRPO with LoRA r 8, no value model, a reward function, groups of 4).
 */
export type MemorySetup =
  | 'four-model'
  | 'lora-ppo'
  | 'grpo-lora'
  /** 'lora-ppo' at batch 64 (peakGrowthBatch). */
  | 'lora-ppo-b64'
  /** 'lora-ppo' with recompute off (recomputeSlowdown). */
  | 'lora-ppo-recompute-off';

/** The LoRA rank of the 'lora-ppo' and 'grpo-lora' setups. */
export const MEMORY_LORA_RANK = 8;

export interface FourModelMemory {
  shape: string;
  /** Absent: 'four-model' (results from before the setups existed). */
  setup?: MemorySetup;
  backend: string;
  /** 'fused' (the trainer's own FusedAdamOptimizer) or 'tfjs' (tf.train.adam swapped in; the same state). */
  adam: 'tfjs' | 'fused';
  params: number;
  batchSize: number;
  responseLength: number;
  /** numBytes after step 1 minus before the models were built. */
  bytesAfterStep1: number;
  /** What the weights and optimizer moments alone take (expectedFourModelBytes, or expectedSetupBytes). */
  expectedBytes: number;
  tensorsAfterStep1: number;
  /**
   * Highest numBytes at any moment of step 1 (peakBytesDuring), relative to the baseline; null where not measured.
   * tfjs's count: a buffer viewed by several tensors (autodiff's saved clones, reshapes) counts once per tensor.
   */
  peakBytesStep1: number | null;
  /**
   * The most bytes of distinct tensor buffers live at any moment of step 1, relative to the baseline: what is held
   * when it starts plus peakMemoryDuring's growth (each buffer once, however many tensors view it). Null where not
   * measured.
   */
  peakLiveBytesStep1?: number | null;
  /** The pre-flight estimate of the step's peak (trainer.memoryEstimate: what the CLI and the app check). */
  estimatedPeakBytes?: number;
  /** The WASM heap's size after step 1 (it only grows: its high-water mark); null on other backends. */
  heapBytes?: number | null;
  /** The update phase of step 1 (timeUpdate), seconds. */
  updateSeconds?: number;
  /** The micro-batch and recompute the step ran with (the trainer's plan). */
  microBatchSize?: number;
  recompute?: boolean;
  gpuAfterStep1: GpuMemory | null;
  stepSeconds: number;
  /** Steps run in total (1 when only the first step was measured). */
  steps: number;
  bytesAfterLastStep: number;
  /** bytesAfterLastStep − bytesAfterStep1. */
  growthBytes: number;
  tensorGrowth: number;
  gpuGrowthBytes: number | null;
}

export interface MemoryBenchOptions {
  label: string;
  /** Default 'four-model'. */
  setup?: MemorySetup;
  /** Samples per prompt (grpo-lora; default the algorithm's, 4). */
  groupSize?: number;
  config: GPT2Config;
  tokenizer: Tokenizer;
  prompts: string[];
  batchSize: number;
  responseLength: number;
  /** Total steps (≥ 1); growth is measured from step 1 to this. */
  steps: number;
  /** Measure the peak of step 1 (peakBytesDuring: every change of the engine's byte count). */
  profilePeak?: boolean;
  /** Config keys over the setup's (microBatchSize, recompute, …). */
  overrides?: Partial<TrainConfig>;
  /**
   * Swap the trainer's two fused Adams (fused-adam.ts) for tfjs's own Adam (TfjsAdam): the same optimizer state (m and v per
   * variable, the iteration count, accBeta1/2), so the same bytes after a step, but a far higher peak, and on the
   * CPU backend ~100 s of element-wise Adam ops per GPT-2-sized model.
   */
  tfjsAdam?: boolean;
  onProgress?: (msg: string) => void;
}

/**
 * Build the setup's models with random weights and a trainer, as `buildTrainer` does for a real run: the four
 * models, or (LoRA) one frozen base with the policy's adapters (seed 1) and for PPO the shared value model's
 * (seed 2), the same seeds buildTrainer uses for seed 1.
 */
export async function randomFourModelTrainer(o: MemoryBenchOptions): Promise<PpoTrainer> {
  const setup = o.setup ?? 'four-model';
  const lora = setup !== 'four-model';
  const cfg = validateConfig(
    {
      model: o.label,
      task: null,
      prompts: o.prompts,
      // A reward function for the LoRA setups (no fourth model); a learned reward model of the same shape for four.
      reward: lora ? 'sentiment' : { model: `random-${o.label}` },
      batchSize: o.batchSize,
      responseLength: o.responseLength,
      steps: Math.max(1, o.steps),
      seed: 1,
      ...(lora
        ? {
            lora: MEMORY_LORA_RANK,
            // The default 2 minibatches (the update's rows, what its peak depends on); one epoch, since a second
            // one repeats the same tensors and only doubles the time.
            ppoEpochs: 1,
            algorithm: setup === 'grpo-lora' ? 'grpo' : 'ppo',
            ...(setup !== 'grpo-lora' ? { valueModel: 'shared' } : {}),
            ...(o.groupSize ? { groupSize: o.groupSize } : {}),
          }
        : { miniBatches: 1, ppoEpochs: 1 }),
      ...o.overrides,
    },
    'memory bench',
  );
  const res: Resources = {
    modelFiles: () => {
      throw new Error('memory bench: models are random; nothing to load');
    },
    loadTask: () => Promise.reject(new Error('memory bench: no task')),
  };
  if (lora) {
    const ref = GPT2.random(o.config, 1, false, 'base');
    const policy = ref.withLora(LoraAdapters.create(ref.config, cfg, cfg.seed, 'policy'), 'policy');
    const value =
      setup !== 'grpo-lora'
        ? ScalarModel.onSharedBase(
            policy.base,
            LoraAdapters.create(ref.config, cfg, cfg.seed + 1, 'value'),
            'value',
          )
        : null;
    return buildTrainer(cfg, res, { weights: { policy, ref, value, tokenizer: o.tokenizer } });
  }
  const policy = GPT2.random(o.config, 1, true, 'policy');
  const ref = policy.clone(false, 'ref');
  const value = ScalarModel.fromTrunk(policy, true, 'value');
  const rewardModel = ScalarModel.random(o.config, 2, false, 'reward');
  const t = await buildTrainer(cfg, res, {
    weights: { policy, ref, value, rewardModel, tokenizer: o.tokenizer },
  });
  if (o.tfjsAdam) {
    t.policyOpt.dispose();
    t.valueOpt?.dispose();
    t.policyOpt = new TfjsAdam(cfg.learningRate, 0.9, 0.999);
    t.valueOpt = new TfjsAdam(cfg.valueLearningRate, 0.9, 0.999);
  }
  return t;
}

import { peakMemoryDuring } from '../../core/base/memory-peak';
export { peakBytesDuring, peakMemoryDuring, type PeakMemory } from '../../core/base/memory-peak';

export function disposeTrainer(t: PpoTrainer): void {
  const { policy, ref, value, reward } = t.models;
  t.disposeOptimizers();
  policy.dispose();
  ref.dispose();
  value?.dispose();
  if (reward.kind === 'model') reward.model.dispose();
}

export async function benchFourModelMemory(o: MemoryBenchOptions): Promise<FourModelMemory> {
  const base = tf.memory().numBytes;
  const baseTensors = tf.memory().numTensors;
  const gpuBase = gpuMemory();
  o.onProgress?.(`${o.label}: building four models with random weights`);
  const trainer = await randomFourModelTrainer(o);
  try {
    o.onProgress?.(`${o.label}: PPO step 1`);
    const t0 = performance.now();
    let peak: number | null = null;
    let peakLive: number | null = null;
    let updateSeconds = 0;
    if (o.profilePeak) {
      // Bytes held when the step starts (the weights, adapters, optimiser state: distinct buffers between
      // steps), plus the most the step's own buffers grow beyond them.
      const held = tf.memory().numBytes - base;
      const measured = await peakMemoryDuring(async () => {
        updateSeconds = (await trainer.trainStep()).metrics.timeUpdate;
      });
      peak = measured.numBytes - base;
      peakLive = held + measured.liveBytesGrowth;
    } else {
      updateSeconds = (await trainer.trainStep()).metrics.timeUpdate;
    }
    const plan = trainer.stepPlan();
    const heap = (tf.backend() as unknown as { wasm?: { HEAPU8?: Uint8Array } }).wasm?.HEAPU8?.length ?? null;
    const stepSeconds = (performance.now() - t0) / 1000;
    const after1 = tf.memory().numBytes - base;
    const tensors1 = tf.memory().numTensors - baseTensors;
    const gpu1 = gpuMemory();
    for (let s = 2; s <= o.steps; s++) {
      await trainer.trainStep();
      if (s % 50 === 0 || s === o.steps)
        o.onProgress?.(`${o.label}: step ${s}/${o.steps}, ${tf.memory().numBytes - base} bytes`);
    }
    const afterN = tf.memory().numBytes - base;
    const gpuN = gpuMemory();
    return {
      shape: o.label,
      setup: o.setup ?? 'four-model',
      backend: tf.getBackend(),
      adam: o.tfjsAdam ? 'tfjs' : 'fused',
      params: gpt2Params(o.config),
      batchSize: o.batchSize,
      responseLength: o.responseLength,
      bytesAfterStep1: after1,
      expectedBytes: expectedSetupBytes(o.config, o.setup ?? 'four-model'),
      tensorsAfterStep1: tensors1,
      peakBytesStep1: peak,
      peakLiveBytesStep1: peakLive,
      estimatedPeakBytes: trainer.memoryEstimate().total,
      heapBytes: tf.getBackend() === 'wasm' ? heap : null,
      updateSeconds,
      microBatchSize: plan.microBatchSize,
      recompute: plan.recompute,
      gpuAfterStep1:
        gpu1 && gpuBase
          ? {
              numBytesInGPU: gpu1.numBytesInGPU - gpuBase.numBytesInGPU,
              numBytesAllocatedInGPU: gpu1.numBytesAllocatedInGPU - gpuBase.numBytesAllocatedInGPU,
            }
          : null,
      stepSeconds,
      steps: o.steps,
      bytesAfterLastStep: afterN,
      growthBytes: afterN - after1,
      tensorGrowth: tf.memory().numTensors - baseTensors - tensors1,
      gpuGrowthBytes: gpu1 && gpuN ? gpuN.numBytesAllocatedInGPU - gpu1.numBytesAllocatedInGPU : null,
    };
  } finally {
    disposeTrainer(trainer);
  }
}
