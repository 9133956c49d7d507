/**
 * GRPO, RLOO and REINFORCE++ beside PPO (docs/formats.md §7, docs/engine.md "Critic-free algorithms"): the maths
 * against hand-worked numbers and plain loops, the GRPO KL term's gradient against finite differences, and the
 * trainer on a tiny random model (WASM): one batched generate per step with G samples per prompt, the first ratio
 * exactly 1, exact resume, no value model anywhere in a critic-free run, and every algorithm's rollout dump
 * recomputed from its own fields.
 */
import { describe, it, expect, beforeAll, vi } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import { derived, validateConfig, type Algorithm, type TrainConfig } from '../src/common/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { readSafetensors } from '../src/core/model/safetensors';
import { REQUIRED_METRICS, NULLABLE_METRICS, type StepMetrics } from '../src/common/metrics';
import { rolloutDump, type RolloutDump } from '../src/core/ppo/rollout';
import { healthAlerts } from '../src/core/ppo/health';
import {
  aggregateLoss,
  broadcastToTokens,
  groupIds,
  groupStats,
  grpoAdvantages,
  reinforcePlusPlus,
  rlooAdvantages,
} from '../src/core/ppo/advantages';
import { aggregateLossT, clipFractions, k3PerToken, klTermLoss } from '../src/core/ppo/losses';
import * as sampling from '../src/core/model/sampling';
import { tinyResources, meanByteReward } from './helpers/trainer-fixture';

// Count the trainer's generate calls (the real function runs underneath; the trainer generates through
// generateInMicroBatches, one call per step for the whole batch).
vi.mock('../src/core/model/sampling', async (importOriginal) => {
  const m = await importOriginal<typeof import('../src/core/model/sampling')>();
  return { ...m, generateInMicroBatches: vi.fn(m.generateInMicroBatches) };
});

const close = (got: number, want: number, tol = 1e-9) =>
  expect(Math.abs(got - want), `${got} vs ${want}`).toBeLessThanOrEqual(tol * Math.max(1, Math.abs(want)));
const closeAll = (got: ArrayLike<number>, want: ArrayLike<number>, tol = 1e-9) => {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) close(got[i], want[i], tol);
};

describe('GRPO advantages, hand-worked (G = 4; group 1 scores all equal)', () => {
  // Group 0: [1, 0, 0, 1]: mean 0.5, unbiased var (4 · 0.25) / 3 = 1/3. Group 1: [2, 2, 2, 2]: std 0.
  // Batch: mean 10/8 = 1.25; Σ(s − 1.25)² = 2·0.0625 + 2·1.5625 + 4·0.5625 = 5.5; unbiased var 5.5 / 7.
  const scores = [1, 0, 0, 1, 2, 2, 2, 2];
  const g0 = Math.sqrt(1 / 3);
  const batchStd = Math.sqrt(5.5 / 7);

  it('scaleRewards "group": (s − mean_g) / (std_g + 1e-4); the all-equal group gets exactly 0, no NaN', () => {
    const a = grpoAdvantages(scores, 4, 'group');
    const h = 0.5 / (g0 + 1e-4);
    closeAll(a, [h, -h, -h, h, 0, 0, 0, 0]);
    expect(a.slice(4).every((x) => x === 0)).toBe(true);
  });

  it('scaleRewards "batch": divided by the batch std + 1e-4', () => {
    const h = 0.5 / (batchStd + 1e-4);
    closeAll(grpoAdvantages(scores, 4, 'batch'), [h, -h, -h, h, 0, 0, 0, 0]);
  });

  it('scaleRewards "none" (Dr. GRPO): only centred', () => {
    closeAll(grpoAdvantages(scores, 4, 'none'), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]);
  });

  it('a batch whose every group is all-equal: A = 0 everywhere for all three scalings (0 / 1e-4)', () => {
    for (const s of ['group', 'batch', 'none'] as const) {
      expect(grpoAdvantages([3, 3, -1, -1], 2, s)).toEqual([0, 0, 0, 0]);
    }
  });

  it('groupStats: fracRewardZeroStd counts the all-equal group (1 of 2), rewardStd is the mean group std', () => {
    const g = groupStats(scores, 4);
    close(g.fracRewardZeroStd!, 0.5);
    close(g.rewardStd, (g0 + 0) / 2);
    // G = 1: no groups, the batch's population std (PPO's rewardStd as before).
    const one = groupStats([1, 3], 1);
    expect(one.fracRewardZeroStd).toBeNull();
    close(one.rewardStd, 1);
    expect(groupIds(6, 3)).toEqual([0, 0, 0, 1, 1, 1]);
    expect(() => groupIds(6, 4)).toThrow(/6 samples cannot be split into groups of 4/);
  });

  it('the same A_i at every counted token, 0 at padding', () => {
    expect(
      broadcastToTokens(
        [2, -1],
        [
          [1, 1, 0],
          [1, 0, 0],
        ],
      ),
    ).toEqual([
      [2, 2, 0],
      [-1, 0, 0],
    ]);
  });
});

describe('RLOO, hand-worked (G = 3, klCoef 0.1, k1)', () => {
  // Σ_t k1 per sample: 0.5, −0.2, 1.0 (padding holds wild numbers that must not count).
  const logprobs = [
    [-1.0, -0.5, 99],
    [-0.7, 99, 99],
    [-0.1, -0.2, -0.3],
  ];
  const ref = [
    [-1.2, -0.8, -5],
    [-0.5, -5, -5],
    [-0.4, -0.5, -0.7],
  ];
  const mask = [
    [1, 1, 0],
    [1, 0, 0],
    [1, 1, 1],
  ];
  const scores = [1, 2, 6];
  // r = s − 0.1·Σk1 = [0.95, 2.02, 5.9]; A_i = r_i − mean of the other two.
  const A = [0.95 - (2.02 + 5.9) / 2, 2.02 - (0.95 + 5.9) / 2, 5.9 - (0.95 + 2.02) / 2]; // −3.01, −1.405, 4.415

  it('r_i = s_i − klCoef·Σ_t k1_t; A_i = r_i − mean of the other G − 1 of the group', () => {
    const r = rlooAdvantages(scores, logprobs, ref, mask, 0.1, 'k1', 3, false);
    closeAll(r.sequenceRewards, [0.95, 2.02, 5.9], 1e-12);
    closeAll(r.advantages, A, 1e-12);
    close(A[0], -3.01, 1e-12);
    // The per-token rewards carry the same total: Σ_t r_t = r_i.
    r.perToken.rewards.forEach((row, i) =>
      close(
        row.reduce((a, b) => a + b, 0),
        r.sequenceRewards[i],
        1e-12,
      ),
    );
  });

  it('normalizeAdvantages whitens A over the batch’s samples: (A − mean) / √(var + 1e-8), var unbiased', () => {
    const r = rlooAdvantages(scores, logprobs, ref, mask, 0.1, 'k1', 3, true);
    // mean(A) = 0; var = (3.01² + 1.405² + 4.415²) / 2 = 15.263175.
    const sd = Math.sqrt(15.263175 + 1e-8);
    closeAll(
      r.advantages,
      A.map((a) => a / sd),
      1e-9,
    );
  });

  it('refuses G = 1 (no other samples to leave out)', () => {
    expect(() => rlooAdvantages([1], [[0]], [[0]], [[1]], 0.1, 'k1', 1, false)).toThrow(
      /groups of 2 or more/,
    );
  });
});

describe('REINFORCE++, hand-worked (γ 0.5, klCoef 0.1, k1)', () => {
  // Sample 0: k1 = [0.2, −0.1, 0.4], score 1. Sample 1: k1 = [0, 0.3] then padding, score −1.
  const logprobs = [
    [-1.0, -2.0, -0.5],
    [-1.0, -0.7, 50],
  ];
  const ref = [
    [-1.2, -1.9, -0.9],
    [-1.0, -1.0, -3],
  ];
  const mask = [
    [1, 1, 1],
    [1, 1, 0],
  ];
  it('r_t = −klCoef·k1_t + s at the last counted token; G_t = Σ γ^{k−t} r_k; whitened over counted tokens', () => {
    const r = reinforcePlusPlus([1, -1], logprobs, ref, mask, 0.1, 'k1', 0.5);
    closeAll(r.perToken.rewards[0], [-0.02, 0.01, 0.96], 1e-12);
    closeAll(r.perToken.rewards[1], [0, -1.03, 0], 1e-12);
    // G: sample 0: 0.96; 0.01 + 0.5·0.96 = 0.49; −0.02 + 0.5·0.49 = 0.225. Sample 1: −1.03; 0 + 0.5·(−1.03).
    closeAll(r.returns[0], [0.225, 0.49, 0.96], 1e-12);
    closeAll(r.returns[1], [-0.515, -1.03, 0], 1e-12);
    // Whitening over the 5 counted returns: mean 0.026, unbiased var 2.53507 / 4.
    const sd = Math.sqrt(2.53507 / 4 + 1e-8);
    closeAll(r.advantages[0], [0.199 / sd, 0.464 / sd, 0.934 / sd], 1e-9);
    closeAll(r.advantages[1], [-0.541 / sd, -1.056 / sd, 0], 1e-9);
  });
});

describe('loss aggregations', () => {
  beforeAll(useCpu);

  it('hand-worked: token-mean 7/3, seq-mean 2.75, seq-sum-norm 7/6', () => {
    const L = [
      [1, 2, 3],
      [4, 0, 0],
    ];
    const m = [
      [1, 1, 0],
      [1, 0, 0],
    ];
    close(aggregateLoss(L, m, 'token-mean', 3), 7 / 3);
    close(aggregateLoss(L, m, 'seq-mean', 3), 2.75);
    close(aggregateLoss(L, m, 'seq-sum-norm', 3), 7 / 6);
  });

  it('the tensor version equals the plain loop for all three, on random ragged rows', async () => {
    let seed = 7;
    const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
    const n = 5;
    const R = 6;
    const L = Array.from({ length: n }, () => Array.from({ length: R }, rnd));
    const m = Array.from({ length: n }, (_, i) => Array.from({ length: R }, (_, t) => (t <= i ? 1 : 0)));
    for (const kind of ['token-mean', 'seq-mean', 'seq-sum-norm'] as const) {
      const t = aggregateLossT(tf.tensor2d(L), tf.tensor2d(m), kind, R);
      close((await t.data())[0], aggregateLoss(L, m, kind, R), 1e-6);
      t.dispose();
    }
  });
});

describe('GRPO KL term: klCoef · k3 with ratio p_ref / p', () => {
  beforeAll(useCpu);

  it('k3 hand-worked: exp(ref − logp) − (ref − logp) − 1', async () => {
    const k = k3PerToken(tf.tensor1d([-1, -2, -0.5]), tf.tensor1d([-2, -1, -0.5]));
    closeAll(await k.data(), [Math.exp(-1) + 1 - 1, Math.E - 1 - 1, 0], 1e-6);
    k.dispose();
  });

  it('its gradient matches central finite differences of a float64 plain loop, for every aggregation', async () => {
    const logp = [
      [-1.1, -0.4, -2.0],
      [-0.3, -1.7, -0.9],
    ];
    const ref = [
      [-0.9, -0.8, -1.5],
      [-0.6, -1.2, -3.0],
    ];
    const mask = [
      [1, 1, 1],
      [1, 1, 0],
    ];
    const plain = (lp: number[][], kind: 'token-mean' | 'seq-mean' | 'seq-sum-norm') =>
      aggregateLoss(
        lp.map((row, i) => row.map((x, t) => Math.exp(ref[i][t] - x) - (ref[i][t] - x) - 1)),
        mask,
        kind,
        3,
      );
    for (const kind of ['token-mean', 'seq-mean', 'seq-sum-norm'] as const) {
      const refT = tf.tensor2d(ref);
      const maskT = tf.tensor2d(mask);
      const g = tf.grad((x: tf.Tensor) => klTermLoss(x, refT, maskT, kind, 3))(tf.tensor2d(logp));
      const grad = await g.array();
      close((await klTermLoss(tf.tensor2d(logp), refT, maskT, kind, 3).data())[0], plain(logp, kind), 1e-6);
      const h = 1e-6;
      for (let i = 0; i < 2; i++) {
        for (let t = 0; t < 3; t++) {
          const up = logp.map((r) => r.slice());
          const down = logp.map((r) => r.slice());
          up[i][t] += h;
          down[i][t] -= h;
          const fd = (plain(up, kind) - plain(down, kind)) / (2 * h);
          expect(Math.abs((grad as number[][])[i][t] - fd), `${kind} d/dlogp[${i}][${t}]`).toBeLessThan(1e-5);
        }
      }
      // Padding gets no gradient; a token at the reference (logp = ref) gets none either (k3' = 1 − e^0 = 0).
      expect((grad as number[][])[1][2] === 0).toBe(true);
      tf.dispose([refT, maskT, g]);
    }
  });

  it('clipFracLow / clipFracHigh: ratio < 1 − ε with A < 0, ratio > 1 + ε with A > 0 (TRL’s definitions)', async () => {
    // ratios e^{±0.5} ≈ 1.65 / 0.61 and 1; four counted tokens.
    const lpOld = tf.tensor2d([[0, 0, 0, 0, 0]]);
    const lpNew = tf.tensor2d([[0.5, 0.5, -0.5, -0.5, 9]]);
    const adv = tf.tensor2d([[1, -1, -1, 1, 1]]);
    const mask = tf.tensor2d([[1, 1, 1, 1, 0]]);
    const c = clipFractions(lpNew, lpOld, adv, mask, 0.2);
    close((await c.high.data())[0], 1 / 4, 1e-7); // token 0 only (token 4 is padding)
    close((await c.low.data())[0], 1 / 4, 1e-7); // token 2 only
    tf.dispose([lpOld, lpNew, adv, mask, c.low, c.high]);
  });
});

describe('health: groups that score the same', () => {
  const m = (step: number, f: number | null) => ({ step, fracRewardZeroStd: f }) as unknown as StepMetrics;
  const fires = (fs: (number | null)[]) => {
    const all = fs.map((f, i) => m(i + 1, f));
    return healthAlerts(all[all.length - 1], 6, all.slice(0, -1)).some((a) => a.id === 'groups-zero-std');
  };
  it('fires when fracRewardZeroStd stays above 0.5 for 5 steps, with the advice, and not before', () => {
    expect(fires([0.6, 0.6, 0.75, 1, 0.51])).toBe(true);
    expect(fires([0.6, 0.75, 1, 0.51])).toBe(false);
    expect(fires([0.6, 0.6, 0.4, 1, 0.9, 0.6])).toBe(false);
    expect(fires([0.6, 0.6, 0.6, 0.6, 0.5])).toBe(false);
    expect(fires([null, null, null, null, null])).toBe(false);
    const all = [1, 1, 1, 1, 1].map((f, i) => m(i + 1, f));
    const a = healthAlerts(all[4], 6, all.slice(0, 4)).find((x) => x.id === 'groups-zero-std')!;
    expect(a.message).toBe(
      'most groups score the same: the task is too easy or too hard for this model; raise temperature, groupSize, or change the reward',
    );
  });
  it('null metrics (no value model) are not "non-finite"', () => {
    const metric = { step: 1, valueLoss: null, explainedVariance: null, kl: 0.1 } as unknown as StepMetrics;
    expect(healthAlerts(metric, 6).some((a) => a.id === 'non-finite')).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------------------
// The trainer, on a tiny random model (WASM).

let dir: string;
const res = (): Resources => tinyResources(() => dir);
const eReward = meanByteReward;
const ALGOS: Algorithm[] = ['ppo', 'grpo', 'rloo', 'reinforce++'];
const TIMING = new Set(['tokensPerSecond', 'timeGenerate', 'timeScore', 'timeUpdate', 'timeStep']);

function config(algorithm: Algorithm, over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({
    model: 'tiny-test',
    task: null,
    prompts: ['Hello', 'The day', 'We', 'A long time ago'],
    seed: 3,
    steps: 4,
    algorithm,
    groupSize: algorithm === 'ppo' || algorithm === 'reinforce++' ? 1 : 2,
    batchSize: 4,
    miniBatches: 2,
    ppoEpochs: 2,
    responseLength: 6,
    learningRate: 3e-3,
    valueLearningRate: 3e-3,
    klCoef: 0.1,
    ...over,
  });
}

function sameMetrics(a: StepMetrics[], b: StepMetrics[], firstStep: number) {
  for (let i = 0; i < a.length; i++) {
    for (const k of [...REQUIRED_METRICS, 'fracRewardZeroStd', 'clipFracLow', 'clipFracHigh'] as const) {
      if (TIMING.has(k)) continue;
      const x = a[i][k];
      const y = b[i][k];
      if (x === null || y === null) expect(y, `${k} at step ${firstStep + i}`).toBe(x);
      else if (Number.isNaN(x)) expect(Number.isNaN(y), `${k} at step ${firstStep + i}`).toBe(true);
      else
        expect(Math.abs(x - y), `${k} at step ${firstStep + i}`).toBeLessThanOrEqual(
          1e-6 * Math.max(1, Math.abs(x)),
        );
    }
  }
}

describe('the trainer runs every algorithm', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  });

  it.each(ALGOS)(
    '%s: one batched generate call per step with G samples per prompt; the first minibatch ratio is exactly 1',
    async (algo) => {
      const cfg = config(algo, { groupSize: 2 });
      const t = await buildTrainer(cfg, res(), eReward);
      const gen = vi.mocked(sampling.generateInMicroBatches);
      gen.mockClear();
      const r = await t.trainStep();
      expect(gen).toHaveBeenCalledTimes(1);
      expect(gen.mock.calls[0][1]).toHaveLength(4); // 2 prompts × G 2 in one call
      // In slices of the plan's generation micro-batch (resolveStepPlan), not the update's.
      expect(gen.mock.calls[0][3]).toBe(t.stepPlan(cfg).generateMicroBatchSize);
      expect(r.rollout.groups).toEqual([0, 0, 1, 1]);
      expect(r.rollout.queries[0]).toEqual(r.rollout.queries[1]);
      expect(r.rollout.queries[2]).toEqual(r.rollout.queries[3]);
      expect(r.firstMinibatch).toEqual({ ratioMean: 1, ratioMax: 1, approxKl: 0, clipFrac: 0 });
      for (const k of REQUIRED_METRICS) {
        if (algo !== 'ppo' && (NULLABLE_METRICS as readonly string[]).includes(k))
          expect(r.metrics[k], k).toBeNull();
        else expect(typeof r.metrics[k], k).toBe('number');
      }
      expect(typeof r.metrics.fracRewardZeroStd).toBe('number');
      expect(typeof r.metrics.clipFracLow).toBe('number');
      expect(typeof r.metrics.clipFracHigh).toBe('number');
      expect(r.metrics.approxKl).toBeGreaterThan(0); // the policy moved during the epochs
      if (algo !== 'ppo')
        expect([r.metrics.valueGradNorm, r.metrics.valueLearningRate]).toEqual([null, null]);
      t.disposeAll();
    },
    20_000,
  );

  it.each(ALGOS)(
    '%s: 4 steps straight equal 2 steps + checkpoint + restore + 2 steps (metrics to 1e-6)',
    async (algo) => {
      const a = await buildTrainer(config(algo), res(), eReward);
      const straight: StepMetrics[] = [];
      for (let i = 0; i < 4; i++) straight.push((await a.trainStep()).metrics);
      a.disposeAll();
      const b = await buildTrainer(config(algo), res(), eReward);
      await b.trainStep();
      await b.trainStep();
      const files = await checkpointFiles(b);
      b.disposeAll();
      const c = await restoreTrainer(memoryFiles('ckpt', files), res(), eReward);
      expect(c.step).toBe(2);
      expect(c.cfg.algorithm).toBe(algo);
      const resumed = [(await c.trainStep()).metrics, (await c.trainStep()).metrics];
      c.disposeAll();
      sameMetrics(straight.slice(2), resumed, 3);
    },
    20_000,
  );

  it.each(['grpo', 'rloo', 'reinforce++'] as const)(
    '%s holds no value model: none built, no value Adam, no value file or moments in the checkpoint, and tf.memory() is lower than PPO’s by the value model (weights + Adam moments)',
    async (algo) => {
      const start = tf.memory().numBytes;
      const ppo = await buildTrainer(config('ppo', { groupSize: 2 }), res(), eReward);
      await ppo.trainStep();
      const ppoBytes = tf.memory().numBytes - start;
      const valueBytes = ppo.models.value!.trainableVariables().reduce((s, v) => s + v.size * 4, 0);
      const valueVar = (n: string) => /^value_\d+\//.test(n) || n.endsWith('/score.weight');
      expect(Object.keys(tf.engine().state.registeredVariables).some(valueVar)).toBe(true);
      ppo.disposeAll();
      expect(tf.memory().numBytes).toBe(start);

      const t = await buildTrainer(config(algo, { groupSize: 2 }), res(), eReward);
      expect(t.models.value).toBeNull();
      expect(t.valueOpt).toBeNull();
      await t.trainStep();
      const bytes = tf.memory().numBytes - start;
      // The value model's weights, its Adam m and v (3 × its bytes), and that Adam's accBeta1/accBeta2 (2 × 4 bytes).
      expect(ppoBytes - bytes).toBe(3 * valueBytes + 8);
      expect(Object.keys(tf.engine().state.registeredVariables).some(valueVar)).toBe(false);
      const files = await checkpointFiles(t);
      expect([...files.keys()].sort()).toEqual([
        'config.json',
        'model.safetensors',
        'optimizer.safetensors',
        'ref_model.safetensors',
        'trainer_state.json',
      ]);
      const opt = readSafetensors(files.get('optimizer.safetensors')!, 'optimizer.safetensors');
      expect([...opt.tensors.keys()].some((k) => k.startsWith('value.'))).toBe(false);
      expect([...opt.tensors.keys()].some((k) => k.startsWith('policy.m.'))).toBe(true);
      t.disposeAll();
      expect(tf.memory().numBytes).toBe(start);
      // A restored critic-free run has no value model either.
      const c = await restoreTrainer(memoryFiles('ckpt', files), res(), eReward);
      expect(c.models.value).toBeNull();
      expect(c.valueOpt).toBeNull();
      c.disposeAll();
      expect(tf.memory().numBytes).toBe(start);
    },
    20_000,
  );

  it('GRPO with a constant reward: every group all-equal → A = 0, fracRewardZeroStd 1, no NaN, and step 1 moves nothing (k3 has zero gradient at the reference)', async () => {
    const t = await buildTrainer(config('grpo'), res(), { rewardFn: { label: 'one', fn: () => 1 } });
    const before = await t.models.policy.trainableVariables()[0].data();
    const r = await t.trainStep();
    expect(r.metrics.fracRewardZeroStd).toBe(1);
    expect(r.rollout.advantages.flat().every((a) => a === 0)).toBe(true);
    expect(r.metrics.gradNorm).toBe(0);
    expect(r.skippedUpdates).toBe(0);
    expect(Array.from(await t.models.policy.trainableVariables()[0].data())).toEqual(Array.from(before));
    t.disposeAll();
  });
});

/** Plain recomputation of each algorithm's accounting from a dump's own fields (independent of advantages.ts). */
function recompute(d: RolloutDump, cfg: TrainConfig) {
  const n = d.scores.length;
  const k1 = d.logprobs.map((row, i) => row.map((lp, t) => lp - d.refLogprobs[i][t]));
  const k1Sum = k1.map((r) => r.reduce((a, b) => a + b, 0));
  const G = d.groupSize;
  const groupOf = (i: number) => d.groups[i];
  const members = (g: number) => d.scores.map((_, j) => j).filter((j) => groupOf(j) === g);
  const tokens = (i: number, v: number) => d.responses[i].map(() => v);
  const whiten = (xs: number[]) => {
    const mu = xs.reduce((a, b) => a + b, 0) / xs.length;
    const v = xs.reduce((a, b) => a + (b - mu) ** 2, 0) / (xs.length - 1);
    return xs.map((x) => (x - mu) / Math.sqrt(v + 1e-8));
  };
  expect(d.groups).toEqual(d.scores.map((_, i) => Math.floor(i / G)));
  switch (d.algorithm) {
    case 'grpo': {
      const std = (xs: number[]) => {
        const mu = xs.reduce((a, b) => a + b, 0) / xs.length;
        return Math.sqrt(xs.reduce((a, b) => a + (b - mu) ** 2, 0) / (xs.length - 1));
      };
      const A = d.scores.map((s, i) => {
        const g = members(groupOf(i)).map((j) => d.scores[j]);
        const mu = g.reduce((a, b) => a + b, 0) / g.length;
        const div =
          d.scaleRewards === 'group' ? std(g) + 1e-4 : d.scaleRewards === 'batch' ? std(d.scores) + 1e-4 : 1;
        return (s - mu) / div;
      });
      return {
        rewards: d.responses.map((r, i) => r.map((_, t) => (t === r.length - 1 ? d.scores[i] : 0))),
        advantages: A.map((a, i) => tokens(i, a)),
      };
    }
    case 'rloo': {
      const r = d.scores.map((s, i) => s - d.klCoef * k1Sum[i]);
      let A = r.map((ri, i) => {
        const others = members(groupOf(i)).filter((j) => j !== i);
        return ri - others.reduce((a, j) => a + r[j], 0) / others.length;
      });
      if (d.normalizeAdvantages) A = whiten(A);
      return {
        rewards: k1.map((row, i) =>
          row.map((k, t) => -d.klCoef * k + (t === row.length - 1 ? d.scores[i] : 0)),
        ),
        advantages: A.map((a, i) => tokens(i, a)),
      };
    }
    case 'reinforce++': {
      const rewards = k1.map((row, i) =>
        row.map((k, t) => -d.klCoef * k + (t === row.length - 1 ? d.scores[i] : 0)),
      );
      const G_ = rewards.map((row) => {
        const out = new Array<number>(row.length).fill(0);
        let acc = 0;
        for (let t = row.length - 1; t >= 0; t--) out[t] = acc = row[t] + d.gamma * acc;
        return out;
      });
      const flat = whiten(G_.flat());
      let k = 0;
      return { rewards, advantages: G_.map((row) => row.map(() => flat[k++])) };
    }
    case 'ppo': {
      const rewards = k1.map((row, i) =>
        row.map((kk, t) => -d.klCoef * kk + (t === row.length - 1 ? d.scores[i] : 0)),
      );
      const adv = rewards.map((row, i) => {
        const out = new Array<number>(row.length).fill(0);
        let next = 0;
        let nextV = 0;
        for (let t = row.length - 1; t >= 0; t--) {
          const v = d.values![i][t];
          next = row[t] + d.gamma * nextV - v + d.gamma * d.lam * next;
          nextV = v;
          out[t] = next;
        }
        return out;
      });
      d.returns!.forEach((row, i) => row.forEach((x, t) => close(x, adv[i][t] + d.values![i][t], 1e-5)));
      expect(cfg.whitenAdvantages).toBe(false);
      return { rewards, advantages: adv };
    }
  }
  throw new Error(`no recomputation for ${String(n)}`);
}

describe('rollout dumps recompute from their own fields (docs/formats.md §4, §7)', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    dir ??= await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  });

  it.each([
    ['ppo', { whitenAdvantages: false }],
    ['grpo', { scaleRewards: 'group' }],
    ['grpo', { scaleRewards: 'batch', lossAggregation: 'seq-sum-norm' }],
    ['grpo', { scaleRewards: 'none', lossAggregation: 'seq-mean' }],
    ['rloo', {}],
    ['rloo', { normalizeAdvantages: true }],
    ['reinforce++', { gamma: 0.9 }],
  ] as [Algorithm, Partial<TrainConfig>][])(
    '%s %j',
    async (algo, over) => {
      const cfg = config(algo, { batchSize: 8, miniBatches: 2, ...over, groupSize: algo === 'ppo' ? 1 : 4 });
      const t = await buildTrainer(cfg, res(), eReward);
      await t.trainStep(); // step 2's rollout has logprobs ≠ refLogprobs, so the KL terms are not all 0
      const klCoef = t.kl.value;
      const r = await t.trainStep();
      const d = JSON.parse(
        JSON.stringify(rolloutDump(r.rollout, 2, { ...cfg, groupSize: derived(cfg).groupSize, klCoef })),
      ) as RolloutDump;
      t.disposeAll();
      expect(d.algorithm).toBe(algo);
      expect(d.groupSize).toBe(derived(cfg).groupSize);
      expect(d.scaleRewards).toBe(cfg.scaleRewards);
      expect(d.normalizeAdvantages).toBe(cfg.normalizeAdvantages);
      if (algo === 'ppo') expect(d.values).not.toBeNull();
      else expect([d.values, d.returns]).toEqual([null, null]);
      expect(d.logprobs.flat().some((x, i) => x !== d.refLogprobs.flat()[i])).toBe(true);
      const want = recompute(d, cfg);
      for (let i = 0; i < d.scores.length; i++) {
        closeAll(d.rewards[i], want.rewards[i], 1e-5);
        closeAll(d.advantages[i], want.advantages[i], 1e-4);
      }
    },
    20_000,
  );
});
