/**
 * `bench --gpu`'s issue #22 keys, the pure parts (src/bench/webgpu-gpu.ts): gpuBenchKeys (which figure goes under
 * which name, and null with a note where it was not measured), matmulShapeKeys (tfjs's matmul beside ours at
 * GPT-2's shapes, never as GPU speed on a software adapter) and torchProbeFromRun (the PyTorch probe's outcome
 * from its process result). No GPU, no Python needed.
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
  torchProbeFromRun,
  TORCH_PROBE_CODE,
  type TorchProbe,
} from '../src/bench/webgpu-gpu';
import { useCpu } from './helpers/backend';
import { parseTorchResult, torchSpec } from '../src/bench/torch-ppo';
import { validateConfig } from '../src/core/config';
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
    expect(notes.some((n) => n.startsWith('matmulTflops2048'))).toBe(false);
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
    expect(notes.find((n) => n.startsWith('matmulTflops2048'))).toMatch(/256².*not 2048²/);
  });

  it("our matmul at 2048² is matmulFastTflops2048 beside tfjs's; at 256² (a software adapter) or not timed: null with a note", () => {
    const base = { matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 }, decode, timing, torch: noTorch };
    const both = gpuBenchKeys({ ...base, matmulFast: { n: 2048, iters: 16, seconds: 2, gflops: 31000 } });
    expect(both.keys.matmulTflops2048).toBeCloseTo(9.3, 12);
    expect(both.keys.matmulFastTflops2048).toBeCloseTo(31, 12);
    expect(both.notes.some((n) => n.startsWith('matmulFastTflops2048'))).toBe(false);
    const soft = gpuBenchKeys({
      ...base,
      matmul: { n: 256, iters: 1, seconds: 0.2, gflops: 12.5 },
      matmulFast: { n: 256, iters: 1, seconds: 0.2, gflops: 20 },
    });
    expect(soft.keys.matmulFastTflops2048).toBeNull();
    expect(soft.notes.find((n) => n.startsWith('matmulFastTflops2048'))).toMatch(/256².*not 2048²/);
    for (const missing of [undefined, null]) {
      const k = gpuBenchKeys({ ...base, matmulFast: missing });
      expect(k.keys.matmulFastTflops2048).toBeNull();
      expect(k.notes).toContain('matmulFastTflops2048: null (our matmul was not timed).');
    }
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
      matmulShapes: shapes.rows,
      dispatchOverheadMs: 0.5,
      layers: { fused: layer, plain: layer },
      webgpuDispatchesPerLayerFwd: 7,
      webgpuDispatchesPerLayerFwdBwd: 32,
      ppo,
      webgpuDispatchesPerStep: 100,
      readbacksPerStep: 3,
      gpt2Lora: [],
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
    });
  });
});
