/**
 * The f16 base in the estimate the app shows before Start (issue #36, "the estimate, the plan and the model picker
 * know f16"): the worker's estimate of a Qwen3-1.7B-shaped folder (config.json and tokenizer only) counts the base
 * in f16 on WebGPU and says so; a run that would not fit with the f32 base but fits with f16 names that remedy in
 * words; on WASM, where there are no f16 kernels, "baseDtype" "f16" is refused saying why, the estimate counts the
 * f32 base, and a run too big for the heap is told what WebGPU's f16 base would hold. The UI's line says "base in
 * f16". No weights are read, no GPU is needed.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { LLAMA_LORA_TARGET_NAMES } from '../src/common/config/fields';
import { LLAMA_SHAPES, parseLlamaConfig } from '../src/core/model/llama-config';
import { estimateRunMemory, formatParts, type RunShape } from '../src/core/model/size';
import type { ModelSources as ModelSourcesType } from '../src/worker/sources';
import { runMemoryCheck, type DeviceLimits } from '../src/worker/device-limits';
import { estimateLine } from '../src/ui/lib/memory-estimate';
import type { MemoryEstimateReport } from '../src/worker/protocol';
import { BASE_F16, BASE_F32, BUDGET_8GB, configOnlySources } from './helpers/qwen3-config-only';

// The worker's modules read `self` and `navigator` (worker globals).
(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

// Qwen3-1.7B's byte counts, worked by hand: tests/helpers/qwen3-config-only.ts.
const qwen3 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen3-1.7b'] });
const WEBGPU: DeviceLimits = { backend: 'webgpu' };
const WASM: DeviceLimits = { backend: 'wasm' };
const LORA8 = {
  lora: { r: 8, targets: [...LLAMA_LORA_TARGET_NAMES] },
  valueModel: 'none' as const,
  rewardModel: false,
};
const SHAPE: RunShape = { batchSize: 2, miniBatches: 1, promptLength: 8, responseLength: 2 };

let limits: DeviceLimits = WEBGPU;
/** Whether the weights are read a tensor at a time, as a Hub model through Cache Storage is in a browser. */
let ranged = true;
let sources: ModelSourcesType;

function cfg(over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({
    model: 'qwen3-1.7b',
    algorithm: 'grpo',
    task: 'arithmetic',
    batchSize: 2,
    groupSize: 2,
    miniBatches: 1,
    responseLength: 2,
    lora: 8,
    chatTemplate: false,
    ...over,
  });
}

beforeAll(async () => {
  sources = await configOnlySources(
    () => limits,
    () => null,
    () => ranged,
  );
});

describe('the estimate of a Qwen3-1.7B-shaped folder with baseDtype "f16"', () => {
  it('on WebGPU: the base in f16 (half the matrices), said so, and the run fits the 8 GB browser budget', async () => {
    limits = WEBGPU;
    const report = await sources.estimateReport(cfg({ baseDtype: 'f16' }));
    expect(report.parts.base).toBe(BASE_F16);
    expect(report.baseDtype).toBe('f16');
    expect(report.problem).toBeNull();
    expect(estimateLine(report)).toMatch(/^≈ \d+\.\d GB: base in f16 3\.44, reward model —, adapters /);
    // The run loads its policy first: read a tensor at a time that peaks at 3.44 + 0.62 + 0.62 GB, within the
    // 5.2 GB; read whole (a source without ranges) at 3.44 + 0.62 + 3.44 GB, which Start refuses in the load's words.
    ranged = false;
    try {
      expect((await sources.estimateReport(cfg({ baseDtype: 'f16' }))).problem).toBe(
        'Loading qwen3-1.7b with the base in f16 needs ≈ 7.5 GB: 3.44 GB of weights (the large matrices in f16), ' +
          "and while they load, a weight at a time, the largest weight's values on the host (0.62 GB) and the " +
          'safetensors file (≈ 3.44 GB if stored in bf16); that is over the 5.2 GB budget here. Choose a smaller ' +
          'model.',
      );
    } finally {
      ranged = true;
    }
    // The same run with the f32 base: 6.88 GB of base alone, over the budget, and the remedy names f16.
    const f32 = await sources.estimateReport(cfg());
    expect(f32.parts.base).toBe(BASE_F32);
    expect(f32.baseDtype).toBeUndefined();
    expect(estimateLine(f32)).toMatch(/^≈ \d+\.\d GB: base 6\.88, /);
    expect(f32.problem).toMatch(
      /^Training qwen3-1\.7b \(1720\.6 M parameters\) with LoRA r=8 needs ≈ 7\.\d GB of weights/,
    );
    expect(f32.problem).toContain(
      'Setting "baseDtype" to "f16" would fit it: the frozen base in half precision, 3.44 GB rather than 6.88 GB ' +
        '(adapters, optimiser state and arithmetic stay f32).',
    );
  });

  it("on WebGPU the update's logits are counted as the trainer runs them: whole up to 128 MB, in chunks above", async () => {
    limits = WEBGPU;
    // R 64, V 151936: 3 rows' logits take 116.7 MB (whole, through the fused kernels), 4 rows' 155.6 MB (chunks of
    // 8192 entries). Counted whole at 4 rows, the update would hold 21 · 256 · 151936 floats (3.3 GB) of logits
    // and the estimate would grow with the micro-batch; counted as run, it falls.
    const at = async (microBatchSize: number) =>
      sources.estimateReport(
        cfg({
          baseDtype: 'f16',
          batchSize: 16,
          groupSize: 8,
          responseLength: 64,
          microBatchSize,
          recompute: 'blocks',
        }),
      );
    const [three, four] = [await at(3), await at(4)];
    expect(four.bytes).toBeLessThan(three.bytes);
  });

  it('on WASM: refused, saying why (no f16 kernels there); the estimate counts the f32 base', async () => {
    limits = WASM;
    const report = await sources.estimateReport(cfg({ baseDtype: 'f16' }));
    expect(report.parts.base).toBe(BASE_F32);
    expect(report.baseDtype).toBeUndefined();
    expect(report.problem).toMatch(
      /^"baseDtype" "f16" stores the frozen base in half precision for the WebGPU kernels, but the backend is "wasm"; use the webgpu backend, or set "baseDtype" to "f32"\. /,
    );
    // 6.88 GB of base does not fit the 4.1 GB the heap allows either: WebGPU is the remedy, with its f16 base.
    expect(report.problem).toContain(
      'Choose WebGPU on a GPU (not bound by the WASM heap; there "baseDtype" "f16" holds the frozen base in half ' +
        'precision (3.44 GB rather than 6.88 GB), which WASM cannot (its kernels read f32)).',
    );
    // With the f32 base the first sentence goes; the heap's refusal stays.
    const f32 = await sources.estimateReport(cfg());
    expect(f32.problem).toMatch(/^Training qwen3-1\.7b /);
    expect(f32.problem).not.toContain('"baseDtype" "f16" stores');
  });

  it('GPT-2 with baseDtype "f16" on WebGPU: refused in words (Llama / Qwen families only)', async () => {
    limits = WEBGPU;
    const report = await sources.estimateReport(
      cfg({ model: 'gpt2-124m', task: 'sentiment', baseDtype: 'f16' }),
    );
    expect(report.baseDtype).toBeUndefined();
    expect(report.problem).toBe(
      '"baseDtype" "f16" is implemented for the Llama / Qwen2 / Qwen3 families, not GPT-2 (its Conv1D kernels ' +
        'read f32 weights); set "baseDtype" to "f32".',
    );
  });
});

describe('runMemoryCheck: the f16 base as a remedy (pure)', () => {
  const budget = { bytes: BUDGET_8GB, what: 'the budget here is 5.2 GB (60% of this device’s memory)' };

  it('WebGPU, LoRA with an f32 base over the budget: f16 named first, with both sizes', () => {
    const check = runMemoryCheck(qwen3, 'Qwen3-1.7B', SHAPE, LORA8, budget, 'webgpu');
    expect(check.estimate.parts.base).toBe(BASE_F32);
    const remedies = check.problem!.slice(check.problem!.indexOf(budget.what) + budget.what.length + 2);
    expect(remedies).toBe(
      'Setting "baseDtype" to "f16" would fit it: the frozen base in half precision, 3.44 GB rather than 6.88 GB ' +
        '(adapters, optimiser state and arithmetic stay f32). Or choose a smaller model (e.g. distilbert/distilgpt2 or tiny).',
    );
    // With f16 set: it fits, and the estimate says its base is in f16.
    const half = runMemoryCheck(qwen3, 'Qwen3-1.7B', SHAPE, { ...LORA8, baseDtype: 'f16' }, budget, 'webgpu');
    expect(half.problem).toBeNull();
    expect(half.estimate.baseDtype).toBe('f16');
    expect(half.estimate.parts.base).toBe(BASE_F16);
    expect(formatParts(half.estimate)).toMatch(/^base in f16 3\.44, LoRA adapters 0\.03, /);
  });

  it('a budget f16 cannot meet either: f16 is not offered; the refusal says the run is on an f16 base', () => {
    const small = { bytes: 3e9, what: 'the budget here is 3.0 GB' };
    const f32 = runMemoryCheck(qwen3, 'Qwen3-1.7B', SHAPE, LORA8, small, 'webgpu');
    expect(f32.problem).not.toContain('baseDtype');
    const f16 = runMemoryCheck(qwen3, 'Qwen3-1.7B', SHAPE, { ...LORA8, baseDtype: 'f16' }, small, 'webgpu');
    expect(f16.problem).toMatch(
      /^Training Qwen3-1\.7B \(1720\.6 M parameters\) with LoRA r=8 on a base in f16 needs ≈ 3\.\d GB of weights, gradients and optimiser state \(base in f16 3\.44, /,
    );
  });

  it('WebGPU: refused only when the fallback floor (one sample, recompute) does not fit either', () => {
    const half = { ...LORA8, baseDtype: 'f16' as const };
    const big: RunShape = { batchSize: 64, miniBatches: 1, promptLength: 64, responseLength: 64 };
    const floor: RunShape = { ...big, microBatchSize: 1, generateMicroBatchSize: 1, recompute: true };
    expect(estimateRunMemory(qwen3, big, half).total).toBeGreaterThan(budget.bytes);
    expect(estimateRunMemory(qwen3, floor, half).total).toBeLessThan(budget.bytes);
    expect(runMemoryCheck(qwen3, 'Qwen3-1.7B', big, half, budget, 'webgpu').problem).toMatch(
      /^Training Qwen3-1\.7B /,
    );
    expect(runMemoryCheck(qwen3, 'Qwen3-1.7B', big, half, budget, 'webgpu', floor).problem).toBeNull();
    // The f16 remedy counts the floor too: with the f32 base neither shape fits, with f16 the floor does.
    const f32 = runMemoryCheck(qwen3, 'Qwen3-1.7B', big, LORA8, budget, 'webgpu', floor);
    expect(f32.problem).toContain('Setting "baseDtype" to "f16" would fit it: ');
  });

  it('full fine-tuning on WebGPU: the LoRA remedy also says what LoRA with the f16 base holds', () => {
    const full = { valueModel: 'none' as const, rewardModel: false };
    const check = runMemoryCheck(qwen3, 'Qwen3-1.7B', SHAPE, full, budget, 'webgpu');
    // By hand: LoRA r=8 on the seven projections, per layer 8·((2048 + 2048)·2 (q, o) + (2048 + 1024)·2 (k, v) +
    // (2048 + 6144)·3 (gate, up, down)) = 311 296, × 28 = 8 716 288 parameters; held as adapters, gradients and
    // Adam's two moments in f32 (4 × 4 bytes each) beside the f16 base: 3 441 397 760 + 16 × 8 716 288 = 3.58 GB.
    expect(check.problem).toContain('; ≈ 3.58 GB with "baseDtype" "f16", the base in half precision).');
    // Not for GPT-2 (no f16 base), nor off WebGPU.
    const onWasm = runMemoryCheck(qwen3, 'Qwen3-1.7B', SHAPE, full, budget, 'wasm');
    expect(onWasm.problem).not.toContain('with "baseDtype" "f16"');
  });
});

describe("the UI's estimate line", () => {
  const report: MemoryEstimateReport = {
    model: 'uploaded:qwen3-2x2048',
    params: 411_838_976,
    policyTrainableParams: 622_592,
    trainableParams: 622_592,
    lora: 8,
    bytes: 900_000_000,
    parts: {
      base: 823_699_456,
      reference: 0,
      value: 0,
      rewardModel: 0,
      adapters: 2_490_368,
      adam: 4_980_736,
      gradients: 2_490_368,
      activations: 66_339_072,
      packed: 0,
      heapGrowth: 0,
    },
    budgetBytes: BUDGET_8GB,
    budget: 'the budget here is 5.2 GB (60% of this device’s memory)',
    problem: null,
    baseDtype: 'f16',
  };

  it('names the base "base in f16" when the report holds it in f16, "base" otherwise', () => {
    expect(estimateLine(report)).toBe(
      '≈ 0.9 GB: base in f16 0.82, reward model —, adapters 0.00, Adam 0.00, gradients 0.00, activations 0.07 GB',
    );
    const { baseDtype: _, ...f32 } = report;
    expect(estimateLine(f32)).toBe(
      '≈ 0.9 GB: base 0.82, reward model —, adapters 0.00, Adam 0.00, gradients 0.00, activations 0.07 GB',
    );
  });
});
