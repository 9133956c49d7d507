/**
 * GpuBufferPeakMeter (src/bench/perf/gpu-buffer-peak.ts): the most bytes of tfjs-backend-webgpu's buffers in use and
 * in existence while something runs, read from its BufferManager's counters. On WebGPU in Node (SwiftShader): a
 * 4 MB intermediate shows in both peaks after it is gone, the counters keep counting after uninstall, and a second
 * meter is refused; on the CPU backend it measures nothing.
 */
import { afterAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { GpuBufferPeakMeter } from '../src/bench/perf/gpu-buffer-peak';

const adapter = await webGpuAdapter();

describe('GpuBufferPeakMeter', () => {
  it('off WebGPU: install returns false and read() is null', async () => {
    await tf.setBackend('cpu');
    const m = new GpuBufferPeakMeter();
    expect(m.install()).toBe(false);
    expect(m.read()).toBeNull();
    m.uninstall();
  });

  describe('on Node WebGPU', () => {
    if (!adapter) return skipWithoutAdapter();
    afterAll(async () => expect(await webGpuErrors()).toEqual([]));

    it('an intermediate of 4 MB made and freed: in both peaks, not in the counters after; uninstall keeps counting', async () => {
      await useNodeWebGpu();
      const manager = (tf.backend() as unknown as { bufferManager: Record<string, number> }).bufferManager;
      // 4 MB of float32: above tfjs's CPU hand-off size, so the adds run on the GPU; a size no other test uses, so no
      // buffer of it waits in tfjs's pool and the two outputs are new allocations.
      const n = (1 << 20) + 4099;
      const a = tf.fill([n], 1);
      const b = tf.fill([n], 2);
      await a.data();
      await b.data();
      const meter = new GpuBufferPeakMeter();
      expect(meter.install()).toBe(true);
      expect(() => new GpuBufferPeakMeter().install()).toThrow('another meter is installed');
      const used0 = manager.numBytesUsed;
      const alloc0 = manager.numBytesAllocated;
      const c = tf.add(a, b);
      const d = tf.mul(c, b); // c and d alive together: two 4 MB outputs in use at once
      expect(Array.from((await d.data()).slice(0, 2))).toEqual([6, 6]);
      tf.dispose([c, d]);
      await tf.nextFrame();
      const peak = meter.read()!;
      expect(peak.usedBytes).toBeGreaterThanOrEqual(used0 + 2 * 4 * n);
      expect(peak.allocatedBytes).toBeGreaterThanOrEqual(alloc0 + 2 * 4 * n);
      // Freed: the in-use counter is back below the peak (the pool keeps the buffers allocated).
      expect(manager.numBytesUsed).toBeLessThan(peak.usedBytes);
      meter.reset();
      expect(meter.read()!.usedBytes).toBe(manager.numBytesUsed);
      meter.uninstall();
      expect(Object.getOwnPropertyDescriptor(manager, 'numBytesUsed')?.get).toBeUndefined();
      expect(meter.read()).toBeNull();
      const before = manager.numBytesUsed;
      const e = tf.add(a, b);
      await e.data();
      expect(manager.numBytesUsed).toBeGreaterThan(before);
      tf.dispose([a, b, e]);
    });
  });
});
