/**
 * The bench report: the issue's headline keys with their targets, and the markdown tables (`npm run bench`
 * prints them and writes bench-results.md). Pure functions over the section results.
 */
import type { SectionResults } from '../bench';
import type { FourModelMemory } from './memory';
import type { LmTrainBench } from './lm-train';
import type { GpuDispatchCounts } from './dispatch';

/**
 * The chromium/wasm run's WASM threads measurement (tfjs's threaded build against one thread, on the PPO update),
 * as the browser bench page reports it in the run's `wasmThreads` field.
 */
export interface WasmThreadsBench {
  threads: number;
  /** updateSeconds1 / updateSecondsN. */
  speedup: number;
  updateSeconds1: number;
  updateSecondsN: number;
  /** Whether the page was cross-origin isolated (SharedArrayBuffer: what the threaded build needs). */
  isolated: boolean;
}

/** One platform/backend run: the section results plus what the page or process says about itself. */
export type BenchRun = SectionResults & {
  label: string;
  plan?: unknown;
  adapter?: Record<string, unknown> | null;
  [k: string]: unknown;
};

export interface BenchReport {
  quick: boolean;
  machine: Record<string, string | number | boolean | null>;
  runs: BenchRun[];
  /** The GPT-2-sized memory runs (Node, CPU backend). */
  bigMemory: FourModelMemory[];
  /** WebGPU dispatch counts on Node WebGPU (perf/dispatch.ts); null or absent when not counted. */
  gpuDispatch?: GpuDispatchCounts | null;
  notes: string[];
  seconds: number;
}

export interface Target {
  value: number | null;
  target: string;
  met: boolean | null;
  /** Where the number comes from. */
  from: string;
}

/** Byte-valued headline keys (the markdown writes them in GB and in full). */
const BYTE_KEYS = [
  'gpt2FourModelBytes',
  'memoryGrowthBytes',
  'gpt2LoraPpoHeldBytes',
  'gpt2GrpoLoraBytes',
  'gpt2LoraPpoPeakBytes',
  'gpt2GrpoLoraPeakBytes',
  'gpt2MediumLoraPpoPeakBytes',
  'gpt2LoraPpoPeakLiveBytes',
  'gpt2GrpoLoraPeakLiveBytes',
  'gpt2MediumLoraPpoPeakLiveBytes',
  'gpt2LoraPpoPeakHeapBytes',
  'gpt2GrpoLoraPeakHeapBytes',
  'gpt2MediumLoraPpoPeakHeapBytes',
];
/** Count-valued headline keys (written as whole numbers). */
const COUNT_KEYS = ['wasmThreads', 'webgpuDispatchesPerStep', 'readbacksPerStep'];

const find = (r: BenchReport, platform: string, backend: string): BenchRun | undefined =>
  r.runs.find((x) => x.platform === platform && x.backend === backend);

const lmOf = (run: BenchRun | undefined, impl: string): LmTrainBench | undefined =>
  run?.lm.find((x) => x.impl === impl);

/**
 * What `updateMfu` is measured against (issue #24): the backend's own matmul rate in the same run, not the machine's
 * peak. `bench --vs-trl` gives absolute GFLOP/s per phase beside PyTorch's matmul on the same thread count.
 */
export const UPDATE_MFU_NOTE =
  "update MFU = the update's GFLOP/s ÷ the backend's own matmul peak measured in this run (tfjs's matmul, e.g. " +
  "XNNPACK on WASM), not the machine's: on one CPU thread PyTorch's matmul runs 2–5× faster than tfjs-wasm's. " +
  "`bench --vs-trl` reports absolute GFLOP/s per phase beside PyTorch's (docs/vs-trl.md).";

/** The target of a key that is reported without one. */
export const REPORTED = 'reported';

/** The headline numbers of the issue, each with its target and whether it is met (null = not measured). */
export function headline(r: BenchReport): Record<string, Target> {
  const node = r.runs.find((x) => x.platform === 'node');
  const webgpu = find(r, 'chromium', 'webgpu');
  const chromiumWasm = find(r, 'chromium', 'wasm');
  const mfuRun = chromiumWasm?.ppo ? chromiumWasm : node;
  const g = node?.generation.find((x) => x.batch === 8 && x.newTokens === 64) ?? node?.generation[0];
  const gw = webgpu?.generation[0];
  const ours = lmOf(webgpu, 'ours');
  const nano = lmOf(webgpu, 'nanogpt');
  const shapeOf = (shape: string, setup: string) =>
    r.bigMemory.find((m) => m.shape === shape && (m.setup ?? 'four-model') === setup);
  const gpt2Of = (setup: string) => shapeOf('gpt2', setup);
  const gpt2 = gpt2Of('four-model');
  const lora = gpt2Of('lora-ppo');
  const grpo = gpt2Of('grpo-lora');
  const medium = shapeOf('gpt2-medium', 'lora-ppo');
  const lora64 = gpt2Of('lora-ppo-b64');
  const loraOff = gpt2Of('lora-ppo-recompute-off');
  const microOf = (m: FourModelMemory | undefined): string =>
    m ? `, microBatchSize ${m.microBatchSize ?? '?'}, recompute ${m.recompute ? 'on' : 'off'}` : '';
  const heapOf = (m: FourModelMemory | undefined): string =>
    m?.heapBytes != null ? `; WASM heap high-water ${m.heapBytes.toExponential(3)}` : '';
  const ratio = (a: number | null | undefined, b: number | null | undefined) =>
    a != null && b != null && b > 0 ? a / b : null;
  const threads = chromiumWasm?.wasmThreads as WasmThreadsBench | null | undefined;
  const d = r.gpuDispatch ?? null;
  const dFrom = d ? `Node WebGPU (${d.adapter})` : 'Node WebGPU';
  const peakOf = (m: FourModelMemory | undefined): string =>
    m?.peakBytesStep1 != null ? `; peak in the step ${m.peakBytesStep1.toExponential(3)}` : '';
  const tiny = node?.memory.find((m) => m.shape === 'tiny');
  const estOf = (m: FourModelMemory | undefined): string =>
    m?.estimatedPeakBytes != null && m.peakBytesStep1 != null
      ? `; the estimate ${m.estimatedPeakBytes.toExponential(3)} is ${(100 * (m.estimatedPeakBytes / m.peakBytesStep1 - 1)).toFixed(0)}% of it off`
      : '';
  // Beside each peak key: the same moment counted as distinct buffers (tfjs's count adds a buffer once per tensor
  // that views it: autodiff's saved clones, reshapes), and the WASM heap's high-water mark after the step (the
  // buffers plus what the backend keeps of its own: XNNPACK's packed copies of matmul weights, free gaps).
  const liveAndHeap = (prefix: string, m: FourModelMemory | undefined): Record<string, Target> => ({
    [`${prefix}PeakLiveBytes`]: t(
      m?.peakLiveBytesStep1,
      REPORTED,
      () => true,
      `as ${prefix}PeakBytes, counting each tensor buffer once (the memory the tensors really take)`,
    ),
    [`${prefix}PeakHeapBytes`]: t(
      m?.heapBytes,
      REPORTED,
      () => true,
      `the WASM heap after the step of ${prefix}PeakBytes (its high-water mark: buffers, XNNPACK's packed weights, free gaps)`,
    ),
  });
  const t = (
    value: number | null | undefined,
    target: string,
    ok: (v: number) => boolean,
    from: string,
  ): Target => ({
    value: value ?? null,
    target,
    // A key reported without a target is neither met nor missed.
    met: value == null || !Number.isFinite(value) || target === REPORTED ? null : ok(value),
    from,
  });
  return {
    kvSpeedup: t(
      g?.kvSpeedup,
      '≥ 5',
      (v) => v >= 5,
      g ? `${node!.label}, batch ${g.batch} × ${g.newTokens} new tokens` : 'node',
    ),
    kvSpeedupWebgpu: t(
      gw?.kvSpeedup,
      '≥ 5',
      (v) => v >= 5,
      gw ? `chromium/webgpu, batch ${gw.batch} × ${gw.newTokens} new tokens` : 'chromium/webgpu',
    ),
    // The app's WASM is Chromium's (the worker's backend when there is no hardware WebGPU); Node's WASM runs the
    // same code on Node 20's older V8 and is reported beside it.
    updateMfu: t(
      mfuRun?.ppo?.updateMfu,
      '≥ 0.5',
      (v) => v >= 0.5,
      `${mfuRun?.label ?? 'chromium/wasm'}, PPO update FLOP/s ÷ the same page's matmul peak`,
    ),
    updateMfuNode: t(
      node?.ppo?.updateMfu,
      '≥ 0.5',
      (v) => v >= 0.5,
      `${node?.label ?? 'node'}, PPO update FLOP/s ÷ the same process's matmul peak`,
    ),
    vsNanogpt: t(
      ours && nano ? ours.tokensPerSecond / nano.tokensPerSecond : null,
      '≥ 1.5',
      (v) => v >= 1.5,
      `chromium/webgpu, LM training tokens/s, ours ÷ nanogpt${ours ? ` (L${ours.shape.n_layer} C${ours.shape.n_embd} T${ours.shape.T} B${ours.shape.B})` : ''}`,
    ),
    gpt2FourModelBytes: t(
      gpt2?.bytesAfterStep1,
      '≤ 4e9',
      (v) => v <= 4e9,
      `gpt2-124M shape, node/${gpt2?.backend ?? 'cpu'}, after one PPO step`,
    ),
    memoryGrowthBytes: t(
      tiny?.growthBytes,
      '= 0',
      (v) => v === 0,
      `tiny, node/${tiny?.backend ?? 'wasm'}, step ${tiny?.steps ?? '?'} − step 1`,
    ),
    wasmThreadsSpeedup: t(
      threads?.speedup,
      '≥ 1.5',
      (v) => v >= 1.5,
      threads
        ? `chromium/wasm, PPO update ${threads.updateSeconds1.toFixed(2)} s on 1 thread ÷ ${threads.updateSecondsN.toFixed(2)} s on ${threads.threads}${threads.isolated ? '' : ' (page not cross-origin isolated)'}`
        : 'chromium/wasm, PPO update on 1 thread ÷ on N threads',
    ),
    wasmThreads: t(threads?.threads, REPORTED, () => true, 'chromium/wasm, threads of the threaded run'),
    webgpuDispatchesPerLayerFwd: t(
      d?.webgpuDispatchesPerLayerFwd,
      '≤ 20',
      (v) => v <= 20,
      `${dFrom}, GPT-2 forward, per layer ((n_layer 8 − n_layer 2) / 6)`,
    ),
    webgpuDispatchesPerLayerFwdBwd: t(
      d?.webgpuDispatchesPerLayerFwdBwd,
      '≤ 50',
      (v) => v <= 50,
      `${dFrom}, GPT-2 forward + backward, per layer`,
    ),
    webgpuDispatchesPerStep: t(
      d?.webgpuDispatchesPerStep,
      REPORTED,
      () => true,
      `${dFrom}, one tiny PPO step${d ? ` (batch ${d.step.batchSize}, response ${d.step.responseLength})` : ''}`,
    ),
    readbacksPerStep: t(
      d?.readbacksPerStep,
      REPORTED,
      () => true,
      `${dFrom}, one tiny PPO step, mapAsync calls`,
    ),
    gpt2LoraPpoHeldBytes: t(
      lora?.bytesAfterStep1,
      '≤ 1.5e9',
      (v) => v <= 1.5e9,
      `gpt2-124M shape, PPO LoRA r 8, value model shared, reward function, node/${lora?.backend ?? 'cpu'}, batch ${lora?.batchSize ?? '?'} × ${lora?.responseLength ?? '?'}, held after one step${peakOf(lora)}`,
    ),
    gpt2LoraPpoPeakBytes: t(
      lora?.peakBytesStep1,
      '≤ 1.0e9',
      (v) => v <= 1.0e9,
      `the largest tensor bytes live during one step (generation, scoring, update), gpt2-124M shape, PPO LoRA r 8, value shared, node/${lora?.backend ?? 'cpu'}, batch ${lora?.batchSize ?? '?'} × ${lora?.responseLength ?? '?'}${microOf(lora)}${heapOf(lora)}${estOf(lora)}`,
    ),
    gpt2GrpoLoraPeakBytes: t(
      grpo?.peakBytesStep1,
      '≤ 0.9e9',
      (v) => v <= 0.9e9,
      `as gpt2LoraPpoPeakBytes, GRPO (groups of 4, no value model)${microOf(grpo)}${heapOf(grpo)}${estOf(grpo)}`,
    ),
    gpt2MediumLoraPpoPeakBytes: t(
      medium?.peakBytesStep1,
      '≤ 2.2e9',
      (v) => v <= 2.2e9,
      `as gpt2LoraPpoPeakBytes at the gpt2-medium shape (24 layers, width 1024, 16 heads)${microOf(medium)}${heapOf(medium)}${estOf(medium)}`,
    ),
    ...liveAndHeap('gpt2LoraPpo', lora),
    ...liveAndHeap('gpt2GrpoLora', grpo),
    ...liveAndHeap('gpt2MediumLoraPpo', medium),
    peakGrowthBatch: t(
      ratio(lora64?.peakBytesStep1, lora?.peakBytesStep1),
      '≤ 1.2',
      (v) => v <= 1.2,
      `peak at batchSize 64 ÷ peak at batchSize 16, gpt2-124M LoRA PPO, the same micro-batch${microOf(lora64)}`,
    ),
    recomputeSlowdown: t(
      // Only a run with recompute on against one with it off (the plan says which ran).
      lora?.recompute === true && loraOff?.recompute === false
        ? ratio(lora.updateSeconds, loraOff.updateSeconds)
        : null,
      '≤ 1.4',
      (v) => v <= 1.4,
      `update seconds with recompute "blocks" ÷ with "off", gpt2-124M LoRA PPO batch 16 × 24, micro-batch 4 (one run: ${lora?.updateSeconds?.toFixed(1) ?? '?'} vs ${loraOff?.updateSeconds?.toFixed(1) ?? '?'} s)`,
    ),
    gpt2GrpoLoraBytes: t(
      grpo?.bytesAfterStep1,
      '≤ 1.0e9',
      (v) => v <= 1.0e9,
      `gpt2-124M shape, GRPO LoRA r 8, reward function, node/${grpo?.backend ?? 'cpu'}, batch ${grpo?.batchSize ?? '?'} (groups of 4) × ${grpo?.responseLength ?? '?'}, after one step${peakOf(grpo)}`,
    ),
  };
}

/** The JSON object of `bench --json`: the headline keys at the top level, then everything measured. */
export function reportJson(r: BenchReport): Record<string, unknown> {
  const h = headline(r);
  const flat: Record<string, number | null> = {};
  for (const [k, v] of Object.entries(h)) flat[k] = v.value;
  const webgpu = find(r, 'chromium', 'webgpu');
  const tfjsAdam = lmOf(webgpu, 'ours, tf.train.adam');
  const nano = lmOf(webgpu, 'nanogpt');
  return {
    ...flat,
    vsNanogptTfjsAdam: tfjsAdam && nano ? tfjsAdam.tokensPerSecond / nano.tokensPerSecond : null,
    targets: h,
    quick: r.quick,
    seconds: r.seconds,
    machine: r.machine,
    runs: r.runs,
    bigMemory: r.bigMemory,
    notes: r.notes,
  };
}

// ---- markdown -----------------------------------------------------------------------------------------

const f = (x: number | null | undefined, d = 2): string =>
  x == null || !Number.isFinite(x) ? '—' : x.toFixed(d);
const n0 = (x: number | null | undefined): string =>
  x == null || !Number.isFinite(x) ? '—' : Math.round(x).toLocaleString('en-US');
const bytes = (x: number | null | undefined): string => {
  if (x == null || !Number.isFinite(x)) return '—';
  const a = Math.abs(x);
  if (a >= 1e9) return `${(x / 1e9).toFixed(3)} GB`;
  if (a >= 1e6) return `${(x / 1e6).toFixed(2)} MB`;
  if (a >= 1e3) return `${(x / 1e3).toFixed(1)} kB`;
  return `${x} B`;
};

function table(head: string[], rows: string[][]): string {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

export function markdown(r: BenchReport): string {
  const out: string[] = [];
  const runs = r.runs;
  out.push(`## Benchmarks${r.quick ? ' (--quick)' : ''}`, '');
  out.push(
    Object.entries(r.machine)
      .map(([k, v]) => `- ${k}: ${v}`)
      .join('\n'),
    '',
  );

  const h = headline(r);
  out.push('### Targets', '');
  out.push(
    table(
      ['key', 'value', 'target', 'met', 'measured on'],
      Object.entries(h).map(([k, t]) => [
        `\`${k}\``,
        BYTE_KEYS.includes(k)
          ? t.value == null
            ? '—'
            : `${bytes(t.value)} (${n0(t.value)})`
          : COUNT_KEYS.includes(k)
            ? n0(t.value)
            : f(t.value, 3),
        t.target,
        t.value == null ? 'not measured' : t.target === REPORTED ? 'no target' : t.met ? 'yes' : 'NO',
        t.from,
      ]),
    ),
    '',
  );

  out.push('### Matmul peak (GFLOP/s, n×n · n×n, warmed up, awaited)', '');
  const sizes = [...new Set(runs.flatMap((x) => x.matmul.map((m) => m.n)))];
  out.push(
    table(
      ['n', ...runs.map((x) => x.label)],
      sizes.map((n) => [`${n}`, ...runs.map((x) => f(x.matmul.find((m) => m.n === n)?.gflops))]),
    ),
    '',
  );

  out.push('### Generation (tiny model, temperature 1, prompt 8 tokens): tokens/s', '');
  out.push(
    table(
      ['run', 'batch', 'new tokens', 'KV cache', 'recompute', 'speed-up'],
      runs.flatMap((x) =>
        x.generation.map((g) => [
          x.label,
          `${g.batch}`,
          `${g.newTokens}${g.randomWeights ? ' †' : ''}`,
          f(g.cacheTokensPerSecond, 1),
          f(g.recomputeTokensPerSecond, 1),
          `${f(g.kvSpeedup)}×`,
        ]),
      ),
    ),
    '',
  );
  if (runs.some((x) => x.generation.some((g) => g.randomWeights))) {
    out.push(
      "† prompt + new tokens exceed the shipped model's 128 positions: the same shape with a longer position table and random weights.",
      '',
    );
  }

  out.push("### PPO step (tiny model, sentiment task; phase times from the trainer's metrics)", '');
  const ppoRuns = runs.filter((x) => x.ppo);
  out.push(
    table(
      ['', ...ppoRuns.map((x) => x.label)],
      [
        [
          'config',
          ...ppoRuns.map(
            (x) =>
              `B ${x.ppo!.batchSize}, R ${x.ppo!.responseLength}, Tq ${x.ppo!.Tq}${
                x.ppoConfig && Object.keys(x.ppoConfig).length
                  ? ` (${Object.entries(x.ppoConfig)
                      .map(([k, v]) => `${k} ${v}`)
                      .join(', ')})`
                  : ' (defaults)'
              }`,
          ),
        ],
        ['generate s', ...ppoRuns.map((x) => f(x.ppo!.timeGenerate))],
        ['score s', ...ppoRuns.map((x) => f(x.ppo!.timeScore))],
        ['update s', ...ppoRuns.map((x) => f(x.ppo!.timeUpdate))],
        ['step s', ...ppoRuns.map((x) => f(x.ppo!.timeStep))],
        ['response tokens/s (whole step)', ...ppoRuns.map((x) => f(x.ppo!.tokensPerSecond, 1))],
        [
          'update tokens/s (query+response, all epochs)',
          ...ppoRuns.map((x) => f(x.ppo!.updateTokensPerSecond, 1)),
        ],
        ['update model GFLOP', ...ppoRuns.map((x) => f(x.ppo!.updateFlops / 1e9, 2))],
        ['update GFLOP/s', ...ppoRuns.map((x) => f(x.ppo!.updateGflopsPerSecond, 3))],
        ['matmul peak GFLOP/s', ...ppoRuns.map((x) => f(x.ppo!.peakGflops, 2))],
        ['**update MFU**', ...ppoRuns.map((x) => f(x.ppo!.updateMfu, 3))],
      ],
    ),
    '',
    UPDATE_MFU_NOTE,
    '',
  );

  out.push('### Supervised LM training (same layers, width, heads, context, batch): tokens/s', '');
  const lmRows = runs.flatMap((x) =>
    x.lm.map((l) => [
      x.label,
      l.impl,
      `L${l.shape.n_layer} C${l.shape.n_embd} H${l.shape.n_head} T${l.shape.T} B${l.shape.B}`,
      n0(l.params),
      f(l.tokensPerSecond, 1),
      f(l.gflopsPerSecond, 3),
      `${f(l.firstLoss, 3)} → ${f(l.lastLoss, 3)}`,
    ]),
  );
  out.push(
    table(
      ['run', 'implementation', 'shape', 'params', 'tokens/s', 'model GFLOP/s', 'loss (first → last)'],
      lmRows,
    ),
    '',
  );
  for (const x of runs)
    if (x.errors.nanogpt) out.push(`- ${x.label}: nanogpt did not run: ${x.errors.nanogpt}`);
  out.push('');

  const checks = runs.filter((x) => x.fusedAdamCheck);
  if (checks.length) {
    out.push("### Fused Adam (fused-adam.ts) vs tfjs Adam, 6 variables of the tiny model's shapes", '');
    out.push(
      table(
        ['run', 'max |Δw| / max |w| after 3 steps', 'tfjs Adam ms/step', 'fused ms/step', 'speed-up'],
        checks.map((x) => [
          x.label,
          x.fusedAdamCheck!.maxRelDiff.toExponential(2),
          f(x.fusedAdamCheck!.plainMs, 1),
          f(x.fusedAdamCheck!.fusedMs, 1),
          `${f(x.fusedAdamCheck!.plainMs / x.fusedAdamCheck!.fusedMs)}×`,
        ]),
      ),
      '',
    );
  }

  out.push(
    '### Tensor memory of a PPO step, random weights (four-model: policy, ref, value, reward model + 2 Adam; LoRA: one frozen base + adapters)',
    '',
  );
  const mem = [
    ...runs.flatMap((x) => x.memory.map((m) => ({ run: x.label, m }))),
    ...r.bigMemory.map((m) => ({ run: `node/${m.backend}`, m })),
  ];
  out.push(
    table(
      [
        'run',
        'shape',
        'setup',
        'Adam',
        'params/model',
        'B, R',
        'after step 1',
        'weights + moments',
        'peak in step 1 (tfjs count)',
        'peak, live buffers',
        'estimate',
        'WASM heap',
        'GPU allocated after step 1',
        'steps',
        'growth to last step',
        'step-1 s',
      ],
      mem.map(({ run, m }) => [
        run,
        m.shape,
        m.setup ?? 'four-model',
        m.adam,
        n0(m.params),
        `${m.batchSize}, ${m.responseLength}`,
        bytes(m.bytesAfterStep1),
        bytes(m.expectedBytes),
        bytes(m.peakBytesStep1),
        bytes(m.peakLiveBytesStep1 ?? null),
        bytes(m.estimatedPeakBytes ?? null),
        bytes(m.heapBytes ?? null),
        m.gpuAfterStep1 ? bytes(m.gpuAfterStep1.numBytesAllocatedInGPU) : '—',
        `${m.steps}`,
        `${bytes(m.growthBytes)}${m.gpuGrowthBytes != null ? ` (GPU pool ${bytes(m.gpuGrowthBytes)})` : ''}`,
        f(m.stepSeconds, 1),
      ]),
    ),
    '',
  );

  const skipped = runs
    .filter((x) => x.skipped?.length)
    .map(
      (x) =>
        `- ${x.label}: skipped ${x.skipped.join(', ')} (${r.quick ? '--quick' : 'plan'}; see planFor in src/bench/bench.ts)`,
    );
  const errs = runs.flatMap((x) =>
    Object.entries(x.errors)
      .filter(([k]) => k !== 'nanogpt')
      .map(([k, v]) => `- ${x.label} ${k}: ${v}`),
  );
  const leaks = [
    ...runs
      .filter((x) => x.tensorLeak !== 0)
      .map(
        (x) => `- ${x.label}: ${x.tensorLeak} tensors of ours alive after the sections that were not before`,
      ),
    ...runs
      .filter((x) => x.nanogptTensorLeak)
      .map((x) => `- ${x.label}: nanogpt's run left ${x.nanogptTensorLeak} tensors alive`),
  ];
  if (skipped.length || errs.length || leaks.length || r.notes.length)
    out.push('### Notes', '', ...r.notes.map((x) => `- ${x}`), ...skipped, ...errs, ...leaks, '');
  out.push(`Total time: ${f(r.seconds, 0)} s.`);
  return out.join('\n') + '\n';
}
