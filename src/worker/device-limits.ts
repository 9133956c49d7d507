/**
 * What the chosen backend can hold, checked against a model's config (and the run's config) before any weight
 * is read (pure: the limits come in as numbers, so Node tests cover it).
 *
 * - WebGPU: tfjs keeps every tensor in one GPU buffer and binds it whole as a storage buffer, so each weight
 *   tensor must fit both `maxBufferSize` and `maxStorageBufferBindingSize`. GPT-2's token embedding `wte`
 *   (50257 × 768 float32 = 154 MB) is over the 128 MiB that WebGPU guarantees and that many devices allow
 *   (docs/tfjs.md trap 8), so on WebGPU the models are built with `maxBindingBytes` (webgpuBindingBytes):
 *   `wte` and the tied LM head are held as vocabulary chunks that each fit (gpt2.ts embeddingChunks). What is
 *   compared against the limit is then the largest chunk, beside the largest other tensor.
 * - WASM: every tensor lives in one WebAssembly heap of at most 4 GB (wasm32), so what the run holds must fit,
 *   with room left for the allocator and short-lived tensors.
 * - Every backend: the run's estimate against the device-memory budget (checkRunMemory).
 * What a run holds is counted from its config (runMemoryOptions): one frozen base with LoRA, adapters, the value
 * model (separate, shared or none), the reward model when the reward is a learned one, Adam and gradients on the
 * trainable parameters only, and the activations of its batch. Sizes and estimates: src/core/model/size.ts.
 */
import type { LMConfig } from '../core/model/config';
import { embeddingChunks } from '../core/model/gpt2';
import {
  baseWeightBytes,
  F16_BYTES,
  FLOAT32_BYTES,
  estimateRunMemory,
  fittingMicroBatch,
  microBatchRemedy,
  fixedBytes,
  formatEstimate,
  formatParts,
  formatGB,
  largestTensor,
  loraParamCount,
  paramCount,
  PPO_DEFAULTS,
  runMemoryOptions,
  WASM_HEAP_BYTES,
  WASM_HEAP_SHARE,
  WASM_HEAP_RUN_SHARE,
  type MemoryEstimate,
  type PlanDevice,
  type RunMemoryOptions,
  type RunShape,
} from '../core/model/size';
import { lmParamSpecs } from '../core/model/causal-lm';
import { isLlamaFamily } from '../core/model/llama-config';
import { LORA_TARGET_NAMES, type TrainConfig } from '../common/config';
import type { BaseDtype } from '../common/config/fields';
import { UserError } from '../common/errors';
import type { BackendName, ModelFit } from './protocol';

export interface DeviceLimits {
  backend: BackendName;
  /** WebGPU device limits (tfjs asks the adapter for its maximum of both). */
  maxBufferSize?: number;
  maxStorageBufferBindingSize?: number;
  /** WASM: the most bytes the heap can grow to. */
  heapBytes?: number;
}

export { largestTensor, WASM_HEAP_BYTES, WASM_HEAP_SHARE };

const mib = (n: number): string => `${(n / 1024 ** 2).toFixed(0)} MiB`;
const millions = (n: number): string => `${(n / 1e6).toFixed(1)} M`;

/**
 * The binding limit models are built under on this backend (GPT2Options.maxBindingBytes): WebGPU's smaller of
 * maxStorageBufferBindingSize and maxBufferSize; undefined elsewhere (one `wte` tensor).
 */
export function webgpuBindingBytes(limits: DeviceLimits | null): number | undefined {
  if (!limits || limits.backend !== 'webgpu') return undefined;
  const caps = [limits.maxStorageBufferBindingSize, limits.maxBufferSize].filter(
    (c): c is number => c !== undefined && c > 0,
  );
  return caps.length > 0 ? Math.min(...caps) : undefined;
}

/**
 * The device a run's plan is made for (model/size.ts PlanDevice): on WebGPU the device with its one-buffer limit
 * (the whole minibatch, inside that limit; smaller only when the device runs out: src/core/ppo/gpu-plan.ts);
 * elsewhere undefined (the budget plan).
 */
export function planDeviceOf(limits: DeviceLimits | null): PlanDevice | undefined {
  if (!limits || limits.backend !== 'webgpu') return undefined;
  const maxBufferBytes = webgpuBindingBytes(limits);
  return maxBufferBytes === undefined ? { backend: 'webgpu' } : { backend: 'webgpu', maxBufferBytes };
}

/** The largest weight tensor a model holds under a binding limit: wte's largest chunk, or another tensor. */
export function largestHeldTensor(
  config: LMConfig,
  maxBindingBytes?: number,
): { name: string; shape: number[]; bytes: number } {
  const chunks = embeddingChunks(config, maxBindingBytes);
  let best = {
    name: chunks.count > 1 ? 'wte.weight (its largest vocabulary chunk)' : 'wte.weight',
    shape: [chunks.rows, config.n_embd],
    bytes: chunks.largestBytes,
  };
  for (const s of lmParamSpecs(config)) {
    if (['wte.weight', 'embed_tokens.weight', 'lm_head.weight'].includes(s.name)) continue;
    const bytes = s.shape.reduce((a, b) => a * b, 1) * 4;
    if (bytes > best.bytes) best = { name: s.name, shape: s.shape, bytes };
  }
  return best;
}

/**
 * Throws a UserError naming the limit when `config` cannot be held by the backend described by `limits`.
 * `purpose`: 'train' checks the whole training state (of a run built as `opts` says; default: PPO with full
 * copies); 'load' (generate only) one model's weights.
 */
export function checkDeviceLimits(
  config: LMConfig,
  label: string,
  limits: DeviceLimits | null,
  purpose: 'train' | 'load' = 'train',
  opts: RunMemoryOptions = PPO_DEFAULTS,
): void {
  if (!limits) return;
  if (limits.backend === 'webgpu') {
    // embeddingChunks throws (in words) when not even one row of wte fits one binding.
    const t = largestHeldTensor(config, webgpuBindingBytes(limits));
    const caps: [string, number | undefined][] = [
      ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
      ['maxBufferSize', limits.maxBufferSize],
    ];
    for (const [name, cap] of caps) {
      if (cap !== undefined && cap > 0 && t.bytes > cap) {
        throw new UserError(
          `${label} cannot run on this GPU with WebGPU: its weight ${t.name} ` +
            `[${t.shape.join(' × ')}] takes ${mib(t.bytes)}, over this device's ${mib(cap)} limit for one ` +
            `buffer (${name}). Choose the WASM backend, or a model with a smaller width.`,
        );
      }
    }
  }
  if (limits.backend === 'wasm') {
    const heap = limits.heapBytes ?? WASM_HEAP_BYTES;
    const params = paramCount(config);
    if (purpose === 'load') {
      // The weights, and their copy on the way in.
      if (params * 4 * 2 > heap * WASM_HEAP_SHARE) {
        throw new UserError(
          `${label} has ${millions(params)} parameters (${formatGB(params * 4)} of weights), more than the ` +
            `WASM backend can hold (its memory stops at ${formatGB(heap)}). Choose WebGPU on a GPU, or a smaller model.`,
        );
      }
      return;
    }
    // What the heap holds whatever the batch: the weights, Adam, XNNPACK's packed weights (size.ts WASM heap).
    const estimate = estimateRunMemory(
      config,
      { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 },
      { ...opts, heap: 'wasm' },
    );
    const need = fixedBytes(estimate);
    if (need > heap * WASM_HEAP_RUN_SHARE) {
      const smaller = 'a smaller model (e.g. distilbert/distilgpt2 or tiny)';
      const remedy = opts.lora
        ? `Choose WebGPU on a GPU${parenthesised(f16OnWebGpu(config, opts))}, or ${smaller}.`
        : `${loraRemedy(config, { ...opts, heap: 'wasm' })}, choose WebGPU on a GPU, or ${smaller}.`;
      throw new UserError(
        `${label} has ${millions(params)} parameters; training it needs ≈ ${formatGB(need)} of ` +
          `weights, gradients and optimiser state (${formatParts(estimate)}), more than the WASM backend can hold (its memory stops at ` +
          `${formatGB(heap)}, and ${Math.round(WASM_HEAP_RUN_SHARE * 100)}% of it, ${formatGB(heap * WASM_HEAP_RUN_SHARE)}, ` +
          `may go to the run). ${remedy}`,
      );
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Loading a model to generate ("Try the policy"), outside a run

/**
 * How the model generate uses outside a run is stored: "f16" where the run's config asks for the frozen base in
 * f16 ("baseDtype") and it applies here (the webgpu backend and a Llama / Qwen2 / Qwen3 model; that model is
 * frozen), else "f32". Where "f16" cannot apply (WASM, CPU, GPT-2) it is loaded in f32: trying a model is not the
 * run, whose estimate says why "f16" is refused there.
 */
export function generateBaseDtype(
  asked: BaseDtype | undefined,
  family: string,
  backend: BackendName | null | undefined,
): BaseDtype {
  return asked === 'f16' && backend === 'webgpu' && isLlamaFamily(family) ? 'f16' : 'f32';
}

/** What loading a model to generate holds at its peak, in bytes (loadMemory). */
export interface LoadMemory {
  baseDtype: BaseDtype;
  /** The weights as the model holds them (baseWeightBytes: under "f16" the large matrices at 2 bytes a value). */
  weights: number;
  /**
   * Their values on the host on the way in: a model loads a weight at a time (core/model/folder.ts →
   * Llama.fromReader / GPT2.fromReader, each weight placed on the device before the next is read), so the largest
   * weight's values, packed f16 words or f32.
   */
  hostCopy: number;
  /**
   * The bytes of the safetensors file held while they are decoded: the whole file, or where it is read one tensor
   * at a time (`ranged`) its largest tensor. The file's size is `fileBytes` when known, else as the Hub publishes
   * the family: 2 bytes a parameter for the Llama families (bf16), 4 for GPT-2 (f32).
   */
  file: number;
  /** Whether the file's size is known (false: estimated from the parameters, `file`). */
  fileKnown: boolean;
  /**
   * Whether the file is read one tensor at a time (picked Files, a folder on disk, Cache Storage:
   * core/model/folder.ts openWeights): then `file` is its largest tensor's bytes, not the whole file.
   */
  ranged: boolean;
  total: number;
}

/** The largest weight of a model, in values (the embedding, or an untied head of the same size). */
function largestTensorParams(config: LMConfig): number {
  let most = 0;
  for (const s of lmParamSpecs(config))
    most = Math.max(
      most,
      s.shape.reduce((a, b) => a * b, 1),
    );
  return most;
}

/**
 * What loading `config` to generate holds at its peak (folder.ts loadLM, a weight at a time): the weights, the
 * largest weight's values on the host on the way in and its bytes in the file (or the whole file, read whole)
 * (LoadMemory). Not counted: tfjs's upload buffer for one weight on WebGPU (released once the queue has moved on;
 * in Chrome in the GPU process). Measured with scripts/load-memory.ts (docs/models.md, "Reading a weights file"): a
 * 12-layer Qwen2.5-1.5B-shaped folder with the base in f16 on SwiftShader peaked 0.30 GB above its 1.59 GB of
 * weights, where this counts 0.93 GB.
 */
export function loadMemory(
  config: LMConfig,
  baseDtype: BaseDtype,
  fileBytes?: number | null,
  ranged = false,
): LoadMemory {
  const llama = isLlamaFamily(config.model_type);
  const half = baseDtype === 'f16' && llama;
  const weights = baseWeightBytes(config, half ? 'f16' : 'f32');
  const largest = largestTensorParams(config);
  // The largest weight is a vocabulary matrix, which the f16 base packs (f16-base.ts isF16Matrix).
  const hostCopy = largest * (half ? F16_BYTES : FLOAT32_BYTES);
  const fileKnown = fileBytes !== undefined && fileBytes !== null;
  const whole = fileKnown ? fileBytes : (llama ? 2 : 4) * paramCount(config);
  // Read by ranges, the file's bytes in memory at once are one tensor's, at the file's bytes per value.
  const file = ranged ? Math.ceil((whole / paramCount(config)) * largest) : whole;
  return {
    baseDtype: half ? 'f16' : 'f32',
    weights,
    hostCopy,
    file,
    fileKnown,
    ranged,
    total: weights + hostCopy + file,
  };
}

/** What a load holds besides its weights, in words (LoadMemory). */
function loadExtras(need: LoadMemory, config: LMConfig): string {
  const stored = isLlamaFamily(config.model_type) ? 'bf16' : 'f32';
  const file = need.ranged
    ? `its bytes in the file (${need.fileKnown ? '' : '≈ '}${formatGB(need.file, 2)}` +
      `${need.fileKnown ? '' : ` if stored in ${stored}`}; the file is read a tensor at a time)`
    : need.fileKnown
      ? `the ${formatGB(need.file, 2)} safetensors file`
      : `the safetensors file (≈ ${formatGB(need.file, 2)} if stored in ${stored})`;
  return (
    `and while they load, a weight at a time, the largest weight's values on the host ` +
    `(${formatGB(need.hostCopy, 2)}) and ${file}`
  );
}

/**
 * Why loading `config` to generate would not fit the budget (null: it fits), in words: what it needs and what is
 * counted. In f32, where the base in f16 would fit (a Llama-family model), says so: set "baseDtype" on WebGPU,
 * choose WebGPU elsewhere.
 */
export function loadMemoryProblem(
  config: LMConfig,
  label: string,
  o: {
    baseDtype: BaseDtype;
    /** The run's "lora": "baseDtype" "f16" needs a rank ≥ 1 (config validation). */
    lora: number;
    backend: BackendName | null;
    budgetBytes: number;
    fileBytes?: number | null;
    /** Whether the weights file is read a tensor at a time (loadMemory's `ranged`). */
    ranged?: boolean;
    /** Whether to name the f16 base as a remedy (false for a load that cannot have it: DPO / SFT). */
    offerF16?: boolean;
  },
): string | null {
  const need = loadMemory(config, o.baseDtype, o.fileBytes, o.ranged);
  if (need.total <= o.budgetBytes) return null;
  const over = `over the ${formatGB(o.budgetBytes)} budget here`;
  if (need.baseDtype === 'f16') {
    return (
      `Loading ${label} with the base in f16 needs ≈ ${formatGB(need.total)}: ${formatGB(need.weights, 2)} of ` +
      `weights (the large matrices in f16), ${loadExtras(need, config)}; that is ${over}. Choose a smaller model.`
    );
  }
  const words =
    `${label} has ${millions(paramCount(config))} parameters (${formatGB(need.weights)} of weights); loading ` +
    `it needs ≈ ${formatGB(need.total)}: the weights, ${loadExtras(need, config)}; that is ${over}.`;
  const half =
    o.offerF16 !== false && isLlamaFamily(config.model_type)
      ? loadMemory(config, 'f16', o.fileBytes, o.ranged)
      : null;
  if (!half || half.total > o.budgetBytes) return `${words} Choose a smaller model.`;
  const how =
    `≈ ${formatGB(half.total)}: ${formatGB(half.weights, 2)} of weights with the large matrices in f16, ` +
    (half.ranged
      ? 'and the largest weight and its bytes in the file while they load'
      : 'and the largest weight and the file while they load');
  const lora = o.lora > 0 ? '' : '"lora" to a rank ≥ 1 and ';
  const remedy =
    o.backend === 'webgpu'
      ? `Setting ${lora}"baseDtype" to "f16" would fit it (${how}).`
      : `On WebGPU, setting ${lora}"baseDtype" to "f16" would fit it (${how}); ` +
        `the ${o.backend ?? 'current'} backend holds the weights in f32.`;
  return `${words} ${remedy} Or choose a smaller model.`;
}

/**
 * 'Use LoRA ("lora": 8: …, ≈ 0.54 GB of weights and optimiser state)': the remedy for full copies that do not fit.
 * On WebGPU, for a Llama-family model, also what LoRA with the base in f16 would hold.
 */
function loraRemedy(config: LMConfig, opts: RunMemoryOptions, backend: BackendName | null = null): string {
  const lora = { r: 8, targets: LORA_TARGET_NAMES };
  const withLora = {
    ...opts,
    lora,
    valueModel: opts.valueModel === 'none' ? ('none' as const) : ('shared' as const),
  };
  const fixed = (o: RunMemoryOptions) =>
    fixedBytes(
      estimateRunMemory(config, { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 }, o),
    );
  const half =
    backend === 'webgpu' && isLlamaFamily(config.model_type)
      ? `; ≈ ${formatGB(fixed({ ...withLora, baseDtype: 'f16' }), 2)} with "baseDtype" "f16", the base in half precision`
      : '';
  return (
    `Use LoRA ("lora": 8: ${millions(loraParamCount(config, lora))} adapter parameters trained on one frozen ` +
    `base, ≈ ${formatGB(fixed(withLora), 2)} of weights and optimiser state${half})`
  );
}

const parenthesised = (words: string | null): string => (words ? ` (${words})` : '');

/** Whether "baseDtype" "f16" can hold this run's frozen base (LoRA on a Llama / Qwen2 / Qwen3 model). */
function f16Applies(config: LMConfig, opts: RunMemoryOptions): boolean {
  return !!opts.lora && opts.lora.r > 0 && isLlamaFamily(config.model_type);
}

/**
 * Why WebGPU helps a WASM run that f16 would shrink (LoRA on a Llama-family model): 'there "baseDtype" "f16" holds
 * the frozen base in half precision (0.62 GB rather than 1.24 GB), which WASM cannot (its kernels read f32)'; null
 * when f16 does not apply.
 */
function f16OnWebGpu(config: LMConfig, opts: RunMemoryOptions): string | null {
  if (!f16Applies(config, opts)) return null;
  const base = (o: RunMemoryOptions) =>
    estimateRunMemory(config, { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 }, o).parts
      .base;
  return (
    `there "baseDtype" "f16" holds the frozen base in half precision ` +
    `(${formatGB(base({ ...opts, baseDtype: 'f16' }), 2)} rather than ${formatGB(base({ ...opts, baseDtype: 'f32' }), 2)}), ` +
    'which WASM cannot (its kernels read f32)'
  );
}

// ---------------------------------------------------------------------------------------------------------
// The model picker's verdict

/** A run's shape with no batch: what estimateRunMemory counts whatever the batch (fixedBytes). */
const NO_BATCH = { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 };

/**
 * Whether a LoRA run of `config` fits this device (the picker's verdict, protocol.ts ModelFit): its weights, adapters,
 * optimiser state and copies (fixedBytes: the activations depend on the batch and prompts, which the picker does not
 * know) — on WebGPU, or where WebGPU is named, the load's peak when that is more (loadMemory) — against the budget
 * Start uses (memoryBudget: on WASM the heap's share), with the base in f16 where the run's config asks for it on
 * WebGPU, or where only f16 would fit. LoRA at the config's rank, else r=8 (what the app
 * preselects for these models); the value model as the config's algorithm has it; a function reward.
 */
export function modelFit(
  config: LMConfig,
  cfg: Pick<TrainConfig, 'lora' | 'loraTargets' | 'valueModel' | 'algorithm' | 'baseDtype'>,
  limits: DeviceLimits | null,
  deviceBudgetBytes: number,
): ModelFit {
  const backend = limits?.backend ?? null;
  const r = cfg.lora > 0 ? cfg.lora : 8;
  const opts = runMemoryOptions({ ...cfg, lora: r, baseDtype: 'f32' }, false);
  const fixed = (o: RunMemoryOptions) => fixedBytes(estimateRunMemory(config, NO_BATCH, o));
  // Here: on WASM the heap's count (XNNPACK's packed copies) against its share; the f16 base is WebGPU's, counted
  // as tensor bytes against the device budget.
  const budget = memoryBudget(limits, deviceBudgetBytes).bytes;
  // On WebGPU the larger of the run's fixed bytes and what loading the model holds at its peak (loadMemory: a Hub
  // model's file through Cache Storage, read a tensor at a time): the load counts the file's bytes and a weight's
  // host copy beside the weights, which can be more than the adapters and optimiser state the run adds.
  const onGpu = (o: RunMemoryOptions) =>
    Math.max(fixed(o), loadMemory(config, o.baseDtype ?? 'f32', null, true).total);
  const half = isLlamaFamily(config.model_type) ? onGpu({ ...opts, baseDtype: 'f16' }) : null;
  const f32 =
    backend === 'wasm' ? fixed({ ...opts, heap: 'wasm' }) : backend === 'webgpu' ? onGpu(opts) : fixed(opts);
  const of = (n: number, b: number) => `≈ ${formatGB(n)} of ${formatGB(b)} before activations`;
  if (backend === 'webgpu') {
    try {
      checkDeviceLimits(config, 'model', limits, 'load');
    } catch {
      return { fits: false, text: 'does not fit: a weight is over this GPU’s limit for one buffer' };
    }
    if (half !== null && cfg.baseDtype === 'f16') {
      return half <= budget
        ? { fits: true, text: `fits with the base in f16 (${of(half, budget)})` }
        : {
            fits: false,
            text: `does not fit: needs ≈ ${formatGB(half)} with the base in f16, ${formatGB(budget)} here`,
          };
    }
  }
  if (f32 <= budget) return { fits: true, text: `fits with LoRA r=${r} (${of(f32, budget)})` };
  if (half !== null && backend === 'webgpu') {
    return half <= budget
      ? {
          fits: true,
          text: `fits only with the base in f16 (${of(half, budget)}; ≈ ${formatGB(f32)} in f32)`,
        }
      : {
          fits: false,
          text: `does not fit: needs ≈ ${formatGB(half)} with the base in f16, ${formatGB(budget)} here`,
        };
  }
  // Elsewhere (WASM, CPU): what WebGPU would hold, against the device budget.
  const here = (how = '') => `≈ ${formatGB(f32)} here${how}, over ${formatGB(budget)}`;
  const there = onGpu(opts);
  if (there <= deviceBudgetBytes) {
    return { fits: false, text: `needs WebGPU (${of(there, deviceBudgetBytes)} there; ${here()})` };
  }
  if (half !== null && half <= deviceBudgetBytes) {
    return {
      fits: false,
      text: `needs WebGPU for the f16 base (${of(half, deviceBudgetBytes)} there; ${here(' in f32')})`,
    };
  }
  return { fits: false, text: `does not fit: needs ≈ ${formatGB(f32)}, ${formatGB(budget)} here` };
}

// ---------------------------------------------------------------------------------------------------------
// The run's estimate from its config

/** Whether the run's reward is a learned reward model (a `{model}` reward, or a task whose reward is one). */
export function rewardIsModel(cfg: Pick<TrainConfig, 'reward'>, taskReward?: unknown): boolean {
  const spec: unknown = cfg.reward ?? taskReward;
  return !!spec && typeof spec === 'object' && 'model' in spec;
}

export { runMemoryOptions } from '../core/model/size';

/** The budget a run's estimate is held to on a backend, and how it was set (for messages). */
export interface MemoryBudget {
  bytes: number;
  what: string;
}

/**
 * WASM: the smaller of the heap's share and the device budget; elsewhere the device budget (60% of the memory
 * the browser reports, src/worker/sources.ts defaultMemoryBudget).
 */
export function memoryBudget(limits: DeviceLimits | null, deviceBudgetBytes: number): MemoryBudget {
  const device = {
    bytes: deviceBudgetBytes,
    what: `the budget here is ${formatGB(deviceBudgetBytes)} (60% of this device's memory)`,
  };
  if (limits?.backend !== 'wasm') return device;
  const heap = (limits.heapBytes ?? WASM_HEAP_BYTES) * WASM_HEAP_RUN_SHARE;
  if (heap > deviceBudgetBytes) return device;
  return {
    bytes: heap,
    what:
      `the WASM backend allows ${formatGB(heap)} (${Math.round(WASM_HEAP_RUN_SHARE * 100)}% of its ` +
      `${formatGB(limits.heapBytes ?? WASM_HEAP_BYTES)} heap)`,
  };
}

/** The run's estimate with what the UI shows beside it, and why Start would refuse it (null: it fits). */
export interface RunMemoryCheck {
  estimate: MemoryEstimate;
  /** Parameters of the policy model (the tied head once). */
  params: number;
  /** Parameters the policy trains: its LoRA adapters, or all of them. */
  policyTrainableParams: number;
  budget: MemoryBudget;
  problem: string | null;
  /** The plan the run would start with, in words (src/core/ppo/gpu-plan.ts describePlan); set by the worker's estimate. */
  plan?: string;
}

/** The largest batch size (a multiple of miniBatches, below the configured one) whose estimate fits, or 0. */
function largestFittingBatch(
  config: LMConfig,
  shape: RunShape,
  opts: RunMemoryOptions,
  budget: number,
): number {
  for (let b = shape.batchSize - shape.miniBatches; b >= shape.miniBatches; b -= shape.miniBatches) {
    // With an automatic micro-batch a smaller batch can also mean a smaller micro-batch: keep the planned one.
    const micro =
      shape.microBatchSize === undefined ? {} : { microBatchSize: Math.min(shape.microBatchSize, b) };
    if (estimateRunMemory(config, { ...shape, ...micro, batchSize: b }, opts).total <= budget) return b;
  }
  return 0;
}

/**
 * Estimate a run of `config` shaped as `shape` and built as `opts`, against `budget`; `problem` says, with
 * numbers and remedies, why it would not fit (a smaller batch, LoRA, the base in f16, WebGPU, a smaller model).
 * `floor`: on WebGPU, the shape the plan falls back to when the device runs out (size.ts deviceFallbackFloor):
 * the run is refused only if that does not fit either.
 */
export function runMemoryCheck(
  config: LMConfig,
  label: string,
  shape: RunShape,
  opts: RunMemoryOptions,
  budget: MemoryBudget,
  backend: BackendName | null,
  floor?: RunShape,
): RunMemoryCheck {
  const estimate = estimateRunMemory(config, shape, opts);
  const params = paramCount(config);
  const policyTrainableParams = opts.lora ? loraParamCount(config, opts.lora) : params;
  const fits = (o: RunMemoryOptions): boolean =>
    estimateRunMemory(config, shape, o).total <= budget.bytes ||
    (floor !== undefined && estimateRunMemory(config, floor, o).total <= budget.bytes);
  let problem: string | null = null;
  if (!fits(opts)) {
    const fixed = fixedBytes(estimate);
    const how = opts.lora
      ? `with LoRA r=${opts.lora.r}${estimate.baseDtype === 'f16' ? ' on a base in f16' : ''}`
      : 'with full copies';
    const remedies: string[] = [];
    // On WebGPU a LoRA run of a Llama-family model can hold its frozen base in f16 (issue #36).
    const halfOpts: RunMemoryOptions = { ...opts, baseDtype: 'f16' };
    const half =
      backend === 'webgpu' && f16Applies(config, opts) && opts.baseDtype !== 'f16' && fits(halfOpts)
        ? estimateRunMemory(config, shape, halfOpts)
        : null;
    const halfRemedy = half
      ? `Setting "baseDtype" to "f16" would fit it: the frozen base in half precision, ` +
        `${formatGB(half.parts.base, 2)} rather than ${formatGB(estimate.parts.base, 2)} ` +
        `(adapters, optimiser state and arithmetic stay f32).`
      : null;
    const fit = fixed <= budget.bytes ? fittingMicroBatch(config, shape, opts, budget.bytes) : null;
    if (fit) {
      remedies.push(`${microBatchRemedy(fit, shape)}.`);
      if (halfRemedy) remedies.push(halfRemedy);
    } else if (fixed <= budget.bytes) {
      const b = largestFittingBatch(config, shape, opts, budget.bytes);
      remedies.push(
        b > 0
          ? `batchSize ${b} would fit (or lower responseLength, or raise miniBatches from ${shape.miniBatches}: the activations grow with batchSize / miniBatches).`
          : `Lower batchSize or responseLength, or raise miniBatches (now ${shape.miniBatches}).`,
      );
      if (halfRemedy) remedies.push(halfRemedy);
    } else {
      if (halfRemedy) remedies.push(halfRemedy);
      if (!opts.lora) remedies.push(`${loraRemedy(config, opts, backend)}.`);
      if (backend === 'wasm') {
        const f16 = f16OnWebGpu(config, opts);
        remedies.push(`Choose WebGPU on a GPU (not bound by the WASM heap${f16 ? `; ${f16}` : ''}).`);
      }
      remedies.push('Or choose a smaller model (e.g. distilbert/distilgpt2 or tiny).');
    }
    const need =
      fixed > budget.bytes
        ? `≈ ${formatGB(fixed)} of weights, gradients and optimiser state`
        : `≈ ${formatGB(estimate.total)} with the activations of its batch`;
    problem =
      `Training ${label} (${millions(params)} parameters) ${how} needs ${need} ` +
      `(${formatParts(estimate)}); ${budget.what}. ${remedies.join(' ')}`;
  }
  return { estimate, params, policyTrainableParams, budget, problem };
}

/** runMemoryCheck, refused with a UserError when it does not fit. */
export function checkRunMemory(...args: Parameters<typeof runMemoryCheck>): RunMemoryCheck {
  const check = runMemoryCheck(...args);
  if (check.problem) throw new UserError(check.problem);
  return check;
}

export { formatEstimate };
