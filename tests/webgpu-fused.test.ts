/**
 * The fused WGSL kernels together (src/core/kernels/webgpu-fused.ts) on Node WebGPU: every check function
 * (the same ones the Chromium page e2e/pages/kernels.ts and scripts/gpu-checks.ts run) passes against tfjs's
 * ops, and the one switch really turns every fused path off (more dispatches, the same values).
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import {
  FUSED_KERNEL_CHECKS,
  checkLayerNormOnCurrentBackend,
  setWebGpuFusedKernels,
} from '../src/core/kernels/webgpu-fused';
import { gpt2LayerDispatches } from '../src/bench/webgpu-dispatch';

const adapter = await webGpuAdapter();

describe('fused WebGPU kernels, all together', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
  });

  it('the layer-norm check: fused equals the ops, 1 dispatch forward', async () => {
    const r = await checkLayerNormOnCurrentBackend();
    expect(r.maxRelValue).toBeLessThan(1e-5);
    expect(r.maxRelGrad).toBeLessThan(1e-5);
    expect(r.dispatchesFwd).toBe(1);
    expect(tf.getBackend()).toBe('webgpu');
  });

  it('every check in FUSED_KERNEL_CHECKS passes at 1e-5 of scale', async () => {
    expect(Object.keys(FUSED_KERNEL_CHECKS)).toHaveLength(4);
    for (const [name, check] of Object.entries(FUSED_KERNEL_CHECKS)) {
      const r = await check();
      expect(r.maxRelValue, name).toBeLessThan(1e-5);
      expect(r.maxRelGrad, name).toBeLessThan(1e-5);
      expect(r.dispatchesFwd, name).toBeGreaterThan(0);
      expect(r.dispatchesFwdBwd, name).toBeGreaterThan(r.dispatchesFwd);
    }
  }, 120_000);

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
