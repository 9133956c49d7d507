import { readFileSync } from 'node:fs';
import { test, expect, type Page } from '@playwright/test';
import { unzipSync, strFromU8 } from 'fflate';
import { watchConsole } from './console';

/**
 * A LoRA run in the playground on WebGPU (SwiftShader: slow, so the built-in tiny model, lora 4, batch 2,
 * responseLength 4, 2 steps): the memory estimate and "trainable of total" are shown before Start, the run trains
 * (step events arrive; KL at step 1 is exactly 0: the adapters' B starts at zero, so the policy is the reference),
 * and the exported zip holds the merged model at its top and PEFT's pairs in adapter/ and value_adapter/, with no
 * adapter_config.json at the top (transformers with peft would apply it again on the merged weights;
 * docs/formats.md §6).
 */
const LORA_RUN = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=2&lora=4';
const STEP_MS = 240_000;

test.describe.configure({ mode: 'serial' });

let page: Page;
let consoleWatch: { errors: string[] };

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

test('before Start: the estimate, broken down, and the trainable parameters against the total', async () => {
  await page.goto(`/?backend=webgpu#${LORA_RUN}`);
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'webgpu');
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny');
  await expect(page.getByRole('textbox', { name: 'lora value' })).toHaveValue('4');
  // One base, no reference copy, the value model on the shared base, a function reward.
  await expect(page.getByTestId('memory-estimate-line')).toHaveText(
    /^≈ \d+\.\d GB: base 0\.\d\d, value 0\.\d\d, reward model —, adapters 0\.\d\d, Adam 0\.\d\d, gradients 0\.\d\d, activations \d+\.\d\d GB$/,
  );
  await expect(page.getByTestId('memory-estimate-problem')).toHaveCount(0);
  // The tiny model (n_embd 160, 4 layers) with r = 4 on the four targets: 4 · 4 · (640 + 320 + 800 + 800) = 41 k.
  await expect(page.getByTestId('trainable-params')).toHaveText(/^41 k trainable of \d\.\d M$/);
});

test('Start trains 2 LoRA steps; KL at step 1 is 0', async () => {
  test.setTimeout(3 * STEP_MS);
  await button('Start').click();
  await expect(stepCounter()).toHaveText('Step 1', { timeout: STEP_MS });
  await expect(stepCounter()).toHaveText('Step 2', { timeout: STEP_MS });
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });

  const download = page.waitForEvent('download');
  await button('Metrics JSON').click();
  const metrics = JSON.parse(readFileSync(await (await download).path(), 'utf8')) as {
    step: number;
    kl: number;
  }[];
  expect(metrics.map((m) => m.step)).toEqual([1, 2]);
  expect(metrics[0].kl).toBe(0);
});

test('Export checkpoint: the merged model.safetensors at the top, adapter/adapter_config.json + adapter/adapter_model.safetensors', async () => {
  test.setTimeout(STEP_MS);
  const download = page.waitForEvent('download');
  await button('Export checkpoint').click();
  const entries = unzipSync(new Uint8Array(readFileSync(await (await download).path())));
  const inFolder = Object.keys(entries)
    .filter((n) => !n.endsWith('/'))
    .map((n) => n.split('/').slice(1).join('/'));
  for (const need of [
    'adapter/adapter_config.json',
    'adapter/adapter_model.safetensors',
    'value_adapter/adapter_config.json',
    'value_adapter/adapter_model.safetensors',
    'model.safetensors',
    'config.json',
    'trainer_state.json',
  ])
    expect(inFolder).toContain(need);
  // Nothing adapter-like at the folder's top: only the plain model folder and the run's files.
  expect(inFolder.filter((n) => !n.includes('/') && n.includes('adapter'))).toEqual([]);
  const adapterConfig = Object.entries(entries).find(([n]) => n.endsWith('/adapter/adapter_config.json'))![1];
  expect(JSON.parse(strFromU8(adapterConfig))).toMatchObject({
    peft_type: 'LORA',
    r: 4,
    fan_in_fan_out: true,
  });
});
