/**
 * The training session (src/core/session.ts) that the CLI and the worker both drive, and the one rule for
 * which config changes are live (src/core/live.ts). Tiny random model on the CPU backend.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { validateConfig, CONFIG_FIELDS, CONFIG_KEYS, type TrainConfig } from '../src/core/config';
import { applyLive, classifyChanges, LIVE_KEYS, mergeConfig } from '../src/core/live';
import { isCheckpointStep, TrainingSession } from '../src/core/session';
import type { Resources } from '../src/core/ppo/setup';
import { memoryFiles } from '../src/core/model/folder';
import { isUserError } from '../src/core/errors';

describe('the checkpoint cadence', () => {
  it('step 0, every saveEvery steps, and the last step', () => {
    const due = (saveEvery: number, last: number) =>
      Array.from({ length: last + 1 }, (_, s) => s).filter((s) => isCheckpointStep(s, saveEvery, last));
    expect(due(2, 5)).toEqual([0, 2, 4, 5]);
    expect(due(3, 6)).toEqual([0, 3, 6]);
    expect(due(0, 4)).toEqual([0, 4]);
    expect(due(1, 3)).toEqual([0, 1, 2, 3]);
  });
});

describe('which config changes are live', () => {
  const base = validateConfig({});

  it('splits changed keys by the table’s live flag', () => {
    const next = { ...base, klCoef: 0.3, batchSize: 32, miniBatches: 4, learningRate: 2e-4 };
    expect(classifyChanges(base, next)).toEqual({
      changed: CONFIG_KEYS.filter((k) => ['klCoef', 'batchSize', 'miniBatches', 'learningRate'].includes(k)),
      live: CONFIG_KEYS.filter(
        (k) => ['klCoef', 'miniBatches', 'learningRate'].includes(k) && CONFIG_FIELDS[k].live,
      ),
      restart: CONFIG_KEYS.filter(
        (k) => ['klCoef', 'batchSize', 'miniBatches', 'learningRate'].includes(k) && !CONFIG_FIELDS[k].live,
      ),
    });
    expect(classifyChanges(base, { ...base })).toEqual({ changed: [], live: [], restart: [] });
    expect(LIVE_KEYS).toEqual(CONFIG_KEYS.filter((k) => CONFIG_FIELDS[k].live));
    expect(LIVE_KEYS).toContain('klCoef');
    expect(LIVE_KEYS).not.toContain('batchSize');
  });

  it('configure merges (undefined keeps, null removes); setHyperparameters refuses non-live keys', () => {
    const withPrompts = validateConfig({ prompts: ['a'], task: null });
    const m = mergeConfig(withPrompts, { prompts: null, task: 'sentiment', klCoef: undefined });
    expect(m.config.prompts).toBeUndefined();
    expect(m.config.klCoef).toBe(withPrompts.klCoef);
    expect(m.changes.restart).toEqual(['task', 'prompts']);

    expect(applyLive(base, { klCoef: 0.2, batchSize: base.batchSize })).toMatchObject({ klCoef: 0.2 });
    let err: unknown;
    try {
      applyLive(base, { seed: 9 }, 'setHyperparameters');
    } catch (e) {
      err = e;
    }
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toBe(
      `setHyperparameters: "seed" cannot change on a running job; start a new run. Keys that can: ${LIVE_KEYS.join(', ')}.`,
    );
    expect(() => applyLive(base, { klcoef: 0.2 })).toThrow(/klCoef/);
  });
});

describe('TrainingSession (CPU, tiny model)', () => {
  let res: Resources;
  let cfg: TrainConfig;
  beforeAll(async () => {
    await useCpu();
    const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
    res = { modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p), loadTask: loadTaskNode };
    cfg = validateConfig({
      model: 'tiny-test',
      task: 'sentiment',
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
      steps: 3,
      saveEvery: 2,
    });
  });

  it('runs to `until` with hooks on the cadence; a live change shows in the next step; dispose frees every tensor', async () => {
    const before = tf.memory().numTensors;
    const s = await TrainingSession.build(cfg, res);
    const calls: string[] = [];
    s.hooks = {
      step: (r) => void calls.push(`step ${r.metrics.step} kl ${r.metrics.klCoef}`),
      checkpoint: async (x) => void calls.push(`checkpoint ${x.step}`),
      autosaveDue: (step) => step % 2 === 1,
      autosave: async (x) => void calls.push(`autosave ${x.step}`),
    };
    const first = await s.run({ until: 1 });
    expect(first).toEqual({ reason: 'done', step: 1 });
    s.setHyperparameters({ klCoef: 0.3 });
    expect(() => s.setHyperparameters({ batchSize: 4 })).toThrow(
      /"batchSize" cannot change on a running job/,
    );
    expect(() => s.setConfig({ ...s.cfg, seed: 99 })).toThrow(/"seed" cannot change/);
    const end = await s.run();
    expect(end).toEqual({ reason: 'done', step: 3 });
    expect(calls).toEqual([
      'checkpoint 0',
      'step 1 kl 0.05',
      'checkpoint 1', // the last step of run({ until: 1 })
      'autosave 1',
      'autosave 1', // the run stopped after steps
      'step 2 kl 0.3',
      'checkpoint 2',
      'step 3 kl 0.3',
      'checkpoint 3',
      'autosave 3',
      'autosave 3',
    ]);
    await expect(s.runStep()).rejects.toThrow(
      'The run has done its 3 steps; raise "steps" to continue it, or reset.',
    );
    s.dispose();
    // Policy, reference, value, both optimisers: nothing of the run is left.
    expect(tf.memory().numTensors).toBe(before);
    await expect(s.run()).rejects.toThrow(/disposed/);
  });

  it('pause() stops after the step in flight; the checkpoint keeps the configured reward under a stand-in', async () => {
    const s = await TrainingSession.build({ ...cfg, steps: 50 }, res);
    let seen = 0;
    s.hooks = { step: () => void (++seen === 2 && s.pause()) };
    s.overrideReward({ kind: 'fn', fn: () => 7, label: 'stand-in' });
    const end = await s.run();
    expect(end).toEqual({ reason: 'paused', step: 2 });
    expect(s.history.map((m) => m.reward)).toEqual([7, 7]);
    const files = await s.checkpointFiles();
    expect(s.trainer.models.reward.label).toBe('stand-in');
    const back = await TrainingSession.restore(memoryFiles('ckpt', files), res);
    expect(back.trainer.models.reward.label).toBe('sentiment');
    expect(back.step).toBe(2);
    back.dispose();
    s.dispose();
  });

  it('three non-finite steps in a row stop the run with a reason, and nothing is checkpointed at that step', async () => {
    const s = await TrainingSession.build(
      {
        ...cfg,
        steps: 10,
        saveEvery: 1,
        task: 'sentiment',
        reward: { mix: [{ name: 'length', weight: 1e300 }] },
      },
      res,
    );
    const checkpoints: number[] = [];
    s.hooks = { checkpoint: async (x) => void checkpoints.push(x.step) };
    const end = await s.run();
    expect(end).toEqual({
      reason: 'nonfinite',
      step: 3,
      message:
        'stopped at step 3: three steps in a row had NaN/Inf losses or gradients (updates skipped, so the ' +
        'weights are unchanged by them).',
    });
    expect(checkpoints).toEqual([0, 1, 2]);
    s.dispose();
  });

  it('a failing step ends the run with reason "error" and the error', async () => {
    const s = await TrainingSession.build({ ...cfg, steps: 5 }, res);
    s.overrideReward({
      kind: 'fn',
      fn: () => {
        throw new Error('reward exploded');
      },
      label: 'bad',
    });
    const end = await s.run();
    expect(end.reason).toBe('error');
    expect(end.step).toBe(0);
    expect((end.error as Error).message).toMatch(/reward exploded/);
    s.dispose();
  });
});
