/**
 * The replayed frame's profile (src/core/kernels/webgpu-replay-profile.ts) on Node WebGPU (SwiftShader, which has
 * timestamp queries): a replayed generation hands its decode frame to the probe (model/decode-replay.ts
 * setDecodeReplayProbe) after its results are read; the profile times every recorded dispatch in a pass of its own,
 * groups them by program and times the one-pass replay; the counts add up to the frame's dispatches, the program
 * names are the programs the decode runs, and the generation's tokens and log-probs are those of a generation
 * without the probe (and of one after it). Without timestamp queries the per-dispatch figures are null.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { GPT2 } from '../src/core/model/gpt2';
import { generate } from '../src/core/model/sampling';
import {
  lastDecodeReplayStats,
  setDecodeReplay,
  setDecodeReplayProbe,
} from '../src/core/model/decode-replay';
import {
  describeReplayProfile,
  profileReplayFrame,
  type ReplayProfile,
} from '../src/core/kernels/webgpu-replay-profile';
import { liveReplayFrames, programLabel } from '../src/core/kernels/webgpu-replay';
import { tinyGpt2 } from './helpers/f16-base';

const adapter = await webGpuAdapter();
/** A short greedy generation's options. */
const greedy = { maxNewTokens: 4, temperature: 0, topK: 0, stopToken: null, padId: 0, rng: 1 };

describe('programLabel', () => {
  it('names a program by its class, else by its shader key’s first word', () => {
    class FewRowsMatMulProgram {
      shaderKey = 'fewrows_1_2';
    }
    expect(programLabel(new FewRowsMatMulProgram())).toBe('FewRowsMatMulProgram');
    expect(programLabel({ shaderKey: 'binary_add_4' })).toBe('binary');
    // esbuild numbers a class name two bundled modules share
    class MatMulPackedProgram2 {}
    expect(programLabel(new MatMulPackedProgram2())).toBe('MatMulPackedProgram');
    expect(programLabel({})).toBe('program');
  });
});

describe('the replayed decode frame’s profile on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('times each dispatch, groups them by program, and leaves the generation as it was', async () => {
    const m = GPT2.random(tinyGpt2, 11);
    const prompts = [
      [5, 6, 7],
      [8, 9, 10, 11],
    ];
    const opts = { ...greedy, maxNewTokens: 6 };
    try {
      setDecodeReplay(true);
      const plain = await generate(m, prompts, opts);
      const profiles: ReplayProfile[] = [];
      const seen: { B: number; S: number }[] = [];
      setDecodeReplayProbe(async (frame, info) => {
        seen.push(info);
        profiles.push(await profileReplayFrame(frame, { reps: 2, top: 4 }));
      });
      let probed;
      try {
        probed = await generate(m, prompts, opts);
      } finally {
        setDecodeReplayProbe(null);
      }
      const after = await generate(m, prompts, opts);
      const dispatches = lastDecodeReplayStats().dispatchesPerReplay;

      for (const r of [probed, after]) {
        expect(r.tokens).toEqual(plain.tokens);
        expect(r.logprobs).toEqual(plain.logprobs);
      }
      expect(profiles).toHaveLength(1);
      expect(seen).toEqual([{ B: 2, S: 4 + 6 }]);
      const p = profiles[0];
      expect(p.dispatches).toBe(dispatches);
      expect(p.byProgram.reduce((n, g) => n + g.count, 0)).toBe(p.dispatches);
      const labels = p.byProgram.map((g) => g.label);
      // The decode's own programs are there: the attention over the cache, and the choice of the token.
      expect(
        labels.some((l) => /Attention/i.test(l)),
        labels.join(', '),
      ).toBe(true);
      expect(
        labels.some((l) => /Sample|Choose/i.test(l)),
        labels.join(', '),
      ).toBe(true);
      expect(p.wallUsPerReplay).toBeGreaterThan(0);
      expect(p.timestamps).toBe(true); // SwiftShader's device has timestamp queries
      expect(p.kernelUsPerReplay!).toBeGreaterThan(0);
      const summed = p.byProgram.reduce((n, g) => n + g.us!, 0);
      expect(summed).toBeCloseTo(p.kernelUsPerReplay!, 6);
      expect(p.byProgram.reduce((n, g) => n + g.share!, 0)).toBeCloseTo(1, 9);
      for (let i = 1; i < p.byProgram.length; i++)
        expect(p.byProgram[i - 1].us!).toBeGreaterThanOrEqual(p.byProgram[i].us!);
      expect(p.top).toHaveLength(4);
      for (const t of p.top) {
        expect(t.index).toBeGreaterThanOrEqual(0);
        expect(t.index).toBeLessThan(p.dispatches);
        expect(t.workgroups.every((w) => Number.isInteger(w) && w >= 1)).toBe(true);
      }
      expect(p.top[0].us).toBeGreaterThanOrEqual(p.top[3].us);
      expect(p.gapUsPerDispatch).toBeCloseTo((p.wallUsPerReplay - p.kernelUsPerReplay!) / p.dispatches, 9);
      expect(describeReplayProfile(p)).toMatch(/^\d+ dispatches, [\d.]+ µs a replay; kernels [\d.]+ µs/);
      expect(liveReplayFrames()).toBe(0);
    } finally {
      m.dispose();
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it('refuses a frame that is no longer valid, in words', async () => {
    const m = GPT2.random(tinyGpt2, 12);
    let kept: Parameters<typeof profileReplayFrame>[0] | null = null;
    try {
      setDecodeReplayProbe(async (frame) => {
        kept = frame;
      });
      await generate(m, [[5, 6]], greedy);
    } finally {
      setDecodeReplayProbe(null);
      m.dispose();
    }
    expect(kept).not.toBeNull();
    await expect(profileReplayFrame(kept!)).rejects.toThrow(/stale or disposed/);
  });
});
