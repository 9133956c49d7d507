import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import { unzipSync, strFromU8 } from 'fflate';
import { watchConsole } from './console';

/**
 * A Qwen2-shaped local folder in the playground on WebGPU (issue #21): the tiny Qwen2 parity fixture (2 layers,
 * hidden 32, GQA 4/2, q/k/v biases, tied head, BF16, a 512-id ChatML tokenizer with its chat template) is picked
 * with its tokenizer files; the model card names the family and the chat template; LoRA is preselected (a Qwen
 * model, whatever its size), set to r 4, α 8, on the seven Qwen layers; two GRPO steps run with the chat template on (step 1's KL is 0: B
 * starts at zero) and the sample table shows each prompt in the template; the exported checkpoint holds the
 * tokenizer files and PEFT's adapter on q/k/v/o/gate/up/down_proj, and imports back at step 2 and steps on.
 */
const FOLDER = path.resolve('tests/fixtures/parity-llama/qwen2-tiny');
const FILES = [
  'config.json',
  'model.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
  'generation_config.json',
];
const RUN =
  'algorithm=grpo&task=arithmetic-chat&batchSize=4&groupSize=2&miniBatches=1&ppoEpochs=1&responseLength=4' +
  '&steps=100&loraAlpha=8&chatTemplate=true';
const STEP_MS = 240_000;

test.describe.configure({ mode: 'serial' });

let page: Page;
let consoleWatch: { errors: string[] };
let exported: string;

const stepCounter = () => page.getByTestId('step-counter');
const phase = () => page.getByTestId('run-phase');
const button = (name: string) => page.getByRole('button', { name, exact: true });

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  consoleWatch = watchConsole(page);
});

test.afterAll(async () => {
  await page.close();
});

test.afterEach(() => {
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});

test('the Qwen2 folder loads with its tokenizer; LoRA is preselected, then set to r 4, α 8', async () => {
  await page.goto(`/?backend=webgpu#${RUN}`);
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'webgpu');
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny');
  await page.locator('input[type=radio][value=files]').check();
  await page.getByLabel('Model files').setInputFiles(FILES.map((f) => path.join(FOLDER, f)));
  await button('Load model').click();
  const summary = page.getByTestId('model-summary');
  // Loose files are named from their config.json (family, layers × width): not "model".
  await expect(summary).toContainText('uploaded:qwen2-2x32');
  await expect(page.getByTestId('model-family')).toHaveText('Qwen2');
  await expect(page.getByTestId('model-tokenizer')).toHaveText('tokenizer.json (512 ids), chat template');
  await expect(summary).toContainText('2 × 32 (4 heads)');

  await expect(page.getByTestId('lora-note')).toContainText('is a Qwen2 model');
  const lora = page.getByRole('textbox', { name: 'lora value' });
  await expect(lora).toHaveValue('8');
  await lora.fill('4');
  await lora.press('Enter');
  await expect(lora).toHaveValue('4');
  await expect(page.getByRole('textbox', { name: 'loraAlpha value' })).toHaveValue('8');
  // The Qwen layers are offered, all on (the default means all seven); GPT-2's are not.
  for (const t of ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'])
    await expect(page.getByRole('checkbox', { name: new RegExp(`(^| )${t}$`) })).toBeChecked();
  await expect(page.locator('[data-key="loraTargets"] input[type=checkbox]')).toHaveCount(7);
  await expect(page.getByRole('switch', { name: 'chatTemplate' })).toBeChecked();
  await expect(page.getByRole('region', { name: 'Try the policy' })).toContainText(
    'The prompt goes in the model’s chat template',
  );
  await expect(page.getByRole('combobox', { name: 'algorithm' })).toHaveValue('grpo');
  await expect(page.getByTestId('memory-estimate-problem')).toHaveCount(0);
});

test('two LoRA GRPO steps on WebGPU; the samples show the chat-formatted prompt; KL at step 1 is 0', async () => {
  test.setTimeout(3 * STEP_MS);
  await button('Step').click();
  await expect(stepCounter()).toHaveText('Step 1', { timeout: STEP_MS });
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });
  await button('Step').click();
  await expect(stepCounter()).toHaveText('Step 2', { timeout: STEP_MS });
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'webgpu');

  const prompts = page.getByTestId('samples-table').locator('td.prompt');
  await expect(prompts).toHaveCount(4);
  const first = prompts.first();
  await expect(first).toHaveAttribute('data-chat', 'true');
  // Text and title read together: the table may still change from step 1's samples to step 2's between two
  // reads (the samples come in an event of their own; on a loaded machine after the paused status).
  const [text, plain] = await first.evaluate((el) => [el.textContent ?? '', el.getAttribute('title') ?? '']);
  expect(text).toMatch(
    /^<\|im_start\|>system\n[^]*<\|im_end\|>\n<\|im_start\|>user\n[^]*\d+[^]*<\|im_end\|>\n<\|im_start\|>assistant\n$/,
  );
  expect(plain).toMatch(/^In the chat template; the prompt: /);
  expect(text).toContain(plain.replace('In the chat template; the prompt: ', ''));

  const download = page.waitForEvent('download');
  await button('Metrics JSON').click();
  const metrics = JSON.parse(readFileSync(await (await download).path(), 'utf8')) as {
    step: number;
    kl: number;
  }[];
  expect(metrics.map((m) => m.step)).toEqual([1, 2]);
  expect(metrics[0].kl).toBe(0);
});

test('Export checkpoint: a Qwen2 folder with its tokenizer files and the PEFT adapter (r 4, α 8)', async () => {
  test.setTimeout(STEP_MS);
  const download = page.waitForEvent('download');
  await button('Export checkpoint').click();
  exported = await (await download).path();
  const entries = unzipSync(new Uint8Array(readFileSync(exported)));
  const byName = new Map(
    Object.entries(entries)
      .filter(([n]) => !n.endsWith('/'))
      .map(([n, b]) => [n.split('/').slice(1).join('/'), b]),
  );
  for (const need of [
    'config.json',
    'model.safetensors',
    'tokenizer.json',
    'tokenizer_config.json',
    'generation_config.json',
    'adapter/adapter_config.json',
    'adapter/adapter_model.safetensors',
    'trainer_state.json',
  ])
    expect([...byName.keys()]).toContain(need);
  expect(JSON.parse(strFromU8(byName.get('config.json')!))).toMatchObject({ model_type: 'qwen2' });
  expect(strFromU8(byName.get('tokenizer.json')!)).toBe(
    readFileSync(path.join(FOLDER, 'tokenizer.json'), 'utf8'),
  );
  const adapter = JSON.parse(strFromU8(byName.get('adapter/adapter_config.json')!)) as {
    target_modules: string[];
  };
  expect(adapter).toMatchObject({ peft_type: 'LORA', r: 4, lora_alpha: 8, fan_in_fan_out: false });
  expect([...adapter.target_modules].sort()).toEqual(
    ['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj'].sort(),
  );
  const state = JSON.parse(strFromU8(byName.get('trainer_state.json')!)) as {
    step: number;
    config: Record<string, unknown>;
  };
  expect(state.step).toBe(2);
  expect(state.config).toMatchObject({ algorithm: 'grpo', lora: 4, loraAlpha: 8, chatTemplate: true });
});

test('the checkpoint imports back at step 2 and steps on in the chat template', async () => {
  test.setTimeout(2 * STEP_MS);
  await button('Reset').click();
  await expect(stepCounter()).toHaveText('Step 0');
  await page.getByLabel('Import checkpoint').setInputFiles(exported);
  await expect(stepCounter()).toHaveText('Step 2');
  await expect(page.getByRole('alert')).toHaveCount(0);
  await expect(page.getByTestId('model-family')).toHaveText('Qwen2');
  await expect(page.getByRole('textbox', { name: 'lora value' })).toHaveValue('4');

  await button('Step').click();
  await expect(stepCounter()).toHaveText('Step 3', { timeout: STEP_MS });
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });
  await expect(page.getByTestId('samples-table').locator('td.prompt').first()).toContainText(
    '<|im_start|>assistant',
  );
});
