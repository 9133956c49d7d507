/**
 * The NaN/Inf guard and the clip factor decided on the device (src/core/ppo/update.ts jointGuardedStepDeferred,
 * src/core/optim/fused-adam.ts applyControlled; docs/engine.md "No readback inside the update"), on CPU, WASM and Node
 * WebGPU (SwiftShader here):
 * - a window of deferred steps [good, NaN, Inf, good] read at once gives the figures and the weights, moments and
 *   β-powers of a float64 loop of clipped Adam that skips the two bad steps — the step after the skips taking its
 *   bias correction at t + 2, as the fused Adam documents (the host cannot see the flags before the read);
 * - after the read the iteration count is the number of steps applied;
 * - nothing is read back while the steps are taken, one readback reads them all (WebGPU counts mapAsync);
 * - a PPO step's update reads back once, however many epochs and minibatches (early stop off), once per epoch with
 *   early stop on.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import {
  FusedAdamOptimizer,
  fusedAdamAvailable,
  registerFusedAdamKernels,
} from '../src/core/optim/fused-adam';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { jointGuardedStepDeferred, readJointSteps, type UpdatePart } from '../src/core/ppo/update';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import { makeTinyFolder } from './helpers/tiny';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { disposeTrainer } from '../src/bench/perf/memory';

const W0 = [0.5, -1.25, 2, 0.75];
const LR = 0.05;
const MAX_NORM = 1;
/** Per step: the factor of the loss c·Σw², or a poison. */
const PLAN: (number | 'nan' | 'inf')[] = [3, 'nan', 'inf', 2];

/** Float64 clipped Adam over PLAN, skipping the bad steps; `t` counts what the fused Adam counts before a read. */
function reference() {
  const w = [...W0];
  const m = w.map(() => 0);
  const v = w.map(() => 0);
  let t = 0;
  let applied = 0;
  const scales: number[] = [];
  for (const c of PLAN) {
    t++; // the host's count advances whether or not the device applied
    if (typeof c !== 'number') {
      scales.push(1);
      continue;
    }
    applied++;
    const g = w.map((x) => 2 * c * x);
    const sc = Math.min(1, MAX_NORM / (Math.hypot(...g) + 1e-6));
    scales.push(sc);
    for (let i = 0; i < w.length; i++) {
      const gi = g[i] * sc;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      w[i] -= (LR * (m[i] / (1 - 0.9 ** t))) / (Math.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-7);
    }
  }
  return { w, m, v, applied, scales };
}

function maxRel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < b.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]) / Math.max(1e-3, Math.abs(b[i])));
  return Number.isNaN(d) ? Infinity : d;
}

async function deferredWindow(count?: typeof countDispatches) {
  const before = tf.memory().numTensors;
  const w = tf.tidy(() => tf.variable(tf.tensor1d(W0), true, `guard_dev_${Math.random()}`));
  const opt = new FusedAdamOptimizer(LR);
  const part = (c: number | 'nan' | 'inf'): UpdatePart<'sq'> => ({
    optimizer: opt,
    vars: [w],
    objective: () => {
      const sq = tf.sum(tf.square(w)) as tf.Scalar;
      const k = c === 'nan' ? NaN : c === 'inf' ? Infinity : c;
      return { loss: tf.mul(sq, k) as tf.Scalar, stats: { sq: tf.clone(sq) } };
    },
  });
  const take = async () => {
    const pending = [];
    for (const c of PLAN) pending.push(await jointGuardedStepDeferred([part(c)], MAX_NORM));
    return pending;
  };
  const taken = count ? await count(take) : { result: await take(), readbacks: 0 };
  const itersBefore = opt.iterations;
  const read = count
    ? await count(() => readJointSteps(taken.result))
    : { result: await readJointSteps(taken.result), readbacks: 0 };
  const out = {
    takenReadbacks: taken.readbacks,
    readReadbacks: read.readbacks,
    results: read.result,
    itersBefore,
    itersAfter: opt.iterations,
    w: Array.from(await w.data()),
    weights: await (async () => {
      const ws = await opt.getWeights();
      const got = await Promise.all(ws.map(async (x) => Array.from(await x.tensor.data())));
      ws[0].tensor.dispose(); // the iteration count: a new scalar (the moments are the optimizer's own variables)
      return got;
    })(),
    accBeta1: (await (opt as unknown as { accBeta1: tf.Variable }).accBeta1.data())[0],
    before,
  };
  opt.dispose();
  w.dispose();
  return { ...out, after: tf.memory().numTensors };
}

function checkAgainstReference(r: Awaited<ReturnType<typeof deferredWindow>>): void {
  const ref = reference();
  expect(r.results.map((x) => x.applied)).toEqual([true, false, false, true]);
  expect(r.itersBefore).toBe(PLAN.length);
  expect(r.itersAfter).toBe(ref.applied);
  // tfjs keeps β1^(t+1) for the next step: two applied steps → β1³.
  expect(Math.abs(r.accBeta1 - 0.9 ** 3)).toBeLessThan(1e-6);
  r.results.forEach((x, i) => {
    expect(Math.abs(x.clipScale - ref.scales[i])).toBeLessThan(1e-6 * ref.scales[i]);
  });
  expect(Number.isNaN(r.results[1].losses[0])).toBe(true);
  expect(r.results[2].losses[0]).toBe(Infinity);
  expect(maxRel(r.w, ref.w)).toBeLessThan(2e-6);
  // getWeights: [iter, w/m, w/v]
  expect(r.weights[0]).toEqual([ref.applied]);
  expect(maxRel(r.weights[1], ref.m)).toBeLessThan(2e-6);
  expect(maxRel(r.weights[2], ref.v)).toBeLessThan(2e-6);
}

for (const backend of ['cpu', 'wasm'] as const) {
  describe(`device-decided guard on ${backend}`, () => {
    beforeAll(async () => {
      registerFusedAdamKernels();
      if (backend === 'wasm') registerWasmExtraKernels();
      await tf.setBackend(backend);
      await tf.ready();
    });

    it('[good, NaN, Inf, good] deferred and read at once: bad steps skipped, the rest a float64 clipped Adam', async () => {
      expect(fusedAdamAvailable()).toBe(true);
      const r = await deferredWindow();
      checkAgainstReference(r);
      expect(r.after).toBe(r.before);
    });

    it('applyControlled refuses controls of the wrong shape, naming what it needs', () => {
      const w = tf.variable(tf.tensor1d([1]), true, `ctl_${Math.random()}`);
      const opt = new FusedAdamOptimizer(0.1);
      const g = tf.tensor1d([1]);
      const bad = tf.tensor1d([1, 1, 1]);
      expect(() => opt.applyControlled({ [w.name]: g }, bad)).toThrow(/\[gscale, apply\] of 2 values/);
      expect(() => opt.uncountSkipped(1)).toThrow(/whole number in \[0, 0\]/);
      tf.dispose([w, g, bad]);
      opt.dispose();
    });
  });
}

const adapter = await webGpuAdapter();

describe('device-decided guard on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
    registerFusedAdamKernels();
  });

  it('[good, NaN, Inf, good]: no readback while the steps are taken, one for the four; same maths as on CPU', async () => {
    const r = await deferredWindow(countDispatches);
    expect(r.takenReadbacks).toBe(0);
    expect(r.readReadbacks).toBe(1);
    checkAgainstReference(r);
    expect(r.after).toBe(r.before);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('a PPO step reads back once in its update, whatever the epochs and minibatches; once per epoch with earlyStopKl', async () => {
    const dir = await makeTinyFolder();
    const readbacks = async (o: Record<string, unknown>): Promise<number> => {
      const cfg = validateConfig({
        model: dir,
        task: 'sentiment',
        batchSize: 4,
        responseLength: 3,
        // One slice size everywhere, so that generation and scoring read back the same in every case: the counts
        // differ only in the update (a minibatch of 4 is two micro-batches of 2, gradients accumulated).
        microBatchSize: 2,
        earlyStopApproxKl: 10, // the largest allowed: never reached here, so every epoch runs and the counts compare
        ...o,
      });
      const t = await buildTrainer(cfg, { modelFiles: (p) => nodeFiles(p), loadTask: loadTaskNode });
      try {
        // The first step: shader compilation changes no readback count (mapAsync is one per tensor read).
        return (await countDispatches(() => t.trainStep())).readbacks;
      } finally {
        disposeTrainer(t);
      }
    };
    const one = await readbacks({ ppoEpochs: 1, miniBatches: 1, earlyStopKl: false });
    const many = await readbacks({ ppoEpochs: 3, miniBatches: 2, earlyStopKl: false });
    const manyStop = await readbacks({ ppoEpochs: 3, miniBatches: 2, earlyStopKl: true });
    console.log(
      `readbacks per PPO step: 1×1 ${one}, 3 epochs × 2 minibatches ${many}, with earlyStopKl ${manyStop}`,
    );
    // Five more minibatches, no more readbacks; with early stop one per epoch (the last epoch's is the step's own).
    expect(many).toBe(one);
    expect(manyStop).toBe(one + 2);
    expect(await webGpuErrors()).toEqual([]);
  });
});
