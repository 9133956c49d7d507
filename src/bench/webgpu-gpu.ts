/**
 * `npm run bench -- --gpu`: WebGPU in Node (Dawn) on whatever adapter is present. It reports the adapter, the
 * matmul peak measured on it, the tiny model's PPO step (seconds, update MFU against that peak, dispatches and
 * readbacks per step) and the GPT-2 dispatches per transformer layer with and without the fused kernels; on a
 * hardware adapter also GPT-2 124M-shaped LoRA steps (PPO and GRPO, and PPO again on tfjs's ops), the GPT-2 PPO step
 * at the default plan (`ppoDefaultPlan`) and a Qwen2.5-0.5B-shaped LoRA GRPO step at the default plan and the whole
 * batch beside PyTorch eager + PEFT (`qwenGrpo`).
 * Beside tfjs's matmul it times our register-blocked kernel (src/core/kernels/webgpu-matmul.ts, matMulFast) at 2048²
 * and at GPT-2's shapes (MATMUL_SHAPES at MATMUL_SHAPE_ROWS rows), both in the same run on the same inputs.
 * On a software adapter (SwiftShader, lavapipe) it runs the smallest sizes only and says so; it never reports a
 * number it did not measure (what was skipped is null, with a note).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { PpoTrainer } from '../core/ppo/trainer';
import type { BuildOptions } from '../core/ppo/setup';
import { setWebGpuFusedKernels } from '../core/backend/webgpu-fused';
import { benchMatmul, type MatmulBench } from './perf/matmul';
import { matmulFlops } from './perf/flops';
import { matMulFast, matMulFastPlan, webGpuMatMulFastApplies } from '../core/kernels/webgpu-matmul';
import { benchPpoStep, type PpoBench } from './perf/ppo';
import type { ModelShape } from './perf/flops';
import { disposeTrainer } from './perf/memory';
import {
  countDispatches,
  gpt2DecodeDispatches,
  gpt2LayerDispatches,
  type DecodeDispatches,
  type LayerDispatches,
} from './webgpu-dispatch';
import { generate } from '../core/model/sampling';
import type { CausalLM } from '../core/model/lm';
import type { RecomputeMode, TrainConfig } from '../common/config';
import type { TorchPpoResult } from './torch-ppo';
import {
  benchModelLabel,
  qwenBenchRun,
  qwenBenchShape,
  qwenTimedSteps,
  QWEN_SLOW_WARMUP_S,
  torchGrpoSpec,
  type TorchGrpoResult,
  type TorchGrpoSpec,
} from './torch-grpo';
import { resolveLoraTargets } from '../core/model/lora';
import { formatEstimate } from '../core/model/size';
import { ReplayFrame, replayBackend, replayHeldBytes } from '../core/kernels/webgpu-replay';
import { type GpuBufferPeak, GpuBufferPeakMeter } from './perf/gpu-buffer-peak';
import { timeMatmulReplayed, type ReplayedMatmul } from './perf/matmul-replayed';
import type { WebGpuKernelTuning } from '../core/backend/webgpu-tune';

export interface GpuAdapterReport {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  software: boolean;
  vulkan: string;
  /** Storage buffers a program may bind on the device (NodeWebGpuAdapter's; absent where not read). */
  storageBuffersPerProgram?: number;
  /** The fused linear's kernels as timed on the device when the backend started (core/backend/webgpu-tune.ts). */
  kernels?: WebGpuKernelTuning;
}

export interface GpuBenchResult {
  adapter: GpuAdapterReport;
  /** "software adapter: smallest sizes only", or null on a hardware adapter. */
  sizes: string | null;
  matmul: MatmulBench;
  /** Our matmul (matMulFast) timed as `matmul` is, at the same size, in the same run. */
  matmulFast: MatmulBench | null;
  /**
   * The same two products' GPU time alone, from a recorded frame of 8 (bench/perf/matmul-replayed.ts): no tfjs
   * host cost, no readback; null where it failed (a note says why).
   */
  matmulReplayed: ReplayedMatmul | null;
  matmulFastReplayed: ReplayedMatmul | null;
  /** GPT-2's product shapes, tfjs's matmul beside ours (matmulShapeKeys); TFLOP/s null on a software adapter. */
  matmulShapes: MatmulShapeRow[];
  /** Wall time per dispatch of a chain of small element-wise kernels (the fixed cost of one tfjs kernel). */
  dispatchOverheadMs: number;
  /** The same chain recorded once and replayed (measureReplayedDispatch): one dispatch without tfjs's JavaScript. */
  replayedDispatch: ReplayedDispatch | null;
  /** With the fused kernels (what training uses) and without them (tfjs ops). */
  layers: { fused: LayerDispatches; plain: LayerDispatches };
  webgpuDispatchesPerLayerFwd: number;
  webgpuDispatchesPerLayerFwdBwd: number;
  ppo: PpoBench & { webgpuDispatchesPerStep: number; readbacksPerStep: number };
  webgpuDispatchesPerStep: number;
  readbacksPerStep: number;
  /** GPT-2 124M-shaped LoRA steps (PPO and GRPO), on hardware adapters only; [] where not run. */
  gpt2Lora: Gpt2LoraStep[];
  /** The GPT-2 KV-cache decode step's dispatches (gpt2DecodeDispatches), fused kernels. */
  decode: DecodeDispatches;
  /** The same under LoRA r 8 on all four Conv1Ds (PPO's policy in the GPT-2 LoRA steps). */
  decodeLora: DecodeDispatches;
  /** Greedy and sampled generation of the tiny model at batch 16 (decodeTiming). */
  decodeTiming: DecodeTiming;
  /** The GPT-2 124M-shaped PPO policy's generation (LoRA r 8, B zero) at batch 1 and 16; [] where not run. */
  gpt2Decode: DecodeTiming[];
  /** The same PPO step in PyTorch eager on the same GPU (scripts/torch_ppo_step.py); null where not run. */
  torchEager: TorchPpoResult | null;
  /** Every timed pair (our GPT-2 PPO step's seconds, PyTorch's result), the first being torchEager's. */
  torchRuns: { ours: number; torch: TorchPpoResult }[];
  /** gpt2Decode of the repeated PPO runs (bench option repeat). */
  gpt2DecodeRepeats: DecodeTiming[][];
  /** Issue #22's keys (gpuBenchKeys). */
  decodeDispatchesPerLayer: number;
  matmulTflops2048: number | null;
  /** matMulFast at 2048² (null where the product was not 2048², as matmulTflops2048). */
  matmulFastTflops2048: number | null;
  /** The two at 2048² from their recorded frames' GPU time (matmulReplayed, matmulFastReplayed); null likewise. */
  matmulTflops2048Replayed: number | null;
  matmulFastTflops2048Replayed: number | null;
  sampledOverGreedy: number | null;
  vsTorchEager: number | null;
  /** The GPT-2 PPO + LoRA step at the default plan beside PyTorch's whole-batch step of the same run; null: not run. */
  ppoDefaultPlan: PpoDefaultPlan | null;
  /** Qwen2.5-0.5B-shaped LoRA GRPO at the default plan and the whole batch, PyTorch eager + PEFT beside; null: not run. */
  qwenGrpo: QwenGrpoBench | null;
  notes: string[];
}

/**
 * `ppoDefaultPlan`: the GPT-2 124M-shaped PPO + LoRA step (batch 16, 24 tokens) at the default plan
 * (microBatchSize 0, recompute auto: what the engine resolves on this device), beside PyTorch eager's step.
 */
export interface PpoDefaultPlan {
  label: string;
  /** false in a dry run (a software adapter): the figures only show that the code ran. */
  measured: boolean;
  /** The plan the engine resolved (trainer.stepPlan after the timed steps). */
  microBatchSize: number;
  recompute: boolean;
  sPerStep: number;
  generateS: number;
  scoreS: number;
  updateS: number;
  /** PyTorch eager's step of the same run (`torchEager.timeStep`: the whole batch, as PyTorch always runs it). */
  torchEagerS: number | null;
  /** sPerStep ÷ torchEagerS; null with a note in a dry run or without PyTorch. */
  vsTorchEagerDefaultPlan: number | null;
}

/**
 * The plans a Qwen row can time: the default (microBatchSize 0, recompute auto), the whole batch without recompute,
 * and (the f16 rows, asked for) a memory-bounded plan: micro-batches of BOUNDED_PLAN_MICRO with recompute per block.
 */
export type QwenPlanKey = 'defaultPlan' | 'wholeBatch' | 'boundedPlan';
/** The bounded plan's micro-batch (issue #36's GPU memory target is for a plan like it, not the device's default). */
export const BOUNDED_PLAN_MICRO = 4;

/** One of the Qwen row's plans, timed on one trainer (a warm-up, then 1 or 2 steps: qwenTimedSteps). */
export interface QwenPlanRow {
  label: string;
  /** What the config asked for: microBatchSize 0 / recompute auto (the default), the whole batch, off, or bounded. */
  requested: { microBatchSize: number; recompute: RecomputeMode };
  /** What the engine resolved and ran (trainer.stepPlan after the timed steps). */
  microBatchSize: number;
  recompute: boolean;
  generateMicroBatchSize: number;
  sPerStep: number;
  generateS: number;
  scoreS: number;
  updateS: number;
  warmupS: number;
  timedSteps: number;
  stepTimes: number[];
  /**
   * Decode tokens per timed step that generation ran as replays of its recorded token (the trainer's
   * `decodeReplays`): about (R − 2) per generation slice where the recorded decode applies, 0 where it did not.
   */
  decodeReplays?: number;
  /** Why only one step was timed, or null. */
  note: string | null;
}

/** scripts/torch_grpo_step.py's result (TorchGrpoResult) with its times under the Qwen rows' names. */
export type TorchGrpoRow = Omit<TorchGrpoResult, 'timeGenerate' | 'timeScore' | 'timeUpdate' | 'timeStep'> & {
  sPerStep: number;
  generateS: number;
  scoreS: number;
  updateS: number;
};

/**
 * `qwenGrpo`: LoRA r 8 GRPO on Qwen2.5-0.5B's shapes with random weights (a dry run: 2 layers of width 64), 2
 * prompts × groups of 8, 32 response tokens (a dry run: 2 × 2, 4), one epoch of one minibatch; ours at the default
 * plan and at the whole batch without recompute, PyTorch eager + PEFT beside (scripts/torch_grpo_step.py).
 */
export interface QwenGrpoBench {
  /** e.g. "Qwen2.5-0.5B shape (24 layers, width 896, …), random weights". */
  model: string;
  /** false in a dry run: none of the figures is a measurement, and the ratios are null. */
  measured: boolean;
  batchSize: number;
  groupSize: number;
  responseLength: number;
  /** Prompt bucket of the timed steps (PyTorch's prompts are random ids of this length). */
  Tq: number | null;
  lora: number;
  /** The layers our trainer adapted, PEFT's target_modules: what the PyTorch step was given. */
  loraTargets: string[];
  /** Our policy's trainable parameters (the adapters), to compare with PEFT's. */
  trainableParams: number;
  defaultPlan: QwenPlanRow | null;
  wholeBatch: QwenPlanRow | null;
  torchEagerPeft: TorchGrpoRow | null;
  /** defaultPlan.sPerStep ÷ torchEagerPeft.sPerStep; null with a note where not measured. */
  vsTorchEagerDefault: number | null;
  /** wholeBatch.sPerStep ÷ torchEagerPeft.sPerStep. */
  vsTorchEagerWhole: number | null;
  /**
   * The trainer's own warm-up: one untimed step at the first plan before any plan's warm-up, so that the first
   * plan timed no longer carries the trainer's first recordings and pools (null where it failed or in no row).
   */
  trainerWarmupS: number | null;
  /** The f16-base rows (issue #36, src/bench/f16-gpu.ts): the base's dtype ours and PyTorch's ran with. */
  baseDtype?: 'f16' | 'f32';
  /** The f16-base rows, where asked: the memory-bounded plan (BOUNDED_PLAN_MICRO with recompute). */
  boundedPlan?: QwenPlanRow | null;
  /** The f16-base rows: GPU memory of the first plan timed (its `plan`) and the estimate the engine made for it. */
  memory?: StepMemory | null;
  notes: string[];
}

/**
 * GPU memory of one timed plan (the f16-base rows): what the GPU's used memory (nvidia-smi) grew by from before
 * the trainer was built to after its timed steps — weights, the step's buffers in tfjs's pool (freed buffers stay
 * there, so this is at least the step's peak) and the recordings — beside tfjs's own count and the pre-flight
 * estimate (trainer.memoryEstimate, model/size.ts).
 */
export interface StepMemory {
  /** The plan measured: the row's first (the pool keeps what a step freed, so a later plan's reading is not its own). */
  plan: QwenPlanKey;
  /** nvidia-smi's used memory after the timed steps − before the build; null without nvidia-smi. */
  gpuBytes: number | null;
  /**
   * The most nvidia-smi's used memory read while the timed steps ran (sampled every 50 ms) − before the build: the
   * steps' peak on the device, Dawn's and the driver's memory included, at the sampling's resolution. Null without
   * nvidia-smi, or in results from before 2026-12-01 (absent there).
   */
  gpuPeakBytes?: number | null;
  /** How many readings gpuPeakBytes is the most of (null: not sampled). */
  gpuPeakSamples?: number | null;
  /** tfjs-backend-webgpu's numBytesAllocatedInGPU after the timed steps (its buffers, pool included). */
  tfjsAllocatedBytes: number | null;
  /**
   * Of those, the bytes the live replay frames hold (the recorded update's and decode's intermediates, uniforms and
   * uploads; webgpu-replay.ts replayHeldBytes), after the timed steps.
   */
  replayHeldBytes: number;
  /**
   * The most bytes of tfjs's buffers during the timed steps (GpuBufferPeakMeter): in use at once (live tensors, the
   * recordings' buffers, uniforms in flight), and in existence at once (its pool of freed buffers included) — the
   * step's own peak from tfjs's side, which nvidia-smi's after-step reading neither isolates nor bounds (Dawn's and
   * the driver's memory are in it). Null off WebGPU.
   */
  tfjsPeakUsedBytes: number | null;
  tfjsPeakAllocatedBytes: number | null;
  /** The engine's estimate of the step (trainer.memoryEstimate().total) and its words. */
  estimateBytes: number;
  estimate: string;
}

/** The GPU's used memory sampled in the background while something runs; stop() gives the most seen (bytes). */
export interface GpuMemorySampler {
  /** Readings taken so far. */
  samples(): number;
  stop(): Promise<number | null>;
}

/** How long the bench waits for a sampler's first reading before the steps it samples start. */
export const FIRST_SAMPLE_WAIT_MS = 5000;

/** ms per generated token, greedy and sampled, of one model at one batch (prefill excluded). */
export interface DecodeTiming {
  batch: number;
  /** New tokens of the long run; the short run's (subtracted, to leave the prefill out) is 2. */
  tokens: number;
  greedyMsPerToken: number | null;
  sampledMsPerToken: number | null;
  /** The sampled run's settings (the PPO config's; temperature 0 read as 1). */
  sampling: { temperature: number; topK: number; topP: number };
}

/** Whether a Python has torch with CUDA (src/cli/torch-probe.ts probeTorchCuda), and why not. */
export interface TorchProbe {
  ok: boolean;
  /** torch's version and the CUDA device, or why there is no PyTorch on a GPU here. */
  reason: string;
}

/** The Python probeTorchCuda runs: torch's version, whether CUDA is available, the device's name (JSON). */
export const TORCH_PROBE_CODE =
  'import json, torch; ok = torch.cuda.is_available(); ' +
  "print(json.dumps({'torch': torch.__version__, 'cuda': ok, 'device': torch.cuda.get_device_name(0) if ok else None}))";

/** What spawnSync gave for the probe (the parts read). */
export interface ProbeRun {
  error?: { code?: string; message: string } | null;
  status: number | null;
  stdout: string;
  stderr: string;
}

/** The probe's outcome from its process result (pure: tested in tests/bench-gpu-keys.test.ts). */
export function torchProbeFromRun(python: string, r: ProbeRun): TorchProbe {
  if (r.error)
    return {
      ok: false,
      reason:
        r.error.code === 'ENOENT'
          ? `no Python at "${python}"`
          : `"${python}" could not run: ${r.error.message}`,
    };
  if (r.status !== 0) {
    const last = r.stderr.trim().split('\n').pop() || `exit ${r.status}`;
    return { ok: false, reason: `"${python}" cannot import torch: ${last}` };
  }
  let info: { torch?: string; cuda?: boolean; device?: string | null };
  try {
    info = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
  } catch {
    return {
      ok: false,
      reason: `"${python}" printed no torch probe (${JSON.stringify(r.stdout.slice(0, 80))})`,
    };
  }
  if (!info.cuda) return { ok: false, reason: `torch ${info.torch} is installed but CUDA is not available` };
  return { ok: true, reason: `torch ${info.torch} with CUDA on ${info.device}` };
}

/**
 * Issue #22's keys from what the bench measured, with a note for each null (pure: tests/bench-gpu-keys.test.ts):
 * `decodeDispatchesPerLayer` as counted; `matmulTflops2048` only from a 2048² product (a software adapter's
 * smaller one is not reported under that name); `sampledOverGreedy` = sampled ÷ greedy ms/token when both were
 * measured; `vsTorchEager` null: the PyTorch step is not built (the note says whether PyTorch with CUDA is here).
 */
export function gpuBenchKeys(i: {
  matmul: MatmulBench;
  /** matMulFast timed beside `matmul` (absent: not run). */
  matmulFast?: MatmulBench | null;
  /** `matmul`'s and `matmulFast`'s products timed from a recorded frame, at their sizes (absent: not timed). */
  matmulReplayed?: ReplayedMatmul | null;
  matmulFastReplayed?: ReplayedMatmul | null;
  decode: DecodeDispatches;
  timing: Pick<DecodeTiming, 'batch' | 'greedyMsPerToken' | 'sampledMsPerToken'>;
  torch: TorchProbe;
  /** Our GPT-2 PPO step's seconds and PyTorch's, or why PyTorch's was not measured. */
  vsTorch?: { ours: number; torch: number } | { error: string };
  /** Which model and batch the decode timing is of (for the notes). */
  timingLabel?: string;
}): {
  keys: Pick<
    GpuBenchResult,
    | 'decodeDispatchesPerLayer'
    | 'matmulTflops2048'
    | 'matmulFastTflops2048'
    | 'matmulTflops2048Replayed'
    | 'matmulFastTflops2048Replayed'
    | 'sampledOverGreedy'
    | 'vsTorchEager'
  >;
  notes: string[];
} {
  const notes: string[] = [];
  // A product's TFLOP/s under a 2048² key only where it ran at 2048² and gave a positive finite figure; else null, and a
  // note saying why. `ran`: how the note names the product; `missing`: the note where it was not timed.
  const at2048 = (
    key: string,
    ran: string,
    t: { n: number | null; gflops: number } | null | undefined,
    missing: string,
  ): number | null => {
    if (t && t.n === 2048 && t.gflops > 0 && Number.isFinite(t.gflops)) return t.gflops / 1000;
    notes.push(
      !t
        ? `${key}: null (${missing}).`
        : t.n !== 2048
          ? `${key}: null (${ran} ran at ${t.n}², not 2048²; ${t.gflops.toFixed(3)} GFLOP/s there is not reported under that name).`
          : `${key}: null (${t.gflops} GFLOP/s is not a positive finite number).`,
    );
    return null;
  };
  const fast = i.matmulFast ?? null;
  const matmulTflops2048 = at2048('matmulTflops2048', 'the matmul', i.matmul, 'the matmul was not timed');
  const matmulFastTflops2048 = at2048('matmulFastTflops2048', 'our matmul', fast, 'our matmul was not timed');
  // The recorded frames' figures: the same rule, at their products' sizes, under names of their own.
  const replayed = (r: ReplayedMatmul | null | undefined, n: number | null) =>
    r ? { n, gflops: r.gflops } : null;
  const notFramed = 'not timed from a recorded frame';
  const matmulTflops2048Replayed = at2048(
    'matmulTflops2048Replayed',
    'the product',
    replayed(i.matmulReplayed, i.matmul.n),
    notFramed,
  );
  const matmulFastTflops2048Replayed = at2048(
    'matmulFastTflops2048Replayed',
    'the product',
    fast ? replayed(i.matmulFastReplayed, fast.n) : null,
    notFramed,
  );
  const { greedyMsPerToken: g, sampledMsPerToken: sm } = i.timing;
  const ok = (x: number | null): x is number => x !== null && Number.isFinite(x) && x > 0;
  const sampledOverGreedy = ok(g) && ok(sm) ? sm / g : null;
  if (sampledOverGreedy === null)
    notes.push(
      `sampledOverGreedy: null (greedy ${g ?? 'not measured'} ms/token, sampled ${sm ?? 'not measured'} ms/token at batch ${i.timing.batch}${i.timingLabel ? `, ${i.timingLabel}` : ''}).`,
    );
  let vsTorchEager: number | null = null;
  const v = i.vsTorch;
  if (!i.torch.ok) notes.push(`vsTorchEager: null (no PyTorch on a GPU: ${i.torch.reason}).`);
  else if (!v)
    notes.push(`vsTorchEager: null (${i.torch.reason} is here, but the GPT-2 PPO step was not run).`);
  else if ('error' in v) notes.push(`vsTorchEager: null (the PyTorch step failed: ${v.error}).`);
  else if (ok(v.ours) && ok(v.torch)) vsTorchEager = v.ours / v.torch;
  else notes.push(`vsTorchEager: null (step times ours ${v.ours} s, PyTorch ${v.torch} s).`);
  return {
    keys: {
      decodeDispatchesPerLayer: i.decode.perLayer,
      matmulTflops2048,
      matmulFastTflops2048,
      matmulTflops2048Replayed,
      matmulFastTflops2048Replayed,
      sampledOverGreedy,
      vsTorchEager,
    },
    notes,
  };
}

const finitePositive = (x: number | null | undefined): x is number =>
  typeof x === 'number' && Number.isFinite(x) && x > 0;

/**
 * `ppoDefaultPlan` from the GPT-2 PPO row at the default plan and PyTorch's step of the same run (pure:
 * tests/bench-gpu-keys.test.ts): its resolved plan and phase times, and `vsTorchEagerDefaultPlan` = its s/step ÷
 * PyTorch's; the ratio is null with a note in a dry run (not a measurement), without PyTorch, or where a time is not
 * a positive number. `row` null: the row did not run (or failed): null, with a note.
 */
export function ppoDefaultPlanKeys(i: {
  row: Pick<
    Gpt2LoraStep,
    'label' | 'timeStep' | 'timeGenerate' | 'timeScore' | 'timeUpdate' | 'microBatchSize' | 'recompute'
  > | null;
  torch: TorchProbe;
  /** PyTorch's step of the same run (torchEager), or null where it did not run. */
  torchStep: Pick<TorchPpoResult, 'timeStep'> | null;
  dryRun: boolean;
}): { ppoDefaultPlan: PpoDefaultPlan | null; notes: string[] } {
  const r = i.row;
  if (!r)
    return {
      ppoDefaultPlan: null,
      notes: ['ppoDefaultPlan: null (the GPT-2 PPO row at the default plan did not run).'],
    };
  const notes: string[] = [];
  const torchS = i.torchStep?.timeStep ?? null;
  let ratio: number | null = null;
  if (i.dryRun)
    notes.push(
      `ppoDefaultPlan: a dry run (a small shape on a software adapter${torchS ? ', PyTorch on the CPU' : ''}): its figures are not measurements and vsTorchEagerDefaultPlan is null${finitePositive(torchS) && finitePositive(r.timeStep) ? ` (the ratio would be ${(r.timeStep / torchS).toFixed(2)})` : ''}.`,
    );
  else if (!i.torch.ok)
    notes.push(`ppoDefaultPlan.vsTorchEagerDefaultPlan: null (no PyTorch on a GPU: ${i.torch.reason}).`);
  else if (!finitePositive(torchS))
    notes.push(
      'ppoDefaultPlan.vsTorchEagerDefaultPlan: null (the PyTorch PPO step of this run did not give a time).',
    );
  else if (!finitePositive(r.timeStep))
    notes.push(`ppoDefaultPlan.vsTorchEagerDefaultPlan: null (our step time ${r.timeStep} s).`);
  else ratio = r.timeStep / torchS;
  return {
    ppoDefaultPlan: {
      label: r.label,
      measured: !i.dryRun,
      microBatchSize: r.microBatchSize,
      recompute: r.recompute,
      sPerStep: r.timeStep,
      generateS: r.timeGenerate,
      scoreS: r.timeScore,
      updateS: r.timeUpdate,
      torchEagerS: torchS,
      vsTorchEagerDefaultPlan: ratio,
    },
    notes,
  };
}

/** The PyTorch GRPO result under the Qwen rows' names (sPerStep, generateS, …). */
export function torchGrpoRow(t: TorchGrpoResult): TorchGrpoRow {
  return {
    sPerStep: t.timeStep,
    generateS: t.timeGenerate,
    scoreS: t.timeScore,
    updateS: t.timeUpdate,
    steps: t.steps,
    stepTimes: t.stepTimes,
    loraTargets: t.loraTargets,
    trainableParams: t.trainableParams,
    refLogprobs: t.refLogprobs,
    device: t.device,
    tf32: t.tf32,
    torch: t.torch,
    transformers: t.transformers,
    peft: t.peft,
    ...(t.dtype ? { dtype: t.dtype } : {}),
    ...(t.peakMemoryBytes !== undefined ? { peakMemoryBytes: t.peakMemoryBytes } : {}),
  };
}

/**
 * The Qwen row's PyTorch column and ratios (pure: tests/bench-gpu-keys.test.ts): `torchEagerPeft` from the
 * script's result; `vsTorchEagerDefault` / `vsTorchEagerWhole` = our plan's s/step ÷ PyTorch's, each null with a
 * note in a dry run, without PyTorch, where the PyTorch step failed or where our row did not run; a note where
 * PEFT adapted other modules or another number of parameters than ours (the two steps would then differ).
 */
export function qwenGrpoKeys(i: {
  defaultPlan: Pick<QwenPlanRow, 'sPerStep'> | null;
  wholeBatch: Pick<QwenPlanRow, 'sPerStep'> | null;
  torch: TorchProbe;
  /** The PyTorch step's result, why it failed, or absent: not run. */
  torchRun?: TorchGrpoResult | { error: string };
  /** The modules and parameter count of our adapters, to check PEFT's against. */
  ours: { loraTargets: readonly string[]; trainableParams: number };
  dryRun: boolean;
  /** The row's name in notes (default "qwenGrpo"). */
  key?: string;
}): Pick<QwenGrpoBench, 'torchEagerPeft' | 'vsTorchEagerDefault' | 'vsTorchEagerWhole'> & {
  notes: string[];
} {
  const K = i.key ?? 'qwenGrpo';
  const notes: string[] = [];
  const run = i.torchRun;
  const t = run && !('error' in run) ? run : null;
  if (!i.torch.ok) notes.push(`${K}.torchEagerPeft: null (no PyTorch on a GPU: ${i.torch.reason}).`);
  else if (!run)
    notes.push(
      `${K}.torchEagerPeft: null (${i.torch.reason} is here, but the PyTorch GRPO step was not run).`,
    );
  else if ('error' in run)
    notes.push(`${K}.torchEagerPeft: null (the PyTorch GRPO step failed: ${run.error}).`);
  if (t) {
    const want = [...i.ours.loraTargets].sort();
    const got = [...t.loraTargets].sort();
    if (JSON.stringify(want) !== JSON.stringify(got))
      notes.push(
        `${K}: PEFT adapted ${JSON.stringify(got)}, ours ${JSON.stringify(want)}: the two steps differ.`,
      );
    if (t.trainableParams !== i.ours.trainableParams)
      notes.push(
        `${K}: PEFT trains ${t.trainableParams} parameters, ours ${i.ours.trainableParams}: the two steps differ.`,
      );
  }
  const ratio = (name: string, ours: Pick<QwenPlanRow, 'sPerStep'> | null): number | null => {
    if (!t) return null;
    if (!ours) {
      notes.push(`${K}.${name}: null (our row did not run).`);
      return null;
    }
    if (!finitePositive(ours.sPerStep) || !finitePositive(t.timeStep)) {
      notes.push(`${K}.${name}: null (step times ours ${ours.sPerStep} s, PyTorch ${t.timeStep} s).`);
      return null;
    }
    if (i.dryRun) {
      notes.push(
        `${K}.${name}: null (a dry run: a small shape on a software adapter against PyTorch on the CPU is not a measurement; the ratio would be ${(ours.sPerStep / t.timeStep).toFixed(2)}).`,
      );
      return null;
    }
    return ours.sPerStep / t.timeStep;
  };
  return {
    torchEagerPeft: t ? torchGrpoRow(t) : null,
    vsTorchEagerDefault: ratio('vsTorchEagerDefault', i.defaultPlan),
    vsTorchEagerWhole: ratio('vsTorchEagerWhole', i.wholeBatch),
    notes,
  };
}

/** "Qwen2.5-0.5B shape (24 layers, width 896, 14 heads over 2 KV heads, SwiGLU 4864, vocabulary 151936)". */
export function qwenModelLabel(dryRun: boolean): string {
  return benchModelLabel('Qwen2.5-0.5B', qwenBenchShape(dryRun), dryRun);
}

/** GPT-2 124M's weight products [K, N]: c_attn, mlp.c_fc, mlp.c_proj, and the tied LM head (x·wteᵀ). */
export const MATMUL_SHAPES: readonly { name: string; k: number; n: number; transB: boolean }[] = [
  { name: 'c_attn', k: 768, n: 2304, transB: false },
  { name: 'mlp.c_fc', k: 768, n: 3072, transB: false },
  { name: 'mlp.c_proj', k: 3072, n: 768, transB: false },
  { name: 'lm_head (x·wteᵀ)', k: 768, n: 50257, transB: true },
];
/** Rows of the shape table: 16 sequences × 32 tokens (the bench's PPO batch of 16 at prompt 8 + response 24). */
export const MATMUL_SHAPE_ROWS = 512;

/** One shape of the table: tfjs's matmul and ours on the same inputs, in the same run. */
export interface MatmulShapeRow {
  /** e.g. "512×768·768×2304 (c_attn)". */
  shape: string;
  m: number;
  k: number;
  n: number;
  transB: boolean;
  /** Our kernel's tile for it (matMulFastPlan), e.g. "128×128". */
  tile: string;
  tfjsTflops: number | null;
  fastTflops: number | null;
  /** max |ours − tfjs's| / max |tfjs's| over the product: the two must agree whatever the speed. */
  maxRelDiff: number;
}

/** A shape's timings as measured (GFLOP/s; the adapter decides whether they are reported). */
export interface MatmulShapeRun {
  name: string;
  m: number;
  k: number;
  n: number;
  transB: boolean;
  tile: string;
  tfjsGflops: number;
  fastGflops: number;
  maxRelDiff: number;
}

/**
 * The `matmulShapes` rows from the runs (pure: tests/bench-gpu-keys.test.ts): TFLOP/s as measured on a hardware
 * adapter; on a software adapter null, with a note (CPU time is not GPU speed; the products ran as a check only).
 */
export function matmulShapeKeys(
  runs: MatmulShapeRun[],
  o: { software: boolean; dryRun?: boolean },
): { rows: MatmulShapeRow[]; notes: string[] } {
  const notes: string[] = [];
  const toT = (g: number): number | null => (o.software || !(g > 0) || !Number.isFinite(g) ? null : g / 1000);
  const rows = runs.map((r) => ({
    shape: `${r.m}×${r.k}·${r.transB ? `(${r.n}×${r.k})ᵀ` : `${r.k}×${r.n}`} (${r.name})`,
    m: r.m,
    k: r.k,
    n: r.n,
    transB: r.transB,
    tile: r.tile,
    tfjsTflops: toT(r.tfjsGflops),
    fastTflops: toT(r.fastGflops),
    maxRelDiff: r.maxRelDiff,
  }));
  if (o.software && runs.length)
    notes.push(
      `matmulShapes: TFLOP/s null on a software adapter (a CPU's time is not GPU speed); the products ran${o.dryRun ? " at a dry run's small shapes" : ''} only to check that the two kernels agree.`,
    );
  else if (!runs.length)
    notes.push(
      `matmulShapes: not run (${o.software ? 'software adapter' : 'no shapes'}; GPT-2's shapes at ${MATMUL_SHAPE_ROWS} rows run on a hardware adapter, or in a dry run at a small size).`,
    );
  return { rows, notes };
}

/**
 * GFLOP/s of `mm(a, b)` for a [m, k] and b [k, n] (or [n, k] with transB), timed as benchMatmul times tfjs's
 * matmul: warm-up calls, then rounds of `iters` products queued back to back and one readback, until
 * `minSeconds` have passed.
 */
export async function timeMatmul(
  mm: (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor,
  a: tf.Tensor2D,
  b: tf.Tensor2D,
  flops: number,
  o: { iters: number; minSeconds: number; warmup?: number },
): Promise<{ iters: number; seconds: number; gflops: number }> {
  const round = async (k: number): Promise<void> => {
    const outs: tf.Tensor[] = [];
    for (let i = 0; i < k; i++) outs.push(mm(a, b));
    await outs[outs.length - 1].data();
    tf.dispose(outs);
  };
  for (let i = 0; i < (o.warmup ?? 2); i++) await round(1);
  let iters = 0;
  const t0 = performance.now();
  while (iters === 0 || (performance.now() - t0 < o.minSeconds * 1000 && iters < 400)) {
    await round(o.iters);
    iters += o.iters;
  }
  const seconds = (performance.now() - t0) / 1000;
  return { iters, seconds, gflops: (flops * iters) / seconds / 1e9 };
}

/** matMulFast at n × n, timed as benchMatmul times tfjs's (the same seeds). */
export async function benchMatmulFast(
  n: number,
  o: { iters: number; minSeconds: number },
): Promise<MatmulBench> {
  const a = tf.randomNormal([n, n], 0, 1, 'float32', 1) as tf.Tensor2D;
  const b = tf.randomNormal([n, n], 0, 1, 'float32', 2) as tf.Tensor2D;
  try {
    if (!webGpuMatMulFastApplies(a, b)) throw new Error(`matMulFast does not apply at ${n}² here`);
    const r = await timeMatmul((x, y) => matMulFast(x, y), a, b, matmulFlops(n, n, n), o);
    return { n, ...r };
  } finally {
    tf.dispose([a, b]);
  }
}

/** tfjs's matmul and ours at one shape (same inputs; tfjs's first, then ours), and how far apart they are. */
export async function benchMatmulShapePair(
  s: { name: string; k: number; n: number; transB: boolean },
  m: number,
  o: { iters: number; minSeconds: number },
): Promise<MatmulShapeRun> {
  const a = tf.randomNormal([m, s.k], 0, 1, 'float32', 3) as tf.Tensor2D;
  const b = tf.randomNormal(s.transB ? [s.n, s.k] : [s.k, s.n], 0, 1, 'float32', 4) as tf.Tensor2D;
  try {
    if (!webGpuMatMulFastApplies(a, b, false, s.transB))
      throw new Error(`matMulFast does not apply to ${m}×${s.k}·${s.k}×${s.n} here`);
    const flops = matmulFlops(m, s.k, s.n);
    const plain = await timeMatmul((x, y) => tf.matMul(x, y, false, s.transB), a, b, flops, o);
    const fast = await timeMatmul((x, y) => matMulFast(x, y, false, s.transB), a, b, flops, o);
    const diff = tf.tidy(() => {
      const p = tf.matMul(a, b, false, s.transB);
      const f = matMulFast(a, b, false, s.transB);
      return tf.stack([tf.max(tf.abs(tf.sub(f, p))), tf.max(tf.abs(p))]);
    });
    const [abs, scale] = await diff.data();
    diff.dispose();
    const plan = matMulFastPlan(m, s.n, s.k, { transB: s.transB });
    return {
      name: s.name,
      m,
      k: s.k,
      n: s.n,
      transB: s.transB,
      tile: `${plan.tm}×${plan.tn}`,
      tfjsGflops: plain.gflops,
      fastGflops: fast.gflops,
      maxRelDiff: scale > 0 ? abs / scale : abs,
    };
  } finally {
    tf.dispose([a, b]);
  }
}

/**
 * ms per generated token of `model` at `batch` rows, greedy and sampled (`sampling`), with the KV cache and no stop
 * token: each timed as (time of `tokens` new tokens − time of 2) / (tokens − 2), the fastest of `reps` runs of each
 * after a warm-up, so the prefill is left out. Prompts: `batch` rows of 8 ids.
 */
export async function decodeTiming(
  model: CausalLM,
  o: {
    batch: number;
    tokens: number;
    padId: number;
    sampling: { temperature: number; topK: number; topP: number };
    /** Timed runs of each length (the fastest counts); default 2. */
    reps?: number;
  },
): Promise<DecodeTiming> {
  const V = model.config.vocab_size;
  const prompts = Array.from({ length: o.batch }, (_, b) =>
    Array.from({ length: 8 }, (_, t) => (b * 31 + t * 7 + 5) % V),
  );
  const T = o.sampling.temperature === 0 ? 1 : o.sampling.temperature;
  const sampling = { temperature: T, topK: o.sampling.topK, topP: o.sampling.topP };
  const run = async (greedy: boolean, n: number): Promise<number> => {
    const t0 = performance.now();
    await generate(model, prompts, {
      maxNewTokens: n,
      ...(greedy ? { temperature: 0 } : sampling),
      stopToken: null,
      padId: o.padId,
      rng: 7,
    });
    return performance.now() - t0;
  };
  const perToken = async (greedy: boolean): Promise<number> => {
    await run(greedy, o.tokens); // warm-up: shaders, buffer pools
    let long = Infinity;
    let short = Infinity;
    for (let i = 0; i < (o.reps ?? 2); i++) {
      long = Math.min(long, await run(greedy, o.tokens));
      short = Math.min(short, await run(greedy, 2));
    }
    return (long - short) / (o.tokens - 2);
  };
  const greedyMsPerToken = await perToken(true);
  const sampledMsPerToken = await perToken(false);
  return { batch: o.batch, tokens: o.tokens, greedyMsPerToken, sampledMsPerToken, sampling };
}

/** One GPT-2-shaped LoRA step on the GPU: phase times, update FLOPs with a frozen base, MFU, dispatches. */
export interface Gpt2LoraStep {
  label: string;
  algorithm: string;
  batchSize: number;
  responseLength: number;
  Tq: number;
  timeStep: number;
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
  updateFlops: number;
  updateGflopsPerSecond: number;
  updateMfu: number;
  webgpuDispatchesPerStep: number;
  readbacksPerStep: number;
  /** The plan the step ran with (trainer.stepPlan after the timed steps): what microBatchSize 0 resolved to. */
  microBatchSize: number;
  recompute: boolean;
}

/**
 * Update FLOPs of a LoRA step (frozen base): per token and layer the weight products cost 24·C² forward and the
 * same again for the input gradient (no weight gradient for the frozen base), the attention products 4·T·C
 * forward and twice that backward (both inputs need gradients); the tied LM head (frozen) 2·C·V per response
 * row forward and again backward. The low-rank products (r ≪ C) and the scalar head are left out (< 1%).
 * A shared value model runs the trunk again over every token.
 */
export function loraUpdateFlops(
  c: ModelShape,
  o: { batch: number; Tq: number; R: number; epochs: number; value: boolean },
): number {
  const T = o.Tq + o.R;
  const C = c.n_embd;
  const trunk = o.batch * T * c.n_layer * (2 * 24 * C * C + 3 * 4 * T * C);
  const head = 2 * o.batch * o.R * 2 * C * c.vocab_size;
  return o.epochs * (trunk + head + (o.value ? trunk : 0));
}

export async function runGpuBench(o: {
  adapter: GpuAdapterReport;
  /** A PPO trainer on the tiny model with these overrides of the config. */
  buildTinyTrainer: (overrides: Record<string, unknown>) => Promise<PpoTrainer>;
  /** A trainer on a GPT-2 124M-shaped model (random weights) with these overrides; hardware adapters only. */
  buildGpt2Trainer?: (overrides: Record<string, unknown>) => Promise<PpoTrainer>;
  /** Whether PyTorch with CUDA is here (src/cli/torch-probe.ts probeTorchCuda); absent: not probed. */
  probeTorch?: () => Promise<TorchProbe>;
  /** The same PPO step in PyTorch eager (src/cli/torch-probe.ts runTorchPpoStep) for our config at bucket Tq. */
  runTorch?: (cfg: TrainConfig, Tq: number) => Promise<TorchPpoResult>;
  /**
   * Run the GPT-2 path on a software adapter too, at the small batch of the software sizes (the caller gives a
   * small GPT-2 shape): a check that the code runs before a GPU lease, never a measurement (the notes say so).
   */
  dryRun?: boolean;
  /** Times the GPT-2 PPO step (with its decode timing and PyTorch's step) this many times, each reported. */
  repeat?: number;
  /** Leave out the tfjs-ops GPT-2 row (the slowest). */
  skipPlain?: boolean;
  /**
   * Ignored: the GPT-2 PPO row at the default plan (`ppoDefaultPlan`) now runs wherever the GPT-2 rows run (it was
   * PPO_GPU_BENCH_DEFAULT_PLAN=1's row); kept so that callers that pass it still compile.
   */
  defaultPlan?: boolean;
  /**
   * A trainer on the Qwen2.5-0.5B-shaped folder (random weights; torch-grpo.ts qwenBenchShape: a dry run's is 2
   * layers of width 64) with these overrides (src/cli/torch-probe.ts qwenGrpoBenchHooks); absent: no Qwen row.
   */
  buildQwenTrainer?: QwenTrainerBuilder;
  /** The Qwen row's GRPO step in PyTorch eager + PEFT (src/cli/torch-probe.ts runTorchGrpoStep). */
  runTorchGrpo?: (spec: TorchGrpoSpec) => Promise<TorchGrpoResult>;
  log: (m: string) => void;
}): Promise<GpuBenchResult> {
  if (tf.getBackend() !== 'webgpu')
    throw new Error(`the GPU bench needs the webgpu backend, not ${tf.getBackend()}.`);
  const soft = o.adapter.software;
  const notes: string[] = [];
  if (soft)
    notes.push(
      'software adapter: smallest sizes only (a CPU implementation of Vulkan: numbers are not GPU numbers).',
    );
  o.log(`matmul peak (${soft ? 256 : 2048}²)`);
  const matmul = await benchMatmul(soft ? 256 : 2048, { iters: soft ? 1 : 8, minSeconds: soft ? 0.2 : 2 });

  o.log(`  ${(matmul.gflops / 1000).toFixed(3)} TFLOP/s at ${matmul.n}²`);
  // Ours beside it (src/core/kernels/webgpu-matmul.ts), same size and protocol, then GPT-2's shapes (both).
  o.log(`our matmul (matMulFast) at ${matmul.n}²`);
  let matmulFast: MatmulBench | null = null;
  try {
    matmulFast = await benchMatmulFast(matmul.n, { iters: soft ? 1 : 8, minSeconds: soft ? 0.2 : 2 });
    o.log(`  ${(matmulFast.gflops / 1000).toFixed(3)} TFLOP/s at ${matmulFast.n}²`);
  } catch (e) {
    notes.push(`matmulFast: failed: ${(e as Error).message}`);
  }
  // The same products' GPU time alone, from recorded frames (bench/perf/matmul-replayed.ts), both on one pair of
  // inputs: 8 products a frame on a GPU, 2 on a software adapter (a check that it runs: seconds a product there).
  o.log(`both matmuls from recorded frames at ${matmul.n}²`);
  const rn = matmul.n;
  const ra = tf.randomNormal([rn, rn], 0, 1, 'float32', 1) as tf.Tensor2D;
  const rb = tf.randomNormal([rn, rn], 0, 1, 'float32', 2) as tf.Tensor2D;
  const replayedAt = async (
    label: string,
    mm: (x: tf.Tensor2D, y: tf.Tensor2D) => tf.Tensor,
  ): Promise<ReplayedMatmul | null> => {
    try {
      const r = await timeMatmulReplayed(mm, ra, rb, matmulFlops(rn, rn, rn), { calls: soft ? 2 : 8 });
      o.log(`  ${label}, recorded and replayed: ${(r.gflops / 1000).toFixed(3)} TFLOP/s at ${rn}²`);
      return r;
    } catch (e) {
      notes.push(`${label}, recorded and replayed: failed: ${(e as Error).message}`);
      return null;
    }
  };
  let matmulReplayed: ReplayedMatmul | null;
  let matmulFastReplayed: ReplayedMatmul | null;
  try {
    matmulReplayed = await replayedAt('matmul (tfjs)', (x, y) => tf.matMul(x, y));
    matmulFastReplayed = matmulFast ? await replayedAt('matMulFast', (x, y) => matMulFast(x, y)) : null;
  } finally {
    tf.dispose([ra, rb]);
  }
  const shapeRuns: MatmulShapeRun[] = [];
  // A software adapter runs the table only in a dry run, at 8 rows and a sixteenth of each size (a code check).
  const shapeRows = soft ? 8 : MATMUL_SHAPE_ROWS;
  if (!soft || o.dryRun) {
    for (const sh of MATMUL_SHAPES) {
      const s16 = soft ? { ...sh, k: Math.ceil(sh.k / 16), n: Math.ceil(sh.n / 16) } : sh;
      o.log(
        `matmul ${shapeRows}×${s16.k}·${s16.k}×${s16.n}${s16.transB ? ' (B transposed)' : ''}: tfjs's, ours`,
      );
      try {
        const r = await benchMatmulShapePair(s16, shapeRows, {
          iters: soft ? 1 : 8,
          minSeconds: soft ? 0 : 1,
        });
        o.log(`  ${JSON.stringify(r)}`);
        shapeRuns.push(r);
      } catch (e) {
        notes.push(`matmulShapes, ${sh.name}: failed: ${(e as Error).message}`);
      }
    }
  }
  const shapeKeys = matmulShapeKeys(shapeRuns, { software: soft, dryRun: o.dryRun });
  notes.push(...shapeKeys.notes);
  o.log('dispatch overhead (a chain of small element-wise kernels)');
  const dispatchOverheadMs = await measureDispatchOverhead(soft ? 50 : 2000);
  o.log('… and the same chain recorded once and replayed');
  const replayedDispatch = await measureReplayedDispatch(soft ? 50 : 500, soft ? 2 : 20);

  o.log('GPT-2 dispatches per layer (n_layer 2 and 8), fused kernels');
  const fused = await gpt2LayerDispatches();
  o.log("… and with tfjs's ops");
  setWebGpuFusedKernels(false);
  let plain: LayerDispatches;
  try {
    plain = await gpt2LayerDispatches();
  } finally {
    setWebGpuFusedKernels(true);
  }

  o.log('GPT-2 decode step dispatches per layer (n_layer 2 and 8), fused kernels');
  const decode = await gpt2DecodeDispatches();
  o.log('… and under LoRA r 8');
  const decodeLora = await gpt2DecodeDispatches({ lora: 8 });

  const shape = soft
    ? { batchSize: 2, miniBatches: 1, ppoEpochs: 1, responseLength: 4 }
    : { batchSize: 16, responseLength: 24 };
  o.log(`tiny PPO step (${JSON.stringify(shape)})`);
  const trainer = await o.buildTinyTrainer({ ...shape, steps: 10 });
  let ppo: GpuBenchResult['ppo'];
  let timing: DecodeTiming;
  try {
    const timed = await benchPpoStep(trainer, { steps: soft ? 1 : 3, warmup: 1, peakGflops: matmul.gflops });
    const counted = await countDispatches(() => trainer.trainStep());
    ppo = { ...timed, webgpuDispatchesPerStep: counted.dispatches, readbacksPerStep: counted.readbacks };
    const tokens = soft ? 6 : 24;
    o.log(`greedy and sampled generation of the tiny policy, batch 16, ${tokens} new tokens`);
    const cfg = trainer.cfg;
    timing = await decodeTiming(trainer.models.policy, {
      batch: 16,
      tokens,
      reps: soft ? 1 : 3,
      padId: trainer.tokenizer.padId,
      sampling: { temperature: cfg.temperature, topK: cfg.topK ?? 0, topP: cfg.topP ?? 1 },
    });
  } finally {
    disposeTrainer(trainer);
  }
  notes.push(
    `Dispatches counted as GPUComputePassEncoder.dispatchWorkgroups calls, readbacks as GPUBuffer.mapAsync calls; per layer = (count at n_layer 8 − count at 2) / 6 on the project's GPT-2 at width 64, batch 2 × 16 tokens.`,
  );
  const gpt2Lora: Gpt2LoraStep[] = [];
  const gpt2Decode: DecodeTiming[] = [];
  const gpt2DecodeRepeats: DecodeTiming[][] = [];
  const torchRuns: { ours: number; torch: TorchPpoResult }[] = [];
  let vsTorch: { ours: number; torch: number } | { error: string } | undefined;
  const torch: TorchProbe = o.probeTorch
    ? await o.probeTorch()
    : { ok: false, reason: 'not probed (the bench was run without a Python probe)' };
  o.log(`PyTorch: ${torch.reason}`);
  const dry = soft && !!o.dryRun;
  if (dry)
    notes.push(
      'DRY RUN: the GPT-2 path ran on a software adapter at a small shape and batch, and PyTorch on the CPU, to check that the code runs; none of its numbers is a measurement.',
    );
  if ((soft && !dry) || !o.buildGpt2Trainer) {
    notes.push(
      `GPT-2 124M-shaped LoRA steps: not run (${soft ? 'software adapter' : 'no GPT-2 model builder'}; not measured).`,
    );
  } else {
    // The whole batch at once, no recompute: the step PyTorch runs (and what a GPU with memory to spare wants;
    // the automatic micro-batch plans for a 4 GB device: micro-batches of 4 with recompute for GPT-2).
    const size = dry ? { batchSize: 2, responseLength: 4 } : { batchSize: 16, responseLength: 24 };
    const whole = { ...size, microBatchSize: size.batchSize, recompute: 'off' };
    const ppo = { algorithm: 'ppo', lora: 8, ...whole };
    type Run = { label: string; over: Record<string, unknown>; fused: boolean; torch: boolean };
    const runs: Run[] = [{ label: 'PPO, LoRA r 8, shared value', over: ppo, fused: true, torch: true }];
    for (let i = 2; i <= (o.repeat ?? 1); i++)
      runs.push({ label: `PPO, LoRA r 8, shared value (run ${i})`, over: ppo, fused: true, torch: true });
    if (!dry) {
      runs.push({
        label: 'GRPO, LoRA r 8, 4 prompts × 4',
        over: { algorithm: 'grpo', lora: 8, groupSize: 4, ...whole },
        fused: true,
        torch: false,
      });
      if (!o.skipPlain)
        runs.push({
          label: 'PPO, LoRA r 8, shared value — tfjs ops (fused kernels off)',
          over: ppo,
          fused: false,
          torch: false,
        });
    }
    // The default plan (microBatchSize 0, recompute auto: what the engine resolves here), beside PyTorch's
    // whole-batch step of the same run (ppoDefaultPlan); in a dry run too, to check the code.
    runs.push({
      label: PPO_DEFAULT_PLAN_LABEL,
      over: { algorithm: 'ppo', lora: 8, ...size },
      fused: true,
      torch: false,
    });
    for (const { label, over, fused, torch: withTorch } of runs) {
      o.log(`GPT-2 124M shape: ${label}`);
      setWebGpuFusedKernels(fused);
      try {
        // After a PPO run with the fused kernels: its policy's decode speed, and the same step in PyTorch.
        const after = !withTorch
          ? undefined
          : async (trainer: PpoTrainer, step: Gpt2LoraStep): Promise<void> => {
              const cfg = trainer.cfg;
              o.log(`  ${JSON.stringify({ row: label, ...step })}`);
              const timings: DecodeTiming[] = [];
              for (const batch of [1, 16]) {
                o.log(`GPT-2 policy generation, batch ${batch}`);
                timings.push(
                  await decodeTiming(trainer.models.policy, {
                    batch,
                    tokens: dry ? 6 : 32,
                    reps: dry ? 1 : 3,
                    padId: trainer.tokenizer.padId,
                    sampling: { temperature: cfg.temperature, topK: cfg.topK ?? 0, topP: cfg.topP ?? 1 },
                  }),
                );
                o.log(`  ${JSON.stringify(timings[timings.length - 1])}`);
              }
              if (!gpt2Decode.length) gpt2Decode.push(...timings);
              else gpt2DecodeRepeats.push(timings);
              if (torch.ok && o.runTorch) {
                o.log('the same PPO step in PyTorch eager');
                try {
                  const t = await o.runTorch(cfg, step.Tq);
                  o.log(`  ${JSON.stringify({ torch: t })}`);
                  torchRuns.push({ ours: step.timeStep, torch: t });
                  if (torchRuns.length === 1) {
                    vsTorch = dry
                      ? {
                          error: `a dry run (a small shape on a software adapter against PyTorch on the CPU) is not a measurement: its ratio ${(step.timeStep / t.timeStep).toFixed(2)} is not reported under this name`,
                        }
                      : { ours: step.timeStep, torch: t.timeStep };
                  }
                } catch (e) {
                  if (!vsTorch) vsTorch = { error: (e as Error).message };
                }
              }
            };
        const row = await gpt2LoraStep(o.buildGpt2Trainer, label, over, matmul.gflops, o.log, after);
        gpt2Lora.push(row);
        if (!withTorch) o.log(`  ${JSON.stringify({ row: label, ...row })}`);
      } catch (e) {
        notes.push(`GPT-2 124M shape, ${label}: failed: ${(e as Error).message}`);
      } finally {
        setWebGpuFusedKernels(true);
      }
    }
  }
  const torchEager = torchRuns[0]?.torch ?? null;
  let ppoDefaultPlan: PpoDefaultPlan | null = null;
  if (gpt2Lora.length || dry) {
    const d = ppoDefaultPlanKeys({
      row: gpt2Lora.find((g) => g.label === PPO_DEFAULT_PLAN_LABEL) ?? null,
      torch,
      torchStep: torchEager,
      dryRun: dry,
    });
    ppoDefaultPlan = d.ppoDefaultPlan;
    notes.push(...d.notes);
  } else notes.push('ppoDefaultPlan: null (the GPT-2 rows were not run).');
  let qwenGrpo: QwenGrpoBench | null = null;
  if ((soft && !dry) || !o.buildQwenTrainer)
    notes.push(
      `qwenGrpo: null (not run: ${soft && !dry ? 'software adapter' : 'no Qwen model builder (runGpuBench buildQwenTrainer)'}).`,
    );
  else
    qwenGrpo = await qwenGrpoBench({
      build: o.buildQwenTrainer,
      runTorch: o.runTorchGrpo,
      torch,
      dryRun: dry,
      log: o.log,
    });
  // sampledOverGreedy: of the GPT-2 policy at batch 16 where it was timed, else of the tiny policy.
  const g16 = gpt2Decode.find((d) => d.batch === 16);
  const keyTiming = g16 ?? timing;
  const timingLabel = g16
    ? `the GPT-2 124M-shaped PPO policy (LoRA r 8)${dry ? ' — dry run: a small shape' : ''}`
    : 'the tiny policy';
  const k = gpuBenchKeys({
    matmul,
    matmulFast,
    matmulReplayed,
    matmulFastReplayed,
    decode,
    timing: keyTiming,
    torch,
    vsTorch,
    timingLabel,
  });
  notes.push(
    `decodeDispatchesPerLayer: the GPT-2 KV-cache decode step (one token for every row), per layer = (count at n_layer 8 − count at 2) / 6 (width 64, batch 2, 16 cache slots).`,
    `sampledOverGreedy: ms/token of ${timingLabel}'s generation at batch ${keyTiming.batch} (${keyTiming.tokens} − 2 new tokens, prefill left out), sampled at temperature ${keyTiming.sampling.temperature}, top-k ${keyTiming.sampling.topK}, top-p ${keyTiming.sampling.topP}, over greedy${soft ? '; on a software adapter: a ratio of CPU times, not a GPU figure' : ''}.`,
    ...(torchEager
      ? [
          `vsTorchEager: our GPT-2 PPO + LoRA step (fused kernels) ÷ the same step in PyTorch ${torchEager.torch} eager (transformers ${torchEager.transformers}, float32, TF32 ${torchEager.tf32 ? 'on' : 'off'}) on ${torchEager.device}: scripts/torch_ppo_step.py, mean of ${torchEager.steps} steps after a warm-up.`,
        ]
      : []),
    ...k.notes,
  );
  return {
    ...k.keys,
    decode,
    decodeLora,
    decodeTiming: timing,
    gpt2Decode,
    gpt2DecodeRepeats,
    torchEager,
    torchRuns,
    adapter: o.adapter,
    sizes: soft ? 'software adapter: smallest sizes only' : null,
    matmul,
    matmulFast,
    matmulReplayed,
    matmulFastReplayed,
    matmulShapes: shapeKeys.rows,
    dispatchOverheadMs,
    replayedDispatch,
    layers: { fused, plain },
    webgpuDispatchesPerLayerFwd: fused.webgpuDispatchesPerLayerFwd,
    webgpuDispatchesPerLayerFwdBwd: fused.webgpuDispatchesPerLayerFwdBwd,
    ppo,
    webgpuDispatchesPerStep: ppo.webgpuDispatchesPerStep,
    readbacksPerStep: ppo.readbacksPerStep,
    gpt2Lora,
    ppoDefaultPlan,
    qwenGrpo,
    notes,
  };
}

/** Builds the Qwen row's trainer from config overrides; `owner`, when given, is where it reads its config. */
export type QwenTrainerBuilder = (
  overrides: Record<string, unknown>,
  owner?: BuildOptions['owner'],
) => Promise<PpoTrainer>;

/** The label of the GPT-2 PPO row at the default plan (`ppoDefaultPlan`). */
export const PPO_DEFAULT_PLAN_LABEL = 'PPO, LoRA r 8, shared value — the default plan';

/**
 * The Qwen row (`qwenGrpo`): one trainer (GRPO, LoRA r 8, one epoch of one minibatch) timed at the default plan
 * (microBatchSize 0, recompute auto), then (both keys are live: the trainer's config source changes) at the whole batch without
 * recompute; first one untimed step for the trainer (`trainerWarmupS`), then each plan a warm-up and 1 or 2 timed
 * steps (qwenTimedSteps). The trainer is freed, then PyTorch eager
 * + PEFT runs the same step once (warm-up + 3 timed; a dry run: 1, on the CPU). A failure becomes a note.
 */
export async function qwenGrpoBench(o: {
  build: QwenTrainerBuilder;
  runTorch?: (spec: TorchGrpoSpec) => Promise<TorchGrpoResult>;
  torch: TorchProbe;
  dryRun: boolean;
  log: (m: string) => void;
  /**
   * Another row on the same code (src/bench/f16-gpu.ts, issue #36): its name in notes, model label, run, plans,
   * the PyTorch base's dtype (the builder sets ours), and a reading of GPU memory for the default plan's step.
   */
  row?: {
    key: string;
    model: string;
    run: ReturnType<typeof qwenBenchRun>;
    plans: QwenPlanKey[];
    baseDtype: 'f16' | 'f32';
    torchDtype: TorchGrpoSpec['dtype'];
    gpuMemoryUsedBytes?: () => number | null;
    /** Sampling of the same over the memory plan's timed steps (their peak on the device). */
    sampleGpuMemory?: () => GpuMemorySampler;
    /** The bounded plan's micro-batch (default BOUNDED_PLAN_MICRO). */
    boundedMicro?: number;
  };
}): Promise<QwenGrpoBench> {
  const key = o.row?.key ?? 'qwenGrpo';
  const run = o.row?.run ?? qwenBenchRun(o.dryRun);
  const notes: string[] = [];
  const out: QwenGrpoBench = {
    model: o.row?.model ?? qwenModelLabel(o.dryRun),
    measured: !o.dryRun,
    batchSize: run.batchSize,
    groupSize: run.groupSize,
    responseLength: run.responseLength,
    Tq: null,
    lora: run.lora,
    loraTargets: [],
    trainableParams: 0,
    defaultPlan: null,
    wholeBatch: null,
    torchEagerPeft: null,
    vsTorchEagerDefault: null,
    vsTorchEagerWhole: null,
    trainerWarmupS: null,
    ...(o.row ? { baseDtype: o.row.baseDtype, memory: null, boundedPlan: null } : {}),
    notes,
  };
  if (o.dryRun)
    notes.push(
      `${key}: a dry run (2 layers of width 64 on a software adapter, PyTorch on the CPU): none of its figures is a measurement.`,
    );
  const memBefore = o.row?.gpuMemoryUsedBytes?.() ?? null;
  o.log(
    `${out.model}: GRPO, LoRA r ${run.lora}, ${run.batchSize / run.groupSize} prompts × ${run.groupSize}, ${run.responseLength} tokens`,
  );
  let spec: TorchGrpoSpec | null = null;
  let trainer: PpoTrainer;
  let stepPlan: Partial<TrainConfig> = {};
  try {
    // The trainer reads its config from here at each step's start: the plan below is a live change.
    trainer = await o.build({ ...run, miniBatches: 1, ppoEpochs: 1, steps: 1000 }, (first) => ({
      config: () => ({ ...first, ...stepPlan }),
    }));
  } catch (e) {
    notes.push(`${key}: the trainer could not be built: ${(e as Error).message}`);
    return out;
  }
  try {
    const policy = trainer.models.policy;
    out.loraTargets = resolveLoraTargets(policy.config, trainer.cfg.loraTargets);
    out.trainableParams = policy.trainableVariables().reduce((n, v) => n + v.size, 0);
    const boundedMicro = o.row?.boundedMicro ?? BOUNDED_PLAN_MICRO;
    const all: { key: QwenPlanKey; label: string; plan: QwenPlanRow['requested'] }[] = [
      { key: 'defaultPlan', label: 'the default plan', plan: { microBatchSize: 0, recompute: 'auto' } },
      {
        key: 'wholeBatch',
        label: 'the whole batch',
        plan: { microBatchSize: run.batchSize, recompute: 'off' },
      },
      {
        key: 'boundedPlan',
        label: `micro-batches of ${boundedMicro} with recompute`,
        plan: { microBatchSize: boundedMicro, recompute: 'blocks' },
      },
    ];
    // A row's plans in the order it asked for them (the first gets the memory reading); the Qwen row: two.
    const plans = o.row
      ? o.row.plans.map((k) => all.find((p) => p.key === k)!)
      : all.filter((p) => p.key !== 'boundedPlan');
    // One step for the trainer, whichever plan comes first: its first recordings (decode and update replays),
    // buffer pools and JIT belong to no plan. Each plan then has its own warm-up as before.
    if (plans.length > 0) {
      try {
        stepPlan = plans[0].plan;
        out.trainerWarmupS = (await trainer.trainStep()).metrics.timeStep;
        o.log(`  trainer warm-up ${out.trainerWarmupS.toFixed(2)} s (untimed)`);
        notes.push(
          `${key}.trainerWarmupS: ${out.trainerWarmupS.toFixed(2)} s, one untimed step at ${plans[0].label} before any plan (first recordings and pools); each plan then had its own warm-up.`,
        );
      } catch (e) {
        notes.push(`${key}: the trainer's warm-up step failed: ${(e as Error).message}`);
      }
    }
    for (const { key: planKey, label, plan } of plans) {
      o.log(`${key} GRPO, ${label} (microBatchSize ${plan.microBatchSize}, recompute ${plan.recompute})`);
      try {
        stepPlan = plan;
        const w = await trainer.trainStep();
        const warmupS = w.metrics.timeStep;
        const n = qwenTimedSteps(warmupS, o.dryRun);
        o.log(`  warm-up ${warmupS.toFixed(2)} s; ${n} timed step${n > 1 ? 's' : ''}`);
        const stepTimes: number[] = [];
        // The memory reading's plan: the peak of tfjs's buffers over its timed steps.
        const meter = o.row && planKey === plans[0].key ? new GpuBufferPeakMeter() : null;
        meter?.install();
        const sampler = o.row && planKey === plans[0].key ? (o.row.sampleGpuMemory?.() ?? null) : null;
        // The sampler's command takes a moment to start: where the reading before the build worked, the steps
        // begin once it has read once (or after FIRST_SAMPLE_WAIT_MS, where it never does).
        for (
          const t0 = Date.now();
          sampler && memBefore !== null && sampler.samples() === 0 && Date.now() - t0 < FIRST_SAMPLE_WAIT_MS;
        )
          await new Promise<void>((r) => setTimeout(r, 10));
        let peak: GpuBufferPeak | null = null;
        let gpuPeak: number | null = null;
        let timed: Awaited<ReturnType<typeof benchPpoStep>>;
        try {
          timed = await benchPpoStep(trainer, {
            steps: n,
            warmup: 0,
            onStep: (_, s) => {
              stepTimes.push(s);
              o.log(`  step ${s.toFixed(2)} s`);
            },
          });
          peak = meter?.read() ?? null;
        } finally {
          meter?.uninstall();
          gpuPeak = (await sampler?.stop()) ?? null;
        }
        const resolved = trainer.stepPlan();
        out.Tq = timed.Tq;
        if (o.row && planKey === plans[0].key) {
          // What the step destroyed at its end (the trim on entering 'idle') is freed once the device has run the
          // submit that followed it: wait for that before reading what stays.
          await replayBackend()?.queue.onSubmittedWorkDone();
          const after = o.row.gpuMemoryUsedBytes?.() ?? null;
          const m = tf.memory() as tf.MemoryInfo & { numBytesAllocatedInGPU?: number };
          const e = trainer.memoryEstimate();
          out.memory = {
            plan: planKey,
            gpuBytes: after !== null && memBefore !== null ? after - memBefore : null,
            gpuPeakBytes: gpuPeak !== null && memBefore !== null ? gpuPeak - memBefore : null,
            gpuPeakSamples: sampler ? sampler.samples() : null,
            tfjsAllocatedBytes:
              typeof m.numBytesAllocatedInGPU === 'number' ? m.numBytesAllocatedInGPU : null,
            replayHeldBytes: replayHeldBytes(),
            tfjsPeakUsedBytes: peak?.usedBytes ?? null,
            tfjsPeakAllocatedBytes: peak?.allocatedBytes ?? null,
            estimateBytes: e.total,
            estimate: formatEstimate(e),
          };
          o.log(`  memory ${JSON.stringify(out.memory)}`);
        }
        out[planKey] = {
          label,
          requested: plan,
          microBatchSize: resolved.microBatchSize,
          recompute: resolved.recompute,
          generateMicroBatchSize: resolved.generateMicroBatchSize,
          sPerStep: timed.timeStep,
          generateS: timed.timeGenerate,
          scoreS: timed.timeScore,
          updateS: timed.timeUpdate,
          warmupS,
          timedSteps: n,
          stepTimes,
          decodeReplays: timed.decodeReplays,
          note:
            !o.dryRun && n === 1
              ? `one timed step after one warm-up: the warm-up took ${warmupS.toFixed(1)} s (over ${QWEN_SLOW_WARMUP_S} s)`
              : null,
        };
        o.log(`  ${JSON.stringify(out[planKey])}`);
      } catch (e) {
        notes.push(`${key}.${planKey}: failed: ${(e as Error).message}`);
      }
    }
    if (out.Tq !== null && o.torch.ok && o.runTorch)
      spec = torchGrpoSpec(trainer.cfg, {
        model: trainer.cfg.model,
        Tq: out.Tq,
        device: o.dryRun ? 'cpu' : 'cuda',
        loraTargets: out.loraTargets,
        warmup: 1,
        steps: o.dryRun ? 1 : 3,
        dtype: o.row?.torchDtype ?? 'float32',
      });
  } finally {
    disposeTrainer(trainer);
  }
  let torchRun: TorchGrpoResult | { error: string } | undefined;
  if (spec && o.runTorch) {
    o.log('the same GRPO step in PyTorch eager + PEFT');
    try {
      torchRun = await o.runTorch(spec);
      o.log(`  ${JSON.stringify({ torch: torchRun })}`);
    } catch (e) {
      torchRun = { error: (e as Error).message };
    }
  }
  const k = qwenGrpoKeys({
    defaultPlan: out.defaultPlan,
    wholeBatch: out.wholeBatch,
    torch: o.torch,
    torchRun,
    ours: { loraTargets: out.loraTargets, trainableParams: out.trainableParams },
    dryRun: o.dryRun,
    key,
  });
  notes.push(...k.notes);
  if (k.torchEagerPeft)
    notes.push(
      `${key}.torchEagerPeft: scripts/torch_grpo_step.py, PyTorch ${k.torchEagerPeft.torch} eager, transformers ${k.torchEagerPeft.transformers}, PEFT ${k.torchEagerPeft.peft} (${k.torchEagerPeft.dtype === 'float16' ? 'a float16 base, adapters in float32' : 'float32'}, TF32 ${k.torchEagerPeft.tf32 ? 'on' : 'off'}) on ${k.torchEagerPeft.device}: mean of ${k.torchEagerPeft.steps} steps after a warm-up${k.torchEagerPeft.peakMemoryBytes ? `; peak memory allocated ${(k.torchEagerPeft.peakMemoryBytes / 1e9).toFixed(2)} GB` : ''}.`,
    );
  return {
    ...out,
    torchEagerPeft: k.torchEagerPeft,
    vsTorchEagerDefault: k.vsTorchEagerDefault,
    vsTorchEagerWhole: k.vsTorchEagerWhole,
  };
}

/**
 * Elements of the dispatch chains below: at tfjs's CPU hand-off size (WEBGPU_CPU_HANDOFF_SIZE_THRESHOLD, 1000 by
 * default) or above, so that each add is a GPU program. (Before 2026-11-30 the chain was 256 floats, which tfjs's
 * CPU forwarding ran in JavaScript: `dispatchOverheadMs` readings until then, 0.016–0.03 ms, timed CPU adds, not
 * dispatches.)
 */
const CHAIN_ELEMENTS = 1024;
const chainElements = (): number =>
  Math.max(CHAIN_ELEMENTS, tf.env().getNumber('WEBGPU_CPU_HANDOFF_SIZE_THRESHOLD'));

/**
 * Milliseconds per kernel of a chain of `n` dependent adds on 1024 floats (after a warm-up chain): what one
 * dispatch costs when the arithmetic is nothing — the JS, binding and submit work of tfjs and Dawn.
 */
export async function measureDispatchOverhead(n: number): Promise<number> {
  const size = chainElements();
  const chain = async (k: number): Promise<number> => {
    const t0 = performance.now();
    let x = tf.zeros([size]);
    const one = tf.ones([size]);
    for (let i = 0; i < k; i++) {
      const y = tf.add(x, one);
      x.dispose();
      x = y;
    }
    await x.data();
    x.dispose();
    one.dispose();
    return performance.now() - t0;
  };
  await chain(Math.min(n, 50));
  return (await chain(n)) / n;
}

/** What one dispatch of a recorded sequence costs (measureReplayedDispatch). */
export interface ReplayedDispatch {
  /** Dispatches in the recorded chain and replays timed. */
  dispatches: number;
  replays: number;
  /** Wall time per dispatch over the replays, the GPU finishing included: the host's and the GPU's, overlapped. */
  wallUs: number;
  /** The host's share per dispatch: encoding and submitting the replays alone. */
  hostUs: number;
}

/**
 * Microseconds per dispatch of a recorded chain of `n` dependent adds on 1024 floats, replayed `replays` times
 * (kernels/webgpu-replay.ts, as the recorded decode and update run): the fixed cost of one dispatch once tfjs's
 * per-program JavaScript is gone — Dawn's encoding on the host and the GPU's launch and barrier between dependent
 * dispatches. A decode of D dispatches a token cannot take less than D times this. Null where replay does not
 * apply (not WebGPU).
 */
export async function measureReplayedDispatch(n: number, replays: number): Promise<ReplayedDispatch | null> {
  const backend = replayBackend();
  if (!backend) return null;
  const size = chainElements();
  const x0 = tf.zeros([size]);
  const one = tf.ones([size]);
  const { frame, result } = ReplayFrame.record(backend, () => {
    let x = tf.add(x0, one);
    for (let i = 1; i < n; i++) {
      const y = tf.add(x, one);
      x.dispose();
      x = y;
    }
    return x;
  }, [x0, one]);
  try {
    const settle = async () => {
      const probe = tf.slice(result, [0], [1]);
      await probe.data();
      probe.dispose();
    };
    frame.replay();
    await settle(); // warm: pipelines and bind groups are made; the first replay's submit is not timed
    const t0 = performance.now();
    for (let r = 0; r < replays; r++) frame.replay();
    const host = performance.now() - t0;
    await settle();
    const wall = performance.now() - t0;
    const per = 1000 / (replays * frame.size);
    return { dispatches: frame.size, replays, wallUs: wall * per, hostUs: host * per };
  } finally {
    frame.dispose();
    tf.dispose([result, x0, one]);
  }
}

async function gpt2LoraStep(
  build: (overrides: Record<string, unknown>) => Promise<PpoTrainer>,
  label: string,
  over: Record<string, unknown>,
  peakGflops: number,
  log: (m: string) => void,
  after?: (trainer: PpoTrainer, step: Gpt2LoraStep) => Promise<void>,
): Promise<Gpt2LoraStep> {
  const trainer = await build({ ...over, miniBatches: 1, ppoEpochs: 1, steps: 10 });
  try {
    const timed = await benchPpoStep(trainer, {
      steps: 2,
      warmup: 1,
      peakGflops,
      onStep: (i, s) => log(`  ${i < 0 ? 'warm-up' : 'step'} ${s.toFixed(2)} s`),
    });
    const counted = await countDispatches(() => trainer.trainStep());
    const plan = trainer.stepPlan();
    const c = trainer.models.policy.config;
    const flops = loraUpdateFlops(c, {
      batch: timed.batchSize,
      Tq: timed.Tq,
      R: timed.responseLength,
      epochs: trainer.cfg.ppoEpochs,
      value: trainer.models.value !== null,
    });
    const gflops = flops / timed.timeUpdate / 1e9;
    const step: Gpt2LoraStep = {
      label,
      algorithm: String(trainer.cfg.algorithm),
      batchSize: timed.batchSize,
      responseLength: timed.responseLength,
      Tq: timed.Tq,
      timeStep: timed.timeStep,
      timeGenerate: timed.timeGenerate,
      timeScore: timed.timeScore,
      timeUpdate: timed.timeUpdate,
      updateFlops: flops,
      updateGflopsPerSecond: gflops,
      updateMfu: gflops / peakGflops,
      webgpuDispatchesPerStep: counted.dispatches,
      readbacksPerStep: counted.readbacks,
      microBatchSize: plan.microBatchSize,
      recompute: plan.recompute,
    };
    if (after) await after(trainer, step);
    return step;
  } finally {
    disposeTrainer(trainer);
  }
}

const f = (x: number | null, d = 2): string => (x == null ? 'not measured' : x.toFixed(d));

/** Markdown for the GPU bench. */
export function gpuMarkdown(r: GpuBenchResult): string {
  const a = r.adapter;
  const L = r.layers;
  return [
    `## WebGPU in Node (Dawn)`,
    '',
    `Adapter: ${[a.vendor, a.architecture, a.device].filter(Boolean).join(' / ')}${a.description ? ` (${a.description})` : ''}, Vulkan from ${a.vulkan}${a.software ? ' — software adapter: smallest sizes only' : ''}.`,
    '',
    '| measure | value |',
    '| --- | --- |',
    `| matmul peak, ${r.matmul.n}² | ${f(r.matmul.gflops, 3)} GFLOP/s |`,
    `| one small kernel (dispatch overhead) | ${f(r.dispatchOverheadMs, 3)} ms |`,
    `| one small kernel, recorded and replayed (wall; host's share) | ${r.replayedDispatch ? `${f(r.replayedDispatch.wallUs, 1)} µs; ${f(r.replayedDispatch.hostUs, 1)} µs` : '—'} |`,
    `| tiny PPO step (batch ${r.ppo.batchSize}, response ${r.ppo.responseLength}) | ${f(r.ppo.timeStep)} s (update ${f(r.ppo.timeUpdate)} s) |`,
    `| update MFU against that peak | ${f(r.ppo.updateMfu, 3)} |`,
    `| webgpuDispatchesPerStep | ${r.webgpuDispatchesPerStep} |`,
    `| readbacksPerStep | ${r.readbacksPerStep} |`,
    `| decodeDispatchesPerLayer (GPT-2 decode step) | ${r.decodeDispatchesPerLayer} (under LoRA r 8: ${r.decodeLora.perLayer}) |`,
    `| matmulTflops2048 (tfjs's kernel) | ${r.matmulTflops2048 === null ? 'null (see notes)' : f(r.matmulTflops2048, 2)} |`,
    `| matmulFastTflops2048 (ours, webgpu-matmul.ts) | ${r.matmulFastTflops2048 === null ? 'null (see notes)' : f(r.matmulFastTflops2048, 2)} |`,
    `| matmulTflops2048Replayed / matmulFastTflops2048Replayed (GPU time from a recorded frame) | ${r.matmulTflops2048Replayed === null ? 'null (see notes)' : f(r.matmulTflops2048Replayed, 2)} / ${r.matmulFastTflops2048Replayed === null ? 'null (see notes)' : f(r.matmulFastTflops2048Replayed, 2)} |`,
    `| greedy / sampled ms per token (batch ${r.decodeTiming.batch}) | ${f(r.decodeTiming.greedyMsPerToken)} / ${f(r.decodeTiming.sampledMsPerToken)} |`,
    `| sampledOverGreedy | ${r.sampledOverGreedy === null ? 'null (see notes)' : f(r.sampledOverGreedy, 2)} |`,
    `| vsTorchEager | ${r.vsTorchEager === null ? 'null (see notes)' : f(r.vsTorchEager, 2)} |`,
    '',
    '| dispatches per transformer layer | tfjs ops | fused kernels |',
    '| --- | --- | --- |',
    `| forward | ${f(L.plain.webgpuDispatchesPerLayerFwd, 1)} | ${f(L.fused.webgpuDispatchesPerLayerFwd, 1)} |`,
    `| forward + backward | ${f(L.plain.webgpuDispatchesPerLayerFwdBwd, 1)} | ${f(L.fused.webgpuDispatchesPerLayerFwdBwd, 1)} |`,
    `| fixed per forward (embeddings, final norm, head) | ${f(L.plain.fixedFwd, 1)} | ${f(L.fused.fixedFwd, 1)} |`,
    '',
    ...(r.matmulShapes.length
      ? [
          "| matmul (GPT-2's shapes) | our tile | tfjs TFLOP/s | ours TFLOP/s | ours ÷ tfjs | max rel. diff |",
          '| --- | --- | --- | --- | --- | --- |',
          ...r.matmulShapes.map(
            (m) =>
              `| ${m.shape} | ${m.tile} | ${m.tfjsTflops === null ? 'null' : f(m.tfjsTflops, 2)} | ${m.fastTflops === null ? 'null' : f(m.fastTflops, 2)} | ${m.tfjsTflops && m.fastTflops ? (m.fastTflops / m.tfjsTflops).toFixed(2) : '—'} | ${m.maxRelDiff.toExponential(1)} |`,
          ),
          '',
        ]
      : []),
    ...(r.gpt2Lora.length
      ? [
          '| GPT-2 124M shape (random weights) | batch × response | s/step | generate | score | update | update GFLOP/s | MFU | dispatches/step | readbacks/step |',
          '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
          ...r.gpt2Lora.map(
            (g) =>
              `| ${g.label} | ${g.batchSize} × ${g.responseLength} (prompt ${g.Tq}) | ${f(g.timeStep)} | ${f(g.timeGenerate)} | ${f(g.timeScore)} | ${f(g.timeUpdate)} | ${f(g.updateGflopsPerSecond, 1)} | ${f(g.updateMfu, 3)} | ${g.webgpuDispatchesPerStep} | ${g.readbacksPerStep} |`,
          ),
          '',
        ]
      : []),
    ...torchTable(r),
    ...defaultPlanTable(r),
    ...qwenTable(r),
    ...r.notes.map((n) => `- ${n}`),
    '',
  ].join('\n');
}

/** Ours beside PyTorch eager: the GPT-2 PPO + LoRA step's phases and the policy's ms/token ([] if neither ran). */
function torchTable(r: GpuBenchResult): string[] {
  const ours = r.gpt2Lora[0];
  if (!ours && !r.gpt2Decode.length) return [];
  const t = r.torchEager;
  const row = (name: string, a: number | null | undefined, b: number | null | undefined, d = 3): string =>
    `| ${name} | ${f(a ?? null, d)} | ${t ? f(b ?? null, d) : 'not run'} | ${a && b ? (a / b).toFixed(2) : '—'} |`;
  const dec = (batch: number) => r.gpt2Decode.find((x) => x.batch === batch);
  return [
    `| GPT-2 124M shape, PPO + LoRA r 8 | ours (fused kernels) | PyTorch eager${t ? ` (${t.device})` : ''} | ours ÷ PyTorch |`,
    '| --- | --- | --- | --- |',
    row('s/step', ours?.timeStep, t?.timeStep),
    row('generate, s', ours?.timeGenerate, t?.timeGenerate),
    row('score, s', ours?.timeScore, t?.timeScore),
    row('update, s', ours?.timeUpdate, t?.timeUpdate),
    row('greedy ms/token, batch 1', dec(1)?.greedyMsPerToken, t?.greedyMsPerToken['1'], 2),
    row('greedy ms/token, batch 16', dec(16)?.greedyMsPerToken, t?.greedyMsPerToken['16'], 2),
    row('sampled ms/token, batch 16', dec(16)?.sampledMsPerToken, t?.sampledMsPerToken, 2),
    '',
    ...(r.torchRuns.length > 1
      ? [
          '| run | ours s/step | PyTorch s/step | ours ÷ PyTorch |',
          '| --- | --- | --- | --- |',
          ...r.torchRuns.map(
            (x, i) =>
              `| ${i + 1} | ${x.ours.toFixed(3)} | ${x.torch.timeStep.toFixed(3)} | ${(x.ours / x.torch.timeStep).toFixed(2)} |`,
          ),
          '',
        ]
      : []),
  ];
}

const ratioCell = (x: number | null | undefined): string => (x == null ? 'null (see notes)' : x.toFixed(2));

/** ppoDefaultPlan: the GPT-2 PPO step at the default plan beside PyTorch's ([] if it did not run). */
function defaultPlanTable(r: GpuBenchResult): string[] {
  const d = r.ppoDefaultPlan;
  if (!d) return [];
  return [
    `| GPT-2 124M shape, PPO + LoRA r 8, default plan${d.measured ? '' : ' (dry run: not a measurement)'} | micro-batch | recompute | s/step | generate | score | update | PyTorch eager s/step | vsTorchEagerDefaultPlan |`,
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    `| ppoDefaultPlan | ${d.microBatchSize} | ${d.recompute ? 'on' : 'off'} | ${f(d.sPerStep, 3)} | ${f(d.generateS, 3)} | ${f(d.scoreS, 3)} | ${f(d.updateS, 3)} | ${f(d.torchEagerS, 3)} | ${ratioCell(d.vsTorchEagerDefaultPlan)} |`,
    '',
  ];
}

/** qwenGrpo: ours at the default plan and the whole batch, PyTorch eager + PEFT beside ([] if it did not run). */
function qwenTable(r: GpuBenchResult): string[] {
  const q = r.qwenGrpo;
  if (!q) return [];
  const t = q.torchEagerPeft;
  const ours = (p: QwenPlanRow | null, name: string, ratio: number | null): string =>
    p
      ? `| ours, ${name} | ${p.microBatchSize}${p.generateMicroBatchSize !== p.microBatchSize ? ` (generate ${p.generateMicroBatchSize})` : ''}, recompute ${p.recompute ? 'on' : 'off'} | ${f(p.sPerStep, 3)} | ${f(p.generateS, 3)} | ${f(p.scoreS, 3)} | ${f(p.updateS, 3)} | ${p.timedSteps} | ${ratioCell(ratio)} |`
      : `| ours, ${name} | not run | — | — | — | — | — | null (see notes) |`;
  return [
    `| ${q.model}: GRPO + LoRA r ${q.lora}, ${q.batchSize / q.groupSize} prompts × ${q.groupSize}, R ${q.responseLength}${q.measured ? '' : ' (dry run: not a measurement)'} | micro-batch | s/step | generate | score | update | timed steps | ours ÷ PyTorch |`,
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ours(q.defaultPlan, 'default plan', q.vsTorchEagerDefault),
    ours(q.wholeBatch, 'whole batch', q.vsTorchEagerWhole),
    t
      ? `| PyTorch eager + PEFT (${t.device}) | ${q.batchSize}, no recompute | ${f(t.sPerStep, 3)} | ${f(t.generateS, 3)} | ${f(t.scoreS, 3)} | ${f(t.updateS, 3)} | ${t.steps} | — |`
      : '| PyTorch eager + PEFT | not run | — | — | — | — | — | — |',
    '',
    ...q.notes.map((n) => `- ${n}`),
    '',
  ];
}
