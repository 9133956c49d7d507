/**
 * PPO, GRPO, RLOO and REINFORCE++ side by side on the tiny model (docs/formats.md §7): one run each, same task,
 * seed, batch and learning rate, only `algorithm` changing (groupSize = each algorithm's default). Prints a
 * markdown table for the README: final reward (mean of the last 5 steps), final KL (mean of the last 5), seconds
 * per step, peak tensor memory of a step (tf.profile's peakBytes, the largest over the run) and the tensor
 * memory the run holds between steps (models + optimiser state).
 *
 *   npx tsx scripts/compare-algorithms.ts [--steps 40] [--backend wasm|cpu] [--task sentiment] [--seed 1]
 *
 * It trains for minutes: run it on an otherwise idle machine (the timings are wall-clock).
 */
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeResources } from '../src/cli/train';
import { ALGORITHMS, derived, validateConfig, type Algorithm } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';

interface Row {
  algorithm: Algorithm;
  groupSize: number;
  reward: number;
  firstReward: number;
  kl: number;
  secondsPerStep: number;
  peakBytes: number;
  heldBytes: number;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const mb = (b: number) => (b / 2 ** 20).toFixed(2);

async function runOne(algorithm: Algorithm, steps: number, task: string, seed: number): Promise<Row> {
  const cfg = validateConfig({
    model: 'tiny',
    task,
    algorithm,
    seed,
    steps,
    batchSize: 16,
    miniBatches: 2,
    ppoEpochs: 2,
    learningRate: 5e-4,
    valueLearningRate: 1e-3,
    klCoef: 0.02,
    responseLength: 16,
  });
  const before = tf.memory().numBytes;
  const t = await buildTrainer(cfg, nodeResources);
  const rewards: number[] = [];
  const kls: number[] = [];
  const seconds: number[] = [];
  let peakBytes = 0;
  let heldBytes = 0;
  for (let i = 0; i < steps; i++) {
    let metrics: Awaited<ReturnType<typeof t.trainStep>>['metrics'] | undefined;
    const start = tf.memory().numBytes;
    const p = await tf.profile(async () => {
      metrics = (await t.trainStep()).metrics;
    });
    // peakBytes counts from the bytes held when profiling started.
    peakBytes = Math.max(peakBytes, start - before + p.peakBytes);
    heldBytes = tf.memory().numBytes - before;
    rewards.push(metrics!.reward);
    kls.push(metrics!.kl);
    seconds.push(metrics!.timeStep);
    process.stderr.write(
      `${algorithm} step ${i + 1}/${steps} reward ${metrics!.reward.toFixed(3)} kl ${metrics!.kl.toFixed(3)} ` +
        `${metrics!.timeStep.toFixed(2)} s\n`,
    );
  }
  t.disposeAll();
  const tail = Math.min(5, steps);
  return {
    algorithm,
    groupSize: derived(cfg).groupSize,
    reward: mean(rewards.slice(-tail)),
    firstReward: mean(rewards.slice(0, tail)),
    kl: mean(kls.slice(-tail)),
    // Skip step 1 (kernel compilation and warm-up) when there are more.
    secondsPerStep: mean(seconds.length > 1 ? seconds.slice(1) : seconds),
    peakBytes,
    heldBytes,
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      steps: { type: 'string', default: '40' },
      backend: { type: 'string', default: 'wasm' },
      task: { type: 'string', default: 'sentiment' },
      seed: { type: 'string', default: '1' },
    },
  });
  const steps = Number(values.steps);
  if (!Number.isInteger(steps) || steps < 1)
    throw new Error(`--steps must be a whole number ≥ 1, got ${values.steps}`);
  await setNodeBackend(values.backend);
  const rows: Row[] = [];
  for (const a of ALGORITHMS) rows.push(await runOne(a, steps, values.task!, Number(values.seed)));
  const head = [
    'algorithm',
    'G',
    `reward, first 5 → last 5 of ${steps}`,
    'KL (last 5)',
    's/step',
    'peak tensor MB',
    'held MB',
  ];
  const lines = [
    `| ${head.join(' | ')} |`,
    `| ${head.map(() => '---').join(' | ')} |`,
    ...rows.map(
      (r) =>
        `| ${r.algorithm} | ${r.groupSize} | ${r.firstReward.toFixed(3)} → ${r.reward.toFixed(3)} | ${r.kl.toFixed(3)} | ` +
        `${r.secondsPerStep.toFixed(2)} | ${mb(r.peakBytes)} | ${mb(r.heldBytes)} |`,
    ),
  ];
  process.stdout.write(
    `tiny model, task ${values.task}, seed ${values.seed}, batch 16, 2 minibatches × 2 epochs, lr 5e-4, ` +
      `klCoef 0.02, 16 tokens, backend ${tf.getBackend()}\n\n${lines.join('\n')}\n`,
  );
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
