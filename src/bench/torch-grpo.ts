/**
 * `bench --gpu`'s Qwen GRPO row (`qwenGrpo`; docs/gpu.md "What the bench runs"): the model it trains (Qwen2.5-0.5B's
 * shapes with random weights, or a dry run's 2 layers of width 64), the run (2 prompts × groups of 8, 32 response
 * tokens, LoRA r 8), the spec that scripts/torch_grpo_step.py reads — the same LoRA GRPO step in PyTorch eager with
 * PEFT, from our trainer's config — and the parse of what it prints. Pure: the process is run by
 * src/cli/torch-probe.ts (Node only); tested in tests/bench-gpu-keys.test.ts.
 */
import { groupSizeOf, type TrainConfig } from '../common/config';
import { LLAMA_SHAPES } from '../core/model/llama-config';

/** The shapes of issue #36's f16-base rows (`f16Grpo`): seed 003's models. */
export const F16_BENCH_SHAPES = ['qwen2.5-1.5b', 'qwen3-1.7b'] as const;
export type F16BenchShapeName = (typeof F16_BENCH_SHAPES)[number];

/**
 * A bench row's config.json: a published shape (LLAMA_SHAPES) with the token ids of the 512-id ChatML tokenizer the
 * folder gets (tests/fixtures/hf-tokenizer, as scripts/make-random-model.ts --shape writes it). A dry run keeps
 * the vocabulary and shrinks the trunk: 2 layers of width 64, 4 heads over 2 KV heads (of 16 where the shape names
 * its head_dim), SwiGLU 128.
 */
export function benchShape(name: keyof typeof LLAMA_SHAPES, dryRun: boolean): Record<string, unknown> {
  const shape: Record<string, unknown> = {
    ...LLAMA_SHAPES[name],
    bos_token_id: 510,
    eos_token_id: 511,
    pad_token_id: 509,
  };
  return dryRun
    ? {
        ...shape,
        num_hidden_layers: 2,
        hidden_size: 64,
        intermediate_size: 128,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        ...('head_dim' in shape ? { head_dim: 16 } : {}),
      }
    : shape;
}

/** An f16 row's config.json (issue #36): benchShape of Qwen2.5-1.5B or Qwen3-1.7B. */
export function f16BenchShape(name: F16BenchShapeName, dryRun: boolean): Record<string, unknown> {
  return benchShape(name, dryRun);
}

/** An f16 row's run (issue #36): 2 prompts × groups of 8, R 64, LoRA r 8; a dry run as qwenBenchRun's. */
export function f16BenchRun(dryRun: boolean): ReturnType<typeof qwenBenchRun> {
  return dryRun ? qwenBenchRun(true) : { ...qwenBenchRun(false), responseLength: 64 };
}

/** "Qwen2.5-1.5B shape (28 layers, width 1536, …), random weights" for a config.json made as above. */
export function benchModelLabel(title: string, s: Record<string, unknown>, dryRun: boolean): string {
  return `${title} shape${dryRun ? ', dry run' : ''} (${s.num_hidden_layers} layers, width ${s.hidden_size}, ${s.num_attention_heads} heads over ${s.num_key_value_heads} KV heads, SwiGLU ${s.intermediate_size}, vocabulary ${s.vocab_size}), random weights`;
}

/** The title of a shape in labels: "Qwen2.5-1.5B", "Qwen3-1.7B". */
export function f16BenchTitle(name: F16BenchShapeName): string {
  return name === 'qwen2.5-1.5b' ? 'Qwen2.5-1.5B' : 'Qwen3-1.7B';
}

/**
 * The Qwen row's config.json: benchShape of Qwen2.5-0.5B (24 layers, width 896, 14 heads over 2 KV heads, SwiGLU
 * 4864, the 151936-entry vocabulary, tied head).
 */
export function qwenBenchShape(dryRun: boolean): Record<string, unknown> {
  return benchShape('qwen2.5-0.5b', dryRun);
}

/** The row's run: B = prompts × groupSize samples (2 × 8; a dry run 2 × 2), R response tokens, LoRA r 8. */
export function qwenBenchRun(dryRun: boolean): {
  algorithm: 'grpo';
  lora: number;
  batchSize: number;
  groupSize: number;
  responseLength: number;
} {
  return dryRun
    ? { algorithm: 'grpo', lora: 8, batchSize: 4, groupSize: 2, responseLength: 4 }
    : { algorithm: 'grpo', lora: 8, batchSize: 16, groupSize: 8, responseLength: 32 };
}

/** A row's first (warm-up) step above this many seconds: one timed step instead of two (the bench's time). */
export const QWEN_SLOW_WARMUP_S = 10;

/** Timed steps after the warm-up: 1 in a dry run or after a warm-up above QWEN_SLOW_WARMUP_S, else 2. */
export function qwenTimedSteps(warmupS: number, dryRun: boolean): number {
  return dryRun || !(warmupS <= QWEN_SLOW_WARMUP_S) ? 1 : 2;
}

/** What scripts/torch_grpo_step.py reads (its docstring says how each is used). */
export interface TorchGrpoSpec {
  model: string;
  device: 'cuda' | 'cpu';
  seed: number;
  batch: number;
  groupSize: number;
  Tq: number;
  responseLength: number;
  lora: number;
  loraAlpha: number;
  /** PEFT's target_modules: the layers our trainer adapted (resolveLoraTargets of the model and the config). */
  loraTargets: string[];
  learningRate: number;
  temperature: number;
  topK: number;
  topP: number;
  /** β of GRPO's k3 loss term; 0: no reference forward. */
  klCoef: number;
  scaleRewards: TrainConfig['scaleRewards'];
  lossAggregation: TrainConfig['lossAggregation'];
  clipRange: number;
  logRatioClamp: number;
  maxGradNorm: number;
  warmup: number;
  steps: number;
  /** The base's dtype: float32 (TF32 off), or float16 with the adapters in float32 (PEFT's default autocast). */
  dtype: 'float32' | 'float16';
}

/** What scripts/torch_grpo_step.py prints on its last stdout line (seconds). */
export interface TorchGrpoResult {
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
  timeStep: number;
  steps: number;
  stepTimes: number[];
  /** The module names PEFT put LoRA on (sorted), and the adapters' parameter count. */
  loraTargets: string[];
  trainableParams: number;
  /** Whether the step ran the reference forward (klCoef > 0). */
  refLogprobs: boolean;
  device: string;
  tf32: boolean;
  torch: string;
  transformers: string;
  peft: string;
  /** The base's dtype (absent from an older script: float32). */
  dtype?: 'float32' | 'float16';
  /** torch.cuda.max_memory_allocated over the load and every step (absent on the CPU). */
  peakMemoryBytes?: number | null;
}

/** The spec of the PyTorch GRPO step that matches our trainer's config `cfg` at prompt bucket `Tq`. */
export function torchGrpoSpec(
  cfg: Pick<
    TrainConfig,
    | 'algorithm'
    | 'batchSize'
    | 'groupSize'
    | 'responseLength'
    | 'lora'
    | 'loraAlpha'
    | 'learningRate'
    | 'temperature'
    | 'topK'
    | 'topP'
    | 'klCoef'
    | 'scaleRewards'
    | 'lossAggregation'
    | 'clipRange'
    | 'logRatioClamp'
    | 'maxGradNorm'
    | 'ppoEpochs'
    | 'miniBatches'
    | 'entropyCoef'
  >,
  o: {
    model: string;
    Tq: number;
    device: 'cuda' | 'cpu';
    loraTargets: readonly string[];
    warmup: number;
    steps: number;
    dtype?: TorchGrpoSpec['dtype'];
  },
): TorchGrpoSpec {
  if (
    cfg.algorithm !== 'grpo' ||
    cfg.ppoEpochs !== 1 ||
    cfg.miniBatches !== 1 ||
    !(cfg.lora > 0) ||
    cfg.entropyCoef !== 0
  )
    throw new Error(
      `the PyTorch GRPO step is GRPO with LoRA, one epoch of one minibatch, no entropy bonus; got algorithm ${cfg.algorithm}, lora ${cfg.lora}, ppoEpochs ${cfg.ppoEpochs}, miniBatches ${cfg.miniBatches}, entropyCoef ${cfg.entropyCoef}.`,
    );
  if (!o.loraTargets.length) throw new Error('the PyTorch GRPO step needs the LoRA target modules.');
  return {
    model: o.model,
    device: o.device,
    seed: 0,
    batch: cfg.batchSize,
    groupSize: groupSizeOf(cfg),
    Tq: o.Tq,
    responseLength: cfg.responseLength,
    lora: cfg.lora,
    loraAlpha: cfg.loraAlpha,
    loraTargets: [...o.loraTargets],
    learningRate: cfg.learningRate,
    temperature: cfg.temperature,
    topK: cfg.topK,
    topP: cfg.topP,
    klCoef: cfg.klCoef,
    scaleRewards: cfg.scaleRewards,
    lossAggregation: cfg.lossAggregation,
    clipRange: cfg.clipRange,
    logRatioClamp: cfg.logRatioClamp,
    maxGradNorm: cfg.maxGradNorm,
    warmup: o.warmup,
    steps: o.steps,
    dtype: o.dtype ?? 'float32',
  };
}

const positive = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;

/** The result on the last JSON line of the script's stdout; an Error that says what is missing otherwise. */
export function parseTorchGrpoResult(stdout: string): TorchGrpoResult {
  const line = stdout
    .trim()
    .split('\n')
    .reverse()
    .find((l) => l.trim().startsWith('{'));
  if (!line)
    throw new Error(`the PyTorch GRPO step printed no JSON result (${JSON.stringify(stdout.slice(-200))})`);
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(line);
  } catch (e) {
    throw new Error(`the PyTorch GRPO step's result is not JSON: ${(e as Error).message}`);
  }
  for (const k of ['timeGenerate', 'timeScore', 'timeUpdate', 'timeStep', 'trainableParams'])
    if (!positive(r[k]))
      throw new Error(`the PyTorch GRPO step's result has no positive "${k}" (got ${JSON.stringify(r[k])})`);
  const t = r.loraTargets;
  if (!Array.isArray(t) || !t.length || !t.every((x) => typeof x === 'string'))
    throw new Error(
      `the PyTorch GRPO step's result names no LoRA target modules (got ${JSON.stringify(r.loraTargets)})`,
    );
  return r as unknown as TorchGrpoResult;
}
