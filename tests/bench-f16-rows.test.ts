/**
 * `bench --gpu`'s f16-base rows (issue #36; src/bench/f16-gpu.ts), the parts that need no GPU: the shapes and run
 * (src/bench/torch-grpo.ts f16BenchShape / f16BenchRun), the random BF16 folder they train
 * (src/cli/random-bf16-folder.ts: read back by our reader and loaded by our loader, and by transformers where a
 * Python with it exists), the PyTorch spec's dtype, and the Markdown of a result. The rows themselves run on a GPU
 * (scripts/gpu-device-run.sh f16) or as a dry run on SwiftShader (PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_DRYRUN=1).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import {
  benchModelLabel,
  f16BenchRun,
  f16BenchShape,
  f16BenchTitle,
  F16_BENCH_SHAPES,
  qwenBenchRun,
  torchGrpoSpec,
} from '../src/bench/torch-grpo';
import { f16Markdown, type F16BenchResult } from '../src/bench/f16-gpu';
import { LLAMA_SHAPES, parseLlamaConfig } from '../src/core/model/llama-config';
import { llamaParamSpecs } from '../src/core/model/llama';
import { collectBytes, readSafetensors } from '../src/core/model/safetensors';
import { randomBf16Safetensors, writeRandomBf16LlamaFolder } from '../src/cli/random-bf16-folder';
import { loadLM } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { validateConfig } from '../src/common/config';
import { useCpu } from './helpers/backend';
import { TORCH_PYTHON } from './helpers/f16-base';

describe('the f16 rows: shapes and run', () => {
  it('use the published shapes (the tokenizer fixture’s ids), a dry run 2 layers of width 64', () => {
    for (const name of F16_BENCH_SHAPES) {
      const full = f16BenchShape(name, false);
      expect(full).toEqual({
        ...LLAMA_SHAPES[name],
        bos_token_id: 510,
        eos_token_id: 511,
        pad_token_id: 509,
      });
      const dry = f16BenchShape(name, true);
      const c = parseLlamaConfig(dry);
      expect([c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.vocab_size]).toEqual([
        2, 64, 128, 151936,
      ]);
      expect(c.head_dim * c.num_attention_heads).toBe(64);
      expect(parseLlamaConfig(full).num_hidden_layers).toBe(28);
    }
    expect(f16BenchTitle('qwen2.5-1.5b')).toBe('Qwen2.5-1.5B');
    expect(benchModelLabel('Qwen3-1.7B', f16BenchShape('qwen3-1.7b', false), false)).toBe(
      'Qwen3-1.7B shape (28 layers, width 2048, 16 heads over 8 KV heads, SwiGLU 6144, vocabulary 151936), random weights',
    );
  });

  it('is issue #36’s: B16 in groups of 8, R 64, LoRA r 8; the PyTorch spec carries the base dtype', () => {
    expect(f16BenchRun(false)).toEqual({
      algorithm: 'grpo',
      lora: 8,
      batchSize: 16,
      groupSize: 8,
      responseLength: 64,
    });
    expect(f16BenchRun(true)).toEqual(qwenBenchRun(true));
    const cfg = validateConfig(
      { model: 'x', task: 'sentiment', ...f16BenchRun(false), miniBatches: 1, ppoEpochs: 1 },
      'test',
    );
    const o = { model: 'm', Tq: 8, device: 'cuda' as const, loraTargets: ['q_proj'], warmup: 1, steps: 3 };
    expect(torchGrpoSpec(cfg, o).dtype).toBe('float32');
    expect(torchGrpoSpec(cfg, { ...o, dtype: 'float16' }).dtype).toBe('float16');
  });
});

describe('the random BF16 folder', () => {
  beforeAll(useCpu);

  it('holds every parameter in BF16 under HF names: norms 1, matrices uniform with std 0.02, by seed', async () => {
    const config = parseLlamaConfig(f16BenchShape('qwen2.5-1.5b', true));
    const src = randomBf16Safetensors(config, 7);
    const bytes = await collectBytes(src);
    expect(bytes.length).toBe(src.byteLength);
    const file = readSafetensors(bytes, 'model.safetensors');
    const specs = llamaParamSpecs(config);
    expect([...file.tensors.keys()].sort()).toEqual(specs.map((s) => `model.${s.name}`).sort());
    const raw = JSON.parse(
      new TextDecoder().decode(
        bytes.subarray(8, 8 + Number(new DataView(bytes.buffer).getBigUint64(0, true))),
      ),
    );
    for (const s of specs) {
      const t = file.tensors.get(`model.${s.name}`)!;
      expect(raw[`model.${s.name}`].dtype).toBe('BF16');
      expect(t.shape).toEqual(s.shape);
      const v = t.data;
      if (s.name.endsWith('norm.weight')) expect(v.every((x) => x === 1)).toBe(true);
      else if (s.name.endsWith('.bias')) expect(v.every((x) => x === 0)).toBe(true);
      else if (v.length > 10_000) {
        let sum = 0;
        let sq = 0;
        let max = 0;
        for (const x of v) {
          sum += x;
          sq += x * x;
          max = Math.max(max, Math.abs(x));
        }
        expect(Math.abs(sum / v.length)).toBeLessThan(1e-3);
        expect(Math.sqrt(sq / v.length)).toBeCloseTo(0.02, 3);
        expect(max).toBeLessThanOrEqual(0.02 * Math.sqrt(3) * (1 + 2 ** -8));
      }
    }
    // The same seed, the same bytes; another seed, others.
    expect(
      Buffer.compare(Buffer.from(await collectBytes(randomBf16Safetensors(config, 7))), Buffer.from(bytes)),
    ).toBe(0);
    expect(
      Buffer.compare(Buffer.from(await collectBytes(randomBf16Safetensors(config, 8))), Buffer.from(bytes)),
    ).not.toBe(0);
  });

  it('is a folder our loader reads (and transformers, where a Python has it)', async () => {
    const dir = join(await mkdtemp(join(tmpdir(), 'bf16-folder-')), 'qwen3');
    try {
      await writeRandomBf16LlamaFolder(dir, f16BenchShape('qwen3-1.7b', true));
      const cfgJson = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'));
      expect(cfgJson).toMatchObject({
        model_type: 'qwen3',
        architectures: ['Qwen3ForCausalLM'],
        dtype: 'bfloat16',
      });
      const { model, config } = await loadLM(nodeFiles(dir), { trainable: false });
      expect((config as { num_hidden_layers?: number }).num_hidden_layers).toBe(2);
      const lg = model.logits(tf.tensor2d([[510, 5, 6]], [1, 3], 'int32'), tf.ones([1, 3]) as tf.Tensor2D);
      expect(lg.shape).toEqual([1, 3, 151936]);
      const v = await lg.data();
      expect(v.every(Number.isFinite)).toBe(true);
      tf.dispose(lg);
      model.dispose();
      if (!existsSync(TORCH_PYTHON)) {
        console.warn(`skipped the transformers load: no Python at ${TORCH_PYTHON}`);
        return;
      }
      const r = spawnSync(
        TORCH_PYTHON,
        [
          '-c',
          'import sys, torch, transformers as t; m = t.AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True); ' +
            'print(type(m).__name__, m.dtype, m.config.num_hidden_layers)',
          dir,
        ],
        { encoding: 'utf8', timeout: 300_000, env: { ...process.env, HF_HUB_OFFLINE: '1' } },
      );
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout.trim().split('\n').pop()).toBe('Qwen3ForCausalLM torch.bfloat16 2');
    } finally {
      await rm(join(dir, '..'), { recursive: true, force: true });
    }
  }, 600_000);
});

describe('the f16 rows as Markdown', () => {
  it('shows the step beside PyTorch, the memory and the estimate, and the decode ratio', () => {
    const r: F16BenchResult = {
      adapter: {
        vendor: 'nvidia',
        architecture: '',
        device: '',
        description: 'H200',
        software: false,
        vulkan: '',
      },
      rows: [
        {
          model: 'Qwen2.5-1.5B shape (…), random weights, BF16 file, base in f16',
          measured: true,
          batchSize: 16,
          groupSize: 8,
          responseLength: 64,
          trainerWarmupS: 20,
          Tq: 8,
          lora: 8,
          loraTargets: ['q_proj'],
          trainableParams: 9,
          defaultPlan: {
            label: 'the default plan',
            requested: { microBatchSize: 0, recompute: 'auto' },
            microBatchSize: 16,
            recompute: false,
            generateMicroBatchSize: 16,
            sPerStep: 3.5,
            generateS: 1.5,
            scoreS: 0.5,
            updateS: 1.5,
            warmupS: 9,
            timedSteps: 2,
            stepTimes: [3.4, 3.6],
            note: null,
          },
          wholeBatch: null,
          torchEagerPeft: null,
          vsTorchEagerDefault: null,
          vsTorchEagerWhole: null,
          baseDtype: 'f16',
          memory: {
            plan: 'defaultPlan',
            gpuBytes: 5.5e9,
            gpuPeakBytes: 6.25e9,
            gpuPeakSamples: 40,
            tfjsAllocatedBytes: 4.2e9,
            replayHeldBytes: 1.1e9,
            tfjsPeakUsedBytes: 4.8e9,
            tfjsPeakAllocatedBytes: 5.25e9,
            estimateBytes: 5e9,
            estimate: '≈ 5.0 GB: …',
          },
          notes: ['f16Grpo.qwen2.5-1.5b.torchEagerPeft: null (no PyTorch on a GPU: none).'],
        },
      ],
      decode: {
        model: 'Qwen2.5-1.5B shape',
        batch: 1,
        tokens: 32,
        f16GreedyMsPerToken: 6,
        f32GreedyMsPerToken: 10,
        f16OverF32: 0.6,
        vecLoads: { f16GreedyMsPerToken: 3, f32GreedyMsPerToken: 5.5, f16OverF32: 3 / 5.5 },
        dispatchesPerToken: 230,
      },
      linearKernels: { vecRows: null, fastTiles: null },
      notes: [],
    };
    const md = f16Markdown(r);
    expect(md).toContain('| the same, vector loads (setWebGpuLinearVecRows) | 3.00 | 5.50 | 0.55 |');
    expect(md).toContain(
      '| micro-batch 16, recompute off | 3.500 | 1.500 | 0.500 | 1.500 | 5.50 GB / 6.25 GB | 4.20 GB (replay frames 1.10 GB) | 4.80 GB / 5.25 GB | ≈ 5.0 GB: … | not run | — | null (see notes) |',
    );
    expect(md).toContain('| Qwen2.5-1.5B shape; 230.0 dispatches a token (f16) | 6.00 | 10.00 | 0.60 |');
    expect(md).toContain('- f16Grpo.qwen2.5-1.5b.torchEagerPeft: null (no PyTorch on a GPU: none).');
    expect(md).toContain(
      '- The fused linear: vector loads in the few-rows program off (the default), the tiled products on 64 × 64 tiles (the default).',
    );
    expect(f16Markdown({ ...r, linearKernels: { vecRows: true, fastTiles: true } })).toContain(
      '- The fused linear: vector loads in the few-rows program on (PPO_WEBGPU_VEC_ROWS=1), the tiled products on the tile kernel (PPO_WEBGPU_LINEAR_TILES=fast).',
    );
    // The device's timing chose the vector loads: the default line is with them, the other without.
    const tuned = f16Markdown({
      ...r,
      adapter: {
        ...r.adapter,
        kernels: {
          vecRows: { on: true, how: 'timed', why: 'vector loads in the few-rows program on: timed faster' },
          fastTiles: {
            on: false,
            how: 'timed',
            why: 'the tile kernel for the tiled products off: not faster',
          },
          ms: 420,
        },
      },
      decode: {
        ...r.decode!,
        vecLoads: null,
        withoutVecLoads: { f16GreedyMsPerToken: 5, f32GreedyMsPerToken: 6, f16OverF32: 5 / 6 },
      },
      linearKernels: { vecRows: null, fastTiles: null, inForce: { vecRows: true, fastTiles: false } },
    });
    expect(tuned).toContain(
      '| the same, without the vector loads (setWebGpuLinearVecRows(false)) | 5.00 | 6.00 | 0.83 |',
    );
    expect(tuned).not.toContain('| the same, vector loads');
    expect(tuned).toContain(
      '- The fused linear: vector loads in the few-rows program on (the default), the tiled products on 64 × 64 tiles (the default).',
    );
    expect(tuned).toContain(
      '- Kernels timed when the backend started: vector loads in the few-rows program on: timed faster; the tile kernel for the tiled products off: not faster (timed in 0.4 s).',
    );
    // A row that timed the bounded plan first: the memory on its line, PyTorch and the ratio on the default's.
    const row = r.rows[0];
    const bounded = {
      ...row,
      boundedPlan: { ...row.defaultPlan!, microBatchSize: 4, recompute: true, sPerStep: 5.25 },
      // A reading without the sampled peak (no nvidia-smi sampling, or a result from before it): shown as —.
      memory: { ...row.memory!, plan: 'boundedPlan' as const, gpuBytes: 4.5e9, gpuPeakBytes: null },
    };
    const md2 = f16Markdown({ ...r, rows: [bounded] });
    expect(md2).toContain(
      '| micro-batch 16, recompute off | 3.500 | 1.500 | 0.500 | 1.500 | — | — | — | — | not run | — | null (see notes) |',
    );
    expect(md2).toContain(
      '| bounded: micro-batch 4 (generate 16), recompute on | 5.250 | 1.500 | 0.500 | 1.500 | 4.50 GB / — | 4.20 GB (replay frames 1.10 GB) | 4.80 GB / 5.25 GB | ≈ 5.0 GB: … | — | — | — |',
    );
  });
});
