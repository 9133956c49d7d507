/**
 * The WebGPU device the engine asks for (src/core/backend/webgpu-device.ts): tfjs-backend-webgpu's factory with the
 * adapter's maxStorageBuffersPerShaderStage requested as well, so that programs may bind more than WebGPU's default
 * 8 storage buffers where the adapter offers them (Dawn's SwiftShader here: 12). Checks the descriptor, the device
 * the backend got, and a program that binds more than 8 buffers running with the right values.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { deviceDescriptorFor } from '../src/core/backend/webgpu-device';
import { adapterLabel } from '../src/cli/backend-webgpu-node';
import { DEFAULT_STORAGE_BUFFERS, storageBuffersPerProgram } from '../src/core/kernels/webgpu-common';
import { countDispatches } from '../src/bench/webgpu-dispatch';

describe('the device descriptor', () => {
  const limits = {
    maxComputeWorkgroupStorageSize: 32768,
    maxComputeWorkgroupsPerDimension: 65535,
    maxStorageBufferBindingSize: 2 ** 31,
    maxBufferSize: 2 ** 32,
    maxComputeWorkgroupSizeX: 1024,
    maxComputeInvocationsPerWorkgroup: 1024,
    maxStorageBuffersPerShaderStage: 12,
    maxUniformBuffersPerShaderStage: 12,
  };
  it("requests tfjs's six limits and the adapter's storage buffers per stage, nothing else", () => {
    const d = deviceDescriptorFor({ features: new Set(['timestamp-query', 'subgroups']), limits });
    expect(d.requiredFeatures).toEqual(['timestamp-query']);
    const { maxUniformBuffersPerShaderStage: _, ...asked } = limits;
    expect(d.requiredLimits).toEqual(asked);
  });
  it('requests bgra8unorm-storage where offered, as tfjs does', () => {
    const d = deviceDescriptorFor({ features: new Set(['bgra8unorm-storage']), limits });
    expect(d.requiredFeatures).toEqual(['bgra8unorm-storage']);
  });
});

const adapter = await webGpuAdapter();

describe('the device on Node WebGPU', () => {
  if (!adapter) {
    skipWithoutAdapter();
    return;
  }
  let offered = 0;
  let report: Awaited<ReturnType<typeof useNodeWebGpu>>;
  beforeAll(async () => {
    report = await useNodeWebGpu();
    const gpu = (navigator as unknown as { gpu: { requestAdapter(o: object): Promise<unknown> } }).gpu;
    const a = (await gpu.requestAdapter({ powerPreference: 'high-performance' })) as {
      limits: { maxStorageBuffersPerShaderStage: number };
    };
    offered = a.limits.maxStorageBuffersPerShaderStage;
  });

  it("has the adapter's storage buffers per stage, and programs see them", () => {
    const device = (tf.backend() as unknown as { device: { limits: Record<string, number> } }).device;
    expect(device.limits.maxStorageBuffersPerShaderStage).toBe(offered);
    expect(storageBuffersPerProgram()).toBe(Math.max(offered, DEFAULT_STORAGE_BUFFERS));
    // What the benches record of the adapter (and its label) says it too.
    expect(report.storageBuffersPerProgram).toBe(storageBuffersPerProgram());
    expect(adapterLabel(report)).toContain(`${storageBuffersPerProgram()} storage buffers a program`);
  });

  it('runs a program binding more than 8 storage buffers (addN of limit − 1 tensors in one dispatch)', async () => {
    const n = storageBuffersPerProgram() - 1;
    if (n + 1 <= DEFAULT_STORAGE_BUFFERS) return; // an adapter at the default: nothing above it to check
    const xs = Array.from({ length: n }, (_, i) => tf.tensor1d([i + 1, -(i + 1) * 0.5, 2 ** -i]));
    const { result: sum, dispatches } = await countDispatches(() => tf.addN(xs));
    const got = await sum.data();
    const want = [0, 0, 0];
    for (let i = 0; i < n; i++) {
      want[0] += i + 1;
      want[1] += -(i + 1) * 0.5;
      want[2] += 2 ** -i;
    }
    expect(Array.from(got)).toEqual(want.map((v) => Math.fround(v)));
    expect(dispatches).toBe(1);
    expect(await webGpuErrors()).toEqual([]);
    tf.dispose([...xs, sum]);
  });
});
