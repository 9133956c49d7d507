/**
 * Kernel profile of `bench --vs-trl`'s step on our side (issue #24 point 3): the GRPO LoRA step at the bench's
 * setup (src/bench/vs-trl.ts ourConfig) on WASM with 1 thread, one warm-up step, then one step under tf.profile,
 * with each kernel assigned to the phase it ran in (the trainer's phase events: generate, score, update).
 * Per phase: wall ms, ms inside kernels, and the kernels by total ms (matmuls split by input shapes).
 *
 * usage: npx tsx scripts/profile-vs-trl.ts [MODEL_DIR] [microBatchSize]
 *   MODEL_DIR defaults to the bench's GPT-2 124M folder (.bench/models/gpt2-random-12-768-12-1024-50257, made by
 *   `cli bench --vs-trl`); microBatchSize defaults to the batch (8), 0 = cli train's automatic plan.
 * A development tool: the bench says how fast, this says where the time goes. Times are wall times on whatever
 * else the machine runs; compare shares within one profile.
 */
import * as tf from '@tensorflow/tfjs-core';
import * as wasm from '@tensorflow/tfjs-backend-wasm';
import path from 'node:path';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeResources } from '../src/cli/train';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import type { Phase } from '../src/core/ppo/trainer';
import { ourConfig, VS_TRL_PROMPTS, VS_TRL_SETUP } from '../src/bench/vs-trl';

const [dirArg, microArg] = process.argv.slice(2);
const dir = path.resolve(dirArg ?? '.bench/models/gpt2-random-12-768-12-1024-50257');
const micro = microArg === undefined ? VS_TRL_SETUP.batchSize : Number(microArg);
wasm.setThreadsCount(1);
await setNodeBackend('wasm');
const cfg = validateConfig(
  ourConfig(dir, VS_TRL_PROMPTS, 3, { microBatchSize: micro, recompute: micro === 0 ? 'auto' : 'off' }),
  'profile-vs-trl',
);

// Phase boundaries: the number of kernels the active profile holds when each phase starts.
const engineState = (tf.engine() as unknown as { state: { activeProfile: { kernels: unknown[] } } }).state;
const marks: { phase: Phase; kernels: number; t: number }[] = [];
const trainer = await buildTrainer(cfg, {
  ...nodeResources,
});
const plan = trainer.stepPlan();
console.log(`model ${dir}; micro-batch ${plan.microBatchSize}, recompute ${plan.recompute ? 'on' : 'off'}`);
const w = await trainer.trainStep();
console.log(
  `warm-up step ${w.metrics.timeStep.toFixed(2)} s: generate ${w.metrics.timeGenerate.toFixed(2)}, score ${w.metrics.timeScore.toFixed(2)}, update ${w.metrics.timeUpdate.toFixed(2)}`,
);
// The trainer reports its phases to its owner's events; a trainer built without one reports to nobody, so wrap
// its phase method (private: reached through the instance) for the profiled step.
const t = trainer as unknown as { phase(p: Phase): void };
const orig = t.phase.bind(trainer);
t.phase = (p: Phase) => {
  marks.push({ phase: p, kernels: engineState.activeProfile?.kernels.length ?? 0, t: performance.now() });
  orig(p);
};
const info = await tf.profile(async () => {
  const r = await trainer.trainStep();
  console.log(
    `profiled step ${r.metrics.timeStep.toFixed(2)} s: generate ${r.metrics.timeGenerate.toFixed(2)}, score ${r.metrics.timeScore.toFixed(2)}, update ${r.metrics.timeUpdate.toFixed(2)}`,
  );
  return tf.scalar(0);
});
const SCOPES = new Set(['unnamed scope', 'forward']);
const names: Record<string, string> = { generating: 'generate', scoring: 'score', updating: 'update' };
for (let i = 0; i < marks.length - 1; i++) {
  const { phase, kernels: from, t: t0 } = marks[i];
  if (!(phase in names)) continue;
  const to = marks[i + 1].kernels;
  const wall = marks[i + 1].t - t0;
  const by = new Map<string, { ms: number; n: number }>();
  let leaves = 0;
  for (const k of info.kernels.slice(from, to)) {
    const ms = typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
    const shaped = /MatMul|Conv|Einsum/.test(k.name);
    const key = `${k.name}${shaped ? ' ' + JSON.stringify(k.inputShapes) : ''}`;
    const e = by.get(key) ?? { ms: 0, n: 0 };
    e.ms += ms;
    e.n++;
    by.set(key, e);
    if (!SCOPES.has(k.name)) leaves += ms;
  }
  console.log(
    `\n## ${names[phase]}: ${wall.toFixed(0)} ms wall, ${leaves.toFixed(0)} ms in ${to - from} kernels, ${(wall - leaves).toFixed(0)} ms outside`,
  );
  for (const [k, e] of [...by.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 14))
    console.log(`${e.ms.toFixed(1).padStart(9)} ms ${String(e.n).padStart(6)}×  ${k}`);
}
trainer.disposeOptimizers();
