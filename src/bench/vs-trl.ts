/**
 * `cli bench --vs-trl` (issue #24, docs/vs-trl.md): the same GRPO LoRA step through our engine (WASM, 1 thread) and
 * through TRL's GRPOTrainer + PEFT on PyTorch CPU (1 thread, scripts/trl_grpo_step.py), in one run, with the
 * seconds per step, the resident peak and the GFLOP/s of each phase on both sides. The pure parts live here (the
 * setup, the spec the Python side reads, the parse of its answer, the FLOP counts, the summary and the table); the
 * CLI (src/cli/bench.ts) finds the Python (resolvePython, probePython) and runs the two child processes.
 */
import { bucket } from '../core/ppo/trainer';
import { generateFlops, grpoScoreFlops, grpoUpdateFlops, type ModelShape } from './perf/flops';

/** GPT-2 124M: n_layer, n_embd, n_head, n_positions, vocab_size (scripts/make-random-model.ts's arguments). */
export const VS_TRL_GPT2_SHAPE = [12, 768, 12, 1024, 50257] as const;

/**
 * `--vs-trl-shape L,C,H,P,V`: the model shape, five positive integers. The vocabulary must be GPT-2's (≥ 50257):
 * our side then reads the prompts with GPT-2's BPE and the TRL side byte by byte, cut to the same token counts.
 */
export function parseShape(s: string): {
  n_layer: number;
  n_embd: number;
  n_head: number;
  n_positions: number;
  vocab_size: number;
} {
  const xs = s.split(',').map((x) => Number(x.trim()));
  if (xs.length !== 5 || xs.some((x) => !Number.isInteger(x) || x < 1))
    throw new Error(
      `--vs-trl-shape must be five positive integers n_layer,n_embd,n_head,n_positions,vocab_size (GPT-2 124M: ${VS_TRL_GPT2_SHAPE.join(',')}), got "${s}".`,
    );
  const [n_layer, n_embd, n_head, n_positions, vocab_size] = xs;
  if (n_embd % n_head !== 0)
    throw new Error(`--vs-trl-shape: n_embd ${n_embd} must be a multiple of n_head ${n_head}.`);
  if (vocab_size < 50257)
    throw new Error(
      `--vs-trl-shape: vocab_size must be at least GPT-2's 50257 (our side reads the prompts with GPT-2's BPE), got ${vocab_size}.`,
    );
  if (n_positions < 16 + VS_TRL_SETUP.responseLength)
    throw new Error(
      `--vs-trl-shape: n_positions must be at least ${16 + VS_TRL_SETUP.responseLength} (a 16-token query bucket + ${VS_TRL_SETUP.responseLength} new tokens), got ${n_positions}.`,
    );
  return { n_layer, n_embd, n_head, n_positions, vocab_size };
}

/** GRPO with LoRA, as issue #24 measured it: batch 8 completions in groups of 4, 24 new tokens, r 8 on four layers. */
export const VS_TRL_SETUP = {
  batchSize: 8,
  groupSize: 4,
  responseLength: 24,
  lora: 8,
  loraAlpha: 16,
  loraTargets: ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'],
  /** β of both sides: a per-token k3 KL term against the base (adapters off), so both compute the reference. */
  klCoef: 0.05,
  learningRate: 1e-5,
  threads: 1,
  seed: 1,
} as const;

/**
 * Prompt texts: 12 or 13 GPT-2 BPE tokens each (tests/bench-vs-trl.test.ts checks). The TRL side reads prompts
 * byte by byte, so it gets each text cut to as many bytes as ours has tokens (byteMatchedPrompts).
 */
export const VS_TRL_PROMPTS = [
  'The film opened slowly, but by the second act it had won',
  'Write a short note to a friend about the weather in the',
  'My honest review of the new phone after using it for two',
  'Here is a story about a small robot who wanted to learn how',
];

/** Each text cut to `counts[i]` bytes (ASCII, so bytes = characters): the TRL side's byte-level prompts. */
export function byteMatchedPrompts(texts: string[], counts: number[]): string[] {
  if (texts.length !== counts.length)
    throw new Error(`byteMatchedPrompts: ${texts.length} texts but ${counts.length} token counts.`);
  return texts.map((t, i) => {
    const n = counts[i];
    // eslint-disable-next-line no-control-regex
    if (!/^[\x00-\x7f]*$/.test(t))
      throw new Error(`byteMatchedPrompts: prompt ${i} is not ASCII; one byte must be one character.`);
    if (!Number.isInteger(n) || n < 1 || n > t.length)
      throw new Error(
        `byteMatchedPrompts: prompt ${i} has ${t.length} characters, cannot cut it to ${n} bytes.`,
      );
    return t.slice(0, n);
  });
}

/** What scripts/trl_grpo_step.py reads (its SPEC.json). */
export interface TrlSpec {
  model: string;
  prompts: string[];
  batchSize: number;
  groupSize: number;
  responseLength: number;
  lora: number;
  loraAlpha: number;
  loraTargets: string[];
  learningRate: number;
  beta: number;
  temperature: number;
  threads: number;
  warmup: number;
  steps: number;
  seed: number;
  /** [m, k, n] products torch times after the run (GFLOP/s on the same threads). */
  matmulSizes: [number, number, number][];
  outputDir: string;
}

/**
 * Matmul shapes timed on both sides: square 512 and 1024 (tfjs-wasm's and torch's large-shape peak), and GPT-2's
 * c_attn at decoding's 8 rows ([8, C] @ [C, 3C]), where both are nearer memory-bound.
 */
export function matmulShapes(c: Pick<ModelShape, 'n_embd'>): [number, number, number][] {
  return [
    [512, 512, 512],
    [1024, 1024, 1024],
    [8, c.n_embd, 3 * c.n_embd],
  ];
}

export function trlSpec(o: {
  model: string;
  prompts: string[];
  warmup: number;
  steps: number;
  matmulSizes: [number, number, number][];
  outputDir: string;
}): TrlSpec {
  const s = VS_TRL_SETUP;
  return {
    model: o.model,
    prompts: o.prompts,
    batchSize: s.batchSize,
    groupSize: s.groupSize,
    responseLength: s.responseLength,
    lora: s.lora,
    loraAlpha: s.loraAlpha,
    loraTargets: [...s.loraTargets],
    learningRate: s.learningRate,
    beta: s.klCoef,
    temperature: 1,
    threads: s.threads,
    warmup: o.warmup,
    steps: o.steps,
    seed: s.seed,
    matmulSizes: o.matmulSizes,
    outputDir: o.outputDir,
  };
}

/**
 * Our side's training config: the same step as the TRL spec, through the CLI's config path (validateConfig). By
 * default the same arithmetic as TRL's: the whole batch in one micro-batch and no recompute (TRL: one
 * per_device_train_batch_size of 8, gradient_checkpointing off). `microBatchSize` 0 with `recompute` 'auto' is
 * what `cli train` does by default (GPT-2: micro-batches that fit a 256 MB activation budget, model/size.ts).
 */
export function ourConfig(
  model: string,
  prompts: string[],
  steps: number,
  plan: { microBatchSize: number; recompute: 'off' | 'auto' } = {
    microBatchSize: VS_TRL_SETUP.batchSize,
    recompute: 'off',
  },
): Record<string, unknown> {
  const s = VS_TRL_SETUP;
  return {
    model,
    task: 'length',
    prompts,
    algorithm: 'grpo',
    batchSize: s.batchSize,
    groupSize: s.groupSize,
    responseLength: s.responseLength,
    // Exactly responseLength new tokens: no stop token (TRL: min_new_tokens = max_completion_length).
    stopToken: null,
    lora: s.lora,
    loraAlpha: s.loraAlpha,
    loraTargets: [...s.loraTargets],
    klCoef: s.klCoef,
    learningRate: s.learningRate,
    // One optimizer step on the whole batch, as TRL's num_iterations 1, gradient_accumulation_steps 1.
    miniBatches: 1,
    ppoEpochs: 1,
    microBatchSize: plan.microBatchSize,
    recompute: plan.recompute,
    temperature: 1,
    seed: s.seed,
    steps,
  };
}

export interface PhaseSeconds {
  /** Wall seconds of the step. */
  step: number;
  /** CPU seconds of the side's process over the step (user + system), when measured. */
  cpu?: number;
  /** CPU seconds of each phase, when measured. */
  cpuPhases?: { generate: number; score: number; update: number };
  generate: number;
  score: number;
  update: number;
}

export interface TrlMatmul {
  m: number;
  k: number;
  n: number;
  /** Per wall second. */
  gflops: number;
  /** Per CPU second of the process (null when not measured). */
  gflopsCpu: number | null;
}

/** scripts/trl_grpo_step.py's answer, checked. */
export interface TrlResult {
  threads: number;
  steps: (PhaseSeconds & { completionLengths: number[] })[];
  promptLengths: number[];
  maxRssBytes: number;
  matmul: TrlMatmul[];
  versions: Record<string, string>;
}

const isNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

/** Parse the last stdout line of scripts/trl_grpo_step.py; a clear error naming what is missing or wrong. */
export function parseTrlResult(stdout: string, expect: { steps: number; responseLength: number }): TrlResult {
  const last = stdout.trim().split('\n').pop() ?? '';
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(last);
  } catch {
    throw new Error(
      `scripts/trl_grpo_step.py: its last stdout line is not JSON (${JSON.stringify(last.slice(0, 120))}).`,
    );
  }
  const where = 'scripts/trl_grpo_step.py';
  if (o === null || typeof o !== 'object' || o.ok !== true)
    throw new Error(`${where}: the result has no "ok": true.`);
  const steps = o.steps;
  if (!Array.isArray(steps) || steps.length !== expect.steps)
    throw new Error(
      `${where}: expected ${expect.steps} timed steps, got ${Array.isArray(steps) ? steps.length : 'none'}.`,
    );
  steps.forEach((s, i) => {
    for (const k of ['step', 'generate', 'score', 'update'])
      if (!isNum(s?.[k]) || s[k] < 0)
        throw new Error(
          `${where}: step ${i} has no non-negative "${k}" seconds (${JSON.stringify(s?.[k])}).`,
        );
    if (s.cpu !== undefined && (!isNum(s.cpu) || s.cpu < 0))
      throw new Error(
        `${where}: step ${i}'s "cpu" seconds must be a non-negative number (${JSON.stringify(s.cpu)}).`,
      );
    if (
      s.cpuPhases !== undefined &&
      !['generate', 'score', 'update'].every((k) => isNum(s.cpuPhases?.[k]) && s.cpuPhases[k] >= 0)
    )
      throw new Error(
        `${where}: step ${i}'s "cpuPhases" must give non-negative generate, score and update seconds.`,
      );
    const lens = s.completionLengths;
    if (!Array.isArray(lens) || lens.some((n: unknown) => n !== expect.responseLength))
      throw new Error(
        `${where}: step ${i}'s completions are not all ${expect.responseLength} tokens long (${JSON.stringify(lens)}); ` +
          'the two sides would not do the same work.',
      );
  });
  if (!isNum(o.maxRssBytes) || o.maxRssBytes <= 0) throw new Error(`${where}: no positive "maxRssBytes".`);
  if (!isNum(o.threads)) throw new Error(`${where}: no "threads".`);
  const pl = o.promptLengths;
  if (!Array.isArray(pl) || !pl.every(isNum)) throw new Error(`${where}: no "promptLengths".`);
  const mm = o.matmul;
  if (!Array.isArray(mm) || mm.some((x) => !isNum(x?.m) || !isNum(x?.k) || !isNum(x?.n) || !isNum(x?.gflops)))
    throw new Error(`${where}: "matmul" must be a list of {m, k, n, gflops}.`);
  return {
    threads: o.threads,
    steps: steps as TrlResult['steps'],
    promptLengths: pl as number[],
    maxRssBytes: o.maxRssBytes,
    matmul: (mm as TrlMatmul[]).map(({ m, k, n, gflops, gflopsCpu }) => ({
      m,
      k,
      n,
      gflops,
      gflopsCpu: isNum(gflopsCpu) ? gflopsCpu : null,
    })),
    versions: (o.versions ?? {}) as Record<string, string>,
  };
}

/** Our side's child result (cli bench --vs-trl-child). */
export interface OursResult {
  steps: PhaseSeconds[];
  /** Query length the score and update run at (bucket of the longest prompt, multiple of 8). */
  Tq: number;
  promptLengths: number[];
  maxRssBytes: number;
  /** tfjs-wasm's matmul GFLOP/s on the same shapes as torch's. */
  matmul: TrlMatmul[];
  wasmThreads: number;
  microBatchSize: number;
  recompute: boolean;
  /**
   * The trainer took the old log-probs from the update's own forward (PpoTrainer.oldLogprobsFromUpdate, on by
   * default for this GRPO step, one epoch of one minibatch): scoring ran the reference alone and the update one
   * more LM head over the response rows. Absent (an older child): counted as two scoring forwards.
   */
  oldLogprobsFromUpdate?: boolean;
}

export interface SideFigures {
  secondsPerStep: number;
  /** Mean CPU seconds of the process per step (null when not measured). */
  cpuSecondsPerStep: number | null;
  /** Mean CPU seconds per phase, and FLOPs per CPU second (null when not measured). */
  cpuPhases: { generate: number; score: number; update: number } | null;
  gflopsPerCpuSecond: { generate: number; score: number; update: number; step: number } | null;
  phases: { generate: number; score: number; update: number };
  /** Model FLOPs of each phase as that side computes it (perf/flops.ts), and GFLOP/s = FLOPs ÷ mean seconds. */
  flops: { generate: number; score: number; update: number; step: number };
  gflopsPerSecond: { generate: number; score: number; update: number; step: number };
  peakResidentBytes: number;
  matmul: TrlMatmul[];
}

export interface VsTrl {
  /** Our s/step ÷ TRL's (1 thread each). */
  vsTrlCpu: number;
  /** Our CPU seconds per step ÷ TRL's (null when either was not measured): steadier than wall time under load. */
  vsTrlCpuTime: number | null;
  /** Our resident peak ÷ TRL's. */
  peakRatio: number;
  ours: SideFigures;
  trl: SideFigures;
  setup: {
    model: ModelShape & { n_head: number; n_positions: number };
    batchSize: number;
    groupSize: number;
    responseLength: number;
    lora: number;
    loraTargets: string[];
    promptLengths: number[];
    ourTq: number;
    warmup: number;
    steps: number;
    threads: number;
    ourMicroBatchSize: number;
    ourRecompute: boolean;
    wasmThreads: number;
  };
  versions: Record<string, string>;
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

function side(
  steps: PhaseSeconds[],
  flops: { generate: number; score: number; update: number },
  peak: number,
  matmul: TrlMatmul[],
): SideFigures {
  const p = {
    generate: mean(steps.map((s) => s.generate)),
    score: mean(steps.map((s) => s.score)),
    update: mean(steps.map((s) => s.update)),
  };
  const sps = mean(steps.map((s) => s.step));
  const cpus = steps.map((s) => s.cpu);
  const cpu = cpus.every((x): x is number => typeof x === 'number') ? mean(cpus) : null;
  const cp = steps.every((s) => s.cpuPhases)
    ? {
        generate: mean(steps.map((s) => s.cpuPhases!.generate)),
        score: mean(steps.map((s) => s.cpuPhases!.score)),
        update: mean(steps.map((s) => s.cpuPhases!.update)),
      }
    : null;
  const total = flops.generate + flops.score + flops.update;
  return {
    secondsPerStep: sps,
    cpuSecondsPerStep: cpu,
    cpuPhases: cp,
    gflopsPerCpuSecond:
      cp && cpu !== null
        ? {
            generate: flops.generate / cp.generate / 1e9,
            score: flops.score / cp.score / 1e9,
            update: flops.update / cp.update / 1e9,
            step: total / cpu / 1e9,
          }
        : null,
    phases: p,
    flops: { ...flops, step: total },
    gflopsPerSecond: {
      generate: flops.generate / p.generate / 1e9,
      score: flops.score / p.score / 1e9,
      update: flops.update / p.update / 1e9,
      step: total / sps / 1e9,
    },
    peakResidentBytes: peak,
    matmul,
  };
}

/**
 * Both sides' figures and the ratios. FLOPs per phase are what each side computes (docs/vs-trl.md):
 *   generate  the same on both (prefill of the longest prompt, then responseLength − 1 cached decode steps);
 *   score     ours: policy and reference forwards over the bucketed query + response, or the reference alone when
 *             the trainer took the old log-probs from the update (`oldLogprobsFromUpdate`); TRL: the reference
 *             only (num_iterations 1 takes the old log-probs from the update's own forward);
 *   update    one forward + backward of the policy over the batch (ours at the bucketed query length), ours plus
 *             the old log-probs' LM head over the B·R response rows when it took them there.
 */
export function summariseVsTrl(
  shape: ModelShape & { n_head: number; n_positions: number },
  ours: OursResult,
  trl: TrlResult,
  o: { warmup: number },
): VsTrl {
  const s = VS_TRL_SETUP;
  const B = s.batchSize;
  const R = s.responseLength;
  const Tp = Math.max(...ours.promptLengths);
  const TpTrl = Math.max(...trl.promptLengths);
  const oursF = {
    generate: generateFlops(shape, { batch: B, Tp, R }),
    score: grpoScoreFlops(shape, { batch: B, Tq: ours.Tq, R, forwards: ours.oldLogprobsFromUpdate ? 1 : 2 }),
    update:
      grpoUpdateFlops(shape, { batch: B, Tq: ours.Tq, R, epochs: 1 }) +
      (ours.oldLogprobsFromUpdate ? B * R * 2 * shape.n_embd * shape.vocab_size : 0),
  };
  const trlF = {
    generate: generateFlops(shape, { batch: B, Tp: TpTrl, R }),
    score: grpoScoreFlops(shape, { batch: B, Tq: TpTrl, R, forwards: 1 }),
    update: grpoUpdateFlops(shape, { batch: B, Tq: TpTrl, R, epochs: 1 }),
  };
  const a = side(ours.steps, oursF, ours.maxRssBytes, ours.matmul);
  const b = side(trl.steps, trlF, trl.maxRssBytes, trl.matmul);
  return {
    vsTrlCpu: a.secondsPerStep / b.secondsPerStep,
    vsTrlCpuTime:
      a.cpuSecondsPerStep !== null && b.cpuSecondsPerStep !== null
        ? a.cpuSecondsPerStep / b.cpuSecondsPerStep
        : null,
    peakRatio: a.peakResidentBytes / b.peakResidentBytes,
    ours: a,
    trl: b,
    setup: {
      model: {
        n_layer: shape.n_layer,
        n_embd: shape.n_embd,
        n_head: shape.n_head,
        n_positions: shape.n_positions,
        vocab_size: shape.vocab_size,
      },
      batchSize: B,
      groupSize: s.groupSize,
      responseLength: R,
      lora: s.lora,
      loraTargets: [...s.loraTargets],
      promptLengths: ours.promptLengths,
      ourTq: ours.Tq,
      warmup: o.warmup,
      steps: ours.steps.length,
      threads: s.threads,
      ourMicroBatchSize: ours.microBatchSize,
      ourRecompute: ours.recompute,
      wasmThreads: ours.wasmThreads,
    },
    versions: trl.versions,
  };
}

/** The query length our score and update run at for these prompts (the trainer's bucket). */
export function ourQueryLength(promptLengths: number[], nPositions: number, R: number): number {
  return bucket(Math.max(...promptLengths), nPositions - R);
}

const f2 = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '—');
const f1 = (x: number): string => (Number.isFinite(x) ? x.toFixed(1) : '—');
const gb = (x: number): string => `${(x / 1e9).toFixed(2)} GB`;

/** The side-by-side table (markdown), or the line saying why the TRL side was skipped. */
export function vsTrlMarkdown(r: VsTrl | null, skipped: string | null, machine: string): string {
  // machine: the CPU model and the load average when the run started (other jobs on the machine skew timings).
  if (!r) return `## CPU beside TRL\n\nSkipped: ${skipped ?? 'not run'}.\n`;
  const m = r.setup.model;
  const v = r.versions;
  const trio = (
    x: { generate: number; score: number; update: number } | null,
    f: (n: number) => string,
  ): string => (x ? `${f(x.generate)} / ${f(x.score)} / ${f(x.update)}` : '—');
  const row = (name: string, x: SideFigures): string =>
    `| ${name} | ${f2(x.secondsPerStep)} | ${trio(x.phases, f2)} | ${x.cpuSecondsPerStep === null ? '—' : f2(x.cpuSecondsPerStep)} | ` +
    `${trio(x.cpuPhases, f2)} | ${trio(x.gflopsPerCpuSecond, f1)} | ${x.gflopsPerCpuSecond ? f1(x.gflopsPerCpuSecond.step) : '—'} | ${gb(x.peakResidentBytes)} |`;
  const mm = (x: TrlMatmul[]): string =>
    x
      .map(
        (y) =>
          `${y.m}×${y.k}×${y.n}: ${f1(y.gflops)}${y.gflopsCpu === null ? '' : ` (${f1(y.gflopsCpu)} per CPU s)`}`,
      )
      .join(', ');
  return [
    '## CPU beside TRL',
    '',
    `Machine: ${machine}. Model: GPT-2-shaped, random weights (n_layer ${m.n_layer}, n_embd ${m.n_embd}, n_head ${m.n_head}, vocab ${m.vocab_size}); ` +
      `GRPO, LoRA r ${r.setup.lora} on ${r.setup.loraTargets.join('/')}, batch ${r.setup.batchSize} completions in groups of ${r.setup.groupSize}, ` +
      `${r.setup.responseLength} new tokens, our micro-batch ${r.setup.ourMicroBatchSize} with recompute ${r.setup.ourRecompute ? 'on' : 'off'}, prompts of ${Math.min(...r.setup.promptLengths)}–${Math.max(...r.setup.promptLengths)} tokens, ${r.setup.threads} thread each; ` +
      `mean of ${r.setup.steps} steps after ${r.setup.warmup} warm-up.`,
    '',
    '| | s/step (wall) | generate / score / update (wall s) | CPU s/step | generate / score / update (CPU s) | GFLOP per CPU s: generate / score / update | GFLOP per CPU s: step | peak resident |',
    '|---|---|---|---|---|---|---|---|',
    row(`ours, WASM (${r.setup.wasmThreads} thread)`, r.ours),
    row(
      `TRL ${v.trl ?? '?'} GRPOTrainer + peft ${v.peft ?? '?'}, torch ${v.torch ?? '?'} CPU (${r.setup.threads} thread)`,
      r.trl,
    ),
    '',
    `vsTrlCpu (ours ÷ TRL, s/step) = ${f2(r.vsTrlCpu)}; the same in CPU seconds = ${r.vsTrlCpuTime === null ? '—' : f2(r.vsTrlCpuTime)}; ` +
      `peak resident ours ÷ TRL = ${f2(r.peakRatio)}.`,
    '',
    `GFLOP per wall second — ours: ${trio(r.ours.gflopsPerSecond, f1)} (step ${f1(r.ours.gflopsPerSecond.step)}); TRL: ${trio(r.trl.gflopsPerSecond, f1)} (step ${f1(r.trl.gflopsPerSecond.step)}).`,
    '',
    `Matmul GFLOP/s, same thread count — tfjs-wasm: ${mm(r.ours.matmul)}; torch: ${mm(r.trl.matmul)}.`,
    '',
    "FLOPs per phase are each side's own work (docs/vs-trl.md): our score runs the policy and the reference, TRL's the " +
      "reference only. `updateMfu` (the main bench) is measured against tfjs's own matmul peak, not against the machine; " +
      'the GFLOP/s here are absolute. On a machine shared with other jobs, wall seconds move with the load; CPU seconds much less.',
    '',
  ].join('\n');
}
