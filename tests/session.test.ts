/**
 * The training session (src/core/run/session.ts) that the CLI and the worker both drive, and the one rule for
 * which config changes are live (src/common/config/live.ts). Tiny random model on the CPU backend.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { validateConfig, CONFIG_FIELDS, CONFIG_KEYS, type TrainConfig } from '../src/common/config';
import { applyLive, classifyChanges, LIVE_KEYS, mergeConfig } from '../src/common/config/live';
import { isCheckpointStep, TrainingSession } from '../src/core/run/session';
import type { Resources } from '../src/core/ppo/setup';
import { memoryFiles } from '../src/core/model/folder';
import { isUserError } from '../src/common/errors';

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
    const calls: string[] = [];
    const s = await TrainingSession.build(cfg, res, {
      hooks: {
        step: (r) => void calls.push(`step ${r.metrics.step} kl ${r.metrics.klCoef}`),
        checkpoint: async (x) => void calls.push(`checkpoint ${x.step}`),
        autosaveDue: (step) => step % 2 === 1,
        autosave: async (x) => void calls.push(`autosave ${x.step}`),
      },
    });
    const first = await s.run({ until: 1 });
    expect(first).toEqual({ reason: 'done', step: 1 });
    s.setHyperparameters({ klCoef: 0.3 });
    expect(() => s.setHyperparameters({ batchSize: 4 })).toThrow(
      /"batchSize" cannot change on a running job/,
    );
    expect(() => s.setHyperparameters({ seed: 99 })).toThrow(/"seed" cannot change/);
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
    let seen = 0;
    const s = await TrainingSession.build({ ...cfg, steps: 50 }, res, {
      hooks: { step: (_, x) => void (++seen === 2 && x.pause()) },
    });
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
    const checkpoints: number[] = [];
    const s = await TrainingSession.build(
      {
        ...cfg,
        steps: 10,
        saveEvery: 1,
        task: 'sentiment',
        reward: { mix: [{ name: 'length', weight: 1e300 }] },
      },
      res,
      { hooks: { checkpoint: async (x) => void checkpoints.push(x.step) } },
    );
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
    // An ordinary failure while scoring leaves the run as it was: it can be saved and go on.
    expect(s.spoiled).toBeNull();
    s.overrideReward(null);
    expect((await s.runStep()).result.metrics.step).toBe(1);
    s.dispose();
  });
});

/** A WebAssembly trap as tfjs-backend-wasm raises it after a failed _malloc. */
function wasmTrap(): Error {
  const e = new Error('memory access out of bounds');
  e.name = 'RuntimeError';
  e.stack =
    'RuntimeError: memory access out of bounds\n    at wasm://wasm/00a3b2c6:wasm-function[512]:0x2c1f4';
  return e;
}

describe('TrainingSession: running out of memory at the step boundary (CPU, tiny model)', () => {
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
      steps: 4,
      saveEvery: 1,
    });
  });

  /**
   * A session whose hooks record their calls and the checkpoint files each checkpoint hook got; its heap budget
   * is `budget.bytes` (none while null), read at every phase boundary; `beforeStep` runs before each step.
   */
  async function recorded(beforeStep?: (s: TrainingSession) => void) {
    const calls: string[] = [];
    const saved = new Map<number, Map<string, Uint8Array>>();
    const budget: { bytes: number | null } = { bytes: null };
    const s = await TrainingSession.build(cfg, res, {
      hooks: {
        beforeStep,
        step: (r) => void calls.push(`step ${r.metrics.step}`),
        checkpoint: async (x) => {
          saved.set(x.step, await x.checkpointFiles());
          calls.push(`checkpoint ${x.step}`);
        },
        autosaveDue: () => true,
        autosave: async (x) => void calls.push(`autosave ${x.step}`),
      },
      heapBudget: () => budget.bytes,
    });
    return { s, calls, saved, budget };
  }

  async function expectSpoiled(s: TrainingSession, step: number): Promise<void> {
    expect(s.spoiled).toBe(
      `Step ${step} ran out of memory while ${step === 1 ? 'updating the weights' : 'scoring'}`,
    );
    const refusal = new RegExp(
      `^Step ${step} ran out of memory .*, so this run can neither go on nor be saved; resume its last checkpoint or autosave`,
    );
    await expect(s.runStep()).rejects.toThrow(refusal);
    await expect(s.checkpointFiles()).rejects.toThrow(refusal);
    const again = await s.run();
    expect(again.reason).toBe('error');
    expect(isUserError(again.error)).toBe(true);
    expect((again.error as Error).message).toMatch(refusal);
  }

  it('a forced-small budget that Adam’s moments outgrow stops step 1 after its update: nothing recorded or saved after it', async () => {
    const { s, calls, budget } = await recorded();
    const t = s.trainer;
    const trainable = [...t.models.policy.trainableVariables(), ...t.models.value!.trainableVariables()];
    const adamBytes = 2 * 4 * trainable.reduce((n, v) => n + v.size, 0);
    // Every tensor live now (the models) fits; the two Adam moments the first update makes do not.
    budget.bytes = tf.memory().numBytes + adamBytes / 2;
    const end = await s.run();
    expect(end.reason).toBe('error');
    expect(isUserError(end.error)).toBe(true);
    expect((end.error as Error).message).toMatch(
      /^Ran out of memory while updating \(the PPO minibatch backward passes\) at step 1: this process's memory could not hold the run's tensors \(\d+\.\d [kM]B of tensors are live, over the \d+\.\d [kM]B budget\)\. Lower batchSize or responseLength, raise miniBatches \(smaller forwards and backwards\), or choose a smaller model\. The run stopped at step 1 and saves nothing from here on \(step 1 is not recorded\); its last checkpoint or autosave, written before step 1, is intact\.$/,
    );
    // checkpoint-0 only: no step event, no checkpoint and no autosave of the state after the failure.
    expect(calls).toEqual(['checkpoint 0']);
    await expectSpoiled(s, 1);
    s.dispose();
  });

  it('a budget outgrown while scoring step 3 (tensors a reward holds): steps 1–2 recorded and saved, then the clear error', async () => {
    const { s, calls, saved, budget } = await recorded((x) => {
      // From step 2 on (Adam's moments exist), the budget is what is live plus 1 MB.
      if (x.step === 1) budget.bytes = tf.memory().numBytes + (1 << 20);
    });
    const held: tf.Tensor[] = [];
    // Scoring at step 3 holds 4 MB more than the budget leaves room for (activations larger than estimated).
    s.overrideReward({
      kind: 'fn',
      fn: () => {
        if (s.trainer.step === 2 && held.length === 0) held.push(tf.zeros([1 << 20]));
        return 1;
      },
      label: 'holds tensors',
    });
    budget.bytes = Infinity;
    const end = await s.run();
    expect(end).toMatchObject({ reason: 'error', step: 2 });
    const message = (end.error as Error).message;
    expect(message).toMatch(
      /^Ran out of memory while scoring \(the forwards of policy, reference, value and reward models\) at step 3: .*over the .* budget\)\. Lower batchSize or responseLength, raise miniBatches/,
    );
    expect(message).toMatch(
      /The run stopped at step 3 and saves nothing from here on \(the step was left half-done\); its last checkpoint or autosave, written before step 3, is intact\.$/,
    );
    expect(calls).toEqual([
      'checkpoint 0',
      'step 1',
      'checkpoint 1',
      'autosave 1',
      'step 2',
      'checkpoint 2',
      'autosave 2',
    ]);
    expect(s.spoiled).toBe('Step 3 ran out of memory while scoring');
    // The last checkpoint is whole: it restores at step 2 with its history.
    const back = await TrainingSession.restore(memoryFiles('checkpoint-2', saved.get(2)!), res);
    expect(back.step).toBe(2);
    expect(back.history.map((m) => m.step)).toEqual([1, 2]);
    back.dispose();
    tf.dispose(held);
    s.dispose();
  });

  it('a real WASM trap mid-update (simulated) becomes the same clear error, without RuntimeError or a stack', async () => {
    const { s, calls, saved } = await recorded();
    const valueOpt = s.trainer.valueOpt as unknown as { applyControlled: (...a: unknown[]) => void };
    const apply = valueOpt.applyControlled.bind(valueOpt);
    // Step 2's value update fails after the policy's was applied: the weights are half-updated.
    valueOpt.applyControlled = (...a: unknown[]) => {
      if (s.trainer.step === 1) throw wasmTrap();
      apply(...a);
    };
    const end = await s.run();
    expect(end).toMatchObject({ reason: 'error', step: 1 });
    expect(isUserError(end.error)).toBe(true);
    const message = (end.error as Error).message;
    expect(message).toMatch(
      /^Ran out of memory while updating \(the PPO minibatch backward passes\) at step 2: this process's memory could not hold the run's tensors \(\d+\.\d [kM]B of tensors were live; the backend said "memory access out of bounds"\)\. Lower batchSize or responseLength, raise miniBatches/,
    );
    expect(message).toMatch(
      /The run stopped at step 2 and saves nothing from here on \(its weights and optimiser state may be half-updated\); its last checkpoint or autosave, written before step 2, is intact\.$/,
    );
    expect(message).not.toMatch(/RuntimeError|wasm-function|internal error|\n/);
    expect(calls).toEqual(['checkpoint 0', 'step 1', 'checkpoint 1', 'autosave 1']);
    expect(s.spoiled).toBe('Step 2 ran out of memory while updating the weights');
    await expect(s.checkpointFiles()).rejects.toThrow(/can neither go on nor be saved/);
    const back = await TrainingSession.restore(memoryFiles('checkpoint-1', saved.get(1)!), res);
    expect(back.step).toBe(1);
    back.dispose();
    s.dispose();
  });

  it('any other failure while updating is reported as it is, and spoils the session too (weights may be half-updated)', async () => {
    const { s, calls } = await recorded();
    const bug = new TypeError("Cannot read properties of undefined (reading 'shape')");
    (s.trainer.valueOpt as unknown as { applyControlled: () => void }).applyControlled = () => {
      throw bug;
    };
    const end = await s.run();
    expect(end.reason).toBe('error');
    expect(end.error).toBe(bug);
    expect(calls).toEqual(['checkpoint 0']);
    expect(s.spoiled).toBe('Step 1 failed while updating the weights');
    await expect(s.checkpointFiles()).rejects.toThrow(
      /^Step 1 failed while updating the weights, so this run/,
    );
    s.dispose();
  });
});
