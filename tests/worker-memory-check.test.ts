/**
 * The worker's check before a run is built (src/worker/sources.ts checkMemory / runEstimate,
 * src/worker/device-limits.ts): it counts what the configured run holds — one base with LoRA, the adapters,
 * the value model (separate, shared or none), the reward model only when the reward is a learned one, Adam and
 * gradients on the trainable parameters only, and the activations of the batch. From a folder holding only
 * config.json (GPT-2 124M's shape): LoRA with a function reward is accepted on the WASM budget, full copies are
 * refused with the numbers and the remedies. Also the WebGPU check against the largest embedding chunk.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { memoryFiles, type ModelFiles } from '../src/core/model/folder';
import { loadTaskNode } from '../src/cli/tasks-node';
import { isUserError } from '../src/common/errors';
import type { ModelSources as ModelSourcesType } from '../src/worker/sources';
import type { DeviceLimits } from '../src/worker/device-limits';
import {
  checkDeviceLimits,
  largestHeldTensor,
  memoryBudget,
  runMemoryOptions,
  webgpuBindingBytes,
  WASM_HEAP_BYTES,
} from '../src/worker/device-limits';
import { parseGPT2Config } from '../src/core/model/config';
import { refusal } from './helpers/qwen3-config-only';

// The worker's modules read `self` and `navigator` (worker globals).
(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const GPT2_JSON = { vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12 };
const gpt2 = parseGPT2Config(GPT2_JSON);
const configOnly = (label: string): ModelFiles =>
  memoryFiles(label, new Map([['config.json', new TextEncoder().encode(JSON.stringify(GPT2_JSON))]]));

// GPT-2 124M by hand: P = 124,439,808 (tied head once); the value head 768; LoRA r = 8 on the four targets
// per layer: c_attn 8·(768 + 2304) + attn.c_proj 8·(768 + 768) + c_fc 8·(768 + 3072) + mlp.c_proj 8·(3072 + 768)
// = 24576 + 12288 + 30720 + 30720 = 98,304, × 12 layers = 1,179,648.
const P = 124_439_808;
const HEAD = 768;
const ADAPTERS = 1_179_648;
const WASM: DeviceLimits = { backend: 'wasm', heapBytes: WASM_HEAP_BYTES };
/** What the worker assumes when the browser reports 8 GB (navigator.deviceMemory's cap): 60% of 8 GiB. */
const BUDGET_8GB = 8 * 1024 ** 3 * 0.6;

let sources: ModelSourcesType;

function cfg(over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({ model: 'gpt2-124m', task: 'sentiment', ...over });
}

beforeAll(async () => {
  const { ModelSources } = await import('../src/worker/sources');
  class ConfigOnlySources extends ModelSources {
    override files(name: string): ModelFiles {
      if (name === 'gpt2-124m') return configOnly('gpt2-124m');
      if (name === 'rm-124m') return configOnly('rm-124m');
      return super.files(name);
    }
    override loadTask = loadTaskNode;
  }
  sources = new ConfigOnlySources(() => {}, { deviceLimits: () => WASM, memoryBudgetBytes: BUDGET_8GB });
});

describe('the worker checks the run it will build (GPT-2 124M, config.json only)', () => {
  it('LoRA r=8 with a function reward on WASM, batch 8: accepted; one base, two adapter sets, Adam on them only', async () => {
    const check = await sources.checkMemory('gpt2-124m', 'train', cfg({ lora: 8, batchSize: 8 }));
    expect(check).not.toBeNull();
    const { estimate, params, policyTrainableParams, budget } = check!;
    expect(params).toBe(P);
    expect(policyTrainableParams).toBe(ADAPTERS);
    // Policy adapters + the shared value model's adapters and head.
    expect(estimate.trainableParams).toBe(2 * ADAPTERS + HEAD);
    expect(estimate.parts).toMatchObject({
      base: P * 4,
      reference: 0,
      value: HEAD * 4,
      rewardModel: 0,
      adapters: 2 * ADAPTERS * 4,
      adam: 2 * (2 * ADAPTERS + HEAD) * 4,
      gradients: (2 * ADAPTERS + HEAD) * 4,
    });
    expect(estimate.parts.activations).toBeGreaterThan(0);
    // The WASM heap's share (95% of 4 GiB − 64 KiB) is the budget here, below the device's 5.2 GB.
    expect(budget.bytes).toBe(WASM_HEAP_BYTES * 0.95);
    // (That the total fits it is what checkMemory returning, not refusing, already says.)
  });

  it('LoRA r=8 on WASM at the default batch 16: accepted (micro-batches and recomputation bound the activations)', async () => {
    // Before micro-batches this run was refused ("batchSize 12 would fit"): its update held the whole minibatch's
    // activations (3.79e9 tensor bytes measured at its peak).
    const check = await sources.runEstimate(cfg({ lora: 8 }));
    expect(check.problem).toBeNull();
    expect(check.estimate.total).toBeLessThan(1.5e9);
    expect(await refusal(() => sources.checkMemory('gpt2-124m', 'train', cfg({ lora: 8 })))).toBe('');
  });

  it('full copies on WASM: refused, naming the numbers and the remedies (LoRA, WebGPU, a smaller model)', async () => {
    const msg = await refusal(() => sources.checkMemory('gpt2-124m', 'train', cfg({ lora: 0 })));
    expect(msg).toMatch(
      /^Training gpt2-124m \(124\.4 M parameters\) with full copies needs ≈ 5\.6 GB of weights, gradients and optimiser state \(policy 0\.50, reference 0\.50, value 0\.50, Adam 1\.99, gradients 1\.00, activations \d\.\d\d, packed weights 1\.02, heap growth 0\.10 GB\); the WASM backend allows 4\.1 GB \(95% of its 4\.3 GB heap\)\./,
    );
    // On the heap: 0.54 GB of weights and Adam, and the base's 0.34 GB of packed weights.
    expect(msg).toMatch(
      /Use LoRA \("lora": 8: 1\.2 M adapter parameters trained on one frozen base, ≈ 0\.98 GB/,
    );
    expect(msg).toMatch(/Choose WebGPU on a GPU/);
    expect(msg).toMatch(/smaller model \(e\.g\. distilbert\/distilgpt2 or tiny\)/);
  });

  it('a learned reward model is counted (its weights and its forward); a function reward is not', async () => {
    const fn = (await sources.runEstimate(cfg({ lora: 8 }))).estimate;
    const rm = (await sources.runEstimate(cfg({ lora: 8, reward: { model: 'rm-124m' } }))).estimate;
    expect(fn.parts.rewardModel).toBe(0);
    expect(rm.parts.rewardModel).toBe((P + HEAD) * 4);
    expect(rm.trainableParams).toBe(fn.trainableParams);
    expect(rm.total).toBeGreaterThan(fn.total + (P + HEAD) * 4 - 1);
  });

  it('critic-free (GRPO) with LoRA: no value adapters, head or value Adam; separate value: a full value model', async () => {
    const grpo = (await sources.runEstimate(cfg({ lora: 8, algorithm: 'grpo' }))).estimate;
    expect(grpo.trainableParams).toBe(ADAPTERS);
    expect(grpo.parts).toMatchObject({ value: 0, adapters: ADAPTERS * 4, adam: 2 * ADAPTERS * 4 });
    const sep = (await sources.runEstimate(cfg({ lora: 8, valueModel: 'separate' }))).estimate;
    expect(sep.trainableParams).toBe(ADAPTERS + P + HEAD);
    expect(sep.parts).toMatchObject({ value: (P + HEAD) * 4, adapters: ADAPTERS * 4 });
  });

  it('a micro-batch too large for the budget: refused, naming the micro-batch that fits', async () => {
    const own = { lora: 8, batchSize: 64, miniBatches: 1, microBatchSize: 64, recompute: 'off' as const };
    const msg = await refusal(() => sources.checkMemory('gpt2-124m', 'train', cfg(own)));
    expect(msg).toMatch(/with LoRA r=8 needs ≈ \d+\.\d GB with the activations of its batch/);
    const m = /Setting microBatchSize (\d+)( and recompute "blocks")? would fit it/.exec(msg);
    expect(m, msg).not.toBeNull();
    const fits = {
      ...own,
      microBatchSize: Number(m![1]),
      recompute: m![2] ? ('blocks' as const) : ('off' as const),
    };
    expect(fits.microBatchSize).toBeGreaterThan(0);
    expect(fits.microBatchSize).toBeLessThan(64);
    // The micro-batch it names does fit, with the same batch.
    expect(await refusal(() => sources.checkMemory('gpt2-124m', 'train', cfg(fits)))).toBe('');
  });

  it('without the run’s config (a reward model from preferences) the full-copy check stays', async () => {
    expect(await refusal(() => sources.checkMemory('gpt2-124m', 'train'))).toMatch(
      /training it needs ≈ 5\.6 GB .* Use LoRA .*\), choose WebGPU on a GPU, or a smaller model/,
    );
    // Loading to generate needs its weights only.
    expect(await refusal(() => sources.checkMemory('gpt2-124m', 'load'))).toBe('');
  });

  it('estimateReport: what the UI shows, the same numbers', async () => {
    const r = await sources.estimateReport(cfg({ lora: 8, batchSize: 8 }));
    const c = await sources.runEstimate(cfg({ lora: 8, batchSize: 8 }));
    expect(r).toMatchObject({
      model: 'gpt2-124m',
      params: P,
      policyTrainableParams: ADAPTERS,
      trainableParams: 2 * ADAPTERS + HEAD,
      lora: 8,
      bytes: c.estimate.total,
      parts: c.estimate.parts,
      budgetBytes: WASM_HEAP_BYTES * 0.95,
      problem: null,
    });
    expect((await sources.estimateReport(cfg({ lora: 0 }))).problem).toMatch(/^Training gpt2-124m/);
  });
});

describe('memory budgets and run options (pure)', () => {
  it('WASM takes the smaller of the heap share and the device budget; other backends the device budget', () => {
    expect(memoryBudget(WASM, BUDGET_8GB).bytes).toBe(WASM_HEAP_BYTES * 0.95);
    expect(memoryBudget(WASM, 2e9).bytes).toBe(2e9);
    expect(memoryBudget({ backend: 'webgpu' }, 2e9).bytes).toBe(2e9);
    expect(memoryBudget(null, 5e9)).toMatchObject({ bytes: 5e9 });
  });

  it('runMemoryOptions follows buildTrainer: shared value only with LoRA, none without a critic', () => {
    const targets = ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'];
    expect(runMemoryOptions(cfg({ lora: 4 }), false)).toEqual({
      lora: { r: 4, targets },
      valueModel: 'shared',
      rewardModel: false,
    });
    expect(runMemoryOptions(cfg({ lora: 0 }), true)).toEqual({
      lora: undefined,
      valueModel: 'separate',
      rewardModel: true,
    });
    expect(runMemoryOptions(cfg({ lora: 4, algorithm: 'rloo' }), false).valueModel).toBe('none');
    expect(runMemoryOptions(cfg({ lora: 4, valueModel: 'separate' }), false).valueModel).toBe('separate');
  });
});

describe('WebGPU: the largest embedding chunk, not wte, is compared with the binding limit', () => {
  const MiB = 1024 ** 2;
  const limited: DeviceLimits = {
    backend: 'webgpu',
    maxStorageBufferBindingSize: 128 * MiB,
    maxBufferSize: 256 * MiB,
  };
  const messageOf = (f: () => void): string => {
    try {
      f();
    } catch (e) {
      expect(isUserError(e)).toBe(true);
      return (e as Error).message;
    }
    return '';
  };

  it('GPT-2 124M under a 128 MiB binding: accepted, wte in two chunks of 43690 rows', () => {
    expect(webgpuBindingBytes(limited)).toBe(128 * MiB);
    expect(webgpuBindingBytes({ ...limited, maxBufferSize: 64 * MiB })).toBe(64 * MiB);
    expect(webgpuBindingBytes(WASM)).toBeUndefined();
    expect(largestHeldTensor(gpt2, 128 * MiB)).toEqual({
      name: 'wte.weight (its largest vocabulary chunk)',
      shape: [43690, 768],
      bytes: 43690 * 768 * 4,
    });
    expect(messageOf(() => checkDeviceLimits(gpt2, 'gpt2', limited))).toBe('');
    // Every GPT-2 size: medium, large, XL (n_embd 1024, 1280, 1600).
    for (const n_embd of [1024, 1280, 1600]) {
      const big = parseGPT2Config({ ...GPT2_JSON, n_embd, n_head: 16, n_layer: 2 });
      expect(messageOf(() => checkDeviceLimits(big, `n_embd ${n_embd}`, limited))).toBe('');
    }
  });

  it('a non-embedding tensor over the limit is still refused, naming it', () => {
    const wide = parseGPT2Config({ ...GPT2_JSON, n_embd: 8192, n_head: 64, n_layer: 1 });
    expect(messageOf(() => checkDeviceLimits(wide, 'wide', limited))).toMatch(
      /^wide cannot run on this GPU with WebGPU: its weight h\.0\.mlp\.c_fc\.weight \[8192 × 32768\] takes 1024 MiB, over this device's 128 MiB limit for one buffer \(maxStorageBufferBindingSize\)/,
    );
  });
});
