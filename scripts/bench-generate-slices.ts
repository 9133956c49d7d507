/**
 * The generation slice of the automatic plan against the update's micro-batch, on a Node backend: a GPT-2
 * 124M-shaped LoRA PPO step (random weights, batch 16 × 24, the default two minibatches) with `microBatchSize` 0
 * (automatic: generation in slices of 8, the update in micro-batches of 4 with recompute) and with
 * `microBatchSize` 4 (every phase in slices of 4, recompute as planned: the plan before generation was planned
 * apart). One warm-up step each, then `steps` timed steps; prints the phase times and the plans.
 * Usage: npx tsx scripts/bench-generate-slices.ts [wasm|cpu|webgpu] [steps]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeResources } from '../src/cli/train';
import { writeFolder } from '../src/cli/files-node';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { GPT2 } from '../src/core/model/gpt2';
import { exportLM } from '../src/core/model/folder';
import { SHAPES, shapeConfig, disposeTrainer } from '../src/bench/perf/memory';
import { benchPpoStep } from '../src/bench/perf/ppo';

const [backend = 'wasm', steps = '1'] = process.argv.slice(2);
await setNodeBackend(backend);
const dir = join(await mkdtemp(join(tmpdir(), 'gen-slices-')), 'gpt2');
const m = GPT2.random(shapeConfig(SHAPES.gpt2), 1234);
await writeFolder(dir, await exportLM(m));
m.dispose();
try {
  for (const microBatchSize of [0, 4]) {
    const cfg = validateConfig(
      { model: dir, task: 'sentiment', lora: 8, batchSize: 16, responseLength: 24, microBatchSize, seed: 3 },
      'bench',
    );
    const trainer = await buildTrainer(cfg, nodeResources);
    try {
      const plan = trainer.stepPlan();
      const r = await benchPpoStep(trainer, { steps: Number(steps), warmup: 1 });
      console.log(
        JSON.stringify({
          backend,
          microBatchSize,
          plan,
          timeStep: +r.timeStep.toFixed(2),
          timeGenerate: +r.timeGenerate.toFixed(2),
          timeScore: +r.timeScore.toFixed(2),
          timeUpdate: +r.timeUpdate.toFixed(2),
        }),
      );
    } finally {
      disposeTrainer(trainer);
    }
  }
} finally {
  await rm(join(dir, '..'), { recursive: true, force: true });
}
