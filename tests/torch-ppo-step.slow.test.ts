/**
 * scripts/torch_ppo_step.py (`bench --gpu`'s PyTorch column, issue #22) where a Python with torch and transformers
 * exists ($PPO_PYTHON, /tmp/venv/bin/python or python3; skipped otherwise, as in CI): the spec our bench writes for
 * a PPO LoRA config (torchSpec), run on the CPU against a small GPT-2 folder our exporter writes, gives a result
 * that parseTorchResult accepts — every phase time and decode figure positive. Times are not checked: speed is the
 * bench's to report. A config the script does not compute is refused before Python runs (tests/bench-gpu-keys).
 */
import { describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { resolvePython } from '../src/cli/bench';
import { probeTorchCuda, runTorchPpoStep } from '../src/cli/torch-probe';
import { torchSpec } from '../src/bench/torch-ppo';
import { validateConfig } from '../src/common/config';
import { GPT2 } from '../src/core/model/gpt2';
import { parseGPT2Config } from '../src/core/model/config';
import { exportLM } from '../src/core/model/folder';
import { writeFolder } from '../src/cli/files-node';
import { useCpu } from './helpers/backend';

const python = resolvePython();
const probe = probeTorchCuda(python);
// The probe is ok with CUDA; without it, a torch that imports says "CUDA is not available".
const hasTorch = probe.ok || probe.reason.includes('CUDA is not available');

describe('scripts/torch_ppo_step.py on the CPU', () => {
  it.skipIf(!hasTorch)(
    `runs the PPO LoRA step of our config and reports every figure (${probe.reason})`,
    async () => {
      await useCpu();
      const dir = await mkdtemp(path.join(tmpdir(), 'torch-ppo-'));
      try {
        const m = GPT2.random(
          parseGPT2Config({
            vocab_size: 50257,
            n_positions: 64,
            n_embd: 32,
            n_layer: 2,
            n_head: 2,
            tokenizer: 'gpt2-bpe',
            bos_token_id: 50256,
            eos_token_id: 50256,
          }),
          7,
        );
        await writeFolder(dir, await exportLM(m));
        m.dispose();
        const cfg = validateConfig(
          {
            model: 'tiny',
            task: 'sentiment',
            algorithm: 'ppo',
            lora: 4,
            batchSize: 4,
            responseLength: 6,
            miniBatches: 1,
            ppoEpochs: 1,
          },
          'test',
        );
        const spec = torchSpec(cfg, {
          model: dir,
          Tq: 8,
          device: 'cpu',
          warmup: 0,
          steps: 1,
          decodeBatches: [1, 4],
          sampledBatch: 4,
          decodeTokens: 5,
        });
        const r = await runTorchPpoStep(python, spec, () => {});
        for (const k of ['timeGenerate', 'timeScore', 'timeUpdate', 'timeStep', 'sampledMsPerToken'] as const)
          expect(r[k], k).toBeGreaterThan(0);
        expect(Object.keys(r.greedyMsPerToken).sort()).toEqual(['1', '4']);
        expect(r.device).toBe('cpu');
        expect(r.tf32).toBe(false);
        expect(r.steps).toBe(1);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    300_000,
  );
});
