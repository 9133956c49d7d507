/**
 * WebGPU dispatch and readback counts for the bench's headline keys, counted on Node WebGPU (Dawn) with
 * src/bench/webgpu-dispatch.ts: the project's GPT-2 per transformer layer (forward, forward + backward:
 * gpt2LayerDispatches) and one tiny PPO step (countDispatches around trainStep, after a warm-up step), as
 * `bench --gpu` counts them (src/bench/webgpu-gpu.ts). Counts do not depend on the adapter's speed, so a software
 * adapter (SwiftShader) gives the same numbers as a GPU. `cli bench` runs this in a child process
 * (`bench --gpu-dispatch-only`): Dawn and the WASM backend's run do not share a process well.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { PpoTrainer } from '../../core/ppo/trainer';
import { countDispatches, gpt2LayerDispatches, type LayerDispatches } from '../webgpu-dispatch';
import { disposeTrainer } from './memory';

/** The tiny PPO step whose dispatches are counted (the smallest step `bench --gpu` runs on a software adapter). */
export const DISPATCH_STEP = { batchSize: 2, miniBatches: 1, ppoEpochs: 1, responseLength: 4 };

export interface GpuDispatchCounts {
  /** The adapter, in words (vendor / architecture / device). */
  adapter: string;
  software: boolean;
  perLayer: LayerDispatches;
  webgpuDispatchesPerLayerFwd: number;
  webgpuDispatchesPerLayerFwdBwd: number;
  /** Dispatches of one tiny PPO step (DISPATCH_STEP), all phases. */
  webgpuDispatchesPerStep: number;
  readbacksPerStep: number;
  step: typeof DISPATCH_STEP;
  seconds: number;
}

export async function countGpuDispatches(o: {
  adapter: string;
  software: boolean;
  buildTinyTrainer: (overrides: Record<string, unknown>) => Promise<PpoTrainer>;
  log: (m: string) => void;
}): Promise<GpuDispatchCounts> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`countGpuDispatches needs the webgpu backend, not ${tf.getBackend()}.`);
  const t0 = performance.now();
  o.log('webgpu dispatches per GPT-2 layer (n_layer 2 and 8)');
  const perLayer = await gpt2LayerDispatches();
  o.log(`webgpu dispatches of one tiny PPO step (${JSON.stringify(DISPATCH_STEP)})`);
  const trainer = await o.buildTinyTrainer({ ...DISPATCH_STEP, steps: 10 });
  let step: { dispatches: number; readbacks: number };
  try {
    await trainer.trainStep(); // warm-up: shader compilation and buffer pools are not what is counted
    step = await countDispatches(() => trainer.trainStep());
  } finally {
    disposeTrainer(trainer);
  }
  return {
    adapter: o.adapter,
    software: o.software,
    perLayer,
    webgpuDispatchesPerLayerFwd: perLayer.webgpuDispatchesPerLayerFwd,
    webgpuDispatchesPerLayerFwdBwd: perLayer.webgpuDispatchesPerLayerFwdBwd,
    webgpuDispatchesPerStep: step.dispatches,
    readbacksPerStep: step.readbacks,
    step: DISPATCH_STEP,
    seconds: (performance.now() - t0) / 1000,
  };
}
