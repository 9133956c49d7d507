/**
 * `npm run bench -- --gpu`: WebGPU in Node (Dawn) on whatever adapter is present. It reports the adapter, the
 * matmul peak measured on it, the tiny model's PPO step (seconds, update MFU against that peak, dispatches and
 * readbacks per step) and the GPT-2 dispatches per transformer layer with and without the fused layer norm.
 * On a software adapter (SwiftShader, lavapipe) it runs the smallest sizes only and says so; it never reports a
 * number it did not measure (what was skipped is null, with a note).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { PpoTrainer } from '../core/ppo/trainer';
import { setWebGpuLayerNormFused } from '../core/kernels/webgpu-layernorm';
import { benchMatmul, type MatmulBench } from './perf/matmul';
import { benchPpoStep, type PpoBench } from './perf/ppo';
import { disposeTrainer } from './perf/memory';
import { countDispatches, gpt2LayerDispatches, type LayerDispatches } from './webgpu-dispatch';

export interface GpuAdapterReport {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  software: boolean;
  vulkan: string;
}

export interface GpuBenchResult {
  adapter: GpuAdapterReport;
  /** "software adapter: smallest sizes only", or null on a hardware adapter. */
  sizes: string | null;
  matmul: MatmulBench;
  /** With the fused layer norm (what training uses) and without it (tfjs ops). */
  layers: { fused: LayerDispatches; plain: LayerDispatches };
  webgpuDispatchesPerLayerFwd: number;
  webgpuDispatchesPerLayerFwdBwd: number;
  ppo: PpoBench & { webgpuDispatchesPerStep: number; readbacksPerStep: number };
  webgpuDispatchesPerStep: number;
  readbacksPerStep: number;
  notes: string[];
}

export async function runGpuBench(o: {
  adapter: GpuAdapterReport;
  /** A PPO trainer on the tiny model with these overrides of the config. */
  buildTinyTrainer: (overrides: Record<string, unknown>) => Promise<PpoTrainer>;
  log: (m: string) => void;
}): Promise<GpuBenchResult> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`the GPU bench needs the webgpu backend, not ${tf.getBackend()}.`);
  const soft = o.adapter.software;
  const notes: string[] = [];
  if (soft)
    notes.push(
      'software adapter: smallest sizes only (a CPU implementation of Vulkan: numbers are not GPU numbers).',
    );
  o.log(`matmul peak (${soft ? 256 : 2048}²)`);
  const matmul = await benchMatmul(soft ? 256 : 2048, { iters: soft ? 1 : 8, minSeconds: soft ? 0.2 : 2 });

  o.log('GPT-2 dispatches per layer (n_layer 2 and 8), fused layer norm');
  const fused = await gpt2LayerDispatches();
  o.log('… and with tfjs ops for layer norm');
  setWebGpuLayerNormFused(false);
  let plain: LayerDispatches;
  try {
    plain = await gpt2LayerDispatches();
  } finally {
    setWebGpuLayerNormFused(true);
  }

  const shape = soft
    ? { batchSize: 2, miniBatches: 1, ppoEpochs: 1, responseLength: 4 }
    : { batchSize: 16, responseLength: 24 };
  o.log(`tiny PPO step (${JSON.stringify(shape)})`);
  const trainer = await o.buildTinyTrainer({ ...shape, steps: 10 });
  let ppo: GpuBenchResult['ppo'];
  try {
    const timed = await benchPpoStep(trainer, { steps: soft ? 1 : 3, warmup: 1, peakGflops: matmul.gflops });
    const counted = await countDispatches(() => trainer.trainStep());
    ppo = { ...timed, webgpuDispatchesPerStep: counted.dispatches, readbacksPerStep: counted.readbacks };
  } finally {
    disposeTrainer(trainer);
  }
  notes.push(
    `Dispatches counted as GPUComputePassEncoder.dispatchWorkgroups calls, readbacks as GPUBuffer.mapAsync calls; per layer = (count at n_layer 8 − count at 2) / 6 on the project's GPT-2 at width 64, batch 2 × 16 tokens.`,
  );
  notes.push('GPT-2 124M-shaped LoRA PPO step: not run by this bench yet (not measured).');
  return {
    adapter: o.adapter,
    sizes: soft ? 'software adapter: smallest sizes only' : null,
    matmul,
    layers: { fused, plain },
    webgpuDispatchesPerLayerFwd: fused.webgpuDispatchesPerLayerFwd,
    webgpuDispatchesPerLayerFwdBwd: fused.webgpuDispatchesPerLayerFwdBwd,
    ppo,
    webgpuDispatchesPerStep: ppo.webgpuDispatchesPerStep,
    readbacksPerStep: ppo.readbacksPerStep,
    notes,
  };
}

const f = (x: number | null, d = 2): string => (x == null ? 'not measured' : x.toFixed(d));

/** Markdown for the GPU bench. */
export function gpuMarkdown(r: GpuBenchResult): string {
  const a = r.adapter;
  const L = r.layers;
  return [
    `## WebGPU in Node (Dawn)`,
    '',
    `Adapter: ${[a.vendor, a.architecture, a.device].filter(Boolean).join(' / ')}${a.description ? ` (${a.description})` : ''}, Vulkan from ${a.vulkan}${a.software ? ' — software adapter: smallest sizes only' : ''}.`,
    '',
    '| measure | value |',
    '| --- | --- |',
    `| matmul peak, ${r.matmul.n}² | ${f(r.matmul.gflops, 3)} GFLOP/s |`,
    `| tiny PPO step (batch ${r.ppo.batchSize}, response ${r.ppo.responseLength}) | ${f(r.ppo.timeStep)} s (update ${f(r.ppo.timeUpdate)} s) |`,
    `| update MFU against that peak | ${f(r.ppo.updateMfu, 3)} |`,
    `| webgpuDispatchesPerStep | ${r.webgpuDispatchesPerStep} |`,
    `| readbacksPerStep | ${r.readbacksPerStep} |`,
    '',
    '| dispatches per transformer layer | tfjs ops for layer norm | fused layer norm |',
    '| --- | --- | --- |',
    `| forward | ${f(L.plain.webgpuDispatchesPerLayerFwd, 1)} | ${f(L.fused.webgpuDispatchesPerLayerFwd, 1)} |`,
    `| forward + backward | ${f(L.plain.webgpuDispatchesPerLayerFwdBwd, 1)} | ${f(L.fused.webgpuDispatchesPerLayerFwdBwd, 1)} |`,
    `| fixed per forward (embeddings, final norm, head) | ${f(L.plain.fixedFwd, 1)} | ${f(L.fused.fixedFwd, 1)} |`,
    '',
    ...r.notes.map((n) => `- ${n}`),
    '',
  ].join('\n');
}
