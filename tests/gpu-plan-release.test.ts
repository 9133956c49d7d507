/**
 * releasePooledBuffers (src/core/ppo/gpu-plan.ts, the trim between a bounded step's phases and at its end): the
 * memory of the buffers it destroys goes back to the device, not only out of tfjs's count. Dawn frees a destroyed
 * buffer's memory once a submit made after the destroy completes, and the trim at a step's end is followed by no
 * GPU work until the next step, so the trim submits (an empty submit) itself. On a software adapter the device's
 * memory is this process's, so the test reads it as resident memory: 256 MB of tfjs's buffers freed into its pool,
 * trimmed, then only waits on the queue (no other GPU work), must leave the process. Vitest runs each file in a
 * process of its own (forks), so no other file's memory is in the reading.
 */
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { releasePooledBuffers } from '../src/core/ppo/gpu-plan';
import { flushTfjs, replayBackend } from '../src/core/kernels/webgpu-replay';

const adapter = await webGpuAdapter();

/** This process's resident memory in bytes (Linux). */
function residentBytes(): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

describe('releasePooledBuffers on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  afterAll(async () => expect(await webGpuErrors()).toEqual([]));

  it.runIf(adapter.software && process.platform === 'linux')(
    "the destroyed buffers' memory leaves the device with no GPU work after the trim",
    async () => {
      await useNodeWebGpu();
      const manager = (tf.backend() as unknown as { bufferManager: { numBytesAllocated: number } })
        .bufferManager;
      const device = (tf.backend() as unknown as { device: GPUDevice }).device;
      const gpu = replayBackend()!;
      releasePooledBuffers();
      await device.queue.onSubmittedWorkDone();
      const n = 1 << 24; // 64 MB of float32 each, made on the GPU (tfjs's fill program)
      const ts = Array.from({ length: 4 }, (_, i) => tf.fill([n], i + 1));
      flushTfjs(gpu);
      await device.queue.onSubmittedWorkDone();
      const alive = residentBytes();
      const allocated = manager.numBytesAllocated;
      tf.dispose(ts);
      flushTfjs(gpu);
      // Freed into tfjs's pool: still allocated, and still resident.
      expect(manager.numBytesAllocated).toBe(allocated);
      releasePooledBuffers();
      expect(manager.numBytesAllocated).toBeLessThanOrEqual(allocated - 4 * 4 * n);
      // Only waits from here: the queue, and time for Dawn's callbacks.
      for (let i = 0; i < 5; i++) {
        await device.queue.onSubmittedWorkDone();
        await new Promise((r) => setTimeout(r, 20));
      }
      const after = residentBytes();
      expect(alive - after).toBeGreaterThan(0.75 * 4 * 4 * n);
    },
  );
});
