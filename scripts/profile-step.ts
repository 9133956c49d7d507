/**
 * Kernel profile of one PPO step (after a warm-up step) on a Node backend: total wall time per kernel name,
 * sorted. Usage: npx tsx scripts/profile-step.ts [wasm|cpu] [batchSize] [responseLength]
 * A development tool for finding what the update spends its time on (the bench says how fast; this says where).
 */
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { resolveModel } from '../src/cli/models';
import { nodeResources } from '../src/cli/train';
import { validateConfig } from '../src/core/config';
import { buildTrainer } from '../src/core/ppo/setup';

const [backendName = 'wasm', B = '16', R = '24'] = process.argv.slice(2);
await setNodeBackend(backendName);
const cfg = validateConfig(
  { model: resolveModel('tiny'), task: 'sentiment', batchSize: Number(B), responseLength: Number(R) },
  'profile',
);
const trainer = await buildTrainer(cfg, nodeResources);
await trainer.trainStep();
const byKernel = new Map<string, { ms: number; n: number }>();
const info = await tf.profile(async () => {
  const r = await trainer.trainStep();
  console.error(
    `step ${r.metrics.timeStep.toFixed(2)} s: generate ${r.metrics.timeGenerate.toFixed(2)}, score ${r.metrics.timeScore.toFixed(2)}, update ${r.metrics.timeUpdate.toFixed(2)}`,
  );
  return tf.scalar(0);
});
let total = 0;
for (const k of info.kernels) {
  const ms = typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
  const key = `${k.name} ${k.name === 'BatchMatMul' || k.name === '_FusedMatMul' || process.env.SHAPES?.split(',').includes(k.name) ? JSON.stringify(k.inputShapes) : ''}`;
  const e = byKernel.get(key) ?? { ms: 0, n: 0 };
  e.ms += ms;
  e.n++;
  total += ms;
  byKernel.set(key, e);
}
const rows = [...byKernel.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 40);
console.log(`kernels: ${info.kernels.length}, summed kernel ms ${total.toFixed(0)}`);
for (const [k, e] of rows) console.log(`${e.ms.toFixed(1).padStart(9)} ms ${String(e.n).padStart(6)}×  ${k}`);
