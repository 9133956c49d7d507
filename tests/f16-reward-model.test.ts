/**
 * Issue #36, "the value head and reward model follow the same rule": with baseDtype "f16" a learned reward model
 * (frozen, like the base) of the Llama families is held with its large matrices packed in f16 and its head f32; a
 * GPT-2-family one stays f32; a trainable scalar model is refused. On weights already exact in f16 the packed reward
 * model scores as the f32 one (WebGPU in Node, SwiftShader here). Inside a run and through a checkpoint:
 * tests/f16-base-trainer.slow.test.ts (its GRPO case scores with such a model).
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { rmSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { f16ExactFolder, f16RewardFiles, normals, packedTrunkParams, relDiff } from './helpers/f16-base';
import { configBytes, loadScalar, memoryFiles, scalarSafetensors } from '../src/core/model/folder';
import { ScalarModel } from '../src/core/model/heads';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { isPackedF16 } from '../src/core/kernels/webgpu-f16';
import { REWARD_FILE } from '../src/core/reward/reward-model';
import { isUserError } from '../src/common/errors';

const adapter = await webGpuAdapter();

describe('a learned reward model under baseDtype "f16" (WebGPU, Node)', () => {
  if (!adapter) return skipWithoutAdapter();
  let dir = '';
  let rm = new Map<string, Uint8Array>();
  beforeAll(async () => {
    await useNodeWebGpu();
    dir = await f16ExactFolder();
    rm = await f16RewardFiles(dir);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('loads packed (head f32) and scores as the f32 model on f16-exact weights', async () => {
    const before = tf.memory().numTensors;
    const f32 = await loadScalar(memoryFiles('rm', rm), REWARD_FILE, { trainable: false });
    const f16 = await loadScalar(memoryFiles('rm', rm), REWARD_FILE, { trainable: false, baseDtype: 'f16' });
    try {
      expect(packedTrunkParams(f32)).toBe(0);
      // Qwen3-tiny, tied head: the embedding and the seven projections of each of its 2 layers.
      expect(packedTrunkParams(f16)).toBe(1 + 7 * 2);
      expect(isPackedF16(f16.score)).toBe(false);
      const ids = tf.tensor2d([3, 17, 40, 99, 0, 5, 61, 7], [2, 4], 'int32');
      const mask = tf.tensor2d([1, 1, 1, 1, 0, 1, 1, 1], [2, 4], 'int32');
      // lastTokenValues leaves its intermediates to the caller's tidy, as the engine's scoring does.
      const v32 = tf.tidy(() => f32.lastTokenValues(ids, mask));
      const v16 = tf.tidy(() => f16.lastTokenValues(ids, mask));
      const [a, b] = [await v32.data(), await v16.data()];
      tf.dispose([ids, mask, v32, v16]);
      // The same numbers in both; only the order of the f32 sums differs (the packed kernel's tiles).
      expect(relDiff(b, a)).toBeLessThan(1e-5);
      expect(Math.abs(a[0] - a[1])).toBeGreaterThan(1e-3);
    } finally {
      f32.dispose();
      f16.dispose();
    }
    expect(tf.memory().numTensors, 'tensors left behind').toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a GPT-2-family reward model stays f32; a trainable one is refused in words', async () => {
    const config = parseGPT2Config({
      model_type: 'gpt2',
      n_layer: 1,
      n_embd: 32,
      n_head: 2,
      n_positions: 16,
      vocab_size: 258,
      tokenizer: 'bytes',
    });
    const lm = GPT2.random(config, 4, false, 'g');
    const arrays = await lm.toArrays();
    lm.dispose();
    arrays.set('score.weight', normals(32, 2, 0.5));
    const src = ScalarModel.fromArrays(config, arrays, false, 'g-src');
    const files = memoryFiles(
      'gpt2-rm',
      new Map([
        ['config.json', configBytes(config)],
        [REWARD_FILE, await scalarSafetensors(src)],
      ]),
    );
    src.dispose();
    const m = await loadScalar(files, REWARD_FILE, { trainable: false, baseDtype: 'f16' });
    expect(packedTrunkParams(m)).toBe(0);
    m.dispose();
    const e = await loadScalar(memoryFiles('rm', rm), REWARD_FILE, {
      trainable: true,
      baseDtype: 'f16',
    }).catch((x: unknown) => x);
    expect(isUserError(e)).toBe(true);
    expect((e as Error).message).toMatch(
      /"baseDtype" "f16" is for the frozen base.*built trainable.*or "baseDtype" to "f32"/,
    );
  });
});
