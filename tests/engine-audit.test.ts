/**
 * The PPO engine audit (issue #10): one test per finding, each failing on the code before its fix.
 * Tiny random models on the WASM backend; see docs/engine.md for the step these guard.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import { validateConfig, derived, type TrainConfig } from '../src/common/config';
import { applyLive } from '../src/common/config/live';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { REWARD_FILE } from '../src/core/reward/reward-model';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import {
  memoryFiles,
  loadLM,
  configBytes,
  scalarSafetensors,
  type ModelFiles,
} from '../src/core/model/folder';
import { ScalarModel } from '../src/core/model/heads';
import { nodeFiles } from '../src/cli/files-node';
import { pickTokens, filterLogits } from '../src/core/model/sampling';
import { AdaptiveKlController } from '../src/core/ppo/kl';
import { REWARD_STATS_FILE } from '../src/core/reward/reward-model';
import { jointGuardedStep } from '../src/core/ppo/update';
import { Rng } from '../src/core/base/rng';
import { tinyResources, tinyConfig, meanByteReward } from './helpers/trainer-fixture';

let dir: string;
let rmFiles: Map<string, Uint8Array>;
const RM_MEAN = 0.75;

const res = (extra: Record<string, ModelFiles> = {}): Resources => tinyResources(() => dir, extra);
const eReward = meanByteReward;

function config(over: Partial<TrainConfig> = {}): TrainConfig {
  return tinyConfig(over);
}

async function weights(vars: tf.Variable[]): Promise<number[]> {
  const out: number[] = [];
  for (const v of vars) out.push(...(await v.data()));
  return out;
}

describe('engine audit', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    dir = await makeTinyFolder();
    // A reward model with a non-zero head, so its scores differ between responses.
    const lm = await loadLM(nodeFiles(dir), { trainable: false, label: 'rm-trunk' });
    const rm = ScalarModel.fromTrunk(lm.model, false, 'rm');
    lm.model.dispose();
    const head = tf.randomNormal(rm.score.shape, 0, 1, 'float32', 5);
    rm.score.assign(head);
    head.dispose();
    rmFiles = new Map([
      ['config.json', configBytes(rm.config)],
      [REWARD_FILE, await scalarSafetensors(rm)],
    ]);
    rm.dispose();
  });

  it('1. live klCoef/targetKl/klHorizon reach an adaptive controller; β is kept unless klCoef changed', async () => {
    // The trainer reads its config from `cfg` at each step's start, as a session's trainer reads the session's.
    let cfg = config({ adaptiveKl: true, klCoef: 0.2, targetKl: 6, klHorizon: 100 });
    const t = await buildTrainer(cfg, res(), { ...eReward, owner: () => ({ config: () => cfg }) });
    t.kl.update(0, 4); // β moves away from klCoef: 0.2·(1 − 0.2·4/100)
    const beta = 0.2 * (1 - (0.2 * 4) / 100);
    expect(t.kl.value).toBeCloseTo(beta, 12);
    cfg = applyLive(cfg, { targetKl: 2, klHorizon: 50 });
    // The next step rebuilds the controller with the new target and horizon, keeping β …
    const r1 = await t.trainStep();
    expect(r1.metrics.klCoef).toBeCloseTo(beta, 12);
    expect(t.kl).toBeInstanceOf(AdaptiveKlController);
    // … and its KL moves β against target 2 over horizon 50 (n = batchSize).
    const err = Math.max(-0.2, Math.min(0.2, r1.metrics.kl / 2 - 1));
    const beta2 = beta * (1 + (err * cfg.batchSize) / 50);
    const st = t.kl.state() as { kind: string; value: number; target: number; horizon: number };
    expect({ ...st, value: 0 }).toEqual({ kind: 'adaptive', value: 0, target: 2, horizon: 50 });
    expect(st.value).toBeCloseTo(beta2, 10);
    // An unrelated live change keeps β.
    cfg = applyLive(cfg, { learningRate: 1e-3 });
    const r2 = await t.trainStep();
    expect(r2.metrics.learningRate).toBe(1e-3);
    expect(r2.metrics.klCoef).toBeCloseTo(beta2, 10);
    // klCoef itself changed: β restarts from it.
    cfg = applyLive(cfg, { klCoef: 0.5 });
    const r3 = await t.trainStep();
    expect(r3.metrics.klCoef).toBe(0.5);
    t.disposeOptimizers();
  });

  it('2. early stop compares the per-token approx KL with its own key, not with targetKl', async () => {
    expect(validateConfig({}).earlyStopApproxKl).toBe(0.02);
    expect(validateConfig({}).earlyStopKl).toBe(false);
    expect('earlyStopApproxKl' in derived(validateConfig({}))).toBe(false);
    // A tiny threshold stops after the first epoch (its second minibatch saw an updated policy) …
    const a = await buildTrainer(
      config({ ppoEpochs: 3, earlyStopKl: true, earlyStopApproxKl: 1e-6 }),
      res(),
      eReward,
    );
    const ra = await a.trainStep();
    a.disposeOptimizers();
    expect(ra.metrics.approxKl).toBeGreaterThan(1e-6);
    expect(ra.metrics.epochsRun).toBe(1);
    // … a large one never does, whatever targetKl says (the old rule stopped at 1.5·targetKl/responseLength).
    const b = await buildTrainer(
      config({ ppoEpochs: 3, earlyStopKl: true, earlyStopApproxKl: 10, targetKl: 0.01 }),
      res(),
      eReward,
    );
    const rb = await b.trainStep();
    b.disposeOptimizers();
    expect(rb.metrics.epochsRun).toBe(3);
    // The switch off: every epoch runs.
    const c = await buildTrainer(config({ ppoEpochs: 3, earlyStopApproxKl: 1e-6 }), res(), eReward);
    expect((await c.trainStep()).metrics.epochsRun).toBe(3);
    c.disposeOptimizers();
  });

  it('3. inverse-CDF sampling never returns a zero-probability token, also where the float32 cumsum falls short of 1', async () => {
    const B = 256;
    const V = 300;
    const K = 20;
    const rng = new Rng(7);
    const logitsArr = Float32Array.from({ length: B * V }, () => 4 * (rng.next() - 0.5));
    const logits = tf.tensor2d(logitsArr, [B, V]);
    // The plain-loop probability of each token after top-k (0 outside the top K).
    const probsOf = async (row: number): Promise<number[]> => {
      const f = tf.tidy(() =>
        tf.softmax(filterLogits(tf.slice(logits, [row, 0], [1, V]) as tf.Tensor2D, K, 1)),
      );
      const p = Array.from(await f.data());
      f.dispose();
      return p;
    };
    const largestBelowOne = 1 - 2 ** -24;
    const cases = [
      Array.from({ length: B }, () => largestBelowOne),
      Array.from({ length: B }, () => 0),
      Array.from({ length: B }, () => rng.next()),
    ];
    const probs = await Promise.all(Array.from({ length: B }, (_, r) => probsOf(r)));
    // Rows whose float32 cumsum ends below the largest uniform: the old code sent them to token V − 1.
    const cdfEnd = tf.tidy(() =>
      tf.slice(tf.cumsum(tf.softmax(filterLogits(logits, K, 1)), 1), [0, V - 1], [B, 1]),
    );
    const short = Array.from(await cdfEnd.data()).filter((c) => c < largestBelowOne).length;
    cdfEnd.dispose();
    expect(short).toBeGreaterThan(0);
    for (const u of cases) {
      const uT = tf.tensor2d(u, [B, 1]);
      const { tokens, logprobs } = pickTokens(logits, 1, K, 1, uT);
      const tok = Array.from(await tokens.data());
      tf.dispose([uT, tokens, logprobs]);
      tok.forEach((t, r) => expect(probs[r][t], `row ${r}, u ${u[r]} → token ${t}`).toBeGreaterThan(0));
    }
    // Inverse CDF on a hand-worked distribution [0.5, 0.25, 0.25, 0] (top-3 of 4).
    const hand = tf.tensor2d([[Math.log(0.5), Math.log(0.25), Math.log(0.25), -5]]);
    const pick = async (u: number): Promise<number> => {
      const uT = tf.tensor2d([[u]]);
      const r = pickTokens(hand, 1, 3, 1, uT);
      const t = (await r.tokens.data())[0];
      tf.dispose([uT, r.tokens, r.logprobs]);
      return t;
    };
    expect([
      await pick(0),
      await pick(0.49),
      await pick(0.51),
      await pick(0.74),
      await pick(0.76),
      await pick(largestBelowOne),
    ]).toEqual([0, 0, 1, 1, 2, 2]);
    // A leading zero-probability token is never drawn, even at u = 0.
    const lead = tf.tensor2d([[-5, 0, 0]]);
    const uZero = tf.tensor2d([[0]]);
    const r0 = pickTokens(lead, 1, 2, 1, uZero);
    expect((await r0.tokens.data())[0]).toBe(1);
    // A diverged (NaN) row still yields a valid id (0), so the non-finite guard can take over.
    const nanRow = tf.tensor2d([[NaN, NaN, NaN]]);
    const rNaN = pickTokens(nanRow, 1, 0, 1, uZero);
    expect(rNaN.tokens.dtype).toBe('int32');
    expect(Array.from(await rNaN.tokens.data())).toEqual([0]);
    tf.dispose([hand, lead, uZero, r0.tokens, r0.logprobs, logits, nanRow, rNaN.tokens, rNaN.logprobs]);
  });

  it('5. reward-model scores are centred by the mean in reward_stats.json; without the file: as is, with an alert', async () => {
    const stats = new TextEncoder().encode(
      JSON.stringify({ mean: RM_MEAN, std: 1, rawMean: 2, rawStd: 3, scale: 1 / 3 }),
    );
    const withStats = memoryFiles('rm', new Map([...rmFiles, [REWARD_STATS_FILE, stats]]));
    const without = memoryFiles('rm-bare', rmFiles);
    const run = async (over: Partial<TrainConfig>, files: ModelFiles) => {
      const t = await buildTrainer(
        config({ reward: { model: files.label }, ...over }),
        res({ [files.label]: files }),
      );
      const r = await t.trainStep();
      return { t, r };
    };
    const centred = await run({}, withStats);
    const raw = await run({ rewardModelCenter: false }, withStats);
    const bare = await run({}, without);
    // Same seed, same responses: the scores differ by the recorded mean exactly.
    expect(centred.r.rollout.responses).toEqual(raw.r.rollout.responses);
    centred.r.rollout.scores.forEach((s, i) => expect(s).toBeCloseTo(raw.r.rollout.scores[i] - RM_MEAN, 6));
    expect(new Set(raw.r.rollout.scores).size).toBeGreaterThan(1);
    expect(centred.r.metrics.reward).toBeCloseTo(raw.r.metrics.reward - RM_MEAN, 6);
    expect(centred.r.alerts.map((a) => a.id)).not.toContain('reward-uncentred');
    expect(raw.r.alerts.map((a) => a.id)).not.toContain('reward-uncentred');
    // No reward_stats.json: the scores are used as they are, and the first step says so.
    expect(bare.r.rollout.scores).toEqual(raw.r.rollout.scores);
    const alert = bare.r.alerts.find((a) => a.id === 'reward-uncentred');
    expect(alert?.message).toContain('reward_stats.json');
    // The mean travels with the checkpoint: a resumed run keeps centring without the reward folder.
    const files = await checkpointFiles(centred.t);
    const c = await restoreTrainer(memoryFiles('ckpt', files), res({ rm: without }));
    expect(c.rewardMean).toBe(RM_MEAN);
    const state = JSON.parse(new TextDecoder().decode(files.get('trainer_state.json')!)) as Record<
      string,
      unknown
    >;
    expect(state.rewardMean).toBe(RM_MEAN);
    for (const x of [centred.t, raw.t, bare.t, c]) x.disposeOptimizers();
  });

  it('6. the bad-step counter is checkpointed; an old checkpoint without it restores 0', async () => {
    // A run at step 1 whose last two steps were skipped (the counter comes back from a checkpoint this way too).
    const t = await buildTrainer(config(), res(), { ...eReward, resume: { step: 1, badSteps: 2 } });
    expect(t.badSteps).toBe(2);
    const files = await checkpointFiles(t);
    t.disposeOptimizers();
    const state = JSON.parse(new TextDecoder().decode(files.get('trainer_state.json')!)) as Record<
      string,
      unknown
    >;
    expect(state.badSteps).toBe(2);
    const c = await restoreTrainer(memoryFiles('ckpt', files), res(), eReward);
    expect(c.badSteps).toBe(2);
    c.disposeOptimizers();
    delete state.badSteps;
    const old = new Map(files);
    old.set('trainer_state.json', new TextEncoder().encode(JSON.stringify(state)));
    const d = await restoreTrainer(memoryFiles('old', old), res(), eReward);
    expect(d.badSteps).toBe(0);
    d.disposeOptimizers();
    state.badSteps = -1;
    old.set('trainer_state.json', new TextEncoder().encode(JSON.stringify(state)));
    await expect(restoreTrainer(memoryFiles('bad', old), res(), eReward)).rejects.toThrow(/"badSteps"/);
  });

  it('7. vfCoef weighs the value loss in the one clipped gradient: it changes the policy step when the clip binds', async () => {
    const policyAfter = async (vfCoef: number, maxGradNorm: number): Promise<number[]> => {
      const t = await buildTrainer(
        config({ vfCoef, maxGradNorm, ppoEpochs: 1, miniBatches: 1 }),
        res(),
        eReward,
      );
      await t.trainStep();
      const w = await weights(t.models.policy.trainableVariables());
      t.disposeOptimizers();
      return w;
    };
    const base = await policyAfter(0, 1e-3);
    const heavy = await policyAfter(10, 1e-3);
    const diff = Math.max(...base.map((x, i) => Math.abs(x - heavy[i])));
    expect(diff).toBeGreaterThan(1e-7);
  });

  it('7b. the joint step clips both parts by one factor min(1, maxGradNorm/‖(g_policy, g_value)‖) (SGD, by hand)', async () => {
    const before = tf.memory().numTensors;
    const [w1, w2] = tf.tidy(() => [
      tf.variable(tf.tensor1d([3, 4]), true, 'joint_w1'),
      tf.variable(tf.tensor1d([12]), true, 'joint_w2'),
    ]);
    const o1 = tf.train.sgd(1);
    const o2 = tf.train.sgd(1);
    // ∇(½‖w1‖²) = w1 (norm 5), ∇(½‖w2‖²) = w2 (norm 12): joint norm 13; maxGradNorm 1.3 → factor 0.1 for both.
    const parts = (bad: boolean) => [
      {
        optimizer: o1,
        vars: [w1],
        objective: () => ({
          loss: tf.mul(0.5, tf.sum(tf.square(w1))) as tf.Scalar,
          stats: { s1: tf.sum(w1) as tf.Scalar },
        }),
      },
      {
        optimizer: o2,
        vars: [w2],
        objective: () => ({
          loss: tf.mul(bad ? NaN : 0.5, tf.sum(tf.square(w2))) as tf.Scalar,
          stats: { s2: tf.max(w2) as tf.Scalar },
        }),
      },
    ];
    const r = await jointGuardedStep(parts(false), 1.3);
    expect(r.applied).toBe(true);
    expect(r.gradNorms[0]).toBeCloseTo(5, 5);
    expect(r.gradNorms[1]).toBeCloseTo(12, 5);
    expect(r.jointGradNorm).toBeCloseTo(13, 5);
    expect(r.clipScale).toBeCloseTo(0.1, 6);
    expect(r.losses).toEqual([12.5, 72]);
    expect(r.stats).toEqual({ s1: 7, s2: 12 });
    Array.from(await w1.data()).forEach((x, i) => expect(x).toBeCloseTo([2.7, 3.6][i], 5));
    expect((await w2.data())[0]).toBeCloseTo(10.8, 5);
    // A NaN in one part: neither part is applied.
    const w1Before = Array.from(await w1.data());
    const bad = await jointGuardedStep(parts(true), 1.3);
    expect(bad.applied).toBe(false);
    expect(Array.from(await w1.data())).toEqual(w1Before);
    expect((await w2.data())[0]).toBeCloseTo(10.8, 5);
    tf.dispose([w1, w2]);
    o1.dispose();
    o2.dispose();
    expect(tf.memory().numTensors).toBe(before);
  });

  it('8. entropyCoef 0: the entropy is measured but not differentiated (fewer kernels), and still reported', async () => {
    const kernels = async (entropyCoef: number) => {
      const t = await buildTrainer(config({ entropyCoef, ppoEpochs: 1, miniBatches: 1 }), res(), eReward);
      let entropy = NaN;
      const info = await tf.profile(async () => {
        entropy = (await t.trainStep()).metrics.entropy;
      });
      t.disposeOptimizers();
      return { n: info.kernels.length, entropy };
    };
    const off = await kernels(0);
    const tiny = await kernels(1e-12);
    expect(off.n).toBeLessThan(tiny.n);
    // One epoch of one minibatch: the entropy is that of the rollout policy in both runs.
    expect(off.entropy).toBeGreaterThan(0);
    expect(off.entropy).toBeCloseTo(tiny.entropy, 6);
  });
});
