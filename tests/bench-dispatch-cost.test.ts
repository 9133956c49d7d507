/**
 * The bench's fixed cost of one kernel (src/bench/webgpu-gpu.ts): `measureDispatchOverhead` times a chain of adds
 * that are GPU programs (not tfjs's CPU forwarding of small host tensors, which the chain of 256 floats was until
 * 2026-11-30), and `measureReplayedDispatch` times the same chain recorded once and replayed. On WebGPU in Node
 * (SwiftShader): the dispatches each makes are counted.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { measureDispatchOverhead, measureReplayedDispatch } from '../src/bench/webgpu-gpu';
import { countDispatches } from '../src/bench/webgpu-dispatch';
import { liveReplayFrames } from '../src/core/kernels/webgpu-replay';

const adapter = await webGpuAdapter();

describe('the fixed cost of one dispatch on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('the chain is GPU programs: 30 adds make 30 dispatches after the warm-up chain’s 30', async () => {
    const c = await countDispatches(() => measureDispatchOverhead(30));
    expect(c.dispatches).toBe(60);
    expect(c.result).toBeGreaterThan(0);
  });

  it('recorded and replayed: each replay makes the chain’s 40 dispatches; wall and host time > 0; no frame or tensor left', async () => {
    const before = tf.memory().numTensors;
    const frames = liveReplayFrames();
    const three = await countDispatches(() => measureReplayedDispatch(40, 3));
    const five = await countDispatches(() => measureReplayedDispatch(40, 5));
    const r = three.result;
    expect(r).not.toBeNull();
    expect(r!.dispatches).toBe(40);
    // Two replays more make 80 dispatches more (recording, the warm-up replay and the settling reads are the same).
    expect(five.dispatches - three.dispatches).toBe(80);
    expect(r!.hostUs).toBeGreaterThan(0);
    expect(Number.isFinite(r!.wallUs)).toBe(true);
    expect(r!.wallUs).toBeGreaterThan(0);
    expect(liveReplayFrames()).toBe(frames);
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  });
});
