/**
 * `bench --gpu`'s f16-base rows (issue #36; `PPO_GPU_BENCH_ROWS=f16`, src/cli/bench.ts): LoRA r 8 GRPO on
 * Qwen2.5-1.5B- and Qwen3-1.7B-shaped models (random weights written in BF16) with the frozen base stored in f16
 * (two values per u32; adapters, optimiser state, activations and arithmetic f32), 2 prompts × groups of 8, 64
 * response tokens, one epoch of one minibatch, at the default plan; beside it the same step in PyTorch eager + PEFT
 * on a float16 base (scripts/torch_grpo_step.py, dtype float16), GPU memory of our step (nvidia-smi, before the
 * build and after the timed steps) against the engine's estimate, and greedy decode at batch 1 of the bare model
 * with its base in f16 against the same model in f32 (issue #36's "decode reads half the bytes").
 *
 * Run one shape per process (PPO_GPU_BENCH_F16_MODELS) where the memory reading matters: tfjs keeps freed buffers
 * in its pool, so a second model in the same process starts from the first one's.
 */
import type { PpoTrainer } from '../core/ppo/trainer';
import type { BuildOptions } from '../core/ppo/setup';
import type { CausalLM } from '../core/model/lm';
import { generate } from '../core/model/sampling';
import { countDispatches } from './webgpu-dispatch';
import {
  setWebGpuLinearVecRows,
  webGpuHeadRows,
  webGpuLinearFastTiles,
  webGpuLinearKernelsInForce,
  webGpuLinearVecRows,
} from '../core/kernels/webgpu-linear';
import { describeKernelTuning } from '../core/backend/webgpu-tune';
import { sharedPrefixDefault } from '../core/model/shared-prefix';
import {
  benchModelLabel,
  f16BenchRun,
  f16BenchShape,
  f16BenchTitle,
  type F16BenchShapeName,
  type TorchGrpoResult,
  type TorchGrpoSpec,
} from './torch-grpo';
import {
  decodeTiming,
  qwenGrpoBench,
  type GpuAdapterReport,
  type GpuMemorySampler,
  type QwenGrpoBench,
  type QwenPlanKey,
  type QwenPlanRow,
  type TorchProbe,
} from './webgpu-gpu';

/** The plans an f16 row may time (PPO_GPU_BENCH_F16_PLANS), in order; the first gets the memory reading. */
export const F16_BENCH_PLANS = ['defaultPlan', 'boundedPlan'] as const;
export type F16BenchPlan = (typeof F16_BENCH_PLANS)[number] & QwenPlanKey;

/** Greedy ms/token at batch 1 of one model with its base in f16 and in f32, on the same GPU in the same run. */
/** Greedy decode at batch 1 with the base in f16 and in f32, and their ratio. */
export interface F16DecodeTimes {
  f16GreedyMsPerToken: number | null;
  f32GreedyMsPerToken: number | null;
  /** f16 ÷ f32 (issue #36's target: ≤ 0.6); null with a note where either is missing or in a dry run. */
  f16OverF32: number | null;
}

export interface F16DecodeRow extends F16DecodeTimes {
  model: string;
  batch: number;
  tokens: number;
  /**
   * GPU dispatches a greedy token costs with the base in f16 (the replayed decode as generate runs it): the count of
   * a 24-token generation less an 8-token one, over 16. Times the bench's `replayedDispatch` it is the fixed cost a
   * token pays whatever the bytes (null where not counted).
   */
  dispatchesPerToken: number | null;
  /**
   * The same three with the few-rows program's vector loads on (setWebGpuLinearVecRows(true)), each timed right
   * after the default on the same model, where the default ran without them; null where the process turned them on
   * or off itself (PPO_WEBGPU_VEC_ROWS), or where the device's timing (core/backend/webgpu-tune.ts) chose them.
   */
  vecLoads: F16DecodeTimes | null;
  /**
   * The same three with the vector loads off (setWebGpuLinearVecRows(false)), where the device's timing chose them
   * for the default; null otherwise (absent in earlier results).
   */
  withoutVecLoads?: F16DecodeTimes | null;
}

export interface F16BenchResult {
  adapter: GpuAdapterReport;
  /** One row per shape run (qwenGrpoBench with the f16 base, at the plans asked for: the default plan unless told). */
  rows: QwenGrpoBench[];
  decode: F16DecodeRow | null;
  /**
   * The fused linear's settings the rows ran under (PPO_WEBGPU_VEC_ROWS, PPO_WEBGPU_LINEAR_TILES; null: the default,
   * which is the device's timing, adapter.kernels): the few-rows program's vector loads and the tile kernel for the
   * tiled products; `inForce`: what ran (absent in earlier results, where the default was off).
   */
  linearKernels: {
    vecRows: boolean | null;
    fastTiles: boolean | null;
    /** PPO_WEBGPU_HEAD_ROWS (absent in earlier results). */
    headRows?: boolean | null;
    inForce?: { vecRows: boolean; fastTiles: boolean; headRows?: boolean };
  };
  /**
   * Whether the rows' trainers ran a prompt their rows share once (PpoTrainer.sharedPrefix, PPO_SHARED_PREFIX;
   * absent in earlier results, which ran every row in full).
   */
  sharedPrefix?: boolean;
  notes: string[];
}

export interface F16BenchHooks {
  buildTrainer: (
    name: F16BenchShapeName,
    overrides: Record<string, unknown>,
    owner?: BuildOptions['owner'],
  ) => Promise<PpoTrainer>;
  loadModel: (name: F16BenchShapeName, baseDtype: 'f16' | 'f32') => Promise<CausalLM>;
  runTorchGrpo?: (spec: TorchGrpoSpec) => Promise<TorchGrpoResult>;
  gpuMemoryUsedBytes?: () => number | null;
  /** The GPU's used memory sampled over the timed steps (src/cli/torch-probe.ts sampleGpuMemory). */
  sampleGpuMemory?: () => GpuMemorySampler;
}

/** The key of a shape's row in notes: "f16Grpo.qwen2.5-1.5b". */
export const f16RowKey = (name: F16BenchShapeName): string => `f16Grpo.${name}`;

export async function runF16Bench(o: {
  adapter: GpuAdapterReport;
  names: readonly F16BenchShapeName[];
  /** The shape whose bare model's decode is timed in f16 and f32 (null: none). */
  decodeModel: F16BenchShapeName | null;
  /** The plans to time, in order (default: the default plan only). */
  plans?: readonly F16BenchPlan[];
  /** The bounded plan's micro-batch (default BOUNDED_PLAN_MICRO, 4). */
  boundedMicro?: number;
  hooks: F16BenchHooks;
  torch: TorchProbe;
  dryRun: boolean;
  log: (m: string) => void;
}): Promise<F16BenchResult> {
  const notes: string[] = [];
  const rows: QwenGrpoBench[] = [];
  for (const name of o.names) {
    const key = f16RowKey(name);
    rows.push(
      await qwenGrpoBench({
        build: (over, owner) => o.hooks.buildTrainer(name, over, owner),
        runTorch: o.hooks.runTorchGrpo,
        torch: o.torch,
        dryRun: o.dryRun,
        log: o.log,
        row: {
          key,
          model: `${benchModelLabel(f16BenchTitle(name), f16BenchShape(name, o.dryRun), o.dryRun)}, BF16 file, base in f16`,
          run: f16BenchRun(o.dryRun),
          plans: [...(o.plans ?? ['defaultPlan'])],
          ...(o.boundedMicro ? { boundedMicro: o.boundedMicro } : {}),
          baseDtype: 'f16',
          torchDtype: 'float16',
          gpuMemoryUsedBytes: o.hooks.gpuMemoryUsedBytes,
          sampleGpuMemory: o.hooks.sampleGpuMemory,
        },
      }),
    );
  }
  let decode: F16DecodeRow | null = null;
  if (o.decodeModel) {
    const name = o.decodeModel;
    const tokens = o.dryRun ? 6 : 32;
    decode = {
      model: benchModelLabel(f16BenchTitle(name), f16BenchShape(name, o.dryRun), o.dryRun),
      batch: 1,
      tokens,
      f16GreedyMsPerToken: null,
      f32GreedyMsPerToken: null,
      f16OverF32: null,
      vecLoads: null,
      withoutVecLoads: null,
      dispatchesPerToken: null,
    };
    // The other form of the vector loads is timed beside the default only where the process left them at the
    // default (the device's timing, else off): with them where the default ran without, and the reverse.
    const vecShipped = webGpuLinearVecRows();
    const vecDefault = webGpuLinearKernelsInForce().vecRows;
    const vec: F16DecodeTimes | null =
      vecShipped === null ? { f16GreedyMsPerToken: null, f32GreedyMsPerToken: null, f16OverF32: null } : null;
    if (!vec)
      notes.push('f16Decode.vecLoads: null (PPO_WEBGPU_VEC_ROWS set: the default timings are with it).');
    else
      notes.push(
        vecDefault
          ? 'f16Decode: the default timings are with the vector loads (chosen by timing on this device); withoutVecLoads without them.'
          : 'f16Decode: the default timings are without the vector loads; vecLoads with them.',
      );
    for (const dtype of ['f16', 'f32'] as const) {
      let model: CausalLM | null = null;
      try {
        model = await o.hooks.loadModel(name, dtype);
        for (const other of vec ? [false, true] : [false]) {
          const vecOn = other ? !vecDefault : vecDefault;
          o.log(
            `${name}: greedy decode at batch 1, base in ${dtype}${vecOn ? ', vector loads' : ''}${other ? '' : ' (the default)'}`,
          );
          if (other) setWebGpuLinearVecRows(vecOn);
          try {
            const t = await decodeTiming(model, {
              batch: 1,
              tokens,
              reps: o.dryRun ? 1 : 3,
              padId: 509,
              sampling: { temperature: 1, topK: 0, topP: 1 },
            });
            o.log(`  ${JSON.stringify(t)}`);
            const into: F16DecodeTimes = other ? vec! : decode;
            if (dtype === 'f16') into.f16GreedyMsPerToken = t.greedyMsPerToken;
            else into.f32GreedyMsPerToken = t.greedyMsPerToken;
            if (dtype === 'f16' && !other) decode.dispatchesPerToken = await decodeDispatchesPerToken(model);
          } finally {
            setWebGpuLinearVecRows(vecShipped);
          }
        }
      } catch (e) {
        notes.push(`f16Decode: the ${dtype} model failed: ${(e as Error).message}`);
      } finally {
        model?.dispose();
      }
    }
    const ratio = (into: F16DecodeTimes, key: string) => {
      const a = into.f16GreedyMsPerToken;
      const b = into.f32GreedyMsPerToken;
      if (a && b && a > 0 && b > 0) {
        if (o.dryRun)
          notes.push(
            `${key}: null (a dry run on a software adapter is not a measurement; the ratio would be ${(a / b).toFixed(2)}).`,
          );
        else into.f16OverF32 = a / b;
      } else notes.push(`${key}: null (a decode timing is missing).`);
    };
    ratio(decode, 'f16Decode.f16OverF32');
    if (vec) {
      const key = vecDefault ? 'withoutVecLoads' : 'vecLoads';
      ratio(vec, `f16Decode.${key}.f16OverF32`);
      decode[key] = vec;
    }
  }
  return {
    adapter: o.adapter,
    rows,
    decode,
    linearKernels: {
      vecRows: webGpuLinearVecRows(),
      fastTiles: webGpuLinearFastTiles(),
      headRows: webGpuHeadRows(),
      inForce: webGpuLinearKernelsInForce(),
    },
    sharedPrefix: sharedPrefixDefault(),
    notes,
  };
}

/** A setting's state in words: set by its variable, else the default (the device's timing, else off). */
const setting = (
  set: boolean | null,
  inForce: boolean | undefined,
  envVar: string,
  on: string,
  off: string,
): string => (set != null ? `${set ? on : off} (${envVar})` : `${inForce ? on : off} (the default)`);
/** Dispatches a greedy token costs at batch 1 (the counts of 24 and 8 new tokens, their difference over 16). */
export async function decodeDispatchesPerToken(model: CausalLM): Promise<number> {
  const V = model.config.vocab_size;
  const prompt = Array.from({ length: 8 }, (_, t) => (t * 7 + 5) % V);
  const count = async (n: number) =>
    (
      await countDispatches(() =>
        generate(model, [prompt], { maxNewTokens: n, temperature: 0, stopToken: null, padId: 0, rng: 7 }),
      )
    ).dispatches;
  const short = await count(8);
  const long = await count(24);
  return (long - short) / 16;
}

const f = (x: number | null | undefined, d = 3): string => (x == null ? '—' : x.toFixed(d));
const gb = (x: number | null | undefined): string => (x == null ? '—' : `${(x / 1e9).toFixed(2)} GB`);

/** The f16 rows as Markdown: one table of the GRPO steps beside PyTorch, one of the decode comparison. */
export function f16Markdown(r: F16BenchResult): string {
  const a = r.adapter;
  const lines = [
    `## bench --gpu, f16-base rows (issue #36): ${a.description || a.device || a.vendor}${a.software ? ' (software adapter)' : ''}`,
    '',
    "| model | plan | s/step | generate | score | update | our GPU memory (nvidia-smi): after / the steps' peak | tfjs allocated (of it, replay frames) | the steps' peak of tfjs's buffers: in use / allocated | estimate | PyTorch eager + PEFT, f16 base: s/step (generate / score / update) | PyTorch peak allocated | ours ÷ PyTorch |",
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...r.rows.flatMap((q) => {
      const t = q.torchEagerPeft;
      const timed = (['defaultPlan', 'boundedPlan'] as const).filter((k) => q[k]);
      // One line per plan timed (the default plan's line when none was); the memory on the plan it was read for,
      // PyTorch and the ratio on the default plan's.
      return (timed.length ? timed : (['defaultPlan'] as const)).map((k) => {
        const p: QwenPlanRow | null | undefined = q[k];
        const m = q.memory?.plan === k ? q.memory : null;
        const torchCells =
          k === 'defaultPlan'
            ? `${t ? `${f(t.sPerStep)} (${f(t.generateS)} / ${f(t.scoreS)} / ${f(t.updateS)})` : 'not run'} | ${gb(t?.peakMemoryBytes)} | ${q.vsTorchEagerDefault == null ? 'null (see notes)' : q.vsTorchEagerDefault.toFixed(2)}`
            : '— | — | —';
        return `| ${q.model}; GRPO + LoRA r ${q.lora}, ${q.batchSize / q.groupSize} prompts × ${q.groupSize}, R ${q.responseLength}${q.measured ? '' : ' (dry run: not a measurement)'} | ${p ? `${k === 'boundedPlan' ? 'bounded: ' : ''}micro-batch ${p.microBatchSize}${p.generateMicroBatchSize !== p.microBatchSize ? ` (generate ${p.generateMicroBatchSize})` : ''}, recompute ${p.recompute ? 'on' : 'off'}` : 'not run'} | ${f(p?.sPerStep)} | ${f(p?.generateS)} | ${f(p?.scoreS)} | ${f(p?.updateS)} | ${m ? `${gb(m.gpuBytes)} / ${gb(m.gpuPeakBytes)}` : '—'} | ${gb(m?.tfjsAllocatedBytes)}${m?.replayHeldBytes != null ? ` (replay frames ${gb(m.replayHeldBytes)})` : ''} | ${m && (m.tfjsPeakUsedBytes != null || m.tfjsPeakAllocatedBytes != null) ? `${gb(m.tfjsPeakUsedBytes)} / ${gb(m.tfjsPeakAllocatedBytes)}` : '—'} | ${m ? m.estimate : '—'} | ${torchCells} |`;
      });
    }),
    '',
    ...(r.decode
      ? [
          '| greedy decode, batch 1 | base in f16, ms/token | base in f32, ms/token | f16 ÷ f32 |',
          '| --- | --- | --- | --- |',
          `| ${r.decode.model}${r.decode.dispatchesPerToken != null ? `; ${f(r.decode.dispatchesPerToken, 1)} dispatches a token (f16)` : ''} | ${f(r.decode.f16GreedyMsPerToken, 2)} | ${f(r.decode.f32GreedyMsPerToken, 2)} | ${r.decode.f16OverF32 == null ? 'null (see notes)' : r.decode.f16OverF32.toFixed(2)} |`,
          ...(r.decode.withoutVecLoads
            ? [
                `| the same, without the vector loads (setWebGpuLinearVecRows(false)) | ${f(r.decode.withoutVecLoads.f16GreedyMsPerToken, 2)} | ${f(r.decode.withoutVecLoads.f32GreedyMsPerToken, 2)} | ${r.decode.withoutVecLoads.f16OverF32 == null ? 'null (see notes)' : r.decode.withoutVecLoads.f16OverF32.toFixed(2)} |`,
              ]
            : []),
          ...(r.decode.vecLoads
            ? [
                `| the same, vector loads (setWebGpuLinearVecRows) | ${f(r.decode.vecLoads.f16GreedyMsPerToken, 2)} | ${f(r.decode.vecLoads.f32GreedyMsPerToken, 2)} | ${r.decode.vecLoads.f16OverF32 == null ? 'null (see notes)' : r.decode.vecLoads.f16OverF32.toFixed(2)} |`,
              ]
            : []),
          '',
        ]
      : []),
    `- The fused linear: vector loads in the few-rows program ${setting(r.linearKernels.vecRows, r.linearKernels.inForce?.vecRows, `PPO_WEBGPU_VEC_ROWS=${r.linearKernels.vecRows ? 1 : 0}`, 'on', 'off')}, the tiled products on ${setting(r.linearKernels.fastTiles, r.linearKernels.inForce?.fastTiles, `PPO_WEBGPU_LINEAR_TILES=${r.linearKernels.fastTiles ? 'fast' : 'classic'}`, 'the tile kernel', '64 × 64 tiles')}.`,
    ...(a.kernels ? [`- Kernels timed when the backend started: ${describeKernelTuning(a.kernels)}`] : []),
    ...(r.sharedPrefix !== undefined
      ? [
          r.sharedPrefix
            ? "- Each group's prompt ran once in the forwards (PpoTrainer.sharedPrefix; PPO_SHARED_PREFIX=0 runs every row in full)."
            : '- Every row ran in full (PPO_SHARED_PREFIX=0).',
        ]
      : []),
    ...r.rows.flatMap((q) => q.notes.map((n) => `- ${n}`)),
    ...r.notes.map((n) => `- ${n}`),
    '',
  ];
  return lines.join('\n');
}
