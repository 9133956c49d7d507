import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';

/**
 * A GPT-2-124M-shaped local folder (random weights in GPT-2's exact shapes and vocabulary, made here, never
 * committed) in the playground on WASM with the default settings (issue #20): loading it preselects LoRA, the
 * default run (batch 16, responseLength 24) is accepted, since micro-batches bound its memory, and one step
 * completes; the memory line then shows what the run holds and the step's peak. A setting that would not fit is
 * refused before Start, and the refusal names the micro-batch that would.
 */
test.describe.configure({ mode: 'serial' });

let dir: string;
let page: Page;
let consoleWatch: { errors: string[] };
const STEP_MS = 12 * 60_000;

const button = (name: string) => page.getByRole('button', { name, exact: true });

test.beforeAll(async ({ browser }) => {
  test.setTimeout(300_000);
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-e2e-gpt2-'));
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'scripts/make-random-model.ts', dir, '12', '768', '12', '1024', '50257'],
    { encoding: 'utf8', timeout: 240_000 },
  );
  expect(r.status, r.stderr).toBe(0);
  expect(statSync(path.join(dir, 'model.safetensors')).size).toBeGreaterThan(490e6);
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  consoleWatch = watchConsole(page);
});

test.afterAll(async () => {
  await page?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test.afterEach(() => {
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});

test('the folder loads with LoRA preselected; the default batch is accepted and one step completes', async () => {
  test.setTimeout(STEP_MS + 240_000);
  await page.goto('/?backend=wasm');
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'wasm');
  await page.locator('input[type=radio][value=files]').check();
  await page
    .getByLabel('Model files')
    .setInputFiles([path.join(dir, 'config.json'), path.join(dir, 'model.safetensors')]);
  await button('Load model').click();
  await expect(page.getByTestId('model-summary')).toContainText('12 × 768', { timeout: 180_000 });
  await expect(page.getByTestId('lora-note')).toBeVisible();
  await expect(page.getByRole('textbox', { name: 'lora value' })).toHaveValue('8');
  // The defaults, untouched: batch 16, responseLength 24, the micro-batch chosen automatically.
  await expect(page.getByRole('textbox', { name: 'batchSize value', exact: true })).toHaveValue('16');
  await expect(page.getByRole('textbox', { name: 'responseLength value' })).toHaveValue('24');
  await expect(page.getByTestId('memory-estimate-line')).toHaveText(/^≈ \d\.\d GB: base 0\.50/);
  await expect(page.getByTestId('memory-estimate-problem')).toHaveCount(0);

  await button('Step').click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 1', { timeout: STEP_MS });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 60_000 });
  await expect(page.getByTestId('memory-line')).toHaveText(
    /^memory \d+ tensors · held \d+(\.\d)? MB · peak \d+(\.\d)? (MB|GB)$/,
  );
});

test('a micro-batch that would not fit is refused before Start, naming one that would', async () => {
  await button('Reset').click();
  // One minibatch of 32 samples as one micro-batch, without recompute: about 9 GB of update activations.
  // miniBatches, microBatchSize and recompute are under "Advanced" (closed while every advanced key is default).
  const closed = page.locator('details.advanced:not([open]) > summary');
  if ((await closed.count()) > 0) await closed.click();
  const set = async (name: string, value: string) => {
    const box = page.getByRole('textbox', { name: `${name} value`, exact: true });
    await box.fill(value);
    await box.press('Enter');
  };
  await set('batchSize', '32');
  await set('miniBatches', '1');
  await set('microBatchSize', '32');
  await page.getByRole('combobox', { name: 'recompute' }).selectOption('off');
  await expect(page.getByTestId('memory-estimate-problem')).toContainText(
    /Setting microBatchSize \d+( and recompute "blocks")? would fit it/,
  );
});
