import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { TfjsAdam } from '../src/core/optim/fused-adam';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import type { TrainConfig } from '../src/common/config';
import { applyLive } from '../src/common/config/live';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { REQUIRED_METRICS, type StepMetrics } from '../src/common/metrics';
import { rolloutDump } from '../src/core/ppo/rollout';
import { tinyResources, tinyConfig, meanByteReward } from './helpers/trainer-fixture';

let dir: string;
const res = (): Resources => tinyResources(() => dir);
const eReward = meanByteReward;

function config(over: Partial<TrainConfig> = {}): TrainConfig {
  return tinyConfig(over);
}

const TIMING = new Set(['tokensPerSecond', 'timeGenerate', 'timeScore', 'timeUpdate', 'timeStep']);

describe('PPO trainer', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    dir = await makeTinyFolder();
  });

  it('reports every metric of docs/formats.md §3, and the first minibatch ratio is exactly 1', async () => {
    const t = await buildTrainer(config(), res(), eReward);
    const r = await t.trainStep();
    for (const k of REQUIRED_METRICS) expect(typeof r.metrics[k]).toBe('number');
    expect(r.metrics.step).toBe(1);
    expect(r.firstMinibatch.ratioMean).toBe(1);
    expect(r.firstMinibatch.ratioMax).toBe(1);
    expect(r.firstMinibatch.approxKl).toBe(0);
    expect(r.firstMinibatch.clipFrac).toBe(0);
    // The policy moved during the epochs, so later minibatches see ratios ≠ 1.
    expect(r.metrics.approxKl).toBeGreaterThan(0);
    t.disposeOptimizers();
  });

  it('the rollout dump follows docs/formats.md §4 and its numbers agree with each other', async () => {
    const cfg = config({ klCoef: 0.1, whitenAdvantages: false });
    const t = await buildTrainer(cfg, res(), eReward);
    const klCoef = t.kl.value;
    const r = await t.trainStep();
    const d = rolloutDump(r.rollout, 1, { ...cfg, klCoef });
    expect(d.queries.length).toBe(4);
    for (let i = 0; i < 4; i++) {
      const L = d.responses[i].length;
      for (const key of [
        'responseMask',
        'logprobs',
        'refLogprobs',
        'values',
        'rewards',
        'advantages',
        'returns',
      ] as const) {
        expect(d[key]![i].length).toBe(L);
      }
      // rewards = −β·k1 (+ score at the last token); returns = advantages + values (unwhitened here).
      for (let t2 = 0; t2 < L; t2++) {
        const k1 = d.logprobs[i][t2] - d.refLogprobs[i][t2];
        const expected = -klCoef * k1 + (t2 === L - 1 ? d.scores[i] : 0);
        expect(d.rewards[i][t2]).toBeCloseTo(expected, 6);
        expect(d.returns![i][t2]).toBeCloseTo(d.advantages[i][t2] + d.values![i][t2], 6);
      }
      // First step: the policy is the reference, so logprobs equal refLogprobs exactly.
      expect(d.logprobs[i]).toEqual(d.refLogprobs[i]);
    }
    t.disposeOptimizers();
  });

  it('4 steps straight equal 2 steps + checkpoint + resume + 2 steps (metrics to 1e-6)', async () => {
    const a = await buildTrainer(config(), res(), eReward);
    const straight: StepMetrics[] = [];
    for (let i = 0; i < 4; i++) straight.push((await a.trainStep()).metrics);
    a.disposeOptimizers();

    const b = await buildTrainer(config(), res(), eReward);
    await b.trainStep();
    await b.trainStep();
    const files = await checkpointFiles(b);
    b.disposeOptimizers();
    expect([...files.keys()].sort()).toEqual([
      'config.json',
      'model.safetensors',
      'optimizer.safetensors',
      'ref_model.safetensors',
      'trainer_state.json',
      'value_model.safetensors',
    ]);
    const c = await restoreTrainer(memoryFiles('ckpt', files), res(), eReward);
    expect(c.step).toBe(2);
    expect(c.history.length).toBe(2);
    const resumed = [(await c.trainStep()).metrics, (await c.trainStep()).metrics];
    c.disposeOptimizers();
    for (let i = 0; i < 2; i++) {
      for (const k of REQUIRED_METRICS) {
        if (TIMING.has(k)) continue;
        const x = straight[2 + i][k];
        const y = resumed[i][k];
        if (x === null || y === null) expect(y, k).toBe(x);
        else if (Number.isNaN(x)) expect(Number.isNaN(y)).toBe(true);
        else
          expect(Math.abs(x - y), `${k} at step ${3 + i}`).toBeLessThanOrEqual(
            1e-6 * Math.max(1, Math.abs(x)),
          );
      }
    }
  });

  it("the trainer's fused Adam (one kernel per variable) trains as tf.train.adam does: 2 steps, metrics to 1e-4", async () => {
    const run = async (plain: boolean): Promise<{ m: StepMetrics[]; fusedCalls: number }> => {
      const t = await buildTrainer(config(), res(), eReward);
      if (plain) {
        t.policyOpt.dispose();
        t.valueOpt!.dispose();
        t.policyOpt = new TfjsAdam(t.cfg.learningRate, 0.9, 0.999);
        t.valueOpt = new TfjsAdam(t.cfg.valueLearningRate, 0.9, 0.999);
      }
      const m = [(await t.trainStep()).metrics, (await t.trainStep()).metrics];
      const fusedCalls = (t.policyOpt as unknown as { fusedCalls?: number }).fusedCalls ?? 0;
      t.disposeOptimizers();
      return { m, fusedCalls };
    };
    const fused = await run(false);
    const plain = await run(true);
    // Every policy variable went through the fused kernel: 2 steps × 2 epochs × 2 minibatches × variables.
    expect(fused.fusedCalls).toBeGreaterThanOrEqual(8 * 4);
    // The two differ only in float32 rounding of the bias correction (~1e-7 relative per step), which the
    // sampled tokens and metrics of two steps carry at well under 1e-4.
    for (let i = 0; i < 2; i++) {
      expect(fused.m[i].approxKl).toBeGreaterThan(0);
      for (const k of REQUIRED_METRICS) {
        if (TIMING.has(k)) continue;
        const x = plain.m[i][k];
        const y = fused.m[i][k];
        if (x === null || y === null) expect(y, k).toBe(x);
        else if (Number.isNaN(x)) expect(Number.isNaN(y)).toBe(true);
        else
          expect(Math.abs(x - y), `${k} at step ${1 + i}`).toBeLessThanOrEqual(
            1e-4 * Math.max(1, Math.abs(x)),
          );
      }
    }
  });

  it('temperature ≠ 1: rollout and training logprobs both use logits / T, so the first ratio is still exactly 1', async () => {
    const t = await buildTrainer(config({ temperature: 0.7 }), res(), eReward);
    const r = await t.trainStep();
    expect(r.firstMinibatch.ratioMax).toBe(1);
    expect(r.firstMinibatch.ratioMean).toBe(1);
    t.disposeOptimizers();
  });

  it('missing-EOS penalty is subtracted only from responses that never stopped; no stop token → all tokens count', async () => {
    const u = await buildTrainer(config({ stopToken: null }), res(), eReward);
    const free = (await u.trainStep()).rollout;
    for (const row of free.mask) expect(row.every((m) => m === 1)).toBe(true);
    u.disposeOptimizers();
    // The stop token: the token the same seeded run without one samples most often among those missing from some
    // response, so that some rows stop and some never do.
    const counts = new Map<number, number>();
    for (const t of free.responses.flat()) counts.set(t, (counts.get(t) ?? 0) + 1);
    const stopToken = [...counts.entries()]
      .filter(([tok]) => free.responses.some((row) => !row.includes(tok)))
      .sort((a, b) => b[1] - a[1])[0][0];
    const t = await buildTrainer(config({ missingEosPenalty: 1.5, stopToken }), res(), eReward);
    const r = await t.trainStep();
    const ro = r.rollout;
    const stopped = ro.scores.map(
      (_, i) => ro.responses[i][ro.mask[i].reduce((a, b) => a + b, 0) - 1] === stopToken,
    );
    expect(stopped).toContain(true);
    expect(stopped).toContain(false);
    ro.scores.forEach((s, i) => {
      expect(ro.penalisedScores[i]).toBeCloseTo(stopped[i] ? s : s - 1.5, 6);
      // After the stop token the response is PAD (257), and masked out.
      ro.mask[i].forEach((m, k) => {
        if (!m) expect(ro.responses[i][k]).toBe(257);
      });
    });
    t.disposeOptimizers();
  });

  it('live changes apply from the next step and show in its metrics; the adaptive controller moves β', async () => {
    let cfg = config();
    const t = await buildTrainer(cfg, res(), { ...eReward, owner: () => ({ config: () => cfg }) });
    await t.trainStep();
    cfg = applyLive(cfg, { klCoef: 0.3, learningRate: 1e-3 });
    const r = await t.trainStep();
    expect(r.metrics.klCoef).toBe(0.3);
    expect(r.metrics.learningRate).toBe(1e-3);
    t.disposeOptimizers();
    const a = await buildTrainer(
      config({ adaptiveKl: true, klCoef: 0.2, targetKl: 0.01, klHorizon: 100, learningRate: 1e-2 }),
      res(),
      eReward,
    );
    const s1 = await a.trainStep();
    const s2 = await a.trainStep();
    // β_{2} = β_{1}·(1 + clip(KL/target − 1, ±0.2)·B/horizon), with KL of step 1.
    const err = Math.max(-0.2, Math.min(0.2, s1.metrics.kl / 0.01 - 1));
    expect(s2.metrics.klCoef).toBeCloseTo(0.2 * (1 + (err * 4) / 100), 10);
    a.disposeOptimizers();
  });

  it('tf.memory().numTensors is flat across training steps', async () => {
    const t = await buildTrainer(config({ ppoEpochs: 1 }), res(), eReward);
    await t.trainStep();
    const before = tf.memory().numTensors;
    for (let i = 0; i < 3; i++) await t.trainStep();
    expect(tf.memory().numTensors).toBe(before);
    t.disposeOptimizers();
  });
});
