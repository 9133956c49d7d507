/**
 * DPO and SFT through the real model worker (src/worker/api.ts in Node, CPU backend, a tiny random model): the
 * run commands drive a DPO job whose step events carry TRL's metric names (and eval/… at the last step); a bad
 * preference file is refused naming its lines; SFT steps report their loss, and "continue with GRPO" starts a
 * GRPO run from the SFT'd weights (policy and reference both: step 1's KL is 0), with the worker's tensor count
 * flat across jobs.
 */
import { describe, it, expect } from 'vitest';
import { nodeWorkerApi } from './helpers/worker';
import { readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { unzipFolder, zipFolder } from '../src/common/checkpoint-zip';
import type { RunStatus, TrainerEvent } from '../src/worker/protocol';

(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fixture = (name: string) =>
  readFileSync(new URL(`./fixtures/dpo-sft/${name}`, import.meta.url), 'utf8');

async function worker() {
  await useCpu();
  const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  const api = await nodeWorkerApi({ tinyDir: dir });
  await api.init('cpu');
  const events: TrainerEvent[] = [];
  await api.subscribe((e) => void events.push(e));
  const settled = async (): Promise<RunStatus> => {
    for (let i = 0; i < 3000; i++) {
      const s = events.flatMap((e) => (e.type === 'status' ? [e.status] : [])).at(-1);
      if (s && s.state !== 'running' && s.phase === 'idle') return s;
      await sleep(20);
    }
    throw new Error('the run did not stop');
  };
  const steps = () => events.flatMap((e) => (e.type === 'step' ? [e] : []));
  const errors = () => events.flatMap((e) => (e.type === 'error' ? [e.message] : []));
  return { api, events, settled, steps, errors };
}

const DPO_KEYS = [
  'loss',
  'rewards/chosen',
  'rewards/rejected',
  'rewards/accuracies',
  'rewards/margins',
  'logps/chosen',
  'logps/rejected',
];

describe('DPO and SFT in the model worker (CPU, in Node)', () => {
  it('a DPO job of 2 steps reports the DPO metrics; a bad file names its lines', async () => {
    const { api, settled, steps, errors } = await worker();
    await api.configure({ model: 'tiny-test', seed: 3 });
    const held = tf.memory().numTensors;
    const bad = await api
      .setSupervisedJob({ kind: 'dpo', data: fixture('pairs-bad.jsonl'), dataName: 'pairs-bad.jsonl' })
      .then(
        () => null,
        (e: Error) => e,
      );
    expect(bad?.name).toBe('UserError');
    expect(bad?.message).toMatch(/pairs-bad\.jsonl: .*line 2: .*rejected/);
    const status = await api.setSupervisedJob({
      kind: 'dpo',
      data: fixture('pairs.jsonl'),
      dataName: 'pairs.jsonl',
      steps: 2,
      batchSize: 2,
      heldOut: 0.34,
      beta: 0.1,
    });
    expect(status.job).toMatchObject({ kind: 'dpo', dataName: 'pairs.jsonl', examples: 6 });
    expect(status.job!.settings).toMatchObject({ beta: 0.1, dpoLoss: 'sigmoid', steps: 2, batchSize: 2 });
    expect(status).toMatchObject({ state: 'idle', step: 0, steps: 2 });
    await api.start();
    expect(await settled()).toMatchObject({ state: 'paused', step: 2, steps: 2 });
    expect(errors()).toEqual([]);
    const got = steps();
    expect(got.map((e) => e.metrics.step)).toEqual([1, 2]);
    for (const e of got) {
      const m = e.metrics as unknown as Record<string, number>;
      for (const k of DPO_KEYS) expect(Number.isFinite(m[k]), k).toBe(true);
      expect(e.samples).toEqual([]);
    }
    const m1 = got[0].metrics as unknown as Record<string, number>;
    // Step 1's policy is its reference: sigmoid loss ln 2, margins 0 (contracts §9).
    expect(m1.loss).toBeCloseTo(Math.LN2, 6);
    expect(m1['rewards/margins']).toBeCloseTo(0, 6);
    expect('eval/loss' in m1).toBe(false);
    const m2 = got[1].metrics as unknown as Record<string, number>;
    for (const k of ['eval/loss', 'eval/rewards/accuracies', 'eval/rewards/margins'])
      expect(Number.isFinite(m2[k]), k).toBe(true);
    expect(m2.loss).not.toBe(m1.loss);
    // The history, the TRL export and the checkpoint follow the job.
    expect((await api.history()).map((m) => m.step)).toEqual([1, 2]);
    expect(JSON.parse(await api.exportTrlConfig())._trl_class).toBe('DPOConfig');
    const zip = await api.exportCheckpoint();
    expect(zip.bytes.length).toBeGreaterThan(1000);
    // Back to RL: the job goes, the status says so, and so do its tensors (and those of the refused build).
    expect((await api.setSupervisedJob(null)).job).toBeNull();
    expect(tf.memory().numTensors).toBe(held);
  }, 120_000);

  it('a DPO job under LoRA: the reference is the base with adapters off (step 1 at ln 2), PEFT files in its zip', async () => {
    const { api, settled, steps, errors } = await worker();
    await api.configure({ model: 'tiny-test', seed: 8, lora: 2, loraAlpha: 4 });
    const s = await api.setSupervisedJob({
      kind: 'dpo',
      data: fixture('pairs.jsonl'),
      dataName: 'pairs.jsonl',
      steps: 2,
      batchSize: 2,
    });
    expect(s.job!.settings).toMatchObject({ lora: 2, loraAlpha: 4 });
    await api.start();
    expect(await settled()).toMatchObject({ step: 2 });
    expect(errors()).toEqual([]);
    const m = steps().map((e) => e.metrics as unknown as Record<string, number>);
    expect(m[0].loss).toBeCloseTo(Math.LN2, 6);
    expect(m[1].loss).not.toBe(m[0].loss);
    const files = unzipFolder((await api.exportCheckpoint()).bytes, 'zip');
    expect([...files.keys()]).toEqual(
      expect.arrayContaining([
        'adapter/adapter_config.json',
        'adapter/adapter_model.safetensors',
        'ref_model.safetensors',
        'dpo_state.json',
        'playground_preferences.jsonl',
      ]),
    );
  }, 120_000);

  it('a DPO job exported at step 2 and imported continues exactly; a zip without the pairs is refused', async () => {
    const { api, settled, steps } = await worker();
    await api.configure({ model: 'tiny-test', seed: 6 });
    await api.setSupervisedJob({
      kind: 'dpo',
      data: fixture('pairs.jsonl'),
      dataName: 'pairs.jsonl',
      steps: 3,
      batchSize: 2,
      learningRate: 1e-2,
      evalEvery: 2,
    });
    await api.stepOnce();
    await api.stepOnce();
    const zip = await api.exportCheckpoint();
    await api.stepOnce();
    const straight = steps().at(-1)!.metrics as unknown as Record<string, number>;
    expect(straight.step).toBe(3);
    const summary = await api.importCheckpoint(zip.bytes);
    expect(summary).toMatchObject({ step: 2, historyLength: 2 });
    const resumed = await settled();
    expect(resumed).toMatchObject({ step: 2, steps: 3, job: { kind: 'dpo', dataName: 'pairs.jsonl' } });
    expect((await api.history()).map((m) => m.step)).toEqual([1, 2]);
    await api.stepOnce();
    const again = steps().at(-1)!.metrics as unknown as Record<string, number>;
    const { timeStep: _a, ...a } = straight;
    const { timeStep: _b, ...b } = again;
    expect(b).toEqual(a);
    expect(Number.isFinite(a['eval/loss'])).toBe(true);
    // A DPO checkpoint without the pairs (as the CLI writes it) cannot resume in the app.
    const files = unzipFolder(zip.bytes, 'zip');
    files.delete('playground_preferences.jsonl');
    await expect(api.importCheckpoint(zipFolder(files, 'checkpoint-2'))).rejects.toThrow(
      /DPO checkpoint without its preference pairs/,
    );
  }, 120_000);

  it('a DPO job is autosaved and resumes from its autosave; an SFT job is not autosaved', async () => {
    const { api, settled } = await worker();
    await api.configure({ model: 'tiny-test', seed: 7 });
    await api.setSupervisedJob({
      kind: 'dpo',
      data: fixture('pairs.jsonl'),
      dataName: 'pairs.jsonl',
      steps: 2,
      batchSize: 2,
    });
    await api.start();
    expect(await settled()).toMatchObject({ step: 2 });
    expect(await api.autosaveInfo()).toMatchObject({ step: 2, historyLength: 2, current: true });
    await api.setSupervisedJob(null);
    const resumed = await api.resumeAutosave();
    expect(resumed).toMatchObject({
      state: 'paused',
      step: 2,
      job: { kind: 'dpo', dataName: 'pairs.jsonl' },
    });
    expect((await api.history()).map((m) => m.step)).toEqual([1, 2]);
    // A backend switch carries the job over (saved and restored as its checkpoint).
    await api.setBackend('cpu');
    expect(await settled()).toMatchObject({ step: 2, job: { kind: 'dpo' } });
    expect((await api.history()).map((m) => m.step)).toEqual([1, 2]);
    // SFT: its weights alone cannot resume it, so the DPO job's save stays the one offered.
    await api.setSupervisedJob({
      kind: 'sft',
      data: fixture('sft.jsonl'),
      dataName: 'sft.jsonl',
      steps: 1,
      batchSize: 4,
    });
    await api.stepOnce();
    expect(await api.autosaveInfo()).toMatchObject({ step: 2, historyLength: 2 });
  }, 120_000);

  it('SFT then continue with DPO: the SFT weights are the policy and the reference (step 1 at ln 2)', async () => {
    const { api, settled, steps, errors, events } = await worker();
    // batchSize 2: GRPO's 4 samples per prompt do not divide it.
    await api.configure({ model: 'tiny-test', seed: 5, batchSize: 2 });
    await api.setSupervisedJob({
      kind: 'sft',
      data: fixture('sft.jsonl'),
      dataName: 'sft.jsonl',
      steps: 1,
      batchSize: 2,
      learningRate: 1e-2,
    });
    const ids = [[1, 2, 3, 4, 5, 6]];
    const mask = [[1, 1, 1, 1, 1, 1]];
    const base = await api.forwardLogits(ids, mask);
    await api.stepOnce();
    expect((await settled()).step).toBe(1);
    const sftd = await api.forwardLogits(ids, mask);
    // A continuation the settings refuse leaves the SFT job as it was.
    await expect(api.continueFromSft({ algorithm: 'grpo' })).rejects.toThrow(/groupSize/);
    expect(await settled()).toMatchObject({ step: 1, job: { kind: 'sft' } });
    events.length = 0;
    const cont = await api.continueFromSft({
      algorithm: 'dpo',
      // A learning rate so small that the DPO step leaves the weights where SFT put them (read back below).
      job: {
        kind: 'dpo',
        data: fixture('pairs.jsonl'),
        dataName: 'pairs.jsonl',
        steps: 1,
        batchSize: 2,
        learningRate: 1e-7,
      },
    });
    expect(cont.config.model).toBe('sft-model');
    expect(cont.job).toMatchObject({ kind: 'dpo', examples: 6 });
    expect(await settled()).toMatchObject({ state: 'paused', step: 1 });
    expect(errors()).toEqual([]);
    const m = steps()[0].metrics as unknown as Record<string, number>;
    expect(m.loss).toBeCloseTo(Math.LN2, 6);
    expect(m['rewards/margins']).toBeCloseTo(0, 6);
    // The DPO policy is the SFT'd model, not the base; with step 1 at the reference, so is the reference.
    const after = await api.forwardLogits(ids, mask);
    const diff = (a: number[][][], b: number[][][]) =>
      Math.max(...a[0].flatMap((row, t) => row.map((v, j) => Math.abs(v - b[0][t][j]))));
    expect(diff(after, sftd)).toBeLessThan(1e-4);
    expect(diff(after, base)).toBeGreaterThan(1e-2);
    // After DPO, continuing goes on with an RL algorithm (issue #33), never with DPO again.
    await expect(api.continueFromSft({ algorithm: 'dpo', job: cont.job as never })).rejects.toThrow(
      /Continue after DPO goes on with an RL algorithm/,
    );
  }, 120_000);

  it('SFT 2 steps, then continue with GRPO from the SFT weights (step-1 KL 0); tensors flat', async () => {
    const { api, settled, steps, errors, events } = await worker();
    await api.configure({
      model: 'tiny-test',
      task: 'sentiment',
      seed: 4,
      batchSize: 4,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
      steps: 1,
      // So small that the GRPO step leaves the weights where SFT put them (read back below).
      learningRate: 1e-7,
    });
    const ids = [[1, 2, 3, 4, 5, 6, 7, 8]];
    const mask = [[1, 1, 1, 1, 1, 1, 1, 1]];
    const before = await api.forwardLogits(ids, mask);
    const held: number[] = [];
    for (let round = 0; round < 2; round++) {
      events.length = 0;
      const s = await api.setSupervisedJob({
        kind: 'sft',
        data: fixture('sft.jsonl'),
        dataName: 'sft.jsonl',
        steps: 2,
        batchSize: 2,
        learningRate: 1e-2,
      });
      expect(s.job).toMatchObject({ kind: 'sft', examples: 4 });
      await api.start();
      expect(await settled()).toMatchObject({ state: 'paused', step: 2 });
      const sft = steps().map((e) => e.metrics as unknown as Record<string, number>);
      expect(sft.map((m) => m.step)).toEqual([1, 2]);
      expect(sft.every((m) => Number.isFinite(m.loss) && m.loss > 0)).toBe(true);
      const afterSft = await api.forwardLogits(ids, mask);
      expect(afterSft[0][0][0]).not.toBe(before[0][0][0]);

      events.length = 0;
      const cont = await api.continueFromSft({ algorithm: 'grpo' });
      expect(cont.config).toMatchObject({ model: 'sft-model', algorithm: 'grpo' });
      expect(cont.job).toBeNull();
      expect(await settled()).toMatchObject({ state: 'paused', step: 1 });
      expect(errors()).toEqual([]);
      const rl = steps();
      expect(rl).toHaveLength(1);
      const m = rl[0].metrics;
      expect(m.step).toBe(1);
      expect(Number.isFinite(m.reward)).toBe(true);
      // The reference is the SFT'd model, as the policy: no divergence at step 1.
      expect(m.kl).toBe(0);
      expect(rl[0].samples.length).toBeGreaterThan(0);
      // The GRPO policy is the SFT'd model (not the base), so the reference above was the SFT'd model too.
      const afterGrpo = await api.forwardLogits(ids, mask);
      const diff = (a: number[][][], b: number[][][]) =>
        Math.max(...a[0].flatMap((row, t) => row.map((v, j) => Math.abs(v - b[0][t][j]))));
      expect(diff(afterGrpo, afterSft)).toBeLessThan(1e-4);
      expect(diff(afterGrpo, before)).toBeGreaterThan(1e-2);
      await api.reset();
      await api.configure({ model: 'tiny-test', algorithm: 'ppo' });
      held.push(tf.memory().numTensors);
    }
    // The second round ends holding what the first did: every job's tensors were freed.
    expect(held[1]).toBe(held[0]);
    expect(errors()).toEqual([]);
  }, 180_000);
});
