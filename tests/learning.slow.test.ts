/**
 * Learning, end to end on the WASM backend: PPO on the shipped tiny model and the sentiment task raises the
 * mean reward of the last 10 of 30 steps clearly above the first 10, with the KL finite.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { nodeResources } from '../src/cli/train';

describe('PPO learns', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
  });

  it('sentiment reward: last 10 of 30 steps clearly beat the first 10 (tiny model, WASM)', async () => {
    const cfg = validateConfig({
      model: 'tiny',
      task: 'sentiment',
      seed: 1,
      steps: 30,
      batchSize: 16,
      miniBatches: 2,
      ppoEpochs: 2,
      learningRate: 5e-4,
      valueLearningRate: 1e-3,
      klCoef: 0.02,
      responseLength: 16,
    });
    const t = await buildTrainer(cfg, nodeResources);
    const rewards: number[] = [];
    const kls: number[] = [];
    for (let i = 0; i < 30; i++) {
      const r = await t.trainStep();
      rewards.push(r.metrics.reward);
      kls.push(r.metrics.kl);
    }
    t.disposeOptimizers();
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const first = mean(rewards.slice(0, 10));
    const last = mean(rewards.slice(20));
    console.log(
      `sentiment reward: first 10 steps ${first.toFixed(3)}, last 10 ${last.toFixed(3)}; final KL ${kls[29].toFixed(3)}`,
    );
    expect(last - first).toBeGreaterThan(0.15);
    for (const k of kls) expect(Number.isFinite(k)).toBe(true);
    expect(tf.getBackend()).toBe('wasm');
  }, 900_000);
});
