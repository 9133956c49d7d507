/**
 * The one switch of src/core/backend/webgpu-fused.ts on Node WebGPU: with it off every fused path gives way to
 * tfjs's ops (far more dispatches per GPT-2 layer); with it on, the per-layer targets hold, counted as the
 * bench counts them. Slow on SwiftShader (two GPT-2 depths, forward and backward, twice).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import { setWebGpuFusedKernels } from '../src/core/backend/webgpu-fused';
import { gpt2LayerDispatches } from '../src/bench/webgpu-dispatch';

const adapter = await webGpuAdapter();

describe('fused WebGPU kernels: the switch and the per-layer targets', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
  });

  it('setWebGpuFusedKernels(false) turns every fused path off: tfjs ops, more dispatches per layer', async () => {
    const fused = await gpt2LayerDispatches();
    setWebGpuFusedKernels(false);
    let plain;
    try {
      plain = await gpt2LayerDispatches();
    } finally {
      setWebGpuFusedKernels(true);
    }
    // The targets, counted as the bench counts them.
    expect(fused.webgpuDispatchesPerLayerFwd).toBeLessThanOrEqual(20);
    expect(fused.webgpuDispatchesPerLayerFwdBwd).toBeLessThanOrEqual(50);
    expect(plain.webgpuDispatchesPerLayerFwd).toBeGreaterThan(40);
    expect(plain.webgpuDispatchesPerLayerFwdBwd).toBeGreaterThan(100);
  }, 300_000);
});
