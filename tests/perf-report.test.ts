/**
 * The bench report (src/bench/perf/report.ts): the headline keys come from the right runs, targets are
 * judged as stated (≥ 5, ≥ 0.5, ≥ 1.5, ≤ 4e9, = 0), unmeasured keys are null and "not measured", and the markdown
 * names every run.
 */
import { describe, it, expect } from 'vitest';
import { headline, markdown, reportJson, type BenchReport, type BenchRun } from '../src/bench/perf/report';
import type { FourModelMemory } from '../src/bench/perf/memory';

const mem = (shape: string, bytes: number, growth: number, backend = 'wasm'): FourModelMemory => ({
  shape,
  backend,
  adam: 'tfjs',
  params: 1,
  batchSize: 2,
  responseLength: 8,
  bytesAfterStep1: bytes,
  expectedBytes: bytes,
  tensorsAfterStep1: 10,
  peakBytesStep1: null,
  gpuAfterStep1: null,
  stepSeconds: 1,
  steps: 200,
  bytesAfterLastStep: bytes + growth,
  growthBytes: growth,
  tensorGrowth: 0,
  gpuGrowthBytes: null,
});

const run = (platform: string, backend: string, over: Partial<BenchRun>): BenchRun => ({
  label: `${platform}/${backend}`,
  platform,
  backend,
  skipped: [],
  matmul: [{ n: 512, iters: 4, seconds: 1, gflops: 10 }],
  generation: [],
  ppo: null,
  ppoConfig: null,
  lm: [],
  memory: [],
  fusedAdamCheck: null,
  notes: [],
  errors: {},
  tensorLeak: 0,
  nanogptTensorLeak: 0,
  ...over,
});

const lm = (impl: string, tps: number) => ({
  impl,
  backend: 'webgpu',
  shape: { n_layer: 4, n_embd: 160, n_head: 4, vocab_size: 258, T: 16, B: 2 },
  params: 1,
  steps: 1,
  seconds: 1,
  tokensPerSecond: tps,
  gflopsPerSecond: 1,
  firstLoss: 5.6,
  lastLoss: 5,
});

describe('bench report', () => {
  const report: BenchReport = {
    quick: true,
    machine: { cpu: 'test × 2' },
    seconds: 10,
    notes: ['a note'],
    bigMemory: [mem('gpt2', 3_982_086_160, 0, 'cpu')],
    runs: [
      run('node', 'wasm', {
        generation: [
          { batch: 8, newTokens: 64, cacheTokensPerSecond: 600, recomputeTokensPerSecond: 60, kvSpeedup: 10 },
        ],
        ppo: {
          steps: 1,
          batchSize: 16,
          responseLength: 24,
          Tq: 24,
          timeGenerate: 1,
          timeScore: 1,
          timeUpdate: 5,
          timeStep: 7,
          tokensPerSecond: 30,
          updateTokensPerSecond: 300,
          updateFlops: 2e10,
          updateGflopsPerSecond: 4,
          updateMfu: 0.4,
          peakGflops: 10,
        },
        memory: [mem('tiny', 4e7, 0)],
      }),
      run('chromium', 'webgpu', {
        generation: [
          { batch: 8, newTokens: 8, cacheTokensPerSecond: 6, recomputeTokensPerSecond: 2, kvSpeedup: 3 },
        ],
        lm: [lm('ours', 4), lm('nanogpt', 2)],
      }),
      run('chromium', 'wasm', {
        ppo: {
          steps: 1,
          batchSize: 16,
          responseLength: 24,
          Tq: 24,
          timeGenerate: 1,
          timeScore: 1,
          timeUpdate: 4,
          timeStep: 6,
          tokensPerSecond: 30,
          updateTokensPerSecond: 300,
          updateFlops: 2e10,
          updateGflopsPerSecond: 5.5,
          updateMfu: 0.55,
          peakGflops: 10,
        },
      }),
    ],
  };

  it('judges each target as the issue states it', () => {
    const h = headline(report);
    expect(h.kvSpeedup).toMatchObject({ value: 10, met: true });
    expect(h.kvSpeedupWebgpu).toMatchObject({ value: 3, met: false });
    expect(h.updateMfu).toMatchObject({ value: 0.55, met: true }); // the app's WASM: Chromium's
    expect(h.updateMfuNode).toMatchObject({ value: 0.4, met: false });
    expect(h.vsNanogpt).toMatchObject({ value: 2, met: true });
    expect(h.gpt2FourModelBytes).toMatchObject({ value: 3_982_086_160, met: true });
    expect(h.memoryGrowthBytes).toMatchObject({ value: 0, met: true });
  });

  it('reports an unmeasured key as null, not as a pass or a fail', () => {
    const h = headline({ ...report, bigMemory: [], runs: report.runs.slice(0, 1) });
    expect(h.gpt2FourModelBytes).toMatchObject({ value: null, met: null });
    expect(h.vsNanogpt).toMatchObject({ value: null, met: null });
    // Without the browser run, updateMfu is Node's.
    expect(h.updateMfu).toMatchObject({ value: 0.4, met: false });
  });

  it('puts the headline keys at the top level of the JSON and every run in the markdown', () => {
    const j = reportJson(report);
    for (const k of [
      'kvSpeedup',
      'kvSpeedupWebgpu',
      'updateMfu',
      'vsNanogpt',
      'gpt2FourModelBytes',
      'memoryGrowthBytes',
    ])
      expect(k in j).toBe(true);
    expect(JSON.parse(JSON.stringify(j)).kvSpeedup).toBe(10);
    const md = markdown(report);
    expect(md).toContain('node/wasm');
    expect(md).toContain('chromium/webgpu');
    expect(md).toContain('| `updateMfu` | 0.550 | ≥ 0.5 | yes |');
    expect(md).toContain('| `updateMfuNode` | 0.400 | ≥ 0.5 | NO |');
    expect(md).toContain('a note');
  });
});
