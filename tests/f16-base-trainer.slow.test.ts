/**
 * baseDtype "f16" through a whole run (issue #36): buildTrainer loads the LoRA base packed in f16 on WebGPU (Node,
 * Dawn; SwiftShader here), and a checkpoint restores it packed again. On weights already exact in f16 (the
 * fixture's Qwen3 rounded to f16 first) the f16 run must be the f32 run: the same tokens, metrics within 1e-6
 * relative, adapters within 1e-6 of their scale — for GRPO (old log-probs from the update) and PPO with a value
 * model on the shared base.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { buildTrainer } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { readSafetensors, writeSafetensors } from '../src/core/model/safetensors';
import { f16Rows, isPackedF16, packF16, roundToF16 } from '../src/core/kernels/webgpu-f16';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import type { TrainConfig } from '../src/common/config';
import type { PpoTrainer, StepResult } from '../src/core/ppo/trainer';
import { maxRelToScale, trainedWeights } from './helpers/weights';

const adapter = await webGpuAdapter();
let dir = '';
const res = tinyResources(() => dir);
const reward = {
  rewardFn: {
    label: 'mean-id',
    fn: (s: { responseTokens: number[] }) =>
      s.responseTokens.reduce((a, b) => a + b, 0) / (512 * Math.max(1, s.responseTokens.length)),
  },
};

/** The fixture's Qwen3 with every tensor rounded to f16 (so storing the base in f16 loses nothing). */
function f16ExactFolder(): string {
  const from = 'tests/fixtures/parity-llama/qwen3-tiny';
  const to = mkdtempSync(path.join(tmpdir(), 'ppo-f16-exact-'));
  for (const f of readdirSync(from)) {
    if (f.startsWith('expected')) continue;
    const bytes = readFileSync(path.join(from, f));
    if (f !== 'model.safetensors') {
      writeFileSync(path.join(to, f), bytes);
      continue;
    }
    const file = readSafetensors(new Uint8Array(bytes), f);
    const tensors = [...file.tensors.entries()].map(([name, t]) => ({
      name,
      shape: t.shape,
      data: roundToF16(Float32Array.from(t.data as ArrayLike<number>)),
    }));
    writeFileSync(path.join(to, f), writeSafetensors(tensors));
  }
  return to;
}

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
    dir = f16ExactFolder();
  });

  const cases: [string, Partial<TrainConfig>][] = [
    ['GRPO', { algorithm: 'grpo', groupSize: 2, miniBatches: 1, ppoEpochs: 1 }],
    ['PPO, value on the shared base', { algorithm: 'ppo' }],
  ];
  for (const [name, over] of cases) {
    it(`${name}: the f16 base is the f32 run on f16-exact weights; a checkpoint restores it packed`, async () => {
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
      const f32 = await buildTrainer(cfg('f32'), res, reward);
      const f16 = await buildTrainer(cfg('f16'), res, reward);
      let restored: PpoTrainer | null = null;
      try {
        expect(packedParams(f32)).toBe(0);
        expect(packedParams(f16)).toBeGreaterThan(0);
        for (let i = 0; i < 2; i++) expectSame(await f32.trainStep(), await f16.trainStep(), `step ${i + 1}`);
        expect(maxRelToScale(await trainedWeights(f32), await trainedWeights(f16))).toBeLessThanOrEqual(1e-6);
        restored = await restoreTrainer(memoryFiles('ckpt', await checkpointFiles(f16)), res, reward);
        expect(restored.cfg.baseDtype).toBe('f16');
        expect(packedParams(restored)).toBe(packedParams(f16));
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
