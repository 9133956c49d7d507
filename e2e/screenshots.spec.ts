import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test, expect, type Browser, type Page } from '@playwright/test';
import { watchConsole } from './console';

/**
 * The docs' screenshots of the main views, at 1280×800 on WASM (the backend every browser has):
 *   docs/screenshot-idle.png      a fresh page, nothing run yet
 *   docs/screenshot.png           the training view after 16 steps of the default run, with 16-token answers
 *                                 (the README's picture)
 *   docs/screenshot-compare.png   that run and one at a 5× higher learning rate, side by side on the charts
 *   docs/screenshot-dpo.png       a DPO job on preference pairs
 *   docs/screenshot-124m.png      a GPT-2-124M-shaped model's second step in progress, with its time left
 *                                 (random weights in GPT-2's shapes, made here as e2e/gpt2-124m.spec.ts does)
 * Written only with PPO_UPDATE_SCREENSHOT=1 (`PPO_UPDATE_SCREENSHOT=1 npx playwright test e2e/screenshots.spec.ts`);
 * otherwise skipped, so `npm test` neither spends the minutes nor changes the tree.
 */
test.skip(process.env.PPO_UPDATE_SCREENSHOT !== '1', 'writes docs/*.png: run with PPO_UPDATE_SCREENSHOT=1');
test.describe.configure({ mode: 'serial', timeout: 900_000 });

/** The default settings but shorter responses: the tiny model's reward rises within a few steps. */
const RUN = 'responseLength=16';
const STEPS = 16;

let page!: Page;
let consoleWatch: { errors: string[] } = { errors: [] };

const button = (name: string) => page.getByRole('button', { name, exact: true });
const stepCounter = () => page.getByTestId('step-counter');
const phase = () => page.getByTestId('run-phase');

async function load(browser: Browser, hash: string): Promise<void> {
  if (page !== undefined) {
    expect(consoleWatch.errors, 'console errors').toEqual([]);
    await page.context().close();
  }
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  consoleWatch = watchConsole(page);
  await page.goto(`/?backend=wasm#${hash}`);
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny', { timeout: 120_000 });
  await expect(button('Start')).toBeEnabled({ timeout: 120_000 });
}

/** The view from the top (no control focused, every column scrolled up), after the charts have drawn. */
async function shot(file: string): Promise<void> {
  const toTop = () =>
    page.evaluate(() => {
      (document.activeElement as HTMLElement | null)?.blur();
      window.scrollTo(0, 0);
      for (const el of Array.from(document.querySelectorAll('.col'))) el.scrollTop = 0;
    });
  await toTop();
  await page.waitForTimeout(800); // charts scrolled into view draw (useInView)
  await toTop();
  await page.mouse.move(0, 0);
  await page.screenshot({ path: `docs/${file}` });
}

async function run(steps: number): Promise<void> {
  await button('Start').click();
  await expect(stepCounter()).toHaveText(`Step ${steps}`, { timeout: steps * 60_000 });
  await expect(phase()).toHaveText('paused', { timeout: 120_000 });
}

test.afterAll(async () => {
  expect(consoleWatch.errors, 'console errors').toEqual([]);
  await page?.context().close();
});

test('idle, training (README) and compare', async ({ browser }) => {
  await load(browser, `${RUN}&steps=${STEPS}`);
  await shot('screenshot-idle.png');
  await run(STEPS);
  await shot('screenshot.png');

  // A second run at a 5× higher learning rate, kept beside the first.
  const lr = page.getByRole('textbox', { name: 'learningRate value', exact: true });
  await lr.fill('0.0005');
  await lr.press('Enter');
  await button('Reset').click();
  await expect(stepCounter()).toHaveText('Step 0');
  await run(STEPS);
  const runs = page.getByRole('region', { name: 'Runs' });
  await runs
    .getByRole('row', { name: /^ppo lr 1e-4/ })
    .getByRole('checkbox', { name: 'Compare' })
    .check();
  const entries = page
    .getByRole('figure', { name: 'Reward', exact: true })
    .getByRole('list', { name: 'Runs in Reward' })
    .getByRole('listitem');
  await expect(entries).toHaveCount(2);
  // The picture is about the comparison: the faster run's health alert (approxKl above 0.1) is dismissed.
  for (const close of await page.getByRole('button', { name: /^Dismiss: / }).all()) await close.click();
  await shot('screenshot-compare.png');
});

test('DPO on preference pairs', async ({ browser }) => {
  await load(browser, '');
  const card = page.getByRole('region', { name: 'DPO and SFT' });
  await card.getByTestId('dpo-file').setInputFiles('tests/fixtures/dpo-sft/pairs.jsonl');
  await card.getByLabel('DPO steps', { exact: true }).fill('10');
  await card.getByLabel('pairs per step', { exact: true }).fill('2');
  await card.getByRole('button', { name: 'Train with DPO', exact: true }).click();
  await expect(card.getByTestId('supervised-status')).toContainText('DPO on pairs.jsonl', {
    timeout: 120_000,
  });
  await run(10);
  await shot('screenshot-dpo.png');
});

test('a GPT-2-124M-shaped step in progress', async ({ browser }) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ppo-shot-gpt2-'));
  try {
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'scripts/make-random-model.ts', dir, '12', '768', '12', '1024', '50257'],
      { encoding: 'utf8', timeout: 400_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    await load(browser, '');
    await page.locator('input[type=radio][value=files]').check();
    await page
      .getByLabel('Model files')
      .setInputFiles([path.join(dir, 'config.json'), path.join(dir, 'model.safetensors')]);
    await button('Load model').click();
    await expect(page.getByTestId('model-summary')).toContainText('12 × 768', { timeout: 300_000 });
    // A first step, so the second can say how long it has left.
    await button('Step').click();
    await expect(stepCounter()).toHaveText('Step 1', { timeout: 600_000 });
    await expect(phase()).toHaveText('paused', { timeout: 120_000 });
    await button('Step').click();
    await expect(phase()).toHaveText(/generating|scoring|updating/, { timeout: 120_000 });
    await page.waitForTimeout(10_000);
    // Autosave after step 1 fails on this model in Chromium (its ~500 MB are more than IndexedDB keeps in one
    // value) and says so in a notice: a known problem, not the subject of this picture.
    const notice = page.getByRole('button', { name: 'Dismiss notice', exact: true });
    if (await notice.isVisible()) await notice.click();
    await shot('screenshot-124m.png');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
