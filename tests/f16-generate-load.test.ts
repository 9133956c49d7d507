/**
 * The model loaded for "Try the policy" follows the run's "baseDtype" (issue #36; docs/models.md, "The frozen base in
 * f16"): the worker's load check (src/worker/sources.ts checkMemory 'load', device-limits.ts loadMemoryProblem)
 * counts the base as it will be loaded, in words that say what is counted, and names the f16 base when it would
 * fit. Driven with a config-only Qwen3-1.7B folder as tests/f16-base-estimate.test.ts (no weights read, no GPU).
 * Then, on WebGPU in Node (Dawn; skipped, saying why, without an adapter), the worker's Run with the tiny Qwen2
 * fixture: loadModel packs the base in f16, a change of "baseDtype" reloads it at the next generate in the new
 * storage, and the RL job disposes it when its trainer takes its place.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadTaskNode } from '../src/cli/tasks-node';
import { describe, it, expect, beforeAll } from 'vitest';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { LLAMA_SHAPES, parseLlamaConfig } from '../src/core/model/llama-config';
import { paramCount } from '../src/core/model/size';
import { parseModelConfig } from '../src/core/model/config';
import type { ModelSources as ModelSourcesType } from '../src/worker/sources';
import { generateBaseDtype, loadMemory, type DeviceLimits } from '../src/worker/device-limits';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  BASE_F16,
  BASE_F32,
  BUDGET_8GB,
  GPT2_JSON,
  MATRICES,
  NORMS,
  configOnlySources,
  refusal,
} from './helpers/qwen3-config-only';

// The worker's modules read `self` and `navigator` (worker globals).
(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

// Qwen3-1.7B's byte counts, worked by hand: tests/helpers/qwen3-config-only.ts. P = 1 720 574 976 parameters.
const P = MATRICES + NORMS;
/** The file when its size is not known: 2 bytes a parameter (bf16). */
const FILE_BF16 = 2 * P; // 3 441 149 952
/** The largest weight: embed_tokens (tied head), 151 936 × 2048 values. */
const EMBED = 151_936 * 2048; // 311 164 928
/**
 * Loading a weight at a time (Llama.fromReader): the weights, the largest weight's values on the host (f32, or
 * packed f16 words) and the file's bytes (whole, or that weight's where it is read by ranges).
 */
const LOAD_F32 = BASE_F32 + 4 * EMBED + FILE_BF16; // 6 882 299 904 + 1 244 659 712 + 3 441 149 952 = 11 568 109 568
const LOAD_F16 = BASE_F16 + 2 * EMBED + FILE_BF16; // 3 441 397 760 + 622 329 856 + 3 441 149 952 = 7 504 877 568

let limits: DeviceLimits = { backend: 'webgpu' };
/** The size of model.safetensors as if its bytes were held (picked files); null: unknown (a Hub model). */
let fileBytes: number | null = null;
/** Whether that file is read a tensor at a time (picked Files). */
let ranged = false;
let sources: ModelSourcesType;

function cfg(over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({ model: 'qwen3-1.7b', algorithm: 'grpo', task: 'arithmetic', lora: 8, ...over });
}

beforeAll(async () => {
  sources = await configOnlySources(
    () => limits,
    () => fileBytes,
    () => ranged,
  );
});

describe('what loading a model to generate counts (pure)', () => {
  const qwen3 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen3-1.7b'] });

  it('a weight at a time: the weights, the largest weight on the host and the file (f32 and f16)', () => {
    expect(loadMemory(qwen3, 'f32')).toEqual({
      baseDtype: 'f32',
      weights: BASE_F32,
      hostCopy: 4 * EMBED,
      file: FILE_BF16,
      fileKnown: false,
      ranged: false,
      total: LOAD_F32,
    });
    expect(LOAD_F32).toBe(11_568_109_568);
    expect(loadMemory(qwen3, 'f16')).toEqual({
      baseDtype: 'f16',
      weights: BASE_F16,
      hostCopy: 2 * EMBED,
      file: FILE_BF16,
      fileKnown: false,
      ranged: false,
      total: LOAD_F16,
    });
    expect(LOAD_F16).toBe(7_504_877_568);
    expect(loadMemory(qwen3, 'f16', 4e9).total).toBe(BASE_F16 + 2 * EMBED + 4e9);
  });

  it('GPT-2 a weight at a time too: in f32 (never f16), its file estimated at 4 bytes a parameter', () => {
    const gpt2 = parseModelConfig({ model_type: 'gpt2', ...GPT2_JSON }, 'gpt2');
    // wte 50 257 × 768 = 38 597 376, wpe 1024 × 768 = 786 432, 12 blocks × 7 087 872, ln_f 1536.
    const P2 = 38_597_376 + 786_432 + 12 * 7_087_872 + 1536;
    expect(paramCount(gpt2)).toBe(P2);
    expect(P2).toBe(124_439_808);
    const WTE = 4 * 38_597_376; // 154 389 504: the largest weight's f32 values
    expect(loadMemory(gpt2, 'f16')).toEqual({
      baseDtype: 'f32',
      weights: 4 * P2,
      hostCopy: WTE,
      file: 4 * P2,
      fileKnown: false,
      ranged: false,
      total: 8 * P2 + WTE,
    });
    // Read by ranges from a 500 MB file: wte's share of its bytes.
    expect(loadMemory(gpt2, 'f32', 5e8, true)).toMatchObject({
      file: Math.ceil((5e8 / P2) * 38_597_376),
      fileKnown: true,
      total: 4 * P2 + WTE + Math.ceil((5e8 / P2) * 38_597_376),
    });
  });

  it('generate holds the base in f16 only where the run would: webgpu, a Llama / Qwen family, "f16" asked', () => {
    expect(generateBaseDtype('f16', 'qwen3', 'webgpu')).toBe('f16');
    expect(generateBaseDtype('f16', 'llama', 'webgpu')).toBe('f16');
    expect(generateBaseDtype('f32', 'qwen3', 'webgpu')).toBe('f32');
    expect(generateBaseDtype(undefined, 'qwen3', 'webgpu')).toBe('f32');
    expect(generateBaseDtype('f16', 'qwen3', 'wasm')).toBe('f32');
    expect(generateBaseDtype('f16', 'qwen3', null)).toBe('f32');
    expect(generateBaseDtype('f16', 'gpt2', 'webgpu')).toBe('f32');
  });
});

describe('loading a Qwen3-1.7B-shaped folder to generate (checkMemory "load", config.json only)', () => {
  it('f16 on WebGPU at the 8 GB browser budget: refused, saying what is counted', async () => {
    limits = { backend: 'webgpu' };
    fileBytes = null;
    sources.setMemoryBudget(BUDGET_8GB);
    // A Hub model without Cache Storage: the file is downloaded and read whole.
    expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' })))).toBe(
      'Loading qwen3-1.7b with the base in f16 needs ≈ 7.5 GB: 3.44 GB of weights (the large matrices in f16), ' +
        "and while they load, a weight at a time, the largest weight's values on the host (0.62 GB) and the " +
        'safetensors file (≈ 3.44 GB if stored in bf16); that is over the 5.2 GB budget here. Choose a smaller ' +
        'model.',
    );
  });

  it('a 10 GB budget: f16 loads (the options say so); f32 is refused, naming f16 with its count', async () => {
    limits = { backend: 'webgpu' };
    fileBytes = null;
    sources.setMemoryBudget(10e9);
    expect(await sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' }))).toEqual({
      baseDtype: 'f16',
    });
    expect(await sources.checkMemory('qwen3-1.7b', 'load', cfg({ baseDtype: 'f16' }))).toBeNull();
    const f32 =
      'qwen3-1.7b has 1720.6 M parameters (6.9 GB of weights); loading it needs ≈ 11.6 GB: the weights, and while ' +
      "they load, a weight at a time, the largest weight's values on the host (1.24 GB) and the safetensors file " +
      '(≈ 3.44 GB if stored in bf16); that is over the 10.0 GB budget here.';
    const how =
      '≈ 7.5 GB: 3.44 GB of weights with the large matrices in f16, and the largest weight and the file while ' +
      'they load';
    expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg()))).toBe(
      `${f32} Setting "baseDtype" to "f16" would fit it (${how}). Or choose a smaller model.`,
    );
    // Without LoRA, "baseDtype" "f16" needs a rank too (config validation refuses it at "lora" 0).
    expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg({ lora: 0 })))).toBe(
      `${f32} Setting "lora" to a rank ≥ 1 and "baseDtype" to "f16" would fit it (${how}). Or choose a smaller model.`,
    );
    // A DPO / SFT job's load (no run config): f32, and no f16 to offer.
    expect(await refusal(() => sources.checkMemory('qwen3-1.7b', 'load'))).toBe(
      `${f32} Choose a smaller model.`,
    );
  });

  it('a f32 file held whole is counted as it is: 6.88 GB more on the host, over 10 GB even in f16', async () => {
    limits = { backend: 'webgpu' };
    fileBytes = 6_882_400_000; // BASE_F32 and a header
    sources.setMemoryBudget(10e9);
    // 3 441 397 760 + 622 329 856 + 6 882 400 000 = 10 946 127 616
    expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' })))).toBe(
      'Loading qwen3-1.7b with the base in f16 needs ≈ 10.9 GB: 3.44 GB of weights (the large matrices in f16), ' +
        "and while they load, a weight at a time, the largest weight's values on the host (0.62 GB) and the 6.88 " +
        'GB safetensors file; that is over the 10.0 GB budget here. Choose a smaller model.',
    );
    // f32 then has no f16 remedy: that would not fit either.
    expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg()))).toMatch(
      /over the 10\.0 GB budget here\. Choose a smaller model\.$/,
    );
    fileBytes = null;
  });

  it('the same file read a tensor at a time (picked Files): its largest tensor is counted, and it loads', async () => {
    limits = { backend: 'webgpu' };
    fileBytes = 6_882_400_000;
    ranged = true;
    sources.setMemoryBudget(10e9);
    try {
      // The largest tensor is embed_tokens, 151 936 × 2048 = 311 164 928 values, at the file's bytes per value
      // (6 882 400 000 / 1 720 574 976 parameters): 1 244 700 … bytes, where the whole file was 6.88 GB.
      const qwen3 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen3-1.7b'] });
      const perValue = 6_882_400_000 / paramCount(qwen3);
      const largest = Math.ceil(perValue * EMBED);
      expect(loadMemory(qwen3, 'f16', fileBytes, true)).toEqual({
        baseDtype: 'f16',
        weights: BASE_F16,
        hostCopy: 2 * EMBED,
        file: largest,
        fileKnown: true,
        ranged: true,
        total: BASE_F16 + 2 * EMBED + largest,
      });
      expect(await sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' }))).toEqual({
        baseDtype: 'f16',
      });
      // At 8 GB (5.2 GB here) this f32 file is refused by a little, the message saying what is counted …
      sources.setMemoryBudget(BUDGET_8GB);
      expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' })))).toBe(
        'Loading qwen3-1.7b with the base in f16 needs ≈ 5.3 GB: 3.44 GB of weights (the large matrices in f16), ' +
          "and while they load, a weight at a time, the largest weight's values on the host (0.62 GB) and its " +
          'bytes in the file (1.24 GB; the file is read a tensor at a time); that is over the 5.2 GB budget ' +
          'here. Choose a smaller model.',
      );
      // … and the bf16 file Qwen publishes (two shards, 3.44 GB and its headers) loads: 3.44 + 0.62 + 0.62 GB.
      fileBytes = FILE_BF16 + 60_000;
      expect(loadMemory(qwen3, 'f16', fileBytes, true).total).toBeLessThan(4.7e9);
      expect(await sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' }))).toEqual({
        baseDtype: 'f16',
      });
    } finally {
      fileBytes = null;
      ranged = false;
    }
  });

  it('off WebGPU "f16" is not used to load: f32 is counted, and WebGPU named where f16 would fit', async () => {
    limits = { backend: 'cpu' };
    sources.setMemoryBudget(10e9);
    expect(await refusal(() => sources.generateLoadOptions('qwen3-1.7b', cfg({ baseDtype: 'f16' })))).toBe(
      'qwen3-1.7b has 1720.6 M parameters (6.9 GB of weights); loading it needs ≈ 11.6 GB: the weights, and ' +
        "while they load, a weight at a time, the largest weight's values on the host (1.24 GB) and the " +
        'safetensors file (≈ 3.44 GB if stored in bf16); that is over the 10.0 GB budget here. On WebGPU, ' +
        'setting "baseDtype" to "f16" would fit it (≈ 7.5 GB: 3.44 GB of weights with the large matrices in f16, ' +
        'and the largest weight and the file while they load); the cpu backend holds the weights in f32. Or ' +
        'choose a smaller model.',
    );
    // GPT-2 never loads in f16: with room for it in f32, the options have no baseDtype.
    limits = { backend: 'webgpu' };
    expect(
      await sources.generateLoadOptions(
        'gpt2-124m',
        validateConfig({ model: 'gpt2-124m', lora: 8, baseDtype: 'f16' }),
      ),
    ).toEqual({});
    sources.setMemoryBudget(BUDGET_8GB);
  });
});

describe('the model picker’s verdicts: which Llama / Qwen sizes fit this device, and why (modelFit)', () => {
  const qwen3 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen3-1.7b'] });
  const qwen06 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen3-0.6b'] });
  const grpo = (over: Partial<TrainConfig> = {}) => cfg({ algorithm: 'grpo', lora: 0, ...over });
  /**
   * LoRA r=8 on the seven linears of a Qwen3-1.7B layer, r × (in + out): q 2048 + 2048, k 2048 + 1024, v 2048 + 1024,
   * o 2048 + 2048, gate and up 2048 + 6144, down 6144 + 2048 = 38 912 × 8 = 311 296, × 28 layers = 8 716 288
   * parameters; with Adam's two moments and the gradients, 4 × 4 bytes each. GRPO: no value model.
   */
  const ADAPTER_STATE = 16 * 8_716_288; // 139 460 608
  const FIT_F16 = BASE_F16 + ADAPTER_STATE; // 3 580 858 368: "3.6 GB"
  const FIT_F32 = BASE_F32 + ADAPTER_STATE; // 7 021 760 512: "7.0 GB"
  /** Qwen3-0.6B: 596 049 920 parameters; adapters 22 528 × 8 × 28 = 5 046 272. */
  const FIT06_F32 = 4 * 596_049_920 + 16 * 5_046_272; // 2 464 940 032: "2.5 GB"
  /**
   * WASM: XNNPACK's packed f32 copy of the blocks' matrices, 4 × 28 × 15 728 640 = 1 761 607 680 bytes more, and the
   * heap's growth step (96 MiB: size.ts WASM_HEAP_GROWTH_BYTES).
   */
  const FIT06_WASM = FIT06_F32 + 4 * 28 * 15_728_640 + 100_663_296; // 4 327 211 008: "4.3 GB"
  /**
   * On WebGPU the verdict takes the larger of those and the load's peak (a Hub file through Cache Storage, read a
   * tensor at a time, 2 bytes a parameter): the weights, the embedding's values on the host and its bytes in the
   * file. Qwen3-1.7B: LOAD_F16 with the file's embedding (2 × EMBED) in place of the whole file, and in f32.
   */
  const LOADR_F16 = BASE_F16 + 2 * EMBED + 2 * EMBED; // 4 686 057 472: "4.7 GB" (FIT_F16 3.6 GB)
  const LOADR_F32 = BASE_F32 + 4 * EMBED + 2 * EMBED; // 8 749 289 472: "8.7 GB" (FIT_F32 7.0 GB)
  /** Qwen3-0.6B in f32: its embedding 151 936 × 1024 = 155 582 464 values. */
  const LOADR06_F32 = 4 * 596_049_920 + 6 * 155_582_464; // 3 317 694 464: "3.3 GB" (FIT06_F32 2.5 GB)

  it('the counts are the estimate’s (weights, adapters, Adam, gradients; no activations)', async () => {
    const { estimateRunMemory, fixedBytes, runMemoryOptions } = await import('../src/core/model/size');
    const none = { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 };
    const opts = runMemoryOptions(grpo({ lora: 8 }), false);
    expect(fixedBytes(estimateRunMemory(qwen3, none, { ...opts, baseDtype: 'f16' }))).toBe(FIT_F16);
    expect(fixedBytes(estimateRunMemory(qwen3, none, opts))).toBe(FIT_F32);
    expect(fixedBytes(estimateRunMemory(qwen06, none, opts))).toBe(FIT06_F32);
    expect(fixedBytes(estimateRunMemory(qwen06, none, { ...opts, heap: 'wasm' }))).toBe(FIT06_WASM);
    expect(loadMemory(qwen3, 'f16', null, true).total).toBe(LOADR_F16);
    expect(loadMemory(qwen3, 'f32', null, true).total).toBe(LOADR_F32);
    expect(loadMemory(qwen06, 'f32', null, true).total).toBe(LOADR06_F32);
    expect([LOADR_F16, LOADR_F32, LOADR06_F32]).toEqual([4_686_057_472, 8_749_289_472, 3_317_694_464]);
  });

  it('WebGPU at the 8 GB browser budget: Qwen3-1.7B only with the base in f16; Qwen3-0.6B either way', async () => {
    const { modelFit } = await import('../src/worker/device-limits');
    const gpu: DeviceLimits = { backend: 'webgpu' };
    expect(modelFit(qwen3, grpo(), gpu, BUDGET_8GB)).toEqual({
      fits: true,
      text: 'fits only with the base in f16 (≈ 4.7 GB of 5.2 GB before activations; ≈ 8.7 GB in f32)',
    });
    expect(modelFit(qwen3, grpo({ lora: 8, baseDtype: 'f16' }), gpu, BUDGET_8GB)).toEqual({
      fits: true,
      text: 'fits with the base in f16 (≈ 4.7 GB of 5.2 GB before activations)',
    });
    expect(modelFit(qwen3, grpo(), gpu, 3e9)).toEqual({
      fits: false,
      text: 'does not fit: needs ≈ 4.7 GB with the base in f16, 3.0 GB here',
    });
    expect(modelFit(qwen06, grpo(), gpu, BUDGET_8GB)).toEqual({
      fits: true,
      text: 'fits with LoRA r=8 (≈ 3.3 GB of 5.2 GB before activations)',
    });
    // A GPU whose one-buffer limit is under a block matrix (6144 × 2048 f32 = 48 MiB).
    expect(
      modelFit(qwen3, grpo(), { backend: 'webgpu', maxStorageBufferBindingSize: 32 * 1024 ** 2 }, BUDGET_8GB),
    ).toEqual({ fits: false, text: 'does not fit: a weight is over this GPU’s limit for one buffer' });
  });

  it('WASM and CPU: what WebGPU would hold, and why it is needed', async () => {
    const { modelFit, memoryBudget } = await import('../src/worker/device-limits');
    const wasm: DeviceLimits = { backend: 'wasm' };
    expect(formatBudget(memoryBudget(wasm, BUDGET_8GB).bytes)).toBe('4.1 GB');
    expect(modelFit(qwen06, grpo(), wasm, BUDGET_8GB)).toEqual({
      fits: false,
      text: 'needs WebGPU (≈ 3.3 GB of 5.2 GB before activations there; ≈ 4.3 GB here, over 4.1 GB)',
    });
    expect(modelFit(qwen3, grpo(), { backend: 'cpu' }, BUDGET_8GB)).toEqual({
      fits: false,
      text: 'needs WebGPU for the f16 base (≈ 4.7 GB of 5.2 GB before activations there; ≈ 7.0 GB here in f32, over 5.2 GB)',
    });
    expect(modelFit(qwen3, grpo(), { backend: 'cpu' }, 3e9)).toEqual({
      fits: false,
      text: 'does not fit: needs ≈ 7.0 GB, 3.0 GB here',
    });
  });

  it('the worker answers for every known shape, on its backend and budget', async () => {
    limits = { backend: 'webgpu' };
    sources.setMemoryBudget(BUDGET_8GB);
    const fits = sources.modelFits(grpo());
    expect(Object.keys(fits)).toEqual(Object.keys(LLAMA_SHAPES));
    expect(fits['qwen3-1.7b'].text).toBe(
      'fits only with the base in f16 (≈ 4.7 GB of 5.2 GB before activations; ≈ 8.7 GB in f32)',
    );
    expect(fits['qwen3-0.6b'].text).toBe('fits with LoRA r=8 (≈ 3.3 GB of 5.2 GB before activations)');
    // Qwen2.5-1.5B: 3.09 GB of weights in f16 and its embedding twice (151 936 × 1536 × 2 bytes each).
    expect(fits['qwen2.5-1.5b'].text).toBe(
      'fits only with the base in f16 (≈ 4.0 GB of 5.2 GB before activations; ≈ 7.6 GB in f32)',
    );
  });
});

const formatBudget = (n: number) => `${(n / 1e9).toFixed(1)} GB`;

// ---- the worker's Run on WebGPU (Dawn in Node) ---------------------------------------------------------------

const adapter = await webGpuAdapter();
const QWEN2 = fileURLToPath(new URL('./fixtures/parity-llama/qwen2-tiny/', import.meta.url));
const QWEN2_FILES = [
  'config.json',
  'model.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
  'generation_config.json',
];

describe('the Run loads generate’s model as "baseDtype" says (WebGPU in Node)', () => {
  if (!adapter) {
    skipWithoutAdapter();
    return;
  }

  it('loadModel packs the base in f16; a change of "baseDtype" reloads it; a run disposes it', async () => {
    await useNodeWebGpu();
    const { ModelSources } = await import('../src/worker/sources');
    const { Run } = await import('../src/worker/run');
    const { RunEvents } = await import('../src/worker/events');
    class NodeSources extends ModelSources {
      override loadTask = loadTaskNode;
    }
    const webgpu = new NodeSources(() => {}, {
      deviceLimits: () => ({ backend: 'webgpu' }),
      memoryBudgetBytes: 1e9,
    });
    const run = new Run(webgpu, (job) => job(), {
      events: new RunEvents(),
      hooks: { autosave: async () => {}, failedForDeviceLoss: async () => false },
      memory: () => undefined,
    });
    const name = webgpu.nameFor({
      kind: 'files',
      files: QWEN2_FILES.map((n) => ({
        name: `qwen2-tiny/${n}`,
        bytes: new Uint8Array(readFileSync(`${QWEN2}${n}`)),
      })),
    });
    await run.configure({
      lora: 4,
      baseDtype: 'f16',
      algorithm: 'grpo',
      task: 'arithmetic-chat',
      batchSize: 2,
      groupSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 2,
      steps: 1,
    });
    const tfc = await import('@tensorflow/tfjs-core');
    /** tfjs-backend-webgpu's buffer counters. */
    const manager = () =>
      (
        tfc.backend() as unknown as {
          bufferManager: { numFreeBuffers: number; numBytesAllocated: number; numBytesUsed: number };
        }
      ).bufferManager;
    const packed = (m: { params: Map<string, { dtype: string }> }) =>
      [...m.params.values()].filter((v) => v.dtype === 'int32').length;

    const summary = await run.loadModel(name);
    // The summary counts a packed weight's values, not its words: the same count as the f32 model's.
    const layer = 32 * 32 + 32 + 2 * (32 * 16 + 16) + 32 * 32 + 3 * 32 * 64 + 2 * 32;
    expect(summary.params).toBe(512 * 32 + 2 * layer + 32);
    const f16 = (await run.generator()).model;
    // Packed: the embedding (tied head) and the seven linears of each of the 2 layers.
    expect(packed(f16)).toBe(1 + 2 * 7);

    // "baseDtype" back to f32: the next generate loads the model again, in f32.
    await run.configure({ baseDtype: 'f32' });
    expect(run.hasLm).toBe(true); // kept until generate asks for it
    const f32 = (await run.generator()).model;
    // The f16 model's buffers went back to the device when it was unloaded, not into tfjs's pool.
    expect(manager().numFreeBuffers).toBe(0);
    expect(f32).not.toBe(f16);
    expect(packed(f32)).toBe(0);
    expect((await run.generator()).model).toBe(f32); // same storage: kept

    await run.configure({ baseDtype: 'f16' });
    const again = (await run.generator()).model;
    expect(packed(again)).toBe(1 + 2 * 7);

    // A run's trainer takes the loaded model's place: disposed when the session is built.
    await run.stepOnce();
    expect(run.status().step).toBe(1);
    expect(run.hasLm).toBe(false);
    expect(await webGpuErrors()).toEqual([]);
    // Dropped: the trainer's buffers go back to the device, not into tfjs's pool (which would keep them for the
    // page's life, since another model's sizes never match them).
    const allocated = manager().numBytesAllocated;
    run.dropTrainer();
    expect(manager().numFreeBuffers).toBe(0);
    expect(manager().numBytesAllocated).toBe(manager().numBytesUsed);
    expect(manager().numBytesAllocated).toBeLessThan(allocated);
  }, 120_000);
});
