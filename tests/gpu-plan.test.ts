/**
 * The step plan on a device with memory of its own (issue #31, item 3): on WebGPU the automatic plan is the whole
 * minibatch without recompute, as large as the device's buffer limits allow (model/size.ts deviceStepPlan); the
 * budget plan of WASM / CPU is unchanged. And the pieces of the fallback when the device runs out
 * (src/core/ppo/gpu-plan.ts): the next plan, the words, WebGPU's error scopes on a stand-in device.
 * The fallback inside a training step: tests/gpu-plan-fallback.slow.test.ts.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { parseGPT2Config, type GPT2Config } from '../src/core/model/config';
import { LLAMA_SHAPES, parseLlamaConfig, type LlamaConfig } from '../src/core/model/llama-config';
import {
  deviceFallbackFloor,
  evenSlice,
  largestStepTensor,
  phaseFloats,
  resolveStepPlan,
  runMemoryOptions,
  runShapeOf,
  scorersOf,
  type PlanDevice,
  type RunShape,
} from '../src/core/model/size';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { chunksVocabulary, VOCAB_CHUNK } from '../src/core/ppo/trainer';
import {
  bufferLimitOf,
  currentPlanDevice,
  describePlan,
  fallbackPlan,
  plannedInForce,
  releasePooledBuffers,
  webgpuDeviceErrors,
  type DeviceErrors,
  type PlanInForce,
} from '../src/core/ppo/gpu-plan';
import { planDeviceOf } from '../src/worker/device-limits';
import { isHeapExhaustion } from '../src/core/model/oom';
import { LORA_TARGETS } from '../src/core/model/lora';
import { makeTinyFolder } from './helpers/tiny';
import { meanByteReward, tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { buildTrainer } from '../src/core/ppo/setup';

const gpt2 = parseGPT2Config({ vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12 });
const qwen25 = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-0.5b'] });
/** What an H100's adapter offers tfjs (Dawn on Vulkan): far more than any tensor of these steps. */
const BIG_GPU: PlanDevice = { backend: 'webgpu', maxBufferBytes: 2 ** 31 };
const PROMPT = 13;

const config = (over: Partial<TrainConfig>): TrainConfig =>
  validateConfig({ model: 'x', task: 'sentiment', batchSize: 16, responseLength: 24, ...over }, 'test');

/** The plan as the trainer makes it (runShapeOf with the vocabulary chunk the backend's update uses). */
function plan(c: GPT2Config | LlamaConfig, over: Partial<TrainConfig>, device?: PlanDevice) {
  const cfg = config(over);
  const opts = runMemoryOptions(cfg, false);
  const backend = device ? 'webgpu' : 'wasm';
  const chunk = chunksVocabulary(cfg.responseLength, c.vocab_size, backend) ? VOCAB_CHUNK : 0;
  return runShapeOf(c, cfg, PROMPT, opts, chunk, device);
}

beforeAll(useCpu);

describe('the automatic plan on WebGPU: the whole minibatch, without recompute', () => {
  for (const [name, c] of [
    ['GPT-2 124M', gpt2],
    ['Qwen2.5-0.5B', qwen25],
  ] as const) {
    for (const lora of [0, 8]) {
      it(`${name} ${lora ? 'LoRA' : 'full'} at batch 16 × 24: one minibatch of 16 at once; two minibatches of 8 each at once; generation over all 16`, () => {
        const one = plan(c, { lora, miniBatches: 1 }, BIG_GPU);
        expect([one.microBatchSize, one.generateMicroBatchSize, one.recompute]).toEqual([16, 16, false]);
        const two = plan(c, { lora, miniBatches: 2 }, BIG_GPU);
        expect([two.microBatchSize, two.generateMicroBatchSize, two.recompute]).toEqual([8, 16, false]);
        // No limit known at all: the same.
        const unknown = plan(c, { lora, miniBatches: 1 }, { backend: 'webgpu' });
        expect(unknown.microBatchSize).toBe(16);
      });
    }
  }

  it('the same config on WASM keeps the budget plan (GPT-2 LoRA: micro-batches of 4 with recompute)', () => {
    const wasm = plan(gpt2, { lora: 8, miniBatches: 2 });
    expect([wasm.microBatchSize, wasm.recompute]).toEqual([4, true]);
    expect(wasm.generateMicroBatchSize).toBe(16);
    const gpu = plan(gpt2, { lora: 8, miniBatches: 2 }, BIG_GPU);
    expect([gpu.microBatchSize, gpu.recompute, gpu.generateMicroBatchSize]).toEqual([8, false, 16]);
  });

  it('a small maxStorageBufferBindingSize: the largest evened-out slice whose biggest tensor fits one buffer', () => {
    // Qwen2.5-0.5B's response logits are 24 × 151936 floats a sample (14.6 MB): 16 samples (233 MB) are over a
    // 128 MiB binding, 9 (131 MB) fit, and 16 in slices of at most 9 run as 8 + 8.
    const limit = 128 * 2 ** 20;
    // (Those figures are for the reader; largestStepTensor below checks them against the code.)
    const dev: PlanDevice = { backend: 'webgpu', maxBufferBytes: limit };
    const s = plan(qwen25, { lora: 8, miniBatches: 1 }, dev);
    expect(s.microBatchSize).toBe(8);
    expect(s.recompute).toBe(false);
    // Generation holds one row of logits per sample: all 16 at once.
    expect(s.generateMicroBatchSize).toBe(16);
    const run = { promptLength: PROMPT, responseLength: 24 };
    expect(largestStepTensor(qwen25, run, 8, 'step') * 4).toBeLessThanOrEqual(limit);
    expect(largestStepTensor(qwen25, run, 16, 'step') * 4).toBeGreaterThan(limit);

    // GPT-2 under 16 MiB: 4.8 MB of logits a sample, so 3 fit; 16 as six slices of at most 3 (3 each).
    const g = plan(gpt2, { miniBatches: 1 }, { backend: 'webgpu', maxBufferBytes: 16 * 2 ** 20 });
    expect(g.microBatchSize).toBe(3);
    expect(g.generateMicroBatchSize).toBe(16);
    // The device's limit is the smaller of the two (tfjs binds each tensor's one buffer whole).
    expect(
      planDeviceOf({ backend: 'webgpu', maxStorageBufferBindingSize: 2 ** 27, maxBufferSize: 2 ** 28 }),
    ).toEqual({ backend: 'webgpu', maxBufferBytes: 2 ** 27 });
    expect(bufferLimitOf({ maxStorageBufferBindingSize: 2 ** 30, maxBufferSize: 2 ** 29 })).toBe(2 ** 29);
    expect(planDeviceOf({ backend: 'wasm', heapBytes: 2 ** 32 })).toBeUndefined();
    expect(planDeviceOf(null)).toBeUndefined();
  });

  it('generation is sliced only when its own biggest tensor does not fit (a huge vocabulary), never below the micro-batch', () => {
    const huge = { ...gpt2, vocab_size: 4_000_000 };
    // One row of logits is 16 MB; a 64 MiB binding holds 4 rows of generation logits, and no sample's response
    // logits (24 rows).
    const s = plan(huge, { miniBatches: 1 }, { backend: 'webgpu', maxBufferBytes: 64 * 2 ** 20 });
    expect(s.microBatchSize).toBe(1);
    expect(s.generateMicroBatchSize).toBe(4);
  });

  it('a set microBatchSize is kept on WebGPU; recompute "auto" starts off there, "blocks" is on', () => {
    const s = plan(gpt2, { lora: 8, microBatchSize: 4 }, BIG_GPU);
    expect([s.microBatchSize, s.recompute]).toEqual([4, false]);
    expect(plan(gpt2, { lora: 8, recompute: 'blocks' }, BIG_GPU).recompute).toBe(true);
    expect(plan(gpt2, { lora: 8, microBatchSize: 4, recompute: 'blocks' }, BIG_GPU).recompute).toBe(true);
    // On WASM the same config keeps its budget rule (tests/size.test.ts): recompute on for 4 samples of GPT-2.
    expect(plan(gpt2, { lora: 8, microBatchSize: 4 }).recompute).toBe(true);
  });

  it('with a set microBatchSize, generation takes the largest slice that holds no more than the micro-batch scores or updates with', () => {
    const lora = { r: 8, targets: [...LORA_TARGETS] };
    const models = { scorers: 2, wteTrains: false, lora };
    const c = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-1.5b'] });
    const cfg = { recompute: 'blocks' as const, batchSize: 64, miniBatches: 1, responseLength: 64 };
    const floats = (m: number, g: number) =>
      phaseFloats(
        c,
        { ...cfg, promptLength: 56, microBatchSize: m, generateMicroBatchSize: g, recompute: true },
        models,
      );
    // Qwen2.5-1.5B at batch 64 in micro-batches of 4 with recompute: the update's estimate bounds the step (≈ 1.6 G
    // floats); generating 32 at once stays under it (the prompt's forward holds one block at a time: 1.4 G with
    // the KV cache and logits), 64 at once does not.
    const bound = Math.max(floats(4, 4).update, floats(4, 4).score);
    expect(floats(4, 32).generate).toBeLessThanOrEqual(bound);
    expect(floats(4, 64).generate).toBeGreaterThan(bound);
    const at = (m: number) =>
      resolveStepPlan(c, { ...cfg, microBatchSize: m }, 56, models, { device: BIG_GPU })
        .generateMicroBatchSize;
    expect(at(4)).toBe(32);
    // Every set micro-batch: the slice is the largest evened-out one within the bound (or the micro-batch itself).
    for (const m of [1, 2, 3, 4, 6, 8, 16]) {
      const g = at(m);
      const b = Math.max(floats(m, m).update, floats(m, m).score);
      expect(g).toBeGreaterThanOrEqual(m);
      if (g > m) expect(floats(m, g).generate).toBeLessThanOrEqual(b);
      for (let k = 64; k > g; k--) {
        const slice = evenSlice(64, k);
        if (slice > g) expect(floats(m, slice).generate, `m ${m}, slice ${slice}`).toBeGreaterThan(b);
      }
    }
    // A buffer limit still caps it: a 1 MiB binding holds one row of this vocabulary's logits (0.6 MB), not two.
    const small: PlanDevice = { backend: 'webgpu', maxBufferBytes: 2 ** 20 };
    const capped = resolveStepPlan(c, { ...cfg, microBatchSize: 1 }, 56, models, { device: small });
    expect(capped.generateMicroBatchSize).toBe(1);
    // On WASM a set micro-batch is still the generation slice (the budget plan).
    expect(resolveStepPlan(c, { ...cfg, microBatchSize: 4 }, 56, models).generateMicroBatchSize).toBe(4);
  });

  it('resolveStepPlan without a device is the budget plan (pinned), and a WebGPU device changes it', () => {
    // [microBatchSize, generateMicroBatchSize, recompute] at batch 16 × 24 (miniBatches 2 unless set): without a
    // device, then on BIG_GPU. GPT-2 LoRA at miniBatches 2 is the plan above ([4, 16, true]); a set micro-batch of
    // 4 is its own generation slice with recompute on (the budget rule); on WebGPU the automatic plan is the whole
    // minibatch without recompute, and generation runs all 16.
    const cases: [GPT2Config | LlamaConfig, Partial<TrainConfig>, unknown[], unknown[]][] = [
      [gpt2, { lora: 8, miniBatches: 2 }, [4, 16, true], [8, 16, false]],
      [gpt2, { lora: 0, miniBatches: 1 }, [4, 16, true], [16, 16, false]],
      [gpt2, { lora: 8, microBatchSize: 4 }, [4, 4, true], [4, 16, false]],
      [gpt2, { lora: 8, recompute: 'off' }, [1, 16, false], [8, 16, false]],
      [qwen25, { lora: 8, miniBatches: 2 }, [2, 8, true], [8, 16, false]],
      [qwen25, { lora: 0, miniBatches: 1 }, [2, 8, true], [16, 16, false]],
      [qwen25, { lora: 8, microBatchSize: 4 }, [4, 4, true], [4, 16, false]],
      [qwen25, { lora: 8, recompute: 'off' }, [1, 8, false], [8, 16, false]],
    ];
    const triple = (p: Pick<RunShape, 'microBatchSize' | 'generateMicroBatchSize' | 'recompute'>) => [
      p.microBatchSize,
      p.generateMicroBatchSize,
      p.recompute,
    ];
    for (const [c, over, budget, device] of cases) {
      const cfg = config(over);
      const opts = runMemoryOptions(cfg, false);
      const lora = opts.lora ?? null;
      const models = { scorers: scorersOf(opts), wteTrains: !lora, lora };
      const name = `${c.vocab_size} ${JSON.stringify(over)}`;
      expect(triple(resolveStepPlan(c, cfg, PROMPT, models, { vocabChunk: VOCAB_CHUNK })), name).toEqual(
        budget,
      );
      expect(triple(runShapeOf(c, cfg, PROMPT, opts, VOCAB_CHUNK)), name).toEqual(budget);
      const gpu = resolveStepPlan(c, cfg, PROMPT, models, { vocabChunk: VOCAB_CHUNK, device: BIG_GPU });
      expect(triple(gpu), name).toEqual(device);
    }
  });

  it('the floor a WebGPU run is judged by before it starts: one sample, recompute (unless "off"); a set micro-batch keeps its size', () => {
    const s = plan(gpt2, { lora: 8, miniBatches: 1 }, BIG_GPU);
    expect(deviceFallbackFloor(s, config({ lora: 8 }))).toMatchObject({
      microBatchSize: 1,
      generateMicroBatchSize: 1,
      recompute: true,
    });
    expect(deviceFallbackFloor(s, config({ recompute: 'off' })).recompute).toBe(false);
    const set = plan(gpt2, { lora: 8, microBatchSize: 4 }, BIG_GPU);
    expect(deviceFallbackFloor(set, config({ microBatchSize: 4 }))).toMatchObject({
      microBatchSize: 4,
      recompute: true,
    });
    // The first shortage drops the update's recordings at the same plan: the floor records nothing.
    expect(deviceFallbackFloor(set, config({ microBatchSize: 4, recompute: 'off' }))).toEqual({
      ...set,
      updateRecorded: false,
    });
    expect(deviceFallbackFloor(s, config({ lora: 8 })).updateRecorded).toBe(false);
  });
});

describe('falling back when the device runs out (gpu-plan.ts fallbackPlan)', () => {
  const auto = config({ miniBatches: 1 });
  const start = { microBatchSize: 16, generateMicroBatchSize: 16, recompute: false };

  it('the update and scoring halve the micro-batch down to 1, then the update turns recompute on, then nothing is left', () => {
    const seen: string[] = [];
    let p: typeof start | null = start;
    while (p) {
      seen.push(`${p.microBatchSize}${p.recompute ? '+rc' : ''}`);
      p = fallbackPlan(p, 'update', auto);
    }
    expect(seen).toEqual(['16', '8', '4', '2', '1', '1+rc']);
    expect(fallbackPlan({ ...start, microBatchSize: 1 }, 'score', auto)).toBeNull();
    // Generation keeps its own slice when the update falls back.
    expect(fallbackPlan(start, 'update', auto)!.generateMicroBatchSize).toBe(16);
  });

  it('halves are evened out over the minibatch (6 → 3, 5 → 3 as 3 + 2 … of a minibatch of 6)', () => {
    const six = config({ batchSize: 12, miniBatches: 2 });
    expect(fallbackPlan({ ...start, microBatchSize: 6 }, 'score', six)!.microBatchSize).toBe(3);
    expect(fallbackPlan({ ...start, microBatchSize: 3 }, 'score', six)!.microBatchSize).toBe(2);
    expect(evenSlice(16, 9)).toBe(8);
    expect(evenSlice(6, 5)).toBe(3);
  });

  it('generation halves its slice, and the micro-batch never stays above it', () => {
    const p = fallbackPlan({ ...start, microBatchSize: 8 }, 'generate', auto)!;
    expect([p.generateMicroBatchSize, p.microBatchSize]).toEqual([8, 8]);
    const q = fallbackPlan(p, 'generate', auto)!;
    expect([q.generateMicroBatchSize, q.microBatchSize]).toEqual([4, 4]);
    expect(
      fallbackPlan({ ...start, generateMicroBatchSize: 1, microBatchSize: 1 }, 'generate', auto),
    ).toBeNull();
  });

  it('a set microBatchSize keeps its size: only recompute "auto" may still turn on, in the update', () => {
    const set = config({ microBatchSize: 4 });
    const p = { microBatchSize: 4, generateMicroBatchSize: 4, recompute: false };
    expect(fallbackPlan(p, 'update', set)).toEqual({ ...p, recompute: true });
    expect(fallbackPlan(p, 'score', set)).toBeNull();
    expect(fallbackPlan(p, 'generate', set)).toBeNull();
    expect(fallbackPlan(p, 'update', config({ microBatchSize: 4, recompute: 'off' }))).toBeNull();
    expect(fallbackPlan({ ...p, recompute: true }, 'update', set)).toBeNull();
  });
});

describe('the plan in words', () => {
  const base: PlanInForce = {
    microBatchSize: 16,
    generateMicroBatchSize: 16,
    recompute: false,
    reason: 'device',
    backend: 'webgpu',
    batchSize: 16,
    miniBatchSize: 16,
  };

  it('as the CLI prints it after "plan: " and the app shows it', () => {
    expect(describePlan(base)).toBe('whole batch (16) on WebGPU, recompute off');
    expect(describePlan({ ...base, miniBatchSize: 8, microBatchSize: 8 })).toBe(
      'whole minibatch (8) on WebGPU, recompute off',
    );
    expect(
      describePlan({
        ...base,
        reason: 'budget',
        backend: 'wasm',
        microBatchSize: 4,
        generateMicroBatchSize: 4,
        recompute: true,
      }),
    ).toBe('micro-batches of 4 with recompute (WASM heap budget)');
    expect(
      describePlan({
        ...base,
        reason: 'budget',
        backend: 'wasm',
        microBatchSize: 4,
        generateMicroBatchSize: 8,
        recompute: true,
      }),
    ).toBe('micro-batches of 4 with recompute (WASM heap budget); generation in slices of 8');
    expect(describePlan({ ...base, reason: 'out-of-memory', microBatchSize: 8 })).toBe(
      'micro-batches of 8 after the device ran out of memory',
    );
    expect(describePlan({ ...base, reason: 'out-of-memory', microBatchSize: 1, recompute: true })).toBe(
      'micro-batches of 1 with recompute after the device ran out of memory',
    );
    expect(describePlan({ ...base, reason: 'set', microBatchSize: 2, generateMicroBatchSize: 2 })).toBe(
      'micro-batches of 2, recompute off (microBatchSize set)',
    );
    expect(describePlan({ ...base, reason: 'budget', backend: 'cpu' })).toBe(
      'whole batch (16), recompute off (CPU memory budget)',
    );
  });

  it('the plan a config would start with, from its shape (the worker estimate and the CLI preflight)', () => {
    const cfg = config({ lora: 8, miniBatches: 2 });
    const gpu = plannedInForce(plan(gpt2, { lora: 8, miniBatches: 2 }, BIG_GPU), cfg, 'webgpu', BIG_GPU);
    expect(describePlan(gpu)).toBe('whole minibatch (8) on WebGPU, recompute off');
    // Generation runs the whole batch (16): no slices to name.
    const wasm = plannedInForce(plan(gpt2, { lora: 8, miniBatches: 2 }), cfg, 'wasm', undefined);
    expect(describePlan(wasm)).toBe('micro-batches of 4 with recompute (WASM heap budget)');
  });
});

describe("WebGPU's error scopes (gpu-plan.ts webgpuDeviceErrors) on a stand-in device", () => {
  /** A stand-in for tfjs-backend-webgpu 4.22: a device with error scopes, a command encoder, a buffer pool. */
  class FakeWebGpu {
    scopes: { filter: string; errors: { message: string }[] }[] = [];
    log: string[] = [];
    commandEncoder: object | null = {};
    bufferManager = {
      freeBuffers: new Map<string, { size: number; destroy(): void }[]>(),
      numFreeBuffers: 0,
      numBytesAllocated: 0,
    };
    device = {
      limits: { maxStorageBufferBindingSize: 2 ** 30, maxBufferSize: 2 ** 31 },
      pushErrorScope: (filter: string) => {
        this.log.push(`push ${filter}`);
        this.scopes.push({ filter, errors: [] });
      },
      popErrorScope: () => {
        const s = this.scopes.pop()!;
        this.log.push(`pop ${s.filter}`);
        return Promise.resolve(s.errors[0] ?? null);
      },
    };
    dispose() {}
    endComputePassEncoder() {
      this.log.push('end pass');
    }
    submitQueue() {
      this.log.push('submit');
      this.commandEncoder = null;
    }
    /** An error of `type` raised now: into the innermost scope of that filter. */
    raise(type: 'out-of-memory' | 'validation', message: string) {
      for (let i = this.scopes.length - 1; i >= 0; i--) {
        if (this.scopes[i].filter === type) {
          this.scopes[i].errors.push({ message });
          return;
        }
      }
      throw new Error(`uncaptured ${type}: ${message}`);
    }
  }
  let fake: FakeWebGpu;

  beforeAll(async () => {
    fake = new FakeWebGpu();
    tf.registerBackend('webgpu', () => fake as unknown as tf.KernelBackend, 0);
    await tf.setBackend('webgpu');
  });
  afterAll(async () => {
    await tf.setBackend('cpu');
    tf.removeBackend('webgpu');
  });

  it('the device a plan is made for: WebGPU with the smaller of its two limits', () => {
    expect(currentPlanDevice()).toEqual({ backend: 'webgpu', maxBufferBytes: 2 ** 30 });
  });

  it('each check is an out-of-memory scope over a validation scope, with what tfjs recorded submitted first and last', async () => {
    const errors = webgpuDeviceErrors();
    fake.log = [];
    fake.commandEncoder = {};
    errors.push({ phase: 'score', size: 16 });
    fake.commandEncoder = {}; // the phase records programs
    expect(await errors.pop()).toBeNull();
    expect(fake.log).toEqual([
      'end pass',
      'submit',
      'push validation',
      'push out-of-memory',
      'end pass',
      'submit',
      'pop out-of-memory',
      'pop validation',
    ]);
  });

  it('running out: pop gives the device words, and the invalid buffer validation errors after it are held, not thrown', async () => {
    const errors = webgpuDeviceErrors();
    errors.push({ phase: 'update', size: 16 });
    fake.raise('out-of-memory', 'Out of memory: could not allocate 2147483648 bytes');
    fake.raise('validation', 'Buffer "" is invalid');
    expect(await errors.pop()).toBe('Out of memory: could not allocate 2147483648 bytes');
    expect(fake.scopes).toEqual([]);
  });

  it('scopes nest: an inner check does not see what the outer one holds, and a validation error alone is thrown', async () => {
    const errors = webgpuDeviceErrors();
    errors.push({ phase: 'apply', size: 16 });
    errors.push({ phase: 'update', size: 16 });
    expect(await errors.pop()).toBeNull();
    fake.raise('validation', 'Binding size is larger than the maximum binding size');
    await expect(errors.pop()).rejects.toThrow(/WebGPU rejected a kernel .*Binding size/);
    expect(fake.scopes).toEqual([]);
  });

  it('a thrown allocation failure counts as running out on WebGPU only; the pool of free buffers is emptied after it', async () => {
    const errors = webgpuDeviceErrors();
    const chrome = new RangeError(
      "Failed to execute 'createBuffer' on 'GPUDevice': createBuffer failed, size (4294967296) is too large for the implementation when mappedAtCreation == true",
    );
    expect(isHeapExhaustion(chrome)).toBe(true);
    expect(errors.ranOut!(chrome)).toMatch(/createBuffer failed/);
    expect(errors.ranOut!(new Error('a bug'))).toBeNull();
    let destroyed = 0;
    const buf = (size: number) => ({ size, destroy: () => destroyed++ });
    fake.bufferManager.freeBuffers.set('64_140', [buf(64), buf(64)]);
    fake.bufferManager.freeBuffers.set('4096_140', [buf(4096)]);
    fake.bufferManager.numFreeBuffers = 3;
    fake.bufferManager.numBytesAllocated = 10_000;
    releasePooledBuffers();
    expect(destroyed).toBe(3);
    expect(fake.bufferManager.numFreeBuffers).toBe(0);
    expect(fake.bufferManager.numBytesAllocated).toBe(10_000 - 64 - 64 - 4096);
    // The pool keeps its keys (tfjs reads an empty map as a disposed backend).
    expect([...fake.bufferManager.freeBuffers.values()].every((l) => l.length === 0)).toBe(true);
    expect(fake.bufferManager.freeBuffers.size).toBe(2);
  });
});

describe('elsewhere (CPU here) the default error scopes do nothing', () => {
  it('push / pop are no-ops, nothing thrown counts as running out, and there is no device plan', async () => {
    expect(tf.getBackend()).toBe('cpu');
    const errors = webgpuDeviceErrors();
    errors.push({ phase: 'update', size: 16 });
    expect(await errors.pop()).toBeNull();
    expect(errors.ranOut!(new Error('memory access out of bounds'))).toBeNull();
    expect(currentPlanDevice()).toBeUndefined();
  });
});

describe('a memory-bounded step trims the pool between its phases (PpoTrainer.phase → DeviceErrors.trim)', () => {
  it('a split plan trims at each phase change (generating, scoring, updating, idle); the whole batch never does', async () => {
    const dir = await makeTinyFolder();
    const res = tinyResources(() => dir);
    for (const [microBatchSize, calls] of [
      [2, 4],
      [8, 0],
    ] as const) {
      const phases: string[] = [];
      let trims = 0;
      const errors: DeviceErrors = {
        push() {},
        pop: () => Promise.resolve(null),
        trim: () => {
          trims++;
          phases.push('trim');
        },
      };
      const t = await buildTrainer(
        tinyConfig({ batchSize: 8, miniBatches: 1, ppoEpochs: 1, responseLength: 4, microBatchSize }),
        res,
        {
          ...meanByteReward,
          device: { errors },
          owner: (c) => ({ config: () => c, events: { phase: (p) => phases.push(p) } }),
        },
      );
      try {
        await t.trainStep();
        expect(t.stepPlan().microBatchSize).toBe(microBatchSize);
        expect(trims, `microBatchSize ${microBatchSize}`).toBe(calls);
        if (calls)
          expect(phases).toEqual([
            'trim',
            'generating',
            'trim',
            'scoring',
            'trim',
            'updating',
            'trim',
            'idle',
          ]);
      } finally {
        t.disposeAll();
      }
    }
  });
});
