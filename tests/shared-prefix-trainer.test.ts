/**
 * GRPO and RLOO steps with each group's prompt run once (PpoTrainer.sharedPrefix, src/core/model/shared-prefix.ts)
 * against the same steps with every row in full: on WASM, the tiny Qwen2 / Qwen3 / GPT-2 folders, groups of 4 over
 * 2 prompts, LoRA: the same rollouts (tokens and log-probs), metrics and the policy's gradients at every update of
 * three steps, within float32 rounding — with the whole batch in one micro-batch, in micro-batches of 2 with recomputed blocks, and with two
 * epochs (old log-probs from scoring). And the path is taken: the policy's and reference's trunks see a share in
 * scoring and in the update (counted); PPO's value model does not.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import type { TrainConfig } from '../src/common/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import type { PpoTrainer } from '../src/core/ppo/trainer';
import { REQUIRED_METRICS, type StepMetrics } from '../src/common/metrics';
import { tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { relDiff } from './helpers/f16-base';

const FIX = 'tests/fixtures/parity-llama';
let folder = `${FIX}/qwen2-tiny`;
const res = (): Resources => tinyResources(() => folder);
const reward = {
  rewardFn: {
    label: 'mean-id',
    fn: (s: { responseTokens: number[] }) =>
      s.responseTokens.reduce((a, b) => a + b, 0) / (512 * Math.max(1, s.responseTokens.length)),
  },
};
const TIMING = new Set(['tokensPerSecond', 'timeGenerate', 'timeScore', 'timeUpdate', 'timeStep']);

beforeAll(() => setNodeBackend('wasm'));

interface Counted {
  /** Trunk forwards with a share, and without, by model. */
  shared: Record<string, number>;
  full: Record<string, number>;
}

/** Count each model's trunk forwards with and without a share. */
function countTrunks(t: PpoTrainer, count: Counted): void {
  const models = { policy: t.models.policy, ref: t.models.ref, value: t.models.value } as Record<
    string,
    unknown
  >;
  for (const [name, m] of Object.entries(models)) {
    if (!m) continue;
    const target = (name === 'value' ? (m as { trunkModel: unknown }).trunkModel : m) as {
      trunk: (...a: unknown[]) => unknown;
    };
    const trunk = target.trunk.bind(target);
    target.trunk = (...a: unknown[]) => {
      // (Generation's prefill fills a KV cache: not a forward this counts.)
      if (a[2] !== undefined) return trunk(...a);
      const opts = a[3] as { share?: unknown } | undefined;
      const to = opts?.share ? count.shared : count.full;
      to[name] = (to[name] ?? 0) + 1;
      return trunk(...a);
    };
  }
}

async function run(over: Partial<TrainConfig>, shared: boolean, count?: Counted) {
  const t = await buildTrainer(
    tinyConfig({
      learningRate: 1e-2,
      lora: 4,
      loraAlpha: 8,
      prompts: ['Hello', 'The day was'],
      batchSize: 8,
      groupSize: 4,
      miniBatches: 1,
      ppoEpochs: 1,
      steps: 3,
      ...over,
    }),
    res(),
    reward,
  );
  t.sharedPrefix = shared;
  if (count) countTrunks(t, count);
  // The policy's gradients as Adam receives them (clipped), each step: what the two paths must agree on. (The
  // adapters after Adam are compared too loosely to mean anything: Adam's first steps move a weight by about the
  // learning rate whatever the size of its gradient, so an entry whose gradient is rounding noise may move either way.)
  const grads: Float32Array[][] = [];
  const opt = t.policyOpt as unknown as { applyScaled: (g: unknown, scale: number) => void };
  const apply = opt.applyScaled.bind(opt);
  opt.applyScaled = (g, scale) => {
    const list = Array.isArray(g)
      ? (g as { name: string; tensor: tf.Tensor }[])
      : Object.entries(g as tf.NamedTensorMap).map(([name, tensor]) => ({ name, tensor }));
    grads.push(
      [...list]
        .sort((a, b) => (a.name < b.name ? -1 : 1))
        .map(({ tensor }) => (tensor.dataSync() as Float32Array).map((x) => x * scale)),
    );
    apply(g, scale);
  };
  const metrics: StepMetrics[] = [];
  const tokens: number[][][] = [];
  const logprobs: number[][] = [];
  for (let s = 0; s < 3; s++) {
    const r = await t.trainStep();
    metrics.push(r.metrics);
    tokens.push(r.rollout.responses);
    logprobs.push(r.rollout.logprobs.flat());
  }
  t.disposeAll();
  return { metrics, tokens, logprobs, grads };
}

async function same(over: Partial<TrainConfig>): Promise<Counted> {
  const before = tf.memory().numTensors;
  const count: Counted = { shared: {}, full: {} };
  const off = await run(over, false);
  const on = await run(over, true, count);
  expect(on.tokens).toEqual(off.tokens);
  on.logprobs.forEach((lp, s) =>
    expect(relDiff(lp, off.logprobs[s]), `log-probs, step ${s}`).toBeLessThan(1e-5),
  );
  for (let s = 0; s < 3; s++) {
    for (const k of REQUIRED_METRICS) {
      if (TIMING.has(k)) continue;
      const x = off.metrics[s][k];
      const y = on.metrics[s][k];
      if (x === null || y === null) expect(y, k).toBe(x);
      else expect(Math.abs(x - y), `${k} at step ${s}`).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(x)));
    }
  }
  expect(on.grads.length).toBe(off.grads.length);
  on.grads.forEach((step, s) =>
    step.forEach((g, i) => {
      expect(
        g.some((x) => x !== 0),
        `gradient ${i} at update ${s} all zero`,
      ).toBe(true);
      expect(relDiff(g, off.grads[s][i]), `gradient ${i} at update ${s}`).toBeLessThan(1e-5);
    }),
  );
  expect(tf.memory().numTensors).toBe(before);
  return count;
}

describe.each(['qwen2-tiny', 'qwen3-tiny', 'gpt2'])('%s, groups of 4 sharing their prompt', (name) => {
  beforeAll(() => {
    folder = name === 'gpt2' ? 'tests/fixtures/parity/tiny-plain' : `${FIX}/${name}`;
  });

  it('GRPO, the whole batch: the same steps, and every policy and reference forward shared', async () => {
    const c = await same({ algorithm: 'grpo', klCoef: 0.05 });
    // Scoring: the reference (old log-probs come from the update); the update: the policy. Nothing in full.
    expect(c.shared.ref).toBe(3);
    expect(c.shared.policy).toBe(3);
    expect(c.full).toEqual({});
  });

  it('GRPO in micro-batches of 2 with recomputed blocks, two epochs: the same', async () => {
    const c = await same({
      algorithm: 'grpo',
      klCoef: 0.05,
      microBatchSize: 2,
      recompute: 'blocks',
      ppoEpochs: 2,
    });
    expect(c.shared.policy).toBeGreaterThan(0);
  });

  if (name === 'qwen3-tiny')
    it('RLOO, and PPO with two samples a prompt (the value model in full)', async () => {
      await same({ algorithm: 'rloo' });
      const c = await same({ algorithm: 'ppo', groupSize: 2 });
      expect(c.shared.policy).toBeGreaterThan(0);
      expect(c.full.value).toBeGreaterThan(0);
      expect(c.shared.value).toBeUndefined();
    });
});
