/**
 * scripts/torch_grpo_step.py (`bench --gpu`'s `qwenGrpo.torchEagerPeft`, issue #31) where a Python with torch,
 * transformers and peft exists ($PPO_PYTHON, /tmp/venv/bin/python or python3; skipped otherwise, saying why, as in
 * CI): the spec our bench writes for its Qwen GRPO config (torchGrpoSpec, with the layers our trainer adapts), run
 * on the CPU against the dry run's Qwen2-shaped folder (2 layers of width 64, Qwen2.5's vocabulary) that our
 * exporter writes (writeRandomLlamaFolder), gives a result that parseTorchGrpoResult accepts: every phase time
 * positive, PEFT's LoRA on the seven linear layers with our adapters' parameter count, the reference forward only
 * where β > 0. Times are not checked: speed is the bench's to report. A config the script does not compute is
 * refused before Python runs (tests/bench-gpu-keys.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { resolvePython } from '../src/cli/bench';
import { runTorchGrpoStep, writeRandomLlamaFolder } from '../src/cli/torch-probe';
import { qwenBenchRun, qwenBenchShape, torchGrpoSpec } from '../src/bench/torch-grpo';
import { validateConfig } from '../src/common/config';
import { loraModuleShape, resolveLoraTargets } from '../src/core/model/lora';
import { useCpu } from './helpers/backend';
import { spawnAsync } from './helpers/spawn';

const python = resolvePython();
// Asynchronously (importing torch can take seconds on a loaded machine: tests/helpers/spawn.ts).
const probe = await spawnAsync(
  python,
  [
    '-c',
    'import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)',
  ],
  { timeout: 120_000 },
).catch((e: Error) => ({ status: null, stdout: '', stderr: e.message }));
const ready = probe.status === 0;
const why = ready
  ? `torch, transformers, peft ${probe.stdout.trim()}`
  : `skipped: "${python}" cannot import torch, transformers and peft: ${probe.stderr.trim().split('\n').pop()}`;

describe('scripts/torch_grpo_step.py on the CPU', () => {
  it.skipIf(!ready)(
    `runs the Qwen LoRA GRPO step of our config through PEFT and reports every figure (${why})`,
    async () => {
      await useCpu();
      const dir = await mkdtemp(path.join(tmpdir(), 'torch-grpo-'));
      try {
        const config = await writeRandomLlamaFolder(dir, qwenBenchShape(true));
        const cfg = validateConfig(
          { model: dir, task: 'sentiment', ...qwenBenchRun(true), miniBatches: 1, ppoEpochs: 1 },
          'test',
        );
        const targets = resolveLoraTargets(config, cfg.loraTargets);
        // Our adapters: A [r, in] and B [out, r] on every target of every layer.
        const ours =
          config.n_layer *
          targets.reduce((n, t) => {
            const s = loraModuleShape(config, t);
            return n + cfg.lora * (s.in + s.out);
          }, 0);
        const o = { model: dir, Tq: 16, device: 'cpu' as const, loraTargets: targets, warmup: 0, steps: 1 };
        const r = await runTorchGrpoStep(python, torchGrpoSpec(cfg, o), () => {});
        for (const k of ['timeGenerate', 'timeScore', 'timeUpdate', 'timeStep'] as const)
          expect(r[k], k).toBeGreaterThan(0);
        expect(r.loraTargets).toEqual([...targets].sort());
        expect(r.trainableParams).toBe(ours);
        expect(r.refLogprobs).toBe(cfg.klCoef > 0);
        expect(r.device).toBe('cpu');
        expect(r.tf32).toBe(false);
        expect(r.steps).toBe(1);
        // β 0 (no reference forward), the batch's std and the per-sequence mean: the other branches run too.
        const other = torchGrpoSpec(
          { ...cfg, klCoef: 0, scaleRewards: 'batch', lossAggregation: 'seq-mean' },
          o,
        );
        const r0 = await runTorchGrpoStep(python, other, () => {});
        expect(r0.refLogprobs).toBe(false);
        expect(r0.timeStep).toBeGreaterThan(0);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    300_000,
  );
});
