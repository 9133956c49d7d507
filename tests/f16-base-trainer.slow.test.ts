/**
 * baseDtype "f16" through a whole run (issue #36): buildTrainer loads the LoRA base (and a learned reward model)
 * packed in f16 on WebGPU (Node, Dawn; SwiftShader here), and a checkpoint restores them packed again. On weights already exact in f16 (the
 * fixture's Qwen3 rounded to f16 first) the f16 run must be the f32 run: the same tokens, metrics within 1e-6
 * relative, adapters within 1e-6 of their scale — for GRPO (old log-probs from the update) and PPO with a value
 * model on the shared base.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { buildTrainer } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { f16Rows, isPackedF16, packF16 } from '../src/core/kernels/webgpu-f16';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import type { TrainConfig } from '../src/common/config';
import type { PpoTrainer, StepResult } from '../src/core/ppo/trainer';
import { maxRelToScale, trainedWeights } from './helpers/weights';
import { f16ExactFolder, f16RewardFiles, packedTrunkParams } from './helpers/f16-base';
import type { ModelFiles } from '../src/core/model/folder';
import type { ScalarModel } from '../src/core/model/heads';

const adapter = await webGpuAdapter();
let dir = '';
/** The learned reward model of the GRPO case (a folder of f16-exact weights beside the policy's). */
const extra: Record<string, ModelFiles> = {};
const res = tinyResources(() => dir, extra);
const reward = {
  rewardFn: {
    label: 'mean-id',
    fn: (s: { responseTokens: number[] }) =>
      s.responseTokens.reduce((a, b) => a + b, 0) / (512 * Math.max(1, s.responseTokens.length)),
  },
};

const packedParams = (t: PpoTrainer) =>
  [...(t.models.ref as unknown as { params: Map<string, tf.Tensor> }).params.values()].filter((p) =>
    isPackedF16(p),
  ).length;

function expectSame(a: StepResult, b: StepResult, what: string) {
  expect(b.rollout.responses, what).toEqual(a.rollout.responses);
  for (const k of ['policyLoss', 'approxKl', 'entropy', 'gradNorm', 'kl', 'reward', 'valueLoss'] as const) {
    const x = a.metrics[k] as number | null | undefined;
    const y = b.metrics[k] as number | null | undefined;
    if (x === undefined || x === null) {
      expect(y ?? null, k).toBe(x ?? null);
      continue;
    }
    expect(Math.abs((y as number) - x), `${k}: ${x} vs ${y}`).toBeLessThanOrEqual(
      1e-6 * Math.max(1, Math.abs(x)),
    );
  }
}

describe('baseDtype "f16" through buildTrainer and checkpoints on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
    registerFusedAdamKernels();
    dir = await f16ExactFolder();
    extra.rm = memoryFiles('rm', await f16RewardFiles(dir));
  });

  // GRPO scores with a learned reward model, which the f16 run holds packed as well ("the reward model follows the
  // same rule"); PPO with a function.
  const cases: [string, Partial<TrainConfig>][] = [
    [
      'GRPO with a learned reward model',
      { algorithm: 'grpo', groupSize: 2, miniBatches: 1, ppoEpochs: 1, reward: { model: 'rm' } },
    ],
    ['PPO, value on the shared base', { algorithm: 'ppo' }],
  ];
  const rewardModel = (t: PpoTrainer): ScalarModel | null =>
    t.models.reward.kind === 'model' ? t.models.reward.model : null;
  for (const [name, over] of cases) {
    it(`${name}: the f16 base is the f32 run on f16-exact weights; a checkpoint restores it packed`, async () => {
      const build = over.reward ? {} : reward;
      const cfg = (baseDtype: 'f32' | 'f16') =>
        tinyConfig({
          prompts: ['abcd', 'efgh', 'ijkl', 'mnop'],
          responseLength: 4,
          lora: 4,
          loraAlpha: 8,
          learningRate: 1e-2,
          valueLearningRate: 1e-2,
          baseDtype,
          ...over,
        });
      const f32 = await buildTrainer(cfg('f32'), res, build);
      const f16 = await buildTrainer(cfg('f16'), res, build);
      let restored: PpoTrainer | null = null;
      try {
        expect(packedParams(f32)).toBe(0);
        expect(packedParams(f16)).toBeGreaterThan(0);
        const rm32 = rewardModel(f32);
        const rm16 = rewardModel(f16);
        if (over.reward) {
          // Qwen3-tiny (tied head): the embedding and the seven projections of its 2 layers; the head stays f32.
          expect(packedTrunkParams(rm32!)).toBe(0);
          expect(packedTrunkParams(rm16!)).toBe(1 + 7 * 2);
          expect(isPackedF16(rm16!.score)).toBe(false);
        } else expect(rm16).toBeNull();
        for (let i = 0; i < 2; i++) expectSame(await f32.trainStep(), await f16.trainStep(), `step ${i + 1}`);
        expect(maxRelToScale(await trainedWeights(f32), await trainedWeights(f16))).toBeLessThanOrEqual(1e-6);
        restored = await restoreTrainer(memoryFiles('ckpt', await checkpointFiles(f16)), res, build);
        expect(restored.cfg.baseDtype).toBe('f16');
        expect(packedParams(restored)).toBe(packedParams(f16));
        if (over.reward) expect(packedTrunkParams(rewardModel(restored)!)).toBe(1 + 7 * 2);
        expectSame(await f16.trainStep(), await restored.trainStep(), 'step 3 after a restore');
        expect(await webGpuErrors()).toEqual([]);
      } finally {
        f32.disposeAll();
        f16.disposeAll();
        restored?.disposeAll();
      }
    });
  }

  it('f16Rows copies packed rows word for word (tfjs slice rounds int32 words above 2^24 through f32)', async () => {
    const v = Float32Array.from({ length: 6 * 8 }, (_, i) => Math.sin(i * 1.7) * 3 + 1e-3 * i);
    const w = tf.tensor2d(packF16(v), [6, 4], 'int32');
    const want = Array.from(packF16(v).subarray(2 * 4, 5 * 4));
    const rows = f16Rows(w, 2, 3);
    expect(rows.shape).toEqual([3, 4]);
    expect(Array.from(await rows.data())).toEqual(want);
    expect(() => f16Rows(w, 5, 2)).toThrow(/rows \[5, 7\) are not within the weight's 6 rows/);
    tf.dispose([w, rows]);
  });
});
