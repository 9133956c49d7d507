/**
 * Soak: 500 PPO steps of the shipped tiny model on WASM with tensor count and bytes flat (small batch so it
 * fits in CI). A leak of even one tensor per step would show as +490 here.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { nodeResources } from '../src/cli/train';

describe('soak', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
  });

  it('500 steps: tf.memory() tensors and bytes are flat', async () => {
    const cfg = validateConfig({
      model: 'tiny',
      task: 'sentiment',
      seed: 2,
      steps: 500,
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
    });
    const t = await buildTrainer(cfg, nodeResources);
    await t.trainStep();
    await t.trainStep();
    const start = tf.memory();
    const t0 = performance.now();
    for (let i = 2; i < 500; i++) await t.trainStep();
    const end = tf.memory();
    console.log(
      `soak: 498 steps in ${((performance.now() - t0) / 1000).toFixed(0)} s; tensors ${start.numTensors} → ${end.numTensors}, bytes ${start.numBytes} → ${end.numBytes}`,
    );
    expect(t.step).toBe(500);
    expect(end.numTensors).toBe(start.numTensors);
    expect(end.numBytes).toBe(start.numBytes);
    t.disposeOptimizers();
  }, 1_200_000);
});
