/**
 * `bench --gpu`'s issue #22 keys, the pure parts (src/bench/webgpu-gpu.ts): gpuBenchKeys (which figure goes under
 * which name, and null with a note where it was not measured), matmulShapeKeys (tfjs's matmul beside ours at
 * GPT-2's shapes, never as GPU speed on a software adapter) and torchProbeFromRun (the PyTorch probe's outcome
 * from its process result); issue #31's rows: ppoDefaultPlanKeys (the GPT-2 PPO step at the default plan ÷
 * PyTorch's), the Qwen GRPO row's model, run and timing rule (src/bench/torch-grpo.ts), the spec that
 * scripts/torch_grpo_step.py reads (torchGrpoSpec ↔ our config), its parse, and qwenGrpoKeys. No GPU, no Python.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import {
  decodeTiming,
  gpuBenchKeys,
  gpuMarkdown,
  type GpuBenchResult,
  MATMUL_SHAPE_ROWS,
  MATMUL_SHAPES,
  matmulShapeKeys,
  type MatmulShapeRun,
  PPO_DEFAULT_PLAN_LABEL,
  ppoDefaultPlanKeys,
  qwenGrpoKeys,
  qwenModelLabel,
  type QwenPlanRow,
  torchProbeFromRun,
  TORCH_PROBE_CODE,
  type TorchProbe,
} from '../src/bench/webgpu-gpu';
import {
  parseTorchGrpoResult,
  qwenBenchRun,
  qwenBenchShape,
  qwenTimedSteps,
  torchGrpoSpec,
  type TorchGrpoResult,
} from '../src/bench/torch-grpo';
import { LLAMA_SHAPES, parseLlamaConfig } from '../src/core/model/llama-config';
import { LLAMA_LORA_TARGETS, resolveLoraTargets } from '../src/core/model/lora';
import { groupSizeOf } from '../src/common/config';
import { useCpu } from './helpers/backend';
import { parseTorchResult, torchSpec } from '../src/bench/torch-ppo';
import { validateConfig } from '../src/common/config';
import { GPT2 } from '../src/core/model/gpt2';
import { parseGPT2Config } from '../src/core/model/config';

const decode = { perLayer: 7, fixed: 4 };
const noTorch: TorchProbe = { ok: false, reason: 'no Python at "python3"' };
const timing = { batch: 16, greedyMsPerToken: 4, sampledMsPerToken: 5 };

describe('gpuBenchKeys', () => {
  it('a 2048² matmul is reported in TFLOP/s; sampled ÷ greedy; the decode count as measured', () => {
    const { keys, notes } = gpuBenchKeys({
      matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 },
      decode,
      timing,
      torch: noTorch,
    });
    expect(keys.matmulTflops2048).toBeCloseTo(9.3, 12);
    expect(keys.sampledOverGreedy).toBe(1.25);
    expect(keys.decodeDispatchesPerLayer).toBe(7);
    expect(keys.vsTorchEager).toBeNull();
    expect(notes.some((n) => n.startsWith('matmulTflops2048:'))).toBe(false);
    expect(notes.some((n) => n.startsWith('sampledOverGreedy'))).toBe(false);
    expect(notes).toContain('vsTorchEager: null (no PyTorch on a GPU: no Python at "python3").');
  });

  it("a software adapter's 256² matmul is not reported as matmulTflops2048: null with a note naming the size", () => {
    const { keys, notes } = gpuBenchKeys({
      matmul: { n: 256, iters: 1, seconds: 0.2, gflops: 12.5 },
      decode,
      timing,
      torch: noTorch,
    });
    expect(keys.matmulTflops2048).toBeNull();
    expect(notes.find((n) => n.startsWith('matmulTflops2048:'))).toMatch(/256².*not 2048²/);
  });

  it("our matmul at 2048² is matmulFastTflops2048 beside tfjs's; at 256² (a software adapter) or not timed: null with a note", () => {
    const base = { matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 }, decode, timing, torch: noTorch };
    const both = gpuBenchKeys({ ...base, matmulFast: { n: 2048, iters: 16, seconds: 2, gflops: 31000 } });
    expect(both.keys.matmulTflops2048).toBeCloseTo(9.3, 12);
    expect(both.keys.matmulFastTflops2048).toBeCloseTo(31, 12);
    expect(both.notes.some((n) => n.startsWith('matmulFastTflops2048:'))).toBe(false);
    const soft = gpuBenchKeys({
      ...base,
      matmul: { n: 256, iters: 1, seconds: 0.2, gflops: 12.5 },
      matmulFast: { n: 256, iters: 1, seconds: 0.2, gflops: 20 },
    });
    expect(soft.keys.matmulFastTflops2048).toBeNull();
    expect(soft.notes.find((n) => n.startsWith('matmulFastTflops2048:'))).toMatch(/256².*not 2048²/);
    for (const missing of [undefined, null]) {
      const k = gpuBenchKeys({ ...base, matmulFast: missing });
      expect(k.keys.matmulFastTflops2048).toBeNull();
      expect(k.notes).toContain('matmulFastTflops2048: null (our matmul was not timed).');
    }
  });

  it("the recorded frames' GPU times are reported under names of their own, at 2048² only, null with a note otherwise", () => {
    const base = { matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 }, decode, timing, torch: noTorch };
    const fast = { n: 2048, iters: 16, seconds: 2, gflops: 13000 };
    const rep = (gflops: number) => ({
      calls: 8,
      dispatchesPerProduct: 1,
      replaysPerTrial: 2,
      msPerProduct: 1,
      gflops,
    });
    const both = gpuBenchKeys({
      ...base,
      matmulFast: fast,
      matmulReplayed: rep(11000),
      matmulFastReplayed: rep(16500),
    });
    // The round-trip keys keep their figures; the replayed ones are the frames'.
    expect(both.keys.matmulTflops2048).toBeCloseTo(9.3, 12);
    expect(both.keys.matmulFastTflops2048).toBeCloseTo(13, 12);
    expect(both.keys.matmulTflops2048Replayed).toBeCloseTo(11, 12);
    expect(both.keys.matmulFastTflops2048Replayed).toBeCloseTo(16.5, 12);
    expect(both.notes.filter((n) => n.includes('Replayed'))).toEqual([]);
    const soft = gpuBenchKeys({
      ...base,
      matmul: { n: 256, iters: 1, seconds: 0.2, gflops: 12.5 },
      matmulFast: { n: 256, iters: 1, seconds: 0.2, gflops: 20 },
      matmulReplayed: rep(15),
      matmulFastReplayed: rep(22),
    });
    expect(soft.keys.matmulTflops2048Replayed).toBeNull();
    expect(soft.keys.matmulFastTflops2048Replayed).toBeNull();
    expect(soft.notes).toContain(
      'matmulTflops2048Replayed: null (the product ran at 256², not 2048²; 15.000 GFLOP/s there is not reported under that name).',
    );
    expect(soft.notes.find((n) => n.startsWith('matmulFastTflops2048Replayed'))).toMatch(/256².*not 2048²/);
    // Not timed (failed), or our matmul not run at all: null with a note.
    const none = gpuBenchKeys({ ...base, matmulReplayed: null, matmulFastReplayed: rep(16500) });
    expect(none.keys.matmulTflops2048Replayed).toBeNull();
    expect(none.keys.matmulFastTflops2048Replayed).toBeNull();
    expect(none.notes).toContain('matmulTflops2048Replayed: null (not timed from a recorded frame).');
    expect(none.notes).toContain('matmulFastTflops2048Replayed: null (not timed from a recorded frame).');
    // At 2048², a figure that is not a positive finite number is not reported, round trip or replayed.
    const bad = gpuBenchKeys({
      ...base,
      matmul: { n: 2048, iters: 1, seconds: 0, gflops: Infinity },
      matmulFast: { ...fast, gflops: 0 },
      matmulReplayed: rep(NaN),
      matmulFastReplayed: rep(Infinity),
    });
    expect(bad.keys).toMatchObject({
      matmulTflops2048: null,
      matmulFastTflops2048: null,
      matmulTflops2048Replayed: null,
      matmulFastTflops2048Replayed: null,
    });
    expect(bad.notes).toContain('matmulTflops2048: null (Infinity GFLOP/s is not a positive finite number).');
    expect(bad.notes).toContain('matmulFastTflops2048: null (0 GFLOP/s is not a positive finite number).');
    expect(bad.notes).toContain(
      'matmulTflops2048Replayed: null (NaN GFLOP/s is not a positive finite number).',
    );
    expect(bad.notes).toContain(
      'matmulFastTflops2048Replayed: null (Infinity GFLOP/s is not a positive finite number).',
    );
  });

  it('sampledOverGreedy is null with a note when either time is missing, zero or not finite', () => {
    for (const t of [
      { greedyMsPerToken: null, sampledMsPerToken: 5 },
      { greedyMsPerToken: 4, sampledMsPerToken: null },
      { greedyMsPerToken: 0, sampledMsPerToken: 5 },
      { greedyMsPerToken: 4, sampledMsPerToken: NaN },
      { greedyMsPerToken: -1, sampledMsPerToken: 5 },
    ]) {
      const { keys, notes } = gpuBenchKeys({
        matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 },
        decode,
        timing: { batch: 16, ...t },
        torch: noTorch,
      });
      expect(keys.sampledOverGreedy, JSON.stringify(t)).toBeNull();
      expect(notes.find((n) => n.startsWith('sampledOverGreedy'))).toMatch(/batch 16/);
    }
  });

  it("vsTorchEager = our step ÷ PyTorch's when both ran; null with the reason otherwise", () => {
    const base = { matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 }, decode, timing };
    const cuda: TorchProbe = { ok: true, reason: 'torch 2.5.1 with CUDA on NVIDIA H100' };
    const both = gpuBenchKeys({ ...base, torch: cuda, vsTorch: { ours: 1.5, torch: 0.6 } });
    expect(both.keys.vsTorchEager).toBeCloseTo(2.5, 12);
    expect(both.notes.some((n) => n.startsWith('vsTorchEager'))).toBe(false);

    const notRun = gpuBenchKeys({ ...base, torch: cuda });
    expect(notRun.keys.vsTorchEager).toBeNull();
    expect(notRun.notes).toContain(
      'vsTorchEager: null (torch 2.5.1 with CUDA on NVIDIA H100 is here, but the GPT-2 PPO step was not run).',
    );
    const failed = gpuBenchKeys({ ...base, torch: cuda, vsTorch: { error: 'exit 1: CUDA OOM' } });
    expect(failed.keys.vsTorchEager).toBeNull();
    expect(failed.notes).toContain('vsTorchEager: null (the PyTorch step failed: exit 1: CUDA OOM).');
    // A probe that found no CUDA wins over any step times.
    const none = gpuBenchKeys({ ...base, torch: noTorch, vsTorch: { ours: 1, torch: 1 } });
    expect(none.keys.vsTorchEager).toBeNull();
    for (const bad of [0, NaN, -1])
      expect(
        gpuBenchKeys({ ...base, torch: cuda, vsTorch: { ours: 1, torch: bad } }).keys.vsTorchEager,
      ).toBeNull();
  });
});

describe('torchSpec and parseTorchResult (scripts/torch_ppo_step.py)', () => {
  const cfg = validateConfig(
    { model: 'tiny', task: 'sentiment', algorithm: 'ppo', lora: 8, miniBatches: 1, ppoEpochs: 1, topK: 50 },
    'test',
  );
  const o = {
    model: '/m',
    Tq: 16,
    device: 'cuda' as const,
    warmup: 1,
    steps: 3,
    decodeBatches: [1, 16],
    sampledBatch: 16,
    decodeTokens: 32,
  };

  it('the spec carries our config: batch, lengths, LoRA, learning rates, sampling, PPO coefficients', () => {
    const s = torchSpec(cfg, o);
    expect(s).toMatchObject({
      model: '/m',
      Tq: 16,
      batch: cfg.batchSize,
      responseLength: cfg.responseLength,
      lora: 8,
      loraAlpha: cfg.loraAlpha,
      learningRate: cfg.learningRate,
      valueLearningRate: cfg.valueLearningRate,
      temperature: cfg.temperature,
      topK: 50,
      topP: cfg.topP,
      klCoef: cfg.klCoef,
      gamma: cfg.gamma,
      lam: cfg.lam,
      clipRange: cfg.clipRange,
      clipRangeValue: cfg.clipRangeValue,
      vfCoef: cfg.vfCoef,
      maxGradNorm: cfg.maxGradNorm,
    });
  });

  it('refuses a config the script does not compute (GRPO, no LoRA, several epochs or minibatches)', () => {
    for (const over of [{ algorithm: 'grpo' }, { lora: 0 }, { ppoEpochs: 2 }, { miniBatches: 2 }])
      expect(() => torchSpec({ ...cfg, ...over } as typeof cfg, o), JSON.stringify(over)).toThrow(
        /PPO with LoRA, one epoch of one minibatch/,
      );
  });

  it('reads the last JSON line; names a missing or non-positive field', () => {
    const ok = {
      timeGenerate: 0.2,
      timeScore: 0.05,
      timeUpdate: 0.1,
      timeStep: 0.35,
      steps: 3,
      stepTimes: [0.35, 0.35, 0.35],
      greedyMsPerToken: { '1': 5, '16': 6 },
      sampledMsPerToken: 7,
      device: 'NVIDIA H100',
      tf32: false,
      torch: '2.11.0',
      transformers: '5.17.0',
    };
    expect(parseTorchResult(`[torch] warm-up\n${JSON.stringify(ok)}\n`)).toEqual(ok);
    expect(() => parseTorchResult('Traceback…')).toThrow(/printed no JSON result/);
    expect(() => parseTorchResult(JSON.stringify({ ...ok, timeStep: 0 }))).toThrow(/"timeStep"/);
    expect(() => parseTorchResult(JSON.stringify({ ...ok, greedyMsPerToken: {} }))).toThrow(
      /greedy ms\/token/,
    );
  });
});

describe('torchProbeFromRun', () => {
  const run = (o: Partial<Parameters<typeof torchProbeFromRun>[1]>) =>
    torchProbeFromRun('python3', { error: null, status: 0, stdout: '', stderr: '', ...o });

  it('no Python, a Python without torch, torch without CUDA, torch with CUDA', () => {
    expect(run({ error: { code: 'ENOENT', message: 'spawn python3 ENOENT' }, status: null })).toEqual({
      ok: false,
      reason: 'no Python at "python3"',
    });
    expect(run({ status: 1, stderr: "Traceback …\nModuleNotFoundError: No module named 'torch'\n" })).toEqual(
      {
        ok: false,
        reason: `"python3" cannot import torch: ModuleNotFoundError: No module named 'torch'`,
      },
    );
    expect(run({ stdout: '{"torch": "2.5.1+cpu", "cuda": false, "device": null}\n' })).toEqual({
      ok: false,
      reason: 'torch 2.5.1+cpu is installed but CUDA is not available',
    });
    expect(
      run({
        stdout: 'a warning line\n{"torch": "2.5.1", "cuda": true, "device": "NVIDIA H100 80GB HBM3"}\n',
      }),
    ).toEqual({ ok: true, reason: 'torch 2.5.1 with CUDA on NVIDIA H100 80GB HBM3' });
    expect(run({ stdout: 'not json' }).ok).toBe(false);
  });

  it("the probe's code asks torch for its version, CUDA and the device", () => {
    expect(TORCH_PROBE_CODE).toContain('torch.cuda.is_available()');
    expect(TORCH_PROBE_CODE).toContain('torch.cuda.get_device_name(0)');
  });
});

describe("matmulShapeKeys: tfjs beside ours at GPT-2's shapes", () => {
  const run = (o: Partial<MatmulShapeRun> = {}): MatmulShapeRun => ({
    name: 'c_attn',
    m: 512,
    k: 768,
    n: 2304,
    transB: false,
    tile: '64×128',
    tfjsGflops: 8000,
    fastGflops: 20000,
    maxRelDiff: 3e-7,
    ...o,
  });

  it('the table: 512 rows (16 × (prompt 8 + response 24)) of c_attn, c_fc, c_proj and the LM head (x·wteᵀ)', () => {
    expect(MATMUL_SHAPE_ROWS).toBe(512);
    expect(MATMUL_SHAPES.map((s) => [s.k, s.n, s.transB])).toEqual([
      [768, 2304, false],
      [768, 3072, false],
      [3072, 768, false],
      [768, 50257, true],
    ]);
  });

  it('a hardware adapter: TFLOP/s of both as measured, with the shape, our tile and how far apart they are', () => {
    const { rows, notes } = matmulShapeKeys(
      [run(), run({ name: 'lm_head', n: 50257, transB: true, tile: '128×128' })],
      {
        software: false,
      },
    );
    expect(notes).toEqual([]);
    expect(rows[0]).toEqual({
      shape: '512×768·768×2304 (c_attn)',
      m: 512,
      k: 768,
      n: 2304,
      transB: false,
      tile: '64×128',
      tfjsTflops: 8,
      fastTflops: 20,
      maxRelDiff: 3e-7,
    });
    expect(rows[1].shape).toBe('512×768·(50257×768)ᵀ (lm_head)');
  });

  it('a software adapter: TFLOP/s null (not GPU speed) with a note, the agreement kept; nothing run: a note', () => {
    const soft = matmulShapeKeys([run({ m: 8, k: 48, n: 144 })], { software: true, dryRun: true });
    expect(soft.rows[0]).toMatchObject({ tfjsTflops: null, fastTflops: null, maxRelDiff: 3e-7 });
    expect(soft.notes[0]).toMatch(/^matmulShapes: TFLOP\/s null on a software adapter.*dry run/);
    const none = matmulShapeKeys([], { software: true });
    expect(none.rows).toEqual([]);
    expect(none.notes[0]).toMatch(/^matmulShapes: not run \(software adapter/);
    // A time that is not a positive finite number is not reported either.
    expect(
      matmulShapeKeys([run({ fastGflops: 0, tfjsGflops: NaN })], { software: false }).rows[0],
    ).toMatchObject({
      tfjsTflops: null,
      fastTflops: null,
    });
  });
});

describe('decodeTiming (CPU backend, a tiny GPT-2)', () => {
  beforeAll(useCpu);

  it('times greedy and sampled generation at batch 16 (positive, finite), reads temperature 0 as 1, leaves no tensor', async () => {
    const m = GPT2.random(
      parseGPT2Config({
        vocab_size: 258,
        n_positions: 40,
        n_embd: 16,
        n_layer: 1,
        n_head: 2,
        tokenizer: 'bytes',
        bos_token_id: 256,
        eos_token_id: 256,
        pad_token_id: 257,
      }),
      3,
    );
    const before = tf.memory().numTensors;
    const t = await decodeTiming(m, {
      batch: 16,
      tokens: 12,
      padId: 257,
      sampling: { temperature: 0, topK: 5, topP: 0.9 },
    });
    expect(tf.memory().numTensors).toBe(before);
    m.dispose();
    expect(t.batch).toBe(16);
    expect(t.tokens).toBe(12);
    expect(t.sampling).toEqual({ temperature: 1, topK: 5, topP: 0.9 });
    for (const ms of [t.greedyMsPerToken, t.sampledMsPerToken]) {
      expect(Number.isFinite(ms)).toBe(true);
      expect(ms as number).toBeGreaterThan(0);
    }
  });
});

const cudaProbe: TorchProbe = { ok: true, reason: 'torch 2.11.0 with CUDA on NVIDIA H100 80GB HBM3' };
/** A step's phase times that add up to s (generate 5/9, score 1/9, update 3/9). */
const phases = (s: number) => ({
  timeStep: s,
  timeGenerate: (s * 5) / 9,
  timeScore: s / 9,
  timeUpdate: (s * 3) / 9,
});
const planRow = (s: number): QwenPlanRow => ({
  label: 'plan',
  requested: { microBatchSize: 0, recompute: 'auto' },
  microBatchSize: 16,
  recompute: false,
  generateMicroBatchSize: 16,
  sPerStep: s,
  generateS: (s * 5) / 9,
  scoreS: s / 9,
  updateS: (s * 3) / 9,
  warmupS: 8,
  timedSteps: 2,
  stepTimes: [s, s],
  note: null,
});
const torchGrpo: TorchGrpoResult = {
  timeGenerate: 1,
  timeScore: 0.5,
  timeUpdate: 1.5,
  timeStep: 3,
  steps: 3,
  stepTimes: [3, 3, 3],
  loraTargets: ['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj'],
  trainableParams: 4399104,
  refLogprobs: true,
  device: 'NVIDIA H100 80GB HBM3',
  tf32: false,
  torch: '2.11.0',
  transformers: '5.17.0',
  peft: '0.21.0',
};

describe('ppoDefaultPlanKeys: the GPT-2 PPO step at the default plan beside PyTorch', () => {
  const row = { label: PPO_DEFAULT_PLAN_LABEL, ...phases(9), microBatchSize: 4, recompute: true };

  it("vsTorchEagerDefaultPlan = its s/step ÷ PyTorch's step of the same run; the resolved plan and phases as measured", () => {
    const { ppoDefaultPlan: d, notes } = ppoDefaultPlanKeys({
      row,
      torch: cudaProbe,
      torchStep: { timeStep: 0.5 },
      dryRun: false,
    });
    expect(notes).toEqual([]);
    expect(d).toEqual({
      label: PPO_DEFAULT_PLAN_LABEL,
      measured: true,
      microBatchSize: 4,
      recompute: true,
      sPerStep: 9,
      generateS: 5,
      scoreS: 1,
      updateS: 3,
      torchEagerS: 0.5,
      vsTorchEagerDefaultPlan: 18,
    });
  });

  it('a dry run: the figures kept but not measured, the ratio null with a note; no PyTorch, no row: null with a note', () => {
    const dry = ppoDefaultPlanKeys({ row, torch: cudaProbe, torchStep: { timeStep: 0.9 }, dryRun: true });
    expect(dry.ppoDefaultPlan).toMatchObject({
      measured: false,
      sPerStep: 9,
      vsTorchEagerDefaultPlan: null,
    });
    expect(dry.notes[0]).toMatch(/^ppoDefaultPlan: a dry run.*not measurements.*would be 10\.00/);
    const none = ppoDefaultPlanKeys({ row, torch: noTorch, torchStep: null, dryRun: false });
    expect(none.ppoDefaultPlan?.vsTorchEagerDefaultPlan).toBeNull();
    expect(none.notes).toEqual([
      'ppoDefaultPlan.vsTorchEagerDefaultPlan: null (no PyTorch on a GPU: no Python at "python3").',
    ]);
    const failed = ppoDefaultPlanKeys({ row, torch: cudaProbe, torchStep: null, dryRun: false });
    expect(failed.notes[0]).toMatch(/the PyTorch PPO step of this run did not give a time/);
    const notRun = ppoDefaultPlanKeys({
      row: null,
      torch: cudaProbe,
      torchStep: { timeStep: 1 },
      dryRun: false,
    });
    expect(notRun.ppoDefaultPlan).toBeNull();
    expect(notRun.notes[0]).toMatch(/^ppoDefaultPlan: null/);
  });
});

describe("the Qwen GRPO row: model, run, timing rule, PyTorch's spec and result, keys", () => {
  it("Qwen2.5-0.5B's exact shapes (a dry run: 2 layers of width 64, the same vocabulary) with the fixture tokenizer's ids", () => {
    const full = parseLlamaConfig(qwenBenchShape(false));
    const q = LLAMA_SHAPES['qwen2.5-0.5b'];
    expect(full).toMatchObject({
      model_type: 'qwen2',
      vocab_size: q.vocab_size,
      hidden_size: 896,
      intermediate_size: 4864,
      num_hidden_layers: 24,
      num_attention_heads: 14,
      num_key_value_heads: 2,
      head_dim: 64,
      tie_word_embeddings: true,
      qkv_bias: true,
    });
    expect(full.vocab_size).toBe(151936);
    // The 512-id ChatML tokenizer of tests/fixtures/hf-tokenizer.
    expect([full.bos_token_id, full.eos_token_id, full.pad_token_id]).toEqual([510, 511, 509]);
    const dry = parseLlamaConfig(qwenBenchShape(true));
    expect(dry).toMatchObject({ num_hidden_layers: 2, hidden_size: 64, vocab_size: 151936, head_dim: 16 });
    expect(qwenModelLabel(true)).toMatch(/dry run \(2 layers, width 64/);
  });

  it('the run: B16 = 2 prompts × groups of 8, R 32, LoRA r 8 (a dry run: 2 × 2, R 4); one timed step after a slow warm-up', () => {
    const cfg = validateConfig({ model: 'tiny', ...qwenBenchRun(false) }, 'test');
    expect([cfg.batchSize, groupSizeOf(cfg), cfg.responseLength, cfg.lora]).toEqual([16, 8, 32, 8]);
    expect(cfg.batchSize / groupSizeOf(cfg)).toBe(2);
    const dry = validateConfig({ model: 'tiny', ...qwenBenchRun(true) }, 'test');
    expect([dry.batchSize, groupSizeOf(dry), dry.responseLength]).toEqual([4, 2, 4]);
    expect(qwenTimedSteps(9.9, false)).toBe(2);
    expect(qwenTimedSteps(10, false)).toBe(2);
    expect(qwenTimedSteps(10.1, false)).toBe(1);
    expect(qwenTimedSteps(48, false)).toBe(1);
    expect(qwenTimedSteps(NaN, false)).toBe(1);
    expect(qwenTimedSteps(2, true)).toBe(1);
  });

  // Our GRPO defaults (what the bench's row runs): scaleRewards group, klCoef 0.05 > 0 (so a reference forward),
  // token-mean; one epoch of one minibatch (the bench sets them), LoRA on every linear layer of a Qwen2 model.
  const cfg = validateConfig(
    { model: 'tiny', task: 'sentiment', ...qwenBenchRun(false), miniBatches: 1, ppoEpochs: 1 },
    'test',
  );
  const qwenTargets = resolveLoraTargets(parseLlamaConfig(qwenBenchShape(false)), cfg.loraTargets);
  const o = { model: '/q', Tq: 64, device: 'cuda' as const, loraTargets: qwenTargets, warmup: 1, steps: 3 };

  it("the spec carries our config: B, G, Tq, R, LoRA and the layers our trainer adapts, GRPO's defaults", () => {
    expect(qwenTargets).toEqual([...LLAMA_LORA_TARGETS]);
    const s = torchGrpoSpec(cfg, o);
    expect(s).toEqual({
      model: '/q',
      device: 'cuda',
      seed: 0,
      batch: 16,
      groupSize: 8,
      Tq: 64,
      responseLength: 32,
      lora: 8,
      loraAlpha: cfg.loraAlpha,
      loraTargets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
      learningRate: cfg.learningRate,
      temperature: cfg.temperature,
      topK: cfg.topK,
      topP: cfg.topP,
      klCoef: cfg.klCoef,
      scaleRewards: 'group',
      lossAggregation: 'token-mean',
      clipRange: cfg.clipRange,
      logRatioClamp: cfg.logRatioClamp,
      maxGradNorm: cfg.maxGradNorm,
      warmup: 1,
      steps: 3,
      dtype: 'float32',
    });
    expect(s.klCoef).toBeGreaterThan(0); // β > 0: the script runs the reference forward (adapters disabled)
    const other = torchGrpoSpec(
      { ...cfg, scaleRewards: 'none', lossAggregation: 'seq-sum-norm', klCoef: 0 },
      o,
    );
    expect([other.scaleRewards, other.lossAggregation, other.klCoef]).toEqual(['none', 'seq-sum-norm', 0]);
  });

  it('refuses a config the script does not compute (PPO, no LoRA, several epochs or minibatches, entropy), or no targets', () => {
    for (const over of [
      { algorithm: 'ppo' },
      { lora: 0 },
      { ppoEpochs: 2 },
      { miniBatches: 2 },
      { entropyCoef: 0.01 },
    ])
      expect(() => torchGrpoSpec({ ...cfg, ...over } as typeof cfg, o), JSON.stringify(over)).toThrow(
        /GRPO with LoRA, one epoch of one minibatch/,
      );
    expect(() => torchGrpoSpec(cfg, { ...o, loraTargets: [] })).toThrow(/LoRA target modules/);
  });

  it("reads the script's last JSON line; names a missing or non-positive field", () => {
    expect(parseTorchGrpoResult(`[torch] warm-up\n${JSON.stringify(torchGrpo)}\n`)).toEqual(torchGrpo);
    expect(() => parseTorchGrpoResult('Traceback…')).toThrow(/printed no JSON result/);
    expect(() => parseTorchGrpoResult(JSON.stringify({ ...torchGrpo, timeUpdate: 0 }))).toThrow(
      /"timeUpdate"/,
    );
    expect(() => parseTorchGrpoResult(JSON.stringify({ ...torchGrpo, trainableParams: undefined }))).toThrow(
      /"trainableParams"/,
    );
    expect(() => parseTorchGrpoResult(JSON.stringify({ ...torchGrpo, loraTargets: [] }))).toThrow(
      /no LoRA target modules/,
    );
  });

  const ours = { loraTargets: qwenTargets, trainableParams: torchGrpo.trainableParams };

  it("vsTorchEagerDefault / vsTorchEagerWhole = each plan's s/step ÷ PyTorch's; torchEagerPeft under the rows' names", () => {
    const k = qwenGrpoKeys({
      defaultPlan: planRow(48),
      wholeBatch: planRow(7.5),
      torch: cudaProbe,
      torchRun: torchGrpo,
      ours,
      dryRun: false,
    });
    expect(k.notes).toEqual([]);
    expect(k.vsTorchEagerDefault).toBe(16);
    expect(k.vsTorchEagerWhole).toBe(2.5);
    expect(k.torchEagerPeft).toMatchObject({
      sPerStep: 3,
      generateS: 1,
      scoreS: 0.5,
      updateS: 1.5,
      steps: 3,
      loraTargets: torchGrpo.loraTargets,
      peft: '0.21.0',
    });
  });

  it('null with a note: a dry run (the would-be ratio named), no PyTorch, a failed step, a row that did not run; other modules noted', () => {
    const base = { defaultPlan: planRow(4), wholeBatch: planRow(2), ours };
    const dry = qwenGrpoKeys({ ...base, torch: cudaProbe, torchRun: torchGrpo, dryRun: true });
    expect([dry.vsTorchEagerDefault, dry.vsTorchEagerWhole]).toEqual([null, null]);
    expect(dry.torchEagerPeft?.sPerStep).toBe(3);
    expect(dry.notes.find((n) => n.startsWith('qwenGrpo.vsTorchEagerWhole'))).toMatch(
      /dry run.*would be 0\.67/,
    );
    const none = qwenGrpoKeys({ ...base, torch: noTorch, dryRun: false });
    expect(none.torchEagerPeft).toBeNull();
    expect(none.notes).toEqual([
      'qwenGrpo.torchEagerPeft: null (no PyTorch on a GPU: no Python at "python3").',
    ]);
    const failed = qwenGrpoKeys({
      ...base,
      torch: cudaProbe,
      torchRun: { error: "No module named 'peft'" },
      dryRun: false,
    });
    expect(failed.vsTorchEagerDefault).toBeNull();
    expect(failed.notes).toEqual([
      "qwenGrpo.torchEagerPeft: null (the PyTorch GRPO step failed: No module named 'peft').",
    ]);
    const notRun = qwenGrpoKeys({ ...base, torch: cudaProbe, dryRun: false });
    expect(notRun.notes[0]).toMatch(/but the PyTorch GRPO step was not run/);
    const half = qwenGrpoKeys({
      ...base,
      defaultPlan: null,
      torch: cudaProbe,
      torchRun: torchGrpo,
      dryRun: false,
    });
    expect(half.vsTorchEagerDefault).toBeNull();
    expect(half.vsTorchEagerWhole).toBeCloseTo(2 / 3, 12);
    expect(half.notes).toEqual(['qwenGrpo.vsTorchEagerDefault: null (our row did not run).']);
    const other = qwenGrpoKeys({
      ...base,
      torch: cudaProbe,
      torchRun: { ...torchGrpo, loraTargets: ['q_proj', 'v_proj'], trainableParams: 1 },
      dryRun: false,
    });
    expect(other.notes.join('\n')).toMatch(
      /PEFT adapted \["q_proj","v_proj"\].*differ[\s\S]*PEFT trains 1 parameters/,
    );
  });
});

describe('gpuMarkdown with the #22 keys', () => {
  it('shows the decode dispatches (plain and under LoRA), the keys, and null as "null (see notes)" with the notes', () => {
    const matmul = { n: 256, iters: 1, seconds: 0.2, gflops: 12.5 };
    const t = { batch: 16, tokens: 6, greedyMsPerToken: 40, sampledMsPerToken: 50 };
    const matmulFast = { n: 256, iters: 1, seconds: 0.2, gflops: 20 };
    const k = gpuBenchKeys({ matmul, matmulFast, decode, timing: t, torch: noTorch });
    const shapes = matmulShapeKeys(
      [
        {
          name: 'c_attn',
          m: 8,
          k: 48,
          n: 144,
          transB: false,
          tile: '64×64',
          tfjsGflops: 0.4,
          fastGflops: 0.6,
          maxRelDiff: 2.5e-7,
        },
      ],
      { software: true, dryRun: true },
    );
    const layer = {
      webgpuDispatchesPerLayerFwd: 7,
      webgpuDispatchesPerLayerFwdBwd: 32,
      fixedFwd: 5,
      fixedFwdBwd: 9,
    };
    const ppo = {
      steps: 1,
      batchSize: 2,
      responseLength: 4,
      Tq: 8,
      timeGenerate: 1,
      timeScore: 1,
      timeUpdate: 1,
      timeStep: 3,
      tokensPerSecond: 1,
      updateTokensPerSecond: 1,
      updateFlops: 1,
      updateGflopsPerSecond: 1,
      updateMfu: 0.1,
      peakGflops: 12.5,
      webgpuDispatchesPerStep: 100,
      readbacksPerStep: 3,
    };
    const r: GpuBenchResult = {
      ...k.keys,
      adapter: {
        vendor: 'google',
        architecture: 'swiftshader',
        device: '',
        description: '',
        software: true,
        vulkan: 'SwiftShader',
      },
      sizes: 'software adapter: smallest sizes only',
      gpt2Decode: [],
      gpt2DecodeRepeats: [],
      torchEager: null,
      torchRuns: [],
      matmul,
      matmulFast,
      matmulReplayed: null,
      matmulFastReplayed: null,
      matmulShapes: shapes.rows,
      dispatchOverheadMs: 0.5,
      replayedDispatch: null,
      layers: { fused: layer, plain: layer },
      webgpuDispatchesPerLayerFwd: 7,
      webgpuDispatchesPerLayerFwdBwd: 32,
      ppo,
      webgpuDispatchesPerStep: 100,
      readbacksPerStep: 3,
      gpt2Lora: [],
      ppoDefaultPlan: null,
      qwenGrpo: null,
      decode,
      decodeLora: { perLayer: 11, fixed: 4 },
      decodeTiming: { ...t, sampling: { temperature: 1, topK: 0, topP: 1 } },
      notes: [...k.notes, ...shapes.notes],
    };
    const md = gpuMarkdown(r);
    expect(md).toContain('| decodeDispatchesPerLayer (GPT-2 decode step) | 7 (under LoRA r 8: 11) |');
    expect(md).toContain("| matmulTflops2048 (tfjs's kernel) | null (see notes) |");
    expect(md).toContain('| matmulFastTflops2048 (ours, webgpu-matmul.ts) | null (see notes) |');
    expect(md).toContain('| 8×48·48×144 (c_attn) | 64×64 | null | null | — | 2.5e-7 |');
    expect(md).toContain('| greedy / sampled ms per token (batch 16) | 40.00 / 50.00 |');
    expect(md).toContain('| sampledOverGreedy | 1.25 |');
    expect(md).toContain('| vsTorchEager | null (see notes) |');
    for (const n of [...k.notes, ...shapes.notes]) expect(md).toContain(`- ${n}`);
    // What bench --gpu --json writes: every key present, nulls as null.
    const json = JSON.parse(JSON.stringify(r));
    expect(json).toMatchObject({
      decodeDispatchesPerLayer: 7,
      matmulTflops2048: null,
      matmulFastTflops2048: null,
      matmulShapes: [{ shape: '8×48·48×144 (c_attn)', tfjsTflops: null, fastTflops: null }],
      sampledOverGreedy: 1.25,
      vsTorchEager: null,
      ppoDefaultPlan: null,
      qwenGrpo: null,
    });
    expect(md).not.toContain('ppoDefaultPlan |');
  });

  it('shows ppoDefaultPlan and the Qwen rows (plan, phases, ratios; dry run: not a measurement) and keeps them in the JSON', () => {
    const matmul = { n: 2048, iters: 8, seconds: 2, gflops: 9300 };
    const t = { batch: 16, tokens: 32, greedyMsPerToken: 13, sampledMsPerToken: 14 };
    const replayed = {
      calls: 8,
      dispatchesPerProduct: 1,
      replaysPerTrial: 2,
      msPerProduct: 1.2,
      gflops: 14300,
    };
    const k = gpuBenchKeys({ matmul, matmulReplayed: replayed, decode, timing: t, torch: cudaProbe });
    const layer = {
      webgpuDispatchesPerLayerFwd: 7,
      webgpuDispatchesPerLayerFwdBwd: 32,
      fixedFwd: 5,
      fixedFwdBwd: 9,
    };
    const d = ppoDefaultPlanKeys({
      row: { label: PPO_DEFAULT_PLAN_LABEL, ...phases(0.9), microBatchSize: 16, recompute: false },
      torch: cudaProbe,
      torchStep: { timeStep: 0.36 },
      dryRun: false,
    });
    const q = qwenGrpoKeys({
      defaultPlan: planRow(9),
      wholeBatch: planRow(6),
      torch: cudaProbe,
      torchRun: torchGrpo,
      ours: { loraTargets: LLAMA_LORA_TARGETS, trainableParams: torchGrpo.trainableParams },
      dryRun: false,
    });
    const r: GpuBenchResult = {
      ...k.keys,
      adapter: {
        vendor: 'nvidia',
        architecture: 'hopper',
        device: '',
        description: 'H100',
        software: false,
        vulkan: 'system',
      },
      sizes: null,
      gpt2Decode: [],
      gpt2DecodeRepeats: [],
      torchEager: null,
      torchRuns: [],
      matmul,
      matmulFast: null,
      matmulReplayed: replayed,
      matmulFastReplayed: null,
      matmulShapes: [],
      dispatchOverheadMs: 0.016,
      replayedDispatch: { dispatches: 500, replays: 20, wallUs: 4.2, hostUs: 3.5 },
      layers: { fused: layer, plain: layer },
      webgpuDispatchesPerLayerFwd: 7,
      webgpuDispatchesPerLayerFwdBwd: 32,
      ppo: {
        steps: 1,
        batchSize: 16,
        responseLength: 24,
        Tq: 8,
        timeGenerate: 1,
        timeScore: 1,
        timeUpdate: 1,
        timeStep: 3,
        tokensPerSecond: 1,
        updateTokensPerSecond: 1,
        updateFlops: 1,
        updateGflopsPerSecond: 1,
        updateMfu: 0.1,
        peakGflops: 9300,
        webgpuDispatchesPerStep: 100,
        readbacksPerStep: 3,
      },
      webgpuDispatchesPerStep: 100,
      readbacksPerStep: 3,
      gpt2Lora: [],
      ppoDefaultPlan: d.ppoDefaultPlan,
      qwenGrpo: {
        model: qwenModelLabel(false),
        measured: true,
        batchSize: 16,
        groupSize: 8,
        responseLength: 32,
        Tq: 64,
        lora: 8,
        loraTargets: [...LLAMA_LORA_TARGETS],
        trainableParams: torchGrpo.trainableParams,
        trainerWarmupS: 12,
        defaultPlan: planRow(9),
        wholeBatch: planRow(6),
        ...q,
      },
      decode,
      decodeLora: { perLayer: 11, fixed: 4 },
      decodeTiming: { ...t, sampling: { temperature: 1, topK: 0, topP: 1 } },
      notes: [...k.notes, ...d.notes],
    };
    const md = gpuMarkdown(r);
    expect(md).toContain("| one small kernel, recorded and replayed (wall; host's share) | 4.2 µs; 3.5 µs |");
    expect(md).toContain(
      '| matmulTflops2048Replayed / matmulFastTflops2048Replayed (GPU time from a recorded frame) | 14.30 / null (see notes) |',
    );
    expect(k.notes).toContain('matmulFastTflops2048Replayed: null (not timed from a recorded frame).');
    expect(md).toContain('| ppoDefaultPlan | 16 | off | 0.900 | 0.500 | 0.100 | 0.300 | 0.360 | 2.50 |');
    expect(md).toContain(
      'Qwen2.5-0.5B shape (24 layers, width 896, 14 heads over 2 KV heads, SwiGLU 4864, vocabulary 151936), random weights: GRPO + LoRA r 8, 2 prompts × 8, R 32 |',
    );
    expect(md).toContain(
      '| ours, default plan | 16, recompute off | 9.000 | 5.000 | 1.000 | 3.000 | 2 | 3.00 |',
    );
    expect(md).toContain(
      '| ours, whole batch | 16, recompute off | 6.000 | 3.333 | 0.667 | 2.000 | 2 | 2.00 |',
    );
    expect(md).toContain(
      '| PyTorch eager + PEFT (NVIDIA H100 80GB HBM3) | 16, no recompute | 3.000 | 1.000 | 0.500 | 1.500 | 3 | — |',
    );
    const json = JSON.parse(JSON.stringify(r));
    expect(json.ppoDefaultPlan).toMatchObject({
      microBatchSize: 16,
      sPerStep: 0.9,
      vsTorchEagerDefaultPlan: 2.5,
    });
    expect(json.qwenGrpo).toMatchObject({
      defaultPlan: { sPerStep: 9, microBatchSize: 16, recompute: false },
      wholeBatch: { sPerStep: 6 },
      torchEagerPeft: { sPerStep: 3, peft: '0.21.0' },
      vsTorchEagerDefault: 3,
      vsTorchEagerWhole: 2,
    });
  });
});

/** The parts of a Qwen trainer qwenGrpoBench reads besides its steps and plan (a stand-in's config, models). */
function standInQwen(config: ReturnType<typeof parseLlamaConfig>) {
  return {
    cfg: { batchSize: 16, responseLength: 32, loraTargets: [...LLAMA_LORA_TARGETS], model: 'qwen' },
    models: {
      policy: { config, trainableVariables: () => [{ size: 10 }], dispose: () => {} },
      ref: { dispose: () => {} },
      reward: { kind: 'function' },
    },
    disposeOptimizers: () => {},
  };
}

describe("the Qwen row's order of steps (qwenGrpoBench, a stand-in trainer)", () => {
  it('warms the trainer once, untimed, at the first plan, before each plan’s own warm-up and timed steps', async () => {
    const { qwenGrpoBench } = await import('../src/bench/webgpu-gpu');
    const config = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-0.5b'], num_hidden_layers: 2 });
    const plans: string[] = [];
    let source: { config: () => Record<string, unknown> } | null = null;
    let step = 0;
    const fake = {
      ...standInQwen(config),
      stepPlan: () => ({ microBatchSize: 16, recompute: false, generateMicroBatchSize: 16 }),
      trainStep: async () => {
        const c = source!.config();
        plans.push(`${c.microBatchSize}/${c.recompute}`);
        step++;
        // The first step is the slowest (recordings, pools): it must be in no plan's figures.
        const t = step === 1 ? 100 : 1;
        return {
          metrics: {
            timeStep: t,
            timeGenerate: t,
            timeScore: 0,
            timeUpdate: t,
            tokensPerSecond: 1,
            epochsRun: 1,
          },
          rollout: { queries: [[1, 2, 3]] },
        };
      },
    };
    const r = await qwenGrpoBench({
      build: async (_overrides, owner) => {
        // The bench's owner: the first config in, the live config source (its plan changes) out.
        source = (owner as unknown as (first: object) => NonNullable<typeof source>)({});
        return fake as unknown as Awaited<ReturnType<Parameters<typeof qwenGrpoBench>[0]['build']>>;
      },
      torch: noTorch,
      dryRun: false,
      log: () => {},
    });
    // Trainer warm-up at the first plan; then each plan: its warm-up and 2 timed steps (warm-up ≤ 5 s).
    expect(plans).toEqual(['0/auto', '0/auto', '0/auto', '0/auto', '16/off', '16/off', '16/off']);
    expect(r.trainerWarmupS).toBe(100);
    expect(r.notes[0]).toMatch(/^qwenGrpo.trainerWarmupS: 100.00 s, one untimed step at the default plan/);
    expect(r.defaultPlan).toMatchObject({ warmupS: 1, timedSteps: 2, sPerStep: 1 });
    expect(r.wholeBatch).toMatchObject({ warmupS: 1, timedSteps: 2, sPerStep: 1 });
  });
});

describe("an f16 row's plans in the order asked (qwenGrpoBench, a stand-in trainer)", () => {
  for (const asked of [undefined, 2]) {
    it(`times the bounded plan first (micro-batches of ${asked ?? 'BOUNDED_PLAN_MICRO'}), reads GPU memory for it, then the default plan`, async () => {
      const { qwenGrpoBench, BOUNDED_PLAN_MICRO } = await import('../src/bench/webgpu-gpu');
      const { qwenBenchRun } = await import('../src/bench/torch-grpo');
      const m = asked ?? BOUNDED_PLAN_MICRO;
      const config = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-0.5b'], num_hidden_layers: 2 });
      const plans: string[] = [];
      let source: { config: () => Record<string, unknown> } | null = null;
      let used = 1e9;
      const fake = {
        ...standInQwen(config),
        stepPlan: () => {
          const c = source!.config();
          return {
            microBatchSize: c.microBatchSize || 16,
            recompute: c.recompute !== 'off',
            generateMicroBatchSize: 16,
          };
        },
        memoryEstimate: () => ({ total: 2e9, parts: {} }),
        trainStep: async () => {
          const c = source!.config();
          plans.push(`${c.microBatchSize}/${c.recompute}`);
          used += c.microBatchSize === m ? 1e9 : 5e9;
          return {
            metrics: {
              timeStep: 1,
              timeGenerate: 1,
              timeScore: 0,
              timeUpdate: 1,
              tokensPerSecond: 1,
              epochsRun: 1,
            },
            rollout: { queries: [[1, 2, 3]] },
          };
        },
      };
      let reads = 0;
      let samplers = 0;
      const stopped: string[][] = [];
      const r = await qwenGrpoBench({
        build: async (_overrides, owner) => {
          source = (owner as unknown as (first: object) => NonNullable<typeof source>)({});
          return fake as unknown as Awaited<ReturnType<Parameters<typeof qwenGrpoBench>[0]['build']>>;
        },
        torch: noTorch,
        dryRun: false,
        log: () => {},
        row: {
          key: 'f16Grpo.test',
          model: 'a stand-in',
          run: qwenBenchRun(false),
          plans: ['boundedPlan', 'defaultPlan'],
          baseDtype: 'f16',
          torchDtype: 'float16',
          gpuMemoryUsedBytes: () => (reads++, used),
          sampleGpuMemory: () => {
            samplers++;
            const from = plans.length;
            return {
              samples: () => 7,
              // The most seen while its steps ran: 0.5 GB above what the last of them left.
              stop: async () => (stopped.push(plans.slice(from)), used + 5e8),
            };
          },
          ...(asked ? { boundedMicro: asked } : {}),
        },
      });
      // Trainer warm-up and the bounded plan's warm-up + 2 steps, then the default plan's warm-up + 2 steps.
      const b = `${m}/blocks`;
      expect(plans).toEqual([b, b, b, b, '0/auto', '0/auto', '0/auto']);
      expect(r.boundedPlan).toMatchObject({
        label: `micro-batches of ${m} with recompute`,
        microBatchSize: m,
        recompute: true,
        requested: { microBatchSize: m },
      });
      expect(r.defaultPlan).toMatchObject({ requested: { microBatchSize: 0, recompute: 'auto' } });
      // Memory: read before the build and after the bounded plan's steps only (4 bounded steps of 1 GB each).
      expect(reads).toBe(2);
      expect(r.memory).toMatchObject({ plan: 'boundedPlan', gpuBytes: 4e9, estimateBytes: 2e9 });
      // Sampled over the bounded plan's two timed steps only (not its warm-up, not the default plan's).
      expect(samplers).toBe(1);
      expect(stopped).toEqual([[b, b]]);
      expect(r.memory!.gpuPeakBytes).toBe(4.5e9);
      expect(r.memory!.gpuPeakSamples).toBe(7);
    });
  }
});
