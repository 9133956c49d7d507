/**
 * A GRPO step with ppoEpochs 1 and one minibatch takes its old log-probs from the update's own forward (detached)
 * instead of a policy forward in scoring (PpoTrainer.oldLogprobsFromUpdate, issue #24): TRL's way with
 * num_iterations 1. It must change no number: three steps with it on and off give the same metrics (every one but
 * the timings), the same rollout log-probs and the same weights, bit for bit — on WASM and CPU, on a GPT-2-vocabulary
 * model whose update takes the vocabulary-chunked log-prob (so the update's own log-probs are NOT scoring's
 * numbers; the old ones must be scoring's computation), with the batch in one micro-batch or in two, LoRA or full
 * fine-tuning. And it does skip the forward: scoring runs the policy's trunk no more (counted), and a step with two
 * epochs does not take this path.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { useCpu } from './helpers/backend';
import { tinyResources, meanByteReward } from './helpers/trainer-fixture';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { exportLM } from '../src/core/model/folder';
import { writeFolder } from '../src/cli/files-node';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { chunksVocabulary } from '../src/core/ppo/trainer';
import type { PpoTrainer } from '../src/core/ppo/trainer';

let dir: string;

beforeAll(async () => {
  await useCpu();
  // GPT-2's vocabulary (the BPE tokenizer is built in) on a tiny trunk: the update's log-prob is chunked.
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-oldlp-'));
  const config = parseGPT2Config({ vocab_size: 50257, n_positions: 64, n_embd: 16, n_layer: 2, n_head: 2 });
  const m = GPT2.random(config, 5);
  await writeFolder(dir, await exportLM(m));
  m.dispose();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function config(over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({
    model: 'tiny-test',
    task: null,
    prompts: ['Hello there', 'The day was', 'We went to the', 'A long time ago in'],
    seed: 7,
    steps: 3,
    algorithm: 'grpo',
    groupSize: 2,
    batchSize: 4,
    miniBatches: 1,
    ppoEpochs: 1,
    klCoef: 0.05,
    responseLength: 6,
    stopToken: null,
    lora: 4,
    loraAlpha: 8,
    learningRate: 1e-2,
    ...over,
  });
}

const bits = (x: ArrayLike<number>): number[] => Array.from(new Uint32Array(Float32Array.from(x).buffer));

/** Three steps: metrics without the timings, the rollouts' log-probs and every trainable weight (bits). */
async function run(over: Partial<TrainConfig>, fromUpdate: boolean, count?: { policyTrunk: number }) {
  const t: PpoTrainer = await buildTrainer(
    config(over),
    tinyResources(() => dir),
    meanByteReward,
  );
  t.oldLogprobsFromUpdate = fromUpdate;
  if (count) {
    // Count the policy's trunk forwards made while scoring.
    const policy = t.models.policy as unknown as { trunk: (...a: unknown[]) => unknown };
    const trunk = policy.trunk.bind(policy);
    let scoring = false;
    (t as unknown as { phase: (p: string) => void }).phase = ((orig) =>
      function (this: unknown, p: string) {
        scoring = p === 'scoring';
        return orig.call(t, p);
      })((t as unknown as { phase: (p: string) => void }).phase);
    policy.trunk = (...a: unknown[]) => {
      if (scoring) count.policyTrunk++;
      return trunk(...a);
    };
  }
  const metrics: unknown[] = [];
  const logprobs: number[][][] = [];
  for (let s = 0; s < 3; s++) {
    const r = await t.trainStep();
    const m = Object.fromEntries(
      Object.entries(r.metrics).filter(([k]) => !k.startsWith('time') && k !== 'tokensPerSecond'),
    );
    metrics.push(
      JSON.parse(JSON.stringify(m, (_k, v) => (typeof v === 'number' ? bits([v])[0] + ':' + v : v))),
    );
    logprobs.push(r.rollout.logprobs.map((row) => bits(row)));
  }
  const weights = t.models.policy.trainableVariables().map((v) => bits(v.dataSync()));
  const applied = t.lastStepOldLogprobsFromUpdate;
  t.disposeAll();
  return { metrics, logprobs, weights, applied };
}

async function same(over: Partial<TrainConfig>): Promise<void> {
  const before = tf.memory().numTensors;
  const count = { policyTrunk: 0 };
  const off = await run(over, false);
  const on = await run(over, true, count);
  expect(on.metrics).toEqual(off.metrics);
  expect(on.logprobs).toEqual(off.logprobs);
  expect(on.weights).toEqual(off.weights);
  expect(count.policyTrunk).toBe(0); // scoring ran no policy forward (under LoRA the reference runs apart)
  // What the bench's --vs-trl child reports (its FLOP count follows it).
  expect(on.applied).toBe(true);
  expect(off.applied).toBe(false);
  expect(tf.memory().numTensors).toBe(before);
}

for (const backend of ['wasm', 'cpu'] as const) {
  describe(`old log-probs from the update's forward on ${backend}`, () => {
    beforeAll(async () => {
      await useCpu();
      if (backend === 'wasm') {
        registerWasmExtraKernels();
        await tf.setBackend('wasm');
        await tf.ready();
      }
      expect(chunksVocabulary(4 * 6, 50257)).toBe(true);
    });

    // (The CPU backend is slow at this vocabulary: one case there.)
    if (backend === 'wasm')
      it('LoRA, the batch in one micro-batch: metrics, log-probs and weights bit for bit', async () => {
        await same({ microBatchSize: 4 });
      });

    it('LoRA, two micro-batches: the same', async () => {
      await same({ microBatchSize: 2 });
    });

    if (backend === 'wasm')
      it("two micro-batches with the update's blocks recomputed: the same", async () => {
        await same({ microBatchSize: 2, recompute: 'blocks' });
      });

    if (backend === 'wasm')
      it('full fine-tuning (the head trained): the same', async () => {
        await same({ lora: 0, microBatchSize: 4 });
      });
  });
}

describe('when the path is taken', () => {
  beforeAll(async () => {
    await useCpu();
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });
  afterAll(useCpu);

  it('two epochs or two minibatches: scoring still runs the policy forward', async () => {
    for (const over of [{ ppoEpochs: 2 }, { miniBatches: 2 }] as Partial<TrainConfig>[]) {
      const count = { policyTrunk: 0 };
      const t = await buildTrainer(
        config({ ...over, steps: 1 }),
        tinyResources(() => dir),
        meanByteReward,
      );
      const policy = t.models.policy as unknown as { trunk: (...a: unknown[]) => unknown };
      const trunk = policy.trunk.bind(policy);
      let scoring = false;
      const phase = (t as unknown as { phase: (p: string) => void }).phase.bind(t);
      (t as unknown as { phase: (p: string) => void }).phase = (p: string) => {
        scoring = p === 'scoring';
        phase(p);
      };
      policy.trunk = (...a: unknown[]) => {
        if (scoring) count.policyTrunk++;
        return trunk(...a);
      };
      await t.trainStep();
      expect(count.policyTrunk).toBeGreaterThan(0);
      expect(t.lastStepOldLogprobsFromUpdate).toBe(false);
      t.disposeAll();
    }
  });
});
