import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { allFinite } from '../src/core/optim/optim';
import { jointGuardedStep } from '../src/core/ppo/update';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { checkpointFiles } from '../src/core/run/checkpoint';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';

describe('non-finite guard', () => {
  beforeAll(useCpu);

  it('the guarded update skips a NaN loss: weights and Adam moments unchanged', async () => {
    const w = tf.variable(tf.tensor1d([1, 2, 3]), true, 'guard_w');
    const opt = tf.train.adam(0.1);
    const step = (loss: () => tf.Scalar) =>
      jointGuardedStep([{ optimizer: opt, vars: [w], objective: () => ({ loss: loss(), stats: {} }) }], 1);
    const good = await step(() => tf.sum(tf.square(w)) as tf.Scalar);
    expect(good.applied).toBe(true);
    const before = Array.from(await w.data());
    const momentsBefore = await Promise.all(
      (await opt.getWeights()).map(async (x) => Array.from(await x.tensor.data())),
    );
    const bad = await step(() => tf.mul(tf.sum(w), NaN) as tf.Scalar);
    expect(bad.applied).toBe(false);
    expect(Array.from(await w.data())).toEqual(before);
    const momentsAfter = await Promise.all(
      (await opt.getWeights()).map(async (x) => Array.from(await x.tensor.data())),
    );
    expect(momentsAfter).toEqual(momentsBefore);
    expect(await allFinite([w])).toBe(true);
    opt.dispose();
    w.dispose();
  });

  it('a policy poisoned with NaN: updates skipped, alert raised, pause after three steps, no checkpoint written', async () => {
    const dir = await makeTinyFolder();
    const cfg = validateConfig({
      model: dir,
      task: 'sentiment',
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
    });
    const t = await buildTrainer(cfg, { modelFiles: (p) => nodeFiles(p), loadTask: loadTaskNode });
    const ln = t.models.policy.params.get('ln_f.bias')!;
    ln.assign(tf.fill(ln.shape, NaN));
    const valueWeights = async () =>
      Promise.all(t.models.value!.trainableVariables().map(async (v) => Array.from(await v.data())));
    const valueBefore = await valueWeights();
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await t.trainStep());
    expect(results.map((r) => r.skippedUpdates > 0)).toEqual([true, true, true]);
    expect(results[0].alerts.some((a) => a.id === 'non-finite')).toBe(true);
    expect(results.map((r) => r.shouldPause)).toEqual([false, false, true]);
    // The value model's update was skipped too (one joint step: any non-finite part skips every part): its
    // weights are the ones it started with, and finite.
    expect(await valueWeights()).toEqual(valueBefore);
    expect(await allFinite(t.models.value!.trainableVariables())).toBe(true);
    await expect(checkpointFiles(t)).rejects.toThrow(/NaN\/Inf/);
    t.disposeOptimizers();
  });
});
