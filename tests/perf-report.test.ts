/**
 * The bench report (src/bench/perf/report.ts): the headline keys come from the right runs, targets are
 * judged as stated (≥ 5, ≥ 0.5, ≥ 1.5, ≤ 4e9, = 0, ≤ 20, ≤ 50, ≤ 1.5e9, ≤ 1.0e9), keys without a target are
 * reported and neither met nor missed, unmeasured keys are null and "not measured", and the markdown names every
 * run.
 */
import { describe, it, expect } from 'vitest';
import { headline, markdown, reportJson, type BenchReport, type BenchRun } from '../src/bench/perf/report';
import type { FourModelMemory, MemorySetup } from '../src/bench/perf/memory';
import type { GpuDispatchCounts } from '../src/bench/perf/dispatch';

const mem = (
  shape: string,
  bytes: number,
  growth: number,
  backend = 'wasm',
  setup?: MemorySetup,
  peak: number | null = null,
): FourModelMemory => ({
  shape,
  setup,
  backend,
  adam: 'tfjs',
  params: 1,
  batchSize: 2,
  responseLength: 8,
  bytesAfterStep1: bytes,
  expectedBytes: bytes,
  tensorsAfterStep1: 10,
  peakBytesStep1: peak,
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

const dispatch: GpuDispatchCounts = {
  adapter: 'Google / swiftshader',
  software: true,
  perLayer: {
    webgpuDispatchesPerLayerFwd: 31,
    webgpuDispatchesPerLayerFwdBwd: 48,
    fixedFwd: 9,
    fixedFwdBwd: 30,
  },
  webgpuDispatchesPerLayerFwd: 31,
  webgpuDispatchesPerLayerFwdBwd: 48,
  webgpuDispatchesPerStep: 2589,
  readbacksPerStep: 4,
  step: { batchSize: 2, miniBatches: 1, ppoEpochs: 1, responseLength: 4 },
  seconds: 30,
};

describe('bench report', () => {
  const report: BenchReport = {
    quick: true,
    machine: { cpu: 'test × 2' },
    seconds: 10,
    notes: ['a note'],
    // The LoRA runs come first: gpt2FourModelBytes must still be the four-model run's.
    bigMemory: [
      mem('gpt2', 612_000_000, 0, 'cpu', 'lora-ppo', 1_400_000_000),
      mem('gpt2', 1_200_000_000, 0, 'cpu', 'grpo-lora'),
      mem('gpt2', 3_982_086_160, 0, 'cpu'),
    ],
    gpuDispatch: dispatch,
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
        wasmThreads: { threads: 2, speedup: 1.62, updateSeconds1: 4.05, updateSecondsN: 2.5, isolated: true },
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
    expect(h.wasmThreadsSpeedup).toMatchObject({ value: 1.62, target: '≥ 1.5', met: true });
    expect(h.wasmThreadsSpeedup.from).toContain('4.05 s on 1 thread ÷ 2.50 s on 2');
    expect(h.wasmThreads).toMatchObject({ value: 2, target: 'reported', met: null });
    expect(h.webgpuDispatchesPerLayerFwd).toMatchObject({ value: 31, target: '≤ 20', met: false });
    expect(h.webgpuDispatchesPerLayerFwdBwd).toMatchObject({ value: 48, target: '≤ 50', met: true });
    expect(h.webgpuDispatchesPerStep).toMatchObject({ value: 2589, target: 'reported', met: null });
    expect(h.readbacksPerStep).toMatchObject({ value: 4, target: 'reported', met: null });
    expect(h.webgpuDispatchesPerStep.from).toContain('swiftshader');
    expect(h.gpt2LoraPpoHeldBytes).toMatchObject({ value: 612_000_000, target: '≤ 1.5e9', met: true });
    expect(h.gpt2LoraPpoHeldBytes.from).toContain('peak in the step 1.400e+9');
    expect(h.gpt2GrpoLoraBytes).toMatchObject({ value: 1_200_000_000, target: '≤ 1.0e9', met: false });
  });

  it('issue #20 memory keys: true peaks in the step, the growth from batch 16 to 64, the recompute slowdown', () => {
    const run = (
      shape: string,
      setup: MemorySetup,
      peak: number,
      updateSeconds: number,
      recompute: boolean,
    ) => ({
      ...mem(shape, 5e8, 0, 'wasm', setup, peak),
      updateSeconds,
      microBatchSize: 4,
      recompute,
      heapBytes: 1.2e9,
      peakLiveBytesStep1: peak * 0.6,
      estimatedPeakBytes: peak * 1.1,
    });
    const h = headline({
      ...report,
      bigMemory: [
        run('gpt2', 'lora-ppo', 0.95e9, 12, true),
        run('gpt2', 'grpo-lora', 0.91e9, 9, true),
        run('gpt2-medium', 'lora-ppo', 2.1e9, 30, true),
        run('gpt2', 'lora-ppo-b64', 1.045e9, 48, true),
        run('gpt2', 'lora-ppo-recompute-off', 1.6e9, 10, false),
      ],
    });
    expect(h.gpt2LoraPpoPeakBytes).toMatchObject({ value: 0.95e9, target: '≤ 1.0e9', met: true });
    expect(h.gpt2LoraPpoPeakBytes.from).toContain(
      'microBatchSize 4, recompute on; WASM heap high-water 1.200e+9',
    );
    expect(h.gpt2LoraPpoPeakBytes.from).toContain('the estimate 1.045e+9 is 10% of it off');
    expect(h.gpt2GrpoLoraPeakBytes).toMatchObject({ value: 0.91e9, target: '≤ 0.9e9', met: false });
    // The same moment as distinct buffers, and the heap, beside each peak key, with no target of their own.
    expect(h.gpt2GrpoLoraPeakLiveBytes).toMatchObject({ value: 0.91e9 * 0.6, target: 'reported' });
    expect(h.gpt2MediumLoraPpoPeakHeapBytes).toMatchObject({ value: 1.2e9, target: 'reported' });
    expect(h.gpt2MediumLoraPpoPeakBytes).toMatchObject({ value: 2.1e9, target: '≤ 2.2e9', met: true });
    expect(h.peakGrowthBatch.value).toBeCloseTo(1.1, 12);
    expect(h.peakGrowthBatch.met).toBe(true);
    expect(h.recomputeSlowdown.value).toBeCloseTo(1.2, 12);
    expect(h.recomputeSlowdown.met).toBe(true);
    // The held bytes keep their own name; the old key is gone rather than given a new meaning.
    expect(h.gpt2LoraPpoHeldBytes.value).toBe(5e8);
    expect('gpt2LoraPpoBytes' in h).toBe(false);
    // Without the runs the keys are null, neither met nor missed.
    const none = headline({ ...report, bigMemory: [] });
    for (const k of ['gpt2LoraPpoPeakBytes', 'peakGrowthBatch', 'recomputeSlowdown'])
      expect(none[k], k).toMatchObject({ value: null, met: null });
  });

  it('judges the boundaries as stated (≤ and ≥ include the target)', () => {
    const at = headline({
      ...report,
      bigMemory: [mem('gpt2', 1.5e9, 0, 'cpu', 'lora-ppo'), mem('gpt2', 1.0e9, 0, 'cpu', 'grpo-lora')],
      gpuDispatch: { ...dispatch, webgpuDispatchesPerLayerFwd: 20, webgpuDispatchesPerLayerFwdBwd: 50.5 },
      runs: report.runs.map((x) =>
        x.backend === 'wasm' && x.platform === 'chromium'
          ? {
              ...x,
              wasmThreads: {
                threads: 4,
                speedup: 1.49,
                updateSeconds1: 1,
                updateSecondsN: 1,
                isolated: true,
              },
            }
          : x,
      ),
    });
    expect(at.gpt2LoraPpoHeldBytes.met).toBe(true);
    expect(at.gpt2GrpoLoraBytes.met).toBe(true);
    expect(at.webgpuDispatchesPerLayerFwd.met).toBe(true);
    expect(at.webgpuDispatchesPerLayerFwdBwd.met).toBe(false);
    expect(at.wasmThreadsSpeedup.met).toBe(false);
    expect(at.wasmThreads.value).toBe(4);
  });

  it('reports an unmeasured key as null, not as a pass or a fail', () => {
    const h = headline({ ...report, bigMemory: [], gpuDispatch: null, runs: report.runs.slice(0, 1) });
    expect(h.gpt2FourModelBytes).toMatchObject({ value: null, met: null });
    expect(h.vsNanogpt).toMatchObject({ value: null, met: null });
    for (const k of [
      'wasmThreadsSpeedup',
      'wasmThreads',
      'webgpuDispatchesPerLayerFwd',
      'webgpuDispatchesPerLayerFwdBwd',
      'webgpuDispatchesPerStep',
      'readbacksPerStep',
      'gpt2LoraPpoHeldBytes',
      'gpt2GrpoLoraBytes',
    ])
      expect(h[k], k).toMatchObject({ value: null, met: null });
    // A report from before the new fields (no gpuDispatch key at all, no setup on the memory runs) still reads.
    const old = headline({ ...report, gpuDispatch: undefined, bigMemory: [mem('gpt2', 3e9, 0, 'cpu')] });
    expect(old.gpt2FourModelBytes).toMatchObject({ value: 3e9, met: true });
    expect(old.gpt2LoraPpoHeldBytes.value).toBeNull();
    expect(old.webgpuDispatchesPerStep.value).toBeNull();
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
      'wasmThreadsSpeedup',
      'wasmThreads',
      'webgpuDispatchesPerLayerFwd',
      'webgpuDispatchesPerLayerFwdBwd',
      'webgpuDispatchesPerStep',
      'readbacksPerStep',
      'gpt2LoraPpoHeldBytes',
      'gpt2GrpoLoraBytes',
    ])
      expect(k in j, k).toBe(true);
    const parsed = JSON.parse(JSON.stringify(j));
    expect(parsed.kvSpeedup).toBe(10);
    expect(parsed.webgpuDispatchesPerStep).toBe(2589);
    expect(parsed.gpt2GrpoLoraBytes).toBe(1_200_000_000);
    expect(parsed.targets.gpt2LoraPpoHeldBytes.target).toBe('≤ 1.5e9');
    const md = markdown(report);
    expect(md).toContain('node/wasm');
    expect(md).toContain('chromium/webgpu');
    expect(md).toContain('| `updateMfu` | 0.550 | ≥ 0.5 | yes |');
    expect(md).toContain('| `updateMfuNode` | 0.400 | ≥ 0.5 | NO |');
    expect(md).toContain('a note');
    expect(md).toContain('| `wasmThreadsSpeedup` | 1.620 | ≥ 1.5 | yes |');
    expect(md).toContain('| `wasmThreads` | 2 | reported | no target |');
    expect(md).toContain('| `webgpuDispatchesPerLayerFwd` | 31.000 | ≤ 20 | NO |');
    expect(md).toContain('| `webgpuDispatchesPerStep` | 2,589 | reported | no target |');
    expect(md).toContain('| `gpt2GrpoLoraBytes` | 1.200 GB (1,200,000,000) | ≤ 1.0e9 | NO |');
    expect(md).toContain('| node/cpu | gpt2 | lora-ppo |');
  });
});
