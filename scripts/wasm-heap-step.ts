/**
 * The WASM heap after one LoRA GRPO step against the heap estimate the CLI's preflight holds it to (docs/engine.md,
 * "The WASM heap estimate"): `npx tsx scripts/wasm-heap-step.ts MODEL_DIR`, one fresh process per model (the heap
 * only grows). The run (`heapStepRun`): the arithmetic-chat task, GRPO in groups of 2, batch 4, 16 response
 * tokens, LoRA r 8, as tests/qwen-0.5b.slow.test.ts and tests/cli-preflight.test.ts run it. Make the folders with
 * scripts/make-random-model.ts (`--shape qwen2.5-0.5b --layers 6`, …). Prints the plan, the heap estimate, the
 * heap's length (HEAPU8.length) and the step's times.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeResources } from '../src/cli/train';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { memoryBudget, preflightTrain } from '../src/cli/preflight';

/** The run (a config file's contents) on the model folder `model`: issue #21's done-when run. */
export function heapStepRun(model: string) {
  return {
    model,
    task: 'arithmetic-chat',
    algorithm: 'grpo',
    groupSize: 2,
    batchSize: 4,
    responseLength: 16,
    lora: 8,
    steps: 1,
  };
}

async function main() {
  const dir = process.argv[2];
  if (!dir) throw new Error('usage: npx tsx scripts/wasm-heap-step.ts MODEL_DIR');
  await setNodeBackend('wasm');
  const cfg = validateConfig(heapStepRun(dir), 'wasm-heap-step');
  const estimate = await preflightTrain(cfg, nodeResources, memoryBudget('wasm'));
  const trainer = await buildTrainer(cfg, nodeResources);
  const { metrics: m } = await trainer.trainStep();
  const heap = (tf.backend() as unknown as { wasm: { HEAPU8: Uint8Array } }).wasm.HEAPU8.length;
  const p = trainer.stepPlan();
  const gb = (b: number) => `${(b / 1e9).toFixed(3)} GB`;
  console.log(
    `${dir}: plan micro-batch ${p.microBatchSize}${p.recompute ? ' with recompute' : ''}, generation slice ` +
      `${p.generateMicroBatchSize}; heap estimate ${gb(estimate.total)}, heap ${gb(heap)} ` +
      `(${(100 * (estimate.total / heap - 1)).toFixed(1)}%); step ${m.timeStep.toFixed(1)} s (generate ` +
      `${m.timeGenerate.toFixed(1)}, score ${m.timeScore.toFixed(1)}, update ${m.timeUpdate.toFixed(1)})`,
  );
  trainer.disposeAll();
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) await main();
