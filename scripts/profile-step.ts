/**
 * Kernel profile of one PPO step (after a warm-up step) on a Node backend: total wall time per kernel name,
 * sorted. Usage: npx tsx scripts/profile-step.ts [wasm|cpu] [batchSize] [responseLength]
 * (the tiny model, sentiment), or npx tsx scripts/profile-step.ts [wasm|cpu] run.json (any run: its config file).
 * A development tool for finding what the update spends its time on (the bench says how fast; this says where).
 * First one unprofiled step with V8's garbage collections timed (PerformanceObserver 'gc'): the phase times and
 * the GC pauses inside them; then one step under tf.profile: per kernel name (SHAPES=Name1,Name2 splits those by
 * input shapes; BatchMatMul is always split), the leaf kernels' total, and the step's time outside them (tfjs's
 * engine, autodiff, our JS). Custom-gradient scopes ("unnamed scope", "forward") time their inner kernels again,
 * so they are listed but not summed.
 */
import * as tf from '@tensorflow/tfjs-core';
import { readFileSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import { setNodeBackend } from '../src/cli/backend-node';
import { resolveModel } from '../src/cli/models';
import { nodeResources } from '../src/cli/train';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';

const [backendName = 'wasm', B = '16', R = '24'] = process.argv.slice(2);
await setNodeBackend(backendName);
const cfg = B.endsWith('.json')
  ? validateConfig(JSON.parse(readFileSync(B, 'utf8')), B)
  : validateConfig(
      { model: resolveModel('tiny'), task: 'sentiment', batchSize: Number(B), responseLength: Number(R) },
      'profile',
    );
const trainer = await buildTrainer(cfg, nodeResources);
await trainer.trainStep();

const gc: { start: number; ms: number }[] = [];
const obs = new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gc.push({ start: e.startTime, ms: e.duration });
});
obs.observe({ entryTypes: ['gc'] });
const t0 = performance.now();
const plain = await trainer.trainStep();
const t1 = performance.now();
await new Promise((r) => setTimeout(r, 50)); // gc entries are delivered asynchronously
obs.disconnect();
const m = plain.metrics;
const gcIn = (a: number, b: number) =>
  gc.filter((g) => g.start >= a && g.start < b).reduce((s, g) => s + g.ms, 0);
// The update is the step's last phase (trainer.ts: generate, score, …, update).
const updStart = t1 - m.timeUpdate * 1000;
console.log(
  `unprofiled step ${m.timeStep.toFixed(2)} s: generate ${m.timeGenerate.toFixed(2)}, score ${m.timeScore.toFixed(2)}, ` +
    `update ${m.timeUpdate.toFixed(2)}; GC pauses ${gcIn(t0, t1).toFixed(0)} ms in the step (${gc.filter((g) => g.start >= t0 && g.start < t1).length}), ` +
    `${gcIn(updStart, t1).toFixed(0)} ms in the update`,
);

const byKernel = new Map<string, { ms: number; n: number }>();
const SCOPES = new Set(['unnamed scope', 'forward']);
const p0 = performance.now();
const info = await tf.profile(async () => {
  const r = await trainer.trainStep();
  console.error(
    `profiled step ${r.metrics.timeStep.toFixed(2)} s: generate ${r.metrics.timeGenerate.toFixed(2)}, score ${r.metrics.timeScore.toFixed(2)}, update ${r.metrics.timeUpdate.toFixed(2)}`,
  );
  return tf.scalar(0);
});
const wall = performance.now() - p0;
let leaves = 0;
for (const k of info.kernels) {
  const ms = typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
  const key = `${k.name} ${k.name === 'BatchMatMul' || k.name === '_FusedMatMul' || process.env.SHAPES?.split(',').includes(k.name) ? JSON.stringify(k.inputShapes) : ''}`;
  const e = byKernel.get(key) ?? { ms: 0, n: 0 };
  e.ms += ms;
  e.n++;
  if (!SCOPES.has(k.name)) leaves += ms;
  byKernel.set(key, e);
}
const rows = [...byKernel.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 40);
console.log(
  `kernels: ${info.kernels.length}; leaf kernels ${leaves.toFixed(0)} ms of the profiled step's ${wall.toFixed(0)} ms ` +
    `(outside kernels ${(wall - leaves).toFixed(0)} ms)`,
);
for (const [k, e] of rows) console.log(`${e.ms.toFixed(1).padStart(9)} ms ${String(e.n).padStart(6)}×  ${k}`);
