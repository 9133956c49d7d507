/**
 * What running a group's prompt once saves (PpoTrainer.sharedPrefix, src/core/model/shared-prefix.ts): GRPO + LoRA
 * r 8 steps on a random GPT-2-shaped model (bytes tokenizer), 2 prompts of `prompt` tokens × groups of 8, R 64, the
 * default plan, timed with the share on and off alternately in one process (after one untimed step each), on the
 * backend given (wasm: this machine's CPU; webgpu: Node's Dawn). The share covers generation's prefill too (one
 * per distinct prompt), so `generate` moves with it.
 * Usage: npx tsx scripts/shared-prefix-step.ts [wasm|webgpu] [n_embd=256] [n_layer=6] [prompt=56] [steps=2]
 * Prints each step's phases, then one JSON line with the medians.
 */
import { rmSync } from 'node:fs';
import { setNodeBackend } from '../src/cli/backend-node';
import { letters, randomBytesGpt2Folder } from './random-bytes-gpt2';
import { nodeResources } from '../src/cli/train';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';

const [backend = 'wasm', embd = '256', layers = '6', promptLen = '56', stepsArg = '2'] =
  process.argv.slice(2);
const C = Number(embd);
const L = Number(layers);
const P = Number(promptLen);
const steps = Number(stepsArg);
const R = 64;
await setNodeBackend(backend);
const dir = await randomBytesGpt2Folder(C, L, 256, 'ppo-shared-prefix-');
const prompt = (seed: number) => letters(P, seed);
const cfg = validateConfig({
  model: dir,
  task: null,
  prompts: [prompt(1), prompt(2)],
  seed: 5,
  steps: 100,
  algorithm: 'grpo',
  batchSize: 16,
  groupSize: 8,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: R,
  stopToken: null,
  lora: 8,
  loraAlpha: 16,
  learningRate: 1e-4,
  // PPO_STEP_MICRO / PPO_STEP_RECOMPUTE (off|blocks|auto): another plan than the default, to time against it.
  ...(process.env.PPO_STEP_MICRO ? { microBatchSize: Number(process.env.PPO_STEP_MICRO) } : {}),
  ...(process.env.PPO_STEP_RECOMPUTE ? { recompute: process.env.PPO_STEP_RECOMPUTE } : {}),
});
const trainer = await buildTrainer(cfg, nodeResources, {
  rewardFn: { label: 'mean-byte', fn: (s) => s.responseTokens.reduce((a, b) => a + b, 0) / 256 / R },
});
const plan = trainer.stepPlan();
console.log(
  `plan: micro-batches of ${plan.microBatchSize} (generation ${plan.generateMicroBatchSize}), recompute ${plan.recompute ? 'on' : 'off'}`,
);
if (process.env.PLAN_ONLY) process.exit(0);
type Times = { step: number; generate: number; score: number; update: number };
const times: Record<'on' | 'off', Times[]> = { on: [], off: [] };
try {
  for (let s = -1; s < steps; s++) {
    for (const share of [true, false]) {
      trainer.sharedPrefix = share;
      const r = (await trainer.trainStep()).metrics;
      const t = { step: r.timeStep, generate: r.timeGenerate, score: r.timeScore, update: r.timeUpdate };
      const f = (x: number) => x.toFixed(3);
      console.log(
        `${s < 0 ? 'warm-up' : `step ${s}`}, share ${share ? 'on ' : 'off'}: ${f(t.step)} s (generate ${f(t.generate)}, score ${f(t.score)}, update ${f(t.update)})`,
      );
      if (s >= 0) times[share ? 'on' : 'off'].push(t);
    }
  }
} finally {
  trainer.disposeAll();
  rmSync(dir, { recursive: true, force: true });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const med = (k: 'on' | 'off') =>
  Object.fromEntries(
    (['step', 'generate', 'score', 'update'] as const).map((p) => [p, median(times[k].map((t) => t[p]))]),
  );
const on = med('on');
const off = med('off');
console.log(
  JSON.stringify({
    backend,
    shape: { n_embd: C, n_layer: L, prompt: P, R, batch: 16, groupSize: 8 },
    plan: { microBatchSize: plan.microBatchSize, recompute: plan.recompute },
    on,
    off,
    scoreUpdateOnOverOff: (on.score + on.update) / (off.score + off.update),
    // Generation's prefill runs once per distinct prompt (SampleOptions.sharePrompts) where the share is on.
    generateOnOverOff: on.generate / off.generate,
    stepOnOverOff: on.step / off.step,
  }),
);
