/**
 * The device running out of memory in the middle of a step (issue #31, item 3), simulated on the CPU backend: the
 * trainer's device error scopes (src/core/ppo/gpu-plan.ts DeviceErrors) are a stand-in that reports running out
 * for every slice above N samples. The step must complete, its work redone with smaller micro-batches before any
 * weight changes, the run must go on at the smaller micro-batch, the alert must come once, and the step's results
 * (tokens, metrics, weights) must be those of a run that used the smaller micro-batch from the start.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { meanByteReward, tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { buildTrainer } from '../src/core/ppo/setup';
import type { TrainConfig } from '../src/common/config';
import type { PpoTrainer, StepResult } from '../src/core/ppo/trainer';
import type { DeviceCheck, DeviceErrors } from '../src/core/ppo/gpu-plan';
import { HeapExhaustedError, isHeapExhaustion } from '../src/core/model/oom';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { Evaluator } from '../src/core/ppo/eval';
import { maxRelToScale, trainedWeights } from './helpers/weights';

let dir = '';
const res = tinyResources(() => dir);

/** A device that runs out for every check `fits` refuses ('apply', the optimiser steps, always fit). */
class SimulatedDevice implements DeviceErrors {
  private readonly open: DeviceCheck[] = [];
  /** Every check pushed, in order. */
  readonly log: DeviceCheck[] = [];
  failures = 0;
  released = 0;
  constructor(private readonly fits: (c: DeviceCheck) => boolean) {}
  /** The check open now (innermost). */
  get current(): DeviceCheck | undefined {
    return this.open[this.open.length - 1];
  }
  push(c: DeviceCheck): void {
    this.open.push(c);
    this.log.push(c);
  }
  pop(): Promise<string | null> {
    const c = this.open.pop();
    if (!c) throw new Error('pop without push');
    if (c.phase !== 'apply' && !this.fits(c)) {
      this.failures++;
      return Promise.resolve(`Out of memory (simulated: ${c.size} samples while ${c.phase})`);
    }
    return Promise.resolve(null);
  }
  ranOut(e: unknown): string | null {
    return isHeapExhaustion(e) ? 'thrown' : null;
  }
  release(): void {
    this.released++;
  }
  get balanced(): boolean {
    return this.open.length === 0;
  }
}

const COMPARED = [
  'policyLoss',
  'clipFrac',
  'approxKl',
  'ratioMean',
  'ratioMax',
  'entropy',
  'gradNorm',
  'valueLoss',
  'valueClipFrac',
  'kl',
  'scoreMean',
  'reward',
];

interface Stepped {
  result: StepResult;
  weights: number[][];
  /** Tensors alive after the step less before it. */
  grew: number;
  plan: { microBatchSize: number; generateMicroBatchSize: number; recompute: boolean };
  /** Whether the step took its old log-probs from the update's forward. */
  oldFromUpdate: boolean;
}

/** Two steps of `cfg` with `device` (absent: the default scopes, which do nothing on CPU). */
async function run(cfg: TrainConfig, device?: SimulatedDevice, tweak?: (t: PpoTrainer) => void) {
  const t = await buildTrainer(cfg, res, {
    ...meanByteReward,
    ...(device ? { device: { errors: device } } : {}),
  });
  tweak?.(t);
  const steps: Stepped[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const before = tf.memory().numTensors;
      const result = await t.trainStep();
      const grew = tf.memory().numTensors - before;
      steps.push({
        result,
        weights: await trainedWeights(t),
        grew,
        plan: t.stepPlan(),
        oldFromUpdate: t.lastStepOldLogprobsFromUpdate,
      });
    }
  } finally {
    t.disposeAll();
  }
  return steps;
}

/**
 * `run(cfg)` without a device or a tweak, once per config: the reference at microBatchSize 2 is the same seeded run
 * in three tests (CI time). Its steps are read only.
 */
const plainRuns = new Map<string, ReturnType<typeof run>>();
function plainRun(cfg: TrainConfig): ReturnType<typeof run> {
  const key = JSON.stringify(cfg);
  if (!plainRuns.has(key)) plainRuns.set(key, run(cfg));
  return plainRuns.get(key)!;
}

/** The same step: the same tokens, metrics within 1e-6 relative, weights within 1e-6 of their scale. */
function expectSameStep(a: Stepped, b: Stepped) {
  expect(b.result.rollout.responses).toEqual(a.result.rollout.responses);
  const ma = a.result.metrics as unknown as Record<string, number | null>;
  const mb = b.result.metrics as unknown as Record<string, number | null>;
  for (const k of COMPARED) {
    const x = ma[k];
    const y = mb[k];
    // Every compared key is a metric (a misspelt one would otherwise compare nothing).
    expect(x, k).toBeDefined();
    expect(y, k).toBeDefined();
    if (x === null || y === null) {
      expect(y, k).toBe(x);
      continue;
    }
    expect(Math.abs(y - x), `${k}: ${x} vs ${y}`).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(x)));
  }
  expect(maxRelToScale(a.weights, b.weights)).toBeLessThanOrEqual(1e-6);
}

const alertsOf = (s: Stepped) => s.result.alerts.filter((a) => a.id === 'device-out-of-memory');

beforeAll(async () => {
  await useCpu();
  dir = await makeTinyFolder();
});

describe('the device runs out of memory: the step is redone smaller, and the run keeps the smaller plan', () => {
  /** Batch 8 in 2 minibatches of 4, one epoch (the tiny model's automatic plan runs each at once, generation over all 8). */
  const base = (over: Partial<TrainConfig> = {}) =>
    tinyConfig({ batchSize: 8, miniBatches: 2, ppoEpochs: 1, responseLength: 6, ...over });

  it('PPO, every phase above 2 samples runs out: generation 8 → 4 → 2, then scoring and the update at 2 = a run at microBatchSize 2', async () => {
    const device = new SimulatedDevice((c) => c.size <= 2);
    const fell = await run(base(), device);
    const ref = await plainRun(base({ microBatchSize: 2 }));

    // The plan before: generation over 8, minibatches of 4 at once. The first check (generation, 8) ran out.
    expect(device.log[0]).toEqual({ phase: 'generate', size: 8 });
    expect(device.failures).toBe(2); // generation at 8, then at 4
    // Given back after each failure, and at the start of step 2 (the run fell back).
    expect(device.released).toBe(3);
    expect(device.balanced).toBe(true);
    // The step completed and the run goes on at 2: no check above 2 in step 2.
    expect(fell[0].plan).toEqual({ microBatchSize: 2, generateMicroBatchSize: 2, recompute: false });
    expect(fell[1].plan).toEqual(fell[0].plan);
    expect(fell[0].result.plan.reason).toBe('out-of-memory');
    const step2 = device.log.slice(
      device.log.findIndex((c, i) => i > 0 && c.phase === 'generate' && c.size === 2) + 1,
    );
    expect(step2.filter((c) => c.phase !== 'apply').every((c) => c.size <= 2)).toBe(true);
    // The alert: once, on the step that fell back.
    expect(alertsOf(fell[0])).toHaveLength(1);
    expect(alertsOf(fell[1])).toHaveLength(0);
    expect(alertsOf(fell[0])[0].message).toMatch(
      /ran out of memory at step 1 while generating in slices of 8; .* redone smaller, before any weight changed\. The run goes on with micro-batches of 2 after the device ran out of memory\./,
    );
    // The same steps as a run at microBatchSize 2 from the start, and the same tensors left.
    for (const i of [0, 1]) {
      expectSameStep(ref[i], fell[i]);
      expect(fell[i].grew).toBe(ref[i].grew);
    }
  });

  it('PPO, only the update runs out above 2: the first minibatch is redone at 2 before Adam steps; the same step as microBatchSize 2', async () => {
    const device = new SimulatedDevice((c) => c.phase !== 'update' || c.size <= 2);
    const fell = await run(base(), device);
    const ref = await plainRun(base({ microBatchSize: 2 }));
    const first = device.log.filter((c) => c.phase === 'update').slice(0, 3);
    expect(first).toEqual([
      { phase: 'update', size: 4 },
      { phase: 'update', size: 2 },
      { phase: 'update', size: 2 },
    ]);
    expect(device.failures).toBe(1);
    // Generation keeps its slice of 8 (it did not run out); the micro-batch is 2 from then on.
    expect(fell[0].plan).toEqual({ microBatchSize: 2, generateMicroBatchSize: 8, recompute: false });
    expect(alertsOf(fell[0])).toHaveLength(1);
    expect(alertsOf(fell[0])[0].message).toMatch(/while updating 4 samples at once/);
    expect(alertsOf(fell[1])).toHaveLength(0);
    for (const i of [0, 1]) {
      expectSameStep(ref[i], fell[i]);
      expect(fell[i].grew).toBe(ref[i].grew);
    }
  });

  it('GRPO with its old log-probs from the update (one epoch, one minibatch): the failed attempt keeps nothing; = microBatchSize 2', async () => {
    const grpo = (over: Partial<TrainConfig> = {}) =>
      base({ algorithm: 'grpo', groupSize: 4, miniBatches: 1, ppoEpochs: 1, klCoef: 0.1, ...over });
    const device = new SimulatedDevice((c) => c.phase !== 'update' || c.size <= 2);
    const fell = await run(grpo(), device);
    const ref = await run(grpo({ microBatchSize: 2 }));
    // Both runs took every step's old log-probs from the update, the one that fell back too.
    expect([...fell, ...ref].map((s) => s.oldFromUpdate)).toEqual([true, true, true, true]);
    // 8 → 4 → 2: two attempts thrown away.
    expect(device.failures).toBe(2);
    expect(fell[0].plan.microBatchSize).toBe(2);
    expect(alertsOf(fell[0])).toHaveLength(1);
    expect(alertsOf(fell[1])).toHaveLength(0);
    for (const i of [0, 1]) {
      expectSameStep(ref[i], fell[i]);
      expect(fell[i].grew).toBe(ref[i].grew);
    }
  });

  it('an allocation that throws (tfjs WebGPU createBuffer) counts the same: scoring is redone at 2, nothing left behind', async () => {
    const device = new SimulatedDevice(() => true);
    const fell = await run(base(), device, (t) => {
      const policy = t.models.policy;
      const lmHead = policy.lmHead.bind(policy);
      policy.lmHead = (h) => {
        const c = device.current;
        if (c?.phase === 'score' && c.size > 2) {
          throw new RangeError(
            "Failed to execute 'createBuffer' on 'GPUDevice': createBuffer failed, size (1073741824) is too large for the implementation when mappedAtCreation == true",
          );
        }
        return lmHead(h);
      };
    });
    const ref = await plainRun(base({ microBatchSize: 2 }));
    expect(fell[0].plan).toEqual({ microBatchSize: 2, generateMicroBatchSize: 8, recompute: false });
    expect(alertsOf(fell[0])).toHaveLength(1);
    expect(alertsOf(fell[0])[0].message).toMatch(/while scoring 4 samples at once/);
    expect(device.balanced).toBe(true);
    for (const i of [0, 1]) {
      expectSameStep(ref[i], fell[i]);
      expect(fell[i].grew).toBe(ref[i].grew);
    }
  });

  it('a set microBatchSize with recompute "auto": the update turns recompute on (= recompute "blocks"), the size stays', async () => {
    // Only the first update check runs out (the stand-in cannot see that recompute holds less).
    let updates = 0;
    const device = new SimulatedDevice((c) => c.phase !== 'update' || updates++ > 0);
    const fell = await run(base({ microBatchSize: 2 }), device);
    const ref = await run(base({ microBatchSize: 2, recompute: 'blocks' }));
    expect(fell[0].plan).toEqual({ microBatchSize: 2, generateMicroBatchSize: 2, recompute: true });
    expect(alertsOf(fell[0])).toHaveLength(1);
    expect(alertsOf(fell[0])[0].advice).toMatch(/recompute "blocks"/);
    for (const i of [0, 1]) expectSameStep(ref[i], fell[i]);
  });

  it('nothing smaller left: the step fails in words before any weight changed, and no tensor is left behind', async () => {
    const device = new SimulatedDevice((c) => c.phase !== 'score');
    const cfg = base({ microBatchSize: 1 });
    const t = await buildTrainer(cfg, res, { ...meanByteReward, device: { errors: device } });
    try {
      const before = await trainedWeights(t);
      const tensors = tf.memory().numTensors;
      const err = await t.trainStep().then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(HeapExhaustedError);
      expect((err as HeapExhaustedError).phase).toBe('score');
      expect((err as Error).message).toMatch(/Ran out of memory while scoring .* at step 1/);
      expect((err as Error).message).toMatch(/no smaller plan is left to try/);
      expect(await trainedWeights(t)).toEqual(before);
      expect(tf.memory().numTensors).toBe(tensors);
      expect(device.balanced).toBe(true);
    } finally {
      t.disposeAll();
    }
  });

  it('no device errors (the default on CPU): the plan and the steps are as they were', async () => {
    const plain = await run(base());
    expect(plain[0].plan).toEqual({ microBatchSize: 4, generateMicroBatchSize: 8, recompute: false });
    expect(plain[0].result.plan.reason).toBe('budget');
    expect(alertsOf(plain[0])).toHaveLength(0);
  });
});

describe('the smaller plan outlives the step: checkpoints keep it, and the held-out evaluation falls back too', () => {
  const base = (over: Partial<TrainConfig> = {}) =>
    tinyConfig({ batchSize: 8, miniBatches: 2, ppoEpochs: 1, responseLength: 6, ...over });

  it('a checkpoint saves the plan the run fell back to; the resumed run starts there and = the run that went on', async () => {
    const device = new SimulatedDevice((c) => c.size <= 2);
    const t = await buildTrainer(base(), res, { ...meanByteReward, device: { errors: device } });
    let resumed: PpoTrainer | null = null;
    try {
      await t.trainStep();
      expect(device.failures).toBe(2);
      const files = await checkpointFiles(t);
      const state = JSON.parse(new TextDecoder().decode(files.get('trainer_state.json')!));
      expect(state.devicePlan.plan).toEqual({
        microBatchSize: 2,
        generateMicroBatchSize: 2,
        recompute: false,
      });

      const again = new SimulatedDevice((c) => c.size <= 2);
      resumed = await restoreTrainer(memoryFiles('ckpt', files), res, {
        ...meanByteReward,
        device: { errors: again },
      });
      expect(resumed.stepPlan()).toEqual(t.stepPlan());
      expect(resumed.planInForce().reason).toBe('out-of-memory');
      const a = await t.trainStep();
      const b = await resumed.trainStep();
      // Nothing ran out again: every check of the resumed step was at the smaller plan.
      expect(again.failures).toBe(0);
      expect(again.log.filter((c) => c.phase !== 'apply').every((c) => c.size <= 2)).toBe(true);
      expect(b.alerts.filter((x) => x.id === 'device-out-of-memory')).toHaveLength(0);
      expect(b.rollout.responses).toEqual(a.rollout.responses);
      expect(maxRelToScale(await trainedWeights(t), await trainedWeights(resumed))).toBeLessThanOrEqual(1e-6);
    } finally {
      t.disposeAll();
      resumed?.disposeAll();
    }
  });

  it('a run that never fell back saves null, and a malformed devicePlan is refused in words', async () => {
    const t = await buildTrainer(base(), res, meanByteReward);
    try {
      await t.trainStep();
      const files = await checkpointFiles(t);
      const state = JSON.parse(new TextDecoder().decode(files.get('trainer_state.json')!));
      expect(state.devicePlan).toBeNull();
      state.devicePlan = {
        key: 'x',
        plan: { microBatchSize: 0, generateMicroBatchSize: 2, recompute: false },
      };
      files.set('trainer_state.json', new TextEncoder().encode(JSON.stringify(state)));
      await expect(restoreTrainer(memoryFiles('ckpt', files), res, meanByteReward)).rejects.toThrow(
        /"devicePlan" must be null or \{"key": string, "plan": \{"microBatchSize": n >= 1/,
      );
    } finally {
      t.disposeAll();
    }
  });

  it('the held-out evaluation runs out above 2: redone at 2, the same record as a run at microBatchSize 2, said once', async () => {
    const prompts = ['ab', 'cd', 'ef', 'gh', 'ij', 'kl'];
    const device = new SimulatedDevice((c) => c.size <= 2);
    const t = await buildTrainer(base({ evalTemperature: 1 }), res, {
      ...meanByteReward,
      device: { errors: device },
    });
    const r = await buildTrainer(base({ evalTemperature: 1, microBatchSize: 2 }), res, meanByteReward);
    try {
      const before = tf.memory().numTensors;
      const got = await new Evaluator(t, prompts).run(0);
      expect(tf.memory().numTensors).toBe(before);
      const want = await new Evaluator(r, prompts).run(0);
      // Generation of 6 prompts: 6 → 3 → 2 (two failures); the forwards then start at 2 (the plan kept).
      expect(device.failures).toBe(2);
      expect(device.balanced).toBe(true);
      expect(t.stepPlan()).toEqual({ microBatchSize: 2, generateMicroBatchSize: 2, recompute: false });
      expect(got.samples).toEqual(want.samples);
      for (const k of ['eval/reward', 'eval/kl', 'eval/winRate'] as const) {
        expect(Math.abs(got[k] - want[k]), k).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(want[k])));
      }
      const notices = t.takeOutOfStepNotices();
      expect(notices).toHaveLength(1);
      expect(notices[0].message).toMatch(
        /while generating for the held-out evaluation in slices of 6; .* The run goes on with micro-batches of 2/,
      );
      expect(t.takeOutOfStepNotices()).toHaveLength(0);
    } finally {
      t.disposeAll();
      r.disposeAll();
    }
  });
});
