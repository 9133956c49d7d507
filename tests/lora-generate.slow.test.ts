/**
 * `generate --model CKPT` on a LoRA checkpoint (docs/formats.md §6): the CLI, spawned as a user runs it, reads the
 * merged model.safetensors as a plain model and decodes greedily what the policy (base + adapters) decodes.
 * Slow tier: it spawns the CLI.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { validateConfig } from '../src/common/config';
import { buildTrainer } from '../src/core/ppo/setup';
import { checkpointFiles } from '../src/core/run/checkpoint';
import { generate } from '../src/core/model/sampling';
import { nodeFiles, writeFolder } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { spawnAsync } from './helpers/spawn';

describe('generate --model on a LoRA checkpoint', () => {
  beforeAll(useCpu);

  it('decodes the merged policy: the same greedy tokens as base + adapters in the trainer', async () => {
    const dir = await makeTinyFolder();
    const cfg = validateConfig({
      model: dir,
      task: null,
      prompts: ['Hello', 'The day'],
      seed: 5,
      batchSize: 2,
      miniBatches: 1,
      responseLength: 8,
      lora: 4,
      learningRate: 3e-2,
    });
    const t = await buildTrainer(
      cfg,
      { modelFiles: (p) => nodeFiles(p), loadTask: loadTaskNode },
      { rewardFn: { label: 'bytes', fn: (s) => s.responseTokens.reduce((a, b) => a + b, 0) / 2560 } },
    );
    for (let i = 0; i < 3; i++) await t.trainStep();
    const ckpt = mkdtempSync(path.join(tmpdir(), 'ppo-lora-ckpt-'));
    await writeFolder(ckpt, await checkpointFiles(t));
    const prompt = [72, 101, 108, 108, 111]; // "Hello"
    const opts = { maxNewTokens: 12, temperature: 0, rng: 0, padId: t.tokenizer.padId, stopToken: null };
    const want = (await generate(t.models.policy, [prompt], opts)).tokens[0];
    const base = (await generate(t.models.ref, [prompt], opts)).tokens[0];
    t.disposeAll();
    const r = await spawnAsync(
      process.execPath,
      [
        '--import',
        'tsx',
        'src/cli/main.ts',
        'generate',
        '--model',
        ckpt,
        '--prompt',
        'Hello',
        '--max-new-tokens',
        '12',
        '--temperature',
        '0',
        '--no-stop',
        '--json',
        '--backend',
        'cpu',
      ],
      { timeout: 300_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out.promptTokens).toEqual(prompt);
    expect(out.tokens).toEqual(want);
    // The adapters changed the greedy decode (so the CLI is not just reading the base).
    expect(want).not.toEqual(base);
  }, 600_000);
});
