/**
 * The binding limit wired through model loading (Resources.maxBindingBytes → buildTrainer, restoreTrainer →
 * loadLM / loadScalar → GPT2Options.maxBindingBytes; the worker sets it on WebGPU, docs/tfjs.md trap 8): a
 * forced small limit on the WASM backend builds every model with wte in vocabulary chunks, and a PPO run gives
 * the unsplit run's metrics, for LoRA and for full fine-tuning, from a fresh build and from a restored checkpoint.
 * On Node WebGPU (where an adapter exists), the chunked model's logits equal the unsplit model's.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { buildTrainer, type BuildOptions, type Resources } from '../src/core/ppo/setup';
import type { PpoTrainer } from '../src/core/ppo/trainer';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { loadLM, memoryFiles } from '../src/core/model/folder';
import { GPT2 } from '../src/core/model/gpt2';
import { readSafetensors } from '../src/core/model/safetensors';
import { parseGPT2Config } from '../src/core/model/config';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import type { StepMetrics } from '../src/common/metrics';

const adapter = await webGpuAdapter();

let dir: string;
/** The tiny folder's wte is 258 × 32 float32: rows of 128 bytes. 100 rows per chunk: [100, 100, 58]. */
const LIMIT = 100 * 128 + 60;
const res = (maxBindingBytes?: number): Resources => ({
  modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p),
  loadTask: loadTaskNode,
  ...(maxBindingBytes !== undefined ? { maxBindingBytes } : {}),
});
const meanByte: BuildOptions = {
  rewardFn: {
    label: 'mean-byte',
    fn: (s) => s.responseTokens.reduce((a, b) => a + b, 0) / (256 * s.responseTokens.length),
  },
};
const TIMING = new Set(['tokensPerSecond', 'timeGenerate', 'timeScore', 'timeUpdate', 'timeStep']);
/** The metrics that do not depend on the clock. */
const untimed = (m: StepMetrics) => Object.fromEntries(Object.entries(m).filter(([k]) => !TIMING.has(k)));

/** Step 1's metrics of its rollout (sampled and scored before any update). */
const ROLLOUT = [
  'reward',
  'rewardStd',
  'kl',
  'nonScoreReward',
  'responseLength',
  'advantageMean',
  'returnMean',
];

/**
 * Step 1's rollout is the same bits (the forward gathers and multiplies the same numbers in the same order, so
 * the same tokens are sampled and scored). What follows an update agrees to float32 rounding: the backward
 * sums the tied head's gradient into the hidden states chunk by chunk, in another order, so the gradients (and
 * the weights after the first minibatch) may differ in float32's last bit.
 */
function expectSameStep(b: StepMetrics, a: StepMetrics, exact: readonly string[], what: string): void {
  const [x, y] = [untimed(a), untimed(b)];
  expect(Object.keys(y).sort()).toEqual(Object.keys(x).sort());
  for (const [k, want] of Object.entries(x)) {
    const got = y[k];
    if (typeof want !== 'number' || typeof got !== 'number' || exact.includes(k))
      expect(got, `${k} at ${what}`).toEqual(want);
    else
      expect(Math.abs(got - want), `${k} at ${what}`).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(want)));
  }
}

function config(over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({
    model: 'tiny-test',
    task: null,
    prompts: ['Hello', 'The day', 'We', 'A long time ago'],
    seed: 3,
    steps: 4,
    batchSize: 4,
    miniBatches: 2,
    ppoEpochs: 1,
    responseLength: 6,
    learningRate: 1e-2,
    valueLearningRate: 1e-2,
    ...over,
  });
}

const chunkRows = (t: PpoTrainer) => [
  t.models.policy.wteChunkRows,
  t.models.ref.wteChunkRows,
  t.models.value?.trunkModel.wteChunkRows ?? null,
];

beforeAll(async () => {
  await setNodeBackend('wasm');
  dir = await makeTinyFolder({ n_layer: 1, n_embd: 32, n_head: 2 });
});

describe.each([
  ['LoRA r=4, shared value', { lora: 4, loraAlpha: 8 }],
  ['full fine-tuning', { lora: 0 }],
])('a forced binding limit through buildTrainer on WASM: %s', (_name, over) => {
  it('builds every model chunked and gives the unsplit run’s metrics, steps 1 and 2', async () => {
    const whole = await buildTrainer(config(over), res(), meanByte);
    const chunked = await buildTrainer(config(over), res(LIMIT), meanByte);
    try {
      expect(chunkRows(whole)).toEqual([258, 258, 258]);
      expect(chunkRows(chunked)).toEqual([100, 100, 100]);
      for (let step = 1; step <= 2; step++) {
        const a = await whole.trainStep();
        const b = await chunked.trainStep();
        if (step === 1) expect(a.metrics.kl).toBe(0);
        expectSameStep(b.metrics, a.metrics, step === 1 ? ROLLOUT : [], `step ${step}`);
      }
    } finally {
      whole.disposeAll();
      chunked.disposeAll();
    }
  });

  it('restores a checkpoint of the unsplit run into chunked models and continues it the same', async () => {
    const t = await buildTrainer(config(over), res(), meanByte);
    let restored: PpoTrainer | null = null;
    try {
      await t.trainStep();
      const files = await checkpointFiles(t);
      restored = await restoreTrainer(memoryFiles('ckpt', files), res(LIMIT), meanByte);
      expect(chunkRows(restored)).toEqual([100, 100, 100]);
      const a = await t.trainStep();
      const b = await restored.trainStep();
      expectSameStep(b.metrics, a.metrics, [], 'step 2 after the restore');
    } finally {
      t.disposeAll();
      restored?.disposeAll();
    }
  });
});

describe('a checkpoint of a chunked full fine-tuning run', () => {
  it('names wte’s Adam moments wte.weight (no chunk names) and restores unsplit, continuing the same', async () => {
    const t = await buildTrainer(config({ lora: 0 }), res(LIMIT), meanByte);
    let restored: PpoTrainer | null = null;
    try {
      await t.trainStep();
      const files = await checkpointFiles(t);
      const names = [...readSafetensors(files.get('optimizer.safetensors')!, 'opt').tensors.keys()];
      expect(names).toContain('policy.m.wte.weight');
      expect(names).toContain('value.v.wte.weight');
      expect(names.filter((n) => n.includes('chunk'))).toEqual([]);
      restored = await restoreTrainer(memoryFiles('ckpt', files), res(), meanByte);
      expect(chunkRows(restored)).toEqual([258, 258, 258]);
      const a = await t.trainStep();
      const b = await restored.trainStep();
      expectSameStep(b.metrics, a.metrics, [], 'step 2 after the restore');
    } finally {
      t.disposeAll();
      restored?.disposeAll();
    }
  });
});

describe('loadLM with maxBindingBytes', () => {
  it('holds wte in chunks and writes the same weights back (names and values in files unchanged)', async () => {
    const whole = await loadLM(nodeFiles(dir), { trainable: false });
    const chunked = await loadLM(nodeFiles(dir), { trainable: false, maxBindingBytes: LIMIT });
    try {
      expect(chunked.model.wteChunkRows).toBe(100);
      expect(chunked.model.params.has('wte.weight')).toBe(false);
      const [a, b] = [await whole.model.toArrays(), await chunked.model.toArrays()];
      expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
      for (const [k, v] of a) expect(b.get(k), k).toEqual(v);
    } finally {
      whole.model.dispose();
      chunked.model.dispose();
    }
  });
});

describe('chunked vs unsplit logits on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  it('equal logits for ids in every chunk (tiny shapes)', async () => {
    await useNodeWebGpu();
    const cfg = parseGPT2Config({
      vocab_size: 258,
      n_positions: 16,
      n_embd: 32,
      n_layer: 1,
      n_head: 2,
      tokenizer: 'bytes',
      bos_token_id: 256,
      eos_token_id: 256,
      pad_token_id: 257,
    });
    const src = GPT2.random(cfg, 7, false, 'wgpu_src');
    const arrays = await src.toArrays();
    src.dispose();
    const whole = GPT2.fromArrays(cfg, arrays, false, 'wgpu_whole');
    const chunked = GPT2.fromArrays(cfg, arrays, false, 'wgpu_chunked', { maxBindingBytes: LIMIT });
    try {
      expect(chunked.wteChunkRows).toBe(100);
      const ids = [
        [0, 99, 100, 199, 200, 257],
        [256, 5, 150, 42, 230, 101],
      ];
      const mask = ids.map((r) => r.map(() => 1));
      const run = async (m: GPT2) => {
        const out = tf.tidy(() =>
          m.logits(tf.tensor2d(ids, undefined, 'int32'), tf.tensor2d(mask, undefined, 'int32')),
        );
        const data = await out.data();
        out.dispose();
        return data;
      };
      const [a, b] = [await run(whole), await run(chunked)];
      expect(b.length).toBe(2 * 6 * 258);
      let worst = 0;
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
      // The same float32 products summed in the same order per logit: equal up to the GPU's own rounding.
      expect(worst).toBeLessThanOrEqual(1e-5);
      expect(await webGpuErrors()).toEqual([]);
    } finally {
      whole.dispose();
      chunked.dispose();
      await setNodeBackend('wasm');
    }
  });
});
