/**
 * The WebGPU plan on a real GPU (issue #31, item 3): not a Vitest file (it needs a GPU and Dawn), run on a GPU
 * machine from an esbuild bundle, the way docs/gpu.md "How it was run" runs the CLI there:
 *
 *   npx esbuild tests/gpu-plan-device.ts --bundle --platform=node --format=esm --target=node20 \
 *     --external:webgpu --external:playwright --external:playwright-core --external:@napi-rs/canvas \
 *     --banner:js="import { createRequire as r } from 'module'; const require = r(import.meta.url);" \
 *     --outfile=gpu-plan-device.mjs
 *   PPO_WEBGPU_VULKAN=system node gpu-plan-device.mjs [out-dir]
 *
 * What it checks, in order, each printed as it finishes (a failed check prints FAIL and the script exits 1):
 * A. Running out for real: 1 GiB tensors made one at a time, each inside the default error scopes
 *    (gpu-plan.ts webgpuDeviceErrors), until the device reports running out; then everything freed, the pool
 *    emptied, and a product checked against the CPU, with no uncaptured error.
 * B. A tiny model's PPO steps on WebGPU with the default scopes: the plan ("whole batch … on WebGPU"), the steps'
 *    times, no uncaptured error.
 * C. The fallback for real: the same tiny model at a large batch, with the GPU filled (64 MiB tensors) until only
 *    about what half the batch needs is free: the automatic plan's step must complete with a smaller micro-batch.
 * D. GPT-2 124M's shape (random weights), PPO at batch 16 × 24: a step with the device's plan (whole batch) against
 *    one with the budget plan (micro-batches of 4 with recompute), timed.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs';
import { setNodeWebGpuBackend, adapterLabel } from '../src/cli/backend-webgpu-node';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { exportLM } from '../src/core/model/folder';
import { writeFolder } from '../src/cli/files-node';
import { buildTrainer } from '../src/core/ppo/setup';
import type { PpoTrainer, StepResult } from '../src/core/ppo/trainer';
import {
  currentPlanDevice,
  describePlan,
  releasePooledBuffers,
  webgpuDeviceErrors,
} from '../src/core/ppo/gpu-plan';
import { makeTinyFolder } from './helpers/tiny';
import { meanByteReward, tinyConfig, tinyResources } from './helpers/trainer-fixture';
import type { TrainConfig } from '../src/common/config';

const t0 = performance.now();
const log = (s: string) => console.log(`[${((performance.now() - t0) / 1000).toFixed(1)} s] ${s}`);
const uncaptured: string[] = [];
/** A check that did not hold: printed, and the exit code 1. */
const fail = (s: string) => {
  log(`FAIL: ${s}`);
  process.exitCode = 1;
};
const GiB = 2 ** 30;
const gpuBytes = () =>
  (tf.memory() as unknown as { numBytesInGPU?: number; numBytesAllocatedInGPU?: number })
    .numBytesAllocatedInGPU ?? 0;

async function settle(): Promise<void> {
  // A readback waits for the queue: destroyed buffers are freed by then.
  const x = tf.scalar(1);
  await x.data();
  x.dispose();
}

async function partA(): Promise<void> {
  log('A: fill the device with 1 GiB tensors, each in the default error scopes, until it runs out');
  const errors = webgpuDeviceErrors();
  const ballast: tf.Tensor[] = [];
  let why: string | null = null;
  let thrown: string | null = null;
  const chunk = Math.min(GiB, currentPlanDevice()?.maxBufferBytes ?? GiB);
  for (let i = 0; i < (400 * GiB) / chunk && why === null && thrown === null; i++) {
    errors.push({ phase: 'score', size: i });
    try {
      ballast.push(tf.fill([chunk / 4], 1));
    } catch (e) {
      thrown = (e as Error).message;
    }
    why = await errors.pop().catch((e: unknown) => `(pop threw) ${(e as Error).message}`);
  }
  log(
    `A: ${ballast.length} tensors of ${chunk / 2 ** 20} MiB made; the scope said: ${why}; thrown: ${thrown}`,
  );
  const last = ballast.length >= 2 ? ballast[ballast.length - 2] : null;
  if (why === null && thrown === null) fail('A: the device never reported running out');
  if (last) log(`A: a good tensor still reads ${(await tf.slice(last, [chunk / 4 - 1], [1]).data())[0]}`);
  tf.dispose(ballast);
  releasePooledBuffers();
  await settle();
  const a = tf.randomUniform([256, 256], -1, 1, 'float32', 1);
  const b = tf.randomUniform([256, 256], -1, 1, 'float32', 2);
  const gpu = await tf.matMul(a, b).data();
  const [ad, bd] = [await a.data(), await b.data()];
  await tf.setBackend('cpu');
  const cpu = await tf.matMul(tf.tensor2d(ad, [256, 256]), tf.tensor2d(bd, [256, 256])).data();
  await tf.setBackend('webgpu');
  let worst = 0;
  for (let i = 0; i < cpu.length; i++) worst = Math.max(worst, Math.abs(cpu[i] - gpu[i]));
  tf.dispose([a, b]);
  log(
    `A: after freeing: a 256² product differs from the CPU's by ${worst.toExponential(2)}; uncaptured errors: ${uncaptured.length}; GPU bytes held ${(gpuBytes() / 1e6).toFixed(1)} MB`,
  );
  // Sums of 256 products of numbers in [−1, 1] in float32: rounding alone stays far below this.
  if (!(worst <= 1e-4)) fail(`A: the product after freeing differs from the CPU's by ${worst}`);
}

async function steps(t: PpoTrainer, n: number, label: string): Promise<StepResult[]> {
  const times: number[] = [];
  const results: StepResult[] = [];
  for (let i = 0; i < n; i++) {
    const s = performance.now();
    const r = await t.trainStep();
    times.push((performance.now() - s) / 1000);
    results.push(r);
    const notes = r.alerts.filter((a) => a.id === 'device-out-of-memory').map((a) => a.message);
    log(
      `${label}: step ${r.metrics.step} ${times[i].toFixed(2)} s (generate ${r.metrics.timeGenerate.toFixed(2)}, score ${r.metrics.timeScore.toFixed(2)}, update ${r.metrics.timeUpdate.toFixed(2)}), plan: ${describePlan(r.plan)}${notes.length ? ` — alert: ${notes.join(' | ')}` : ''}`,
    );
  }
  return results;
}

async function partB(dir: string): Promise<void> {
  log('B: tiny PPO on WebGPU, default scopes');
  const res = tinyResources(() => dir);
  const cfg = tinyConfig({ batchSize: 16, miniBatches: 1, ppoEpochs: 1, responseLength: 16 });
  const t = await buildTrainer(cfg, res, meanByteReward);
  log(`B: plan: ${t.planText()}; uncaptured so far ${uncaptured.length}`);
  await steps(t, 3, 'B');
  t.disposeAll();
  log(`B: uncaptured errors: ${uncaptured.length}`);
}

async function partC(dir: string): Promise<void> {
  log('C: the fallback for real (tiny model, batch 1024 × 48, the GPU nearly full)');
  const res = tinyResources(() => dir);
  const mk = (over: Partial<TrainConfig>) =>
    tinyConfig({ batchSize: 1024, miniBatches: 1, ppoEpochs: 1, responseLength: 48, ...over });
  // What a step holds at 256 and at 128 samples (tfjs's GPU bytes, its pool emptied before each).
  const measure = async (micro: number) => {
    const t = await buildTrainer(mk({ microBatchSize: micro }), res, meanByteReward);
    releasePooledBuffers();
    await settle();
    const before = gpuBytes();
    await t.trainStep();
    const grew = gpuBytes() - before;
    t.disposeAll();
    releasePooledBuffers();
    await settle();
    return grew;
  };
  const whole = await measure(1024);
  const half = await measure(512);
  log(
    `C: a step allocates ${(whole / 1e6).toFixed(0)} MB at 1024 samples, ${(half / 1e6).toFixed(0)} MB at 512`,
  );
  const t = await buildTrainer(mk({}), res, meanByteReward);
  const microBefore = t.stepPlan().microBatchSize;
  log(`C: plan before: ${t.planText()}`);
  // Fill the device with 64 MiB tensors until it runs out, then free about what half the batch allocates (+15%).
  const errors = webgpuDeviceErrors();
  const ballast: tf.Tensor[] = [];
  const CHUNK = 64 * 2 ** 20;
  for (let i = 0; i < 4000; i++) {
    errors.push({ phase: 'score', size: i });
    let bad = false;
    try {
      ballast.push(tf.fill([CHUNK / 4], 1));
    } catch {
      bad = true;
    }
    const why = await errors.pop().catch(() => 'pop threw');
    if (why !== null || bad) {
      tf.dispose(ballast.pop());
      break;
    }
  }
  releasePooledBuffers();
  const free = Math.ceil((half * 1.15) / CHUNK);
  tf.dispose(ballast.splice(ballast.length - free));
  releasePooledBuffers();
  await settle();
  log(
    `C: ballast ${((ballast.length * CHUNK) / GiB).toFixed(1)} GiB; freed ${free} × 64 MiB; uncaptured so far ${uncaptured.length}`,
  );
  try {
    const done = await steps(t, 3, 'C');
    // The automatic plan's step completed: with a smaller micro-batch, because the device ran out.
    const plan = done[done.length - 1].plan;
    if (!(plan.microBatchSize < microBefore))
      fail(`C: the micro-batch did not shrink (${microBefore} → ${plan.microBatchSize})`);
    if (plan.reason !== 'out-of-memory') fail(`C: the plan's reason is ${plan.reason}, not out-of-memory`);
  } catch (e) {
    fail(`C: the step failed: ${(e as Error).message.slice(0, 400)}`);
  }
  tf.dispose(ballast);
  t.disposeAll();
  releasePooledBuffers();
  log(
    `C: uncaptured errors: ${uncaptured.length}${uncaptured.length ? ` (first: ${uncaptured[0].slice(0, 200)})` : ''}`,
  );
}

async function partD(): Promise<void> {
  log('D: GPT-2 124M shape (random weights), PPO batch 16 × 24');
  const dir = mkdtempSync(path.join(tmpdir(), 'gpt2-rand-'));
  await tf.setBackend('cpu');
  const config = parseGPT2Config({
    vocab_size: 50257,
    n_positions: 1024,
    n_embd: 768,
    n_layer: 12,
    n_head: 12,
  });
  const m = GPT2.random(config, 5);
  await writeFolder(dir, await exportLM(m));
  m.dispose();
  await tf.setBackend('webgpu');
  log('D: model written');
  const res = { ...tinyResources(() => dir), maxBindingBytes: currentPlanDevice()?.maxBufferBytes };
  const base = { model: 'tiny-test', batchSize: 16, miniBatches: 2, ppoEpochs: 2, responseLength: 24 };
  for (const [label, over] of [
    ['D device plan', {}],
    ['D budget plan (micro 4, recompute)', { microBatchSize: 4, recompute: 'blocks' as const }],
  ] as const) {
    const t = await buildTrainer(tinyConfig({ ...base, ...over }), res, meanByteReward);
    log(`${label}: ${t.planText()}`);
    await steps(t, 2, label);
    t.disposeAll();
  }
  log(`D: uncaptured errors: ${uncaptured.length}`);
}

async function main(): Promise<void> {
  tf.env().set('PROD', true);
  registerWasmExtraKernels();
  const adapter = await setNodeWebGpuBackend({ fatalErrors: false });
  const device = (tf.backend() as unknown as { device: EventTarget & { limits: Record<string, number> } })
    .device;
  device.addEventListener('uncapturederror', (e) => {
    uncaptured.push((e as Event & { error?: { message?: string } }).error?.message ?? String(e));
  });
  log(
    `adapter ${adapterLabel(adapter)}; maxStorageBufferBindingSize ${device.limits.maxStorageBufferBindingSize}, maxBufferSize ${device.limits.maxBufferSize}; plan device ${JSON.stringify(currentPlanDevice())}`,
  );
  const parts = (process.env.PARTS ?? 'ABCD').toUpperCase();
  const dir = await makeTinyFolder();
  for (const p of parts) {
    try {
      if (p === 'A') await partA();
      if (p === 'B') await partB(dir);
      if (p === 'C') await partC(dir);
      if (p === 'D') await partD();
    } catch (e) {
      fail(`${p} failed: ${(e as Error).stack?.slice(0, 800)}`);
    }
  }
  if (uncaptured.length)
    fail(`${uncaptured.length} uncaptured errors (first: ${uncaptured[0].slice(0, 200)})`);
  log(process.exitCode ? 'done, with failures' : 'done');
}

await main();
process.exit(process.exitCode ?? 0);
