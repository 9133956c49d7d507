import { readFileSync } from 'node:fs';
import { test, expect, type Page, type TestInfo } from '@playwright/test';
import { unzipSync, strFromU8 } from 'fflate';
import { CONFIG_FIELDS } from '../src/common/config';
import { sliderScale } from '../src/ui/lib/slider-scale';
import { watchConsole } from './console';

/**
 * The playground end to end on WebGPU (SwiftShader: correct but slow, so the shapes are tiny and the steps few:
 * the first step compiles the shaders, about a minute; later ones take tens of seconds). One page goes through
 * a whole session in order: train, steer, pause, step, export, reset, import, reward code.
 */
const TINY = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=1000';
const STEP_MS = 240_000;

test.describe.configure({ mode: 'serial' });

let page: Page;
let consoleWatch: { errors: string[] };

const stepCounter = () => page.getByTestId('step-counter');
const phase = () => page.getByTestId('run-phase');
const chart = (title: string) => page.getByRole('figure', { name: title, exact: true });
const latest = (title: string) => chart(title).getByTestId('chart-latest');
const button = (name: string) => page.getByRole('button', { name, exact: true });

async function currentStep(): Promise<number> {
  const text = (await stepCounter().textContent()) ?? '';
  const m = /^Step (\d+)$/.exec(text.trim());
  expect(m, `step counter reads "${text}"`).not.toBeNull();
  return Number(m![1]);
}

/** Wait for the run to be paused with no step in flight. */
async function settled(): Promise<number> {
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });
  return currentStep();
}

async function saveScreenshot(testInfo: TestInfo, name: string): Promise<void> {
  const shot = testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path: shot });
  await testInfo.attach(name, { path: shot, contentType: 'image/png' });
}

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

test('loads on WebGPU with the settings of the link', async () => {
  await page.goto(`/?backend=webgpu#${TINY}`);
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'webgpu');
  await expect(page.getByTestId('backend-name')).toHaveText('WebGPU');
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny');
  await expect(stepCounter()).toHaveText('Step 0');
  await expect(page.getByRole('textbox', { name: 'batchSize value', exact: true })).toHaveValue('2');
  await expect(page.getByRole('textbox', { name: 'responseLength value' })).toHaveValue('4');
  for (const name of ['Start', 'Pause', 'Step', 'Reset']) await expect(button(name)).toBeVisible();
  for (const title of ['Reward', 'KL', 'Clip fraction', 'Value loss'])
    await expect(chart(title)).toBeVisible();
  await expect(button('Start')).toBeEnabled();
});

test('Start trains and the charts gain points', async () => {
  test.setTimeout(2 * STEP_MS + 60_000);
  await button('Start').click();
  await expect(phase()).toHaveText(/generating|scoring|updating/);
  await expect(stepCounter()).toHaveText(/^Step [1-9]\d*$/, { timeout: STEP_MS });
  await expect(stepCounter()).toHaveText(/^Step ([2-9]|\d{2,})$/, { timeout: STEP_MS });
  // A drawn line with at least two points, and the newest values beside the titles.
  await expect(chart('Reward').locator('.recharts-line path').first()).toHaveAttribute('d', /L/);
  await expect(latest('KL coefficient')).toHaveAttribute('data-value', '0.05');
  await expect(latest('Entropy')).not.toHaveText('–');
});

test('moving the KL slider changes klCoef from the following steps', async () => {
  test.setTimeout(3 * STEP_MS);
  const scale = sliderScale(CONFIG_FIELDS.klCoef);
  const position = scale.toPosition(0.5);
  const wanted = scale.fromPosition(position);
  expect(wanted).toBeGreaterThan(0.3);
  await page.getByRole('slider', { name: 'klCoef', exact: true }).fill(String(position));
  await expect(page.getByRole('textbox', { name: 'klCoef value' })).toHaveValue(String(wanted));
  const movedAt = await currentStep();
  // The step in flight keeps the old β; a following step shows the new one in its metrics.
  await expect(latest('KL coefficient')).toHaveAttribute('data-value', String(wanted), {
    timeout: 2 * STEP_MS,
  });
  expect(await currentStep()).toBeGreaterThan(movedAt);
  expect(page.url()).toContain(`klCoef=${wanted}`);
});

test('Pause stops the step counter; Step advances exactly one', async () => {
  test.setTimeout(3 * STEP_MS);
  await button('Pause').click();
  const paused = await settled();
  await page.waitForTimeout(5_000);
  expect(await currentStep()).toBe(paused);
  await expect(button('Start')).toBeEnabled();

  await button('Step').click();
  await expect(stepCounter()).toHaveText(`Step ${paused + 1}`, { timeout: STEP_MS });
  expect(await settled()).toBe(paused + 1);
  await page.waitForTimeout(3_000);
  expect(await currentStep()).toBe(paused + 1);
});

let exported: { path: string; step: number };

test('Export checkpoint downloads a zip in the layout of docs/formats.md §2', async () => {
  test.setTimeout(STEP_MS);
  const step = await currentStep();
  const download = page.waitForEvent('download');
  await button('Export checkpoint').click();
  const file = await download;
  expect(file.suggestedFilename()).toMatch(/\.zip$/);
  const path = await file.path();
  const entries = unzipSync(new Uint8Array(readFileSync(path)));
  const names = Object.keys(entries).filter((n) => !n.endsWith('/'));
  // One top folder holding a Hugging Face model folder plus the training state.
  const folders = new Set(names.map((n) => n.split('/')[0]));
  expect(folders.size).toBe(1);
  const inFolder = names.map((n) => n.split('/').slice(1).join('/'));
  for (const need of [
    'config.json',
    'model.safetensors',
    'value_model.safetensors',
    'optimizer.safetensors',
    'trainer_state.json',
  ]) {
    expect(inFolder).toContain(need);
  }
  const top = [...folders][0];
  const config = JSON.parse(strFromU8(entries[`${top}/config.json`])) as Record<string, unknown>;
  expect(config).toMatchObject({ model_type: 'gpt2', activation_function: 'gelu_new' });
  for (const k of ['vocab_size', 'n_positions', 'n_embd', 'n_layer', 'n_head', 'layer_norm_epsilon']) {
    expect(typeof config[k]).toBe('number');
  }
  const state = JSON.parse(strFromU8(entries[`${top}/trainer_state.json`])) as {
    step: number;
    config: Record<string, unknown>;
    history: unknown[];
  };
  expect(state.step).toBe(step);
  expect(state.history).toHaveLength(step);
  expect(state.config).toMatchObject({ batchSize: 2, responseLength: 4 });
  // safetensors: an 8-byte little-endian header length, then a JSON header.
  const model = entries[`${top}/model.safetensors`];
  const headerLength = Number(new DataView(model.buffer, model.byteOffset, 8).getBigUint64(0, true));
  const header = JSON.parse(strFromU8(model.subarray(8, 8 + headerLength))) as Record<string, unknown>;
  expect(Object.keys(header).some((k) => k.startsWith('transformer.'))).toBe(true);
  exported = { path, step };
});

test('importing the checkpoint resumes at the right step', async () => {
  test.setTimeout(2 * STEP_MS);
  await page.getByRole('slider', { name: 'klCoef', exact: true }).fill('0');
  await button('Reset').click();
  await expect(stepCounter()).toHaveText('Step 0');
  await expect(chart('Reward')).toContainText('No steps yet');

  await page.getByLabel('Import checkpoint').setInputFiles(exported.path);
  await expect(stepCounter()).toHaveText(`Step ${exported.step}`);
  await expect(page.getByRole('alert')).toHaveCount(0);
  // History and settings come back with it.
  await expect(latest('KL coefficient')).not.toHaveText('–');
  await expect(page.getByRole('textbox', { name: 'klCoef value' })).not.toHaveValue('0');
  // Charts off screen skip drawing (the file input scrolled the page): bring the reward chart back.
  await chart('Reward').scrollIntoViewIfNeeded();
  await expect(chart('Reward').locator('.recharts-line path').first()).toHaveAttribute('d', /L/);

  await button('Step').click();
  await expect(stepCounter()).toHaveText(`Step ${exported.step + 1}`, { timeout: STEP_MS });
  await settled();
});

test('reward code scores the samples; an infinite loop is stopped with a clear message', async () => {
  test.setTimeout(3 * STEP_MS);
  const editor = page.getByRole('textbox', { name: 'Reward code' });
  await expect(editor).toHaveValue("return sample.response.includes('good') ? 1 : 0;");
  await editor.fill('return 0.75;');
  await button('Use this code').click();
  await expect(page.getByTestId('reward-source')).toContainText('your reward code');
  const before = await currentStep();
  await button('Step').click();
  await expect(stepCounter()).toHaveText(`Step ${before + 1}`, { timeout: STEP_MS });
  await expect(latest('Reward')).toHaveAttribute('data-value', '0.75');
  await expect(page.getByTestId('samples-table')).toContainText('0.75');
  await settled();
  await saveScreenshot(test.info(), 'playground-webgpu');

  await editor.fill('while (true) {}');
  await button('Use this code').click();
  await button('Step').click();
  const alert = page.getByRole('alert');
  await expect(alert).toContainText('did not return within', { timeout: STEP_MS });
  await expect(alert).toContainText('infinite loop');
  await expect(alert).not.toContainText('Something went wrong');
  await expect(phase()).toHaveText(/paused|idle/, { timeout: STEP_MS });
  expect(await currentStep()).toBe(before + 1);
  await alert.getByRole('button', { name: 'Dismiss error' }).click();

  await button('Stop using code').click();
  await expect(page.getByTestId('reward-source')).not.toContainText('your reward code');
});

test('a tampered link shows a clear error and falls back to the defaults', async () => {
  await page.goto('/?backend=wasm#klCoef=banana&batchSize=2');
  const alert = page.getByRole('alert');
  await expect(alert).toContainText('could not be used, so the defaults are loaded instead');
  await expect(alert).toContainText('"klCoef" must be a number from 0 to 10');
  await expect(page.getByRole('textbox', { name: 'klCoef value' })).toHaveValue('0.05');
  await expect(page.getByRole('textbox', { name: 'batchSize value', exact: true })).toHaveValue('16');
});

test('a short sentiment run on the default backend (1280×800)', async () => {
  test.setTimeout(600_000);
  await page.goto('/#steps=14&batchSize=16&ppoEpochs=2&learningRate=0.0005&klCoef=0.02&responseLength=16');
  await expect(page.getByTestId('model-summary')).toBeVisible({ timeout: 120_000 });
  await button('Start').click();
  await expect(stepCounter()).toHaveText('Step 14', { timeout: 540_000 });
  await expect(phase()).toHaveText('paused', { timeout: 60_000 });
  // The docs' pictures (the README's included) are e2e/screenshots.spec.ts's, on WASM.
  await saveScreenshot(test.info(), 'playground');
});
