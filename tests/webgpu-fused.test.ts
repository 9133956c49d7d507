/**
 * The fused WGSL kernels together (src/core/backend/webgpu-fused.ts) on Node WebGPU: every check function
 * (the same ones the Chromium page e2e/pages/kernels.ts and scripts/gpu-checks.ts run) passes against tfjs's
 * ops. The switch that turns them all off, with the per-layer dispatch targets: webgpu-fused.slow.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import { FUSED_KERNEL_CHECKS, checkLayerNormOnCurrentBackend } from '../src/core/backend/webgpu-fused';

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
    expect(Object.keys(FUSED_KERNEL_CHECKS)).toHaveLength(5);
    for (const [name, check] of Object.entries(FUSED_KERNEL_CHECKS)) {
      const r = await check();
      expect(r.maxRelValue, name).toBeLessThan(1e-5);
      expect(r.maxRelGrad, name).toBeLessThan(1e-5);
      expect(r.dispatchesFwd, name).toBeGreaterThan(0);
      // The decode attention has no backward: its forward + backward is its forward.
      expect(r.dispatchesFwdBwd, name).toBeGreaterThanOrEqual(r.dispatchesFwd);
    }
  }, 120_000);
});
