import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test, expect } from '@playwright/test';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';

/**
 * Opt-in (PPO_E2E_FULLSIZE=1; it writes a 3.1 GB folder and holds ~7 GB while it runs, so CI skips it): a
 * Qwen2.5-1.5B-shaped folder at full size — every one of its 28 layers, its 151 936-id vocabulary, random weights in
 * BF16 (src/cli/random-bf16-folder.ts), one 3.09 GB model.safetensors as Qwen2.5-1.5B ships — picked in Chromium
 * and loaded by the model worker on WebGPU with the base in f16, then asked for two greedy tokens. Before
 * 2026-11-30 a file over 2 GB could not be picked at all; the worker now reads the picked File a tensor at a time
 * (docs/models.md, "Reading a weights file"), and since the load goes a weight at a time onto the device it is
 * checked against the default budget (8 GB of device memory in the browser, 5.2 GB for a load) and fits: 3.09 GB
 * of weights, 0.47 GB of the embedding's values on the host and 0.47 GB of its bytes (before, the load check
 * counted 6.65 GB and the spec had to raise the budget to 12 GB).
 */
test.skip(!process.env.PPO_E2E_FULLSIZE, 'opt-in: PPO_E2E_FULLSIZE=1 (writes a 3.1 GB folder)');

const FILES = [
  'config.json',
  'model.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
  'generation_config.json',
];
let dir: string;

test.beforeAll(() => {
  test.setTimeout(600_000);
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-e2e-fullsize-'));
  const code =
    "import { writeRandomBf16LlamaFolder } from './src/cli/random-bf16-folder.ts';" +
    "import { LLAMA_SHAPES } from './src/core/model/llama-config.ts';" +
    `await writeRandomBf16LlamaFolder(${JSON.stringify(dir)}, { ...LLAMA_SHAPES['qwen2.5-1.5b'], ` +
    'bos_token_id: 510, eos_token_id: 511, pad_token_id: 509 });';
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    encoding: 'utf8',
    timeout: 580_000,
  });
  expect(r.status, r.stderr).toBe(0);
  expect(statSync(path.join(dir, 'model.safetensors')).size).toBeGreaterThan(3e9);
});

test.afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a full-size 3.1 GB Qwen2.5-1.5B-shaped file, picked, loads in f16 and generates', async ({ page }) => {
  test.setTimeout(1_200_000);
  const consoleWatch = watchConsole(page);
  await openWorkerPage(page);
  await page.evaluate(() => {
    const input = document.createElement('input');
    input.type = 'file';
    input.multiple = true;
    input.id = 'pick';
    document.body.append(input);
  });
  await page.setInputFiles(
    '#pick',
    FILES.map((f) => path.join(dir, f)),
  );
  const t0 = Date.now();
  const out = await page.evaluate(async () => {
    const w = window.modelWorker;
    await w.init('webgpu');
    await w.configure({ lora: 8, baseDtype: 'f16', algorithm: 'grpo' });
    const picked = Array.from((document.getElementById('pick') as HTMLInputElement).files!);
    const files = await Promise.all(
      picked.map(async (f) =>
        f.name.endsWith('.safetensors')
          ? { name: `qwen25-full/${f.name}`, blob: f }
          : { name: `qwen25-full/${f.name}`, bytes: new Uint8Array(await f.arrayBuffer()) },
      ),
    );
    const started = performance.now();
    const summary = await w.loadModel({ kind: 'files', files });
    const gen = await w.generate({
      prompt: 'Hi',
      chatTemplate: false,
      maxNewTokens: 2,
      temperature: 0,
      topK: 0,
      topP: 1,
      seed: 1,
    });
    return { summary, tokens: gen.tokens.length, ms: performance.now() - started };
  });
  console.log(
    `fullsize: load + 2 tokens ${(out.ms / 1000).toFixed(1)} s (${((Date.now() - t0) / 1000).toFixed(1)} s)`,
  );
  expect(out.summary).toMatchObject({ family: 'qwen2', n_layer: 28, n_embd: 1536, vocab_size: 151936 });
  expect(out.tokens).toBe(2);
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});
