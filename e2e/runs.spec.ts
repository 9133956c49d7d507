import { readFileSync } from 'node:fs';
import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';
import { readComparisonHash } from '../src/ui/lib/url-config';

/**
 * Runs compared in the playground (issue #12): two short runs (ppo, then grpo) are kept and listed, both lines
 * and legend entries show in the reward chart, "Run again with…" starts a third run that joins the comparison,
 * the link holds the compared configs, and the comparison CSV has every run. Tiny shapes, 2 steps a run, WASM
 * (the tiny model's steps take seconds there; the WebGPU path is e2e/playground.spec.ts's).
 */
const TINY = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=2';
const RUN_MS = 240_000;

test.describe.configure({ mode: 'serial' });

let page: Page;
let consoleWatch: { errors: string[] };

const stepCounter = () => page.getByTestId('step-counter');
const phase = () => page.getByTestId('run-phase');
const button = (name: string) => page.getByRole('button', { name, exact: true });
const chart = (title: string) => page.getByRole('figure', { name: title, exact: true });
const legend = (title: string) => chart(title).getByRole('list', { name: `Runs in ${title}` });
const runRow = (name: string) =>
  page.getByRole('region', { name: 'Runs' }).getByRole('row', { name, exact: true });

/** Wait for the run to finish its 2 steps. */
async function finished(): Promise<void> {
  await expect(stepCounter()).toHaveText('Step 2', { timeout: RUN_MS });
  await expect(phase()).toHaveText('paused', { timeout: RUN_MS });
}

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  consoleWatch = watchConsole(page);
});

test.afterAll(async () => {
  await page.close();
});

test.afterEach(() => {
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});

test('a ppo run and a grpo run are kept and overlaid in the reward chart', async () => {
  test.setTimeout(3 * RUN_MS);
  await page.goto(`/?backend=wasm#${TINY}`);
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny', { timeout: 120_000 });
  await expect(page.getByRole('combobox', { name: 'algorithm', exact: true })).toHaveValue('ppo');

  await button('Start').click();
  await finished();
  await expect(runRow('ppo lr 1e-4 · tiny · sentiment')).toBeVisible();
  await expect(runRow('ppo lr 1e-4 · tiny · sentiment').getByTestId('run-steps')).toHaveText('2');

  // The second run: grpo with G = 2 (its default 4 does not divide batchSize 2); both apply on Reset.
  await page.getByRole('combobox', { name: 'algorithm', exact: true }).selectOption('grpo');
  const groupSize = page.getByRole('textbox', { name: 'groupSize value' });
  await groupSize.fill('2');
  await groupSize.press('Enter');
  await expect(page.getByTestId('config-problem')).toHaveCount(0);
  await button('Reset').click();
  await expect(stepCounter()).toHaveText('Step 0');
  await button('Start').click();
  await finished();
  await expect(runRow('grpo G=2 lr 1e-4 · tiny · sentiment')).toBeVisible();

  // Compare the ppo run with the current (grpo) one: two lines and two legend entries in the reward chart.
  await runRow('ppo lr 1e-4 · tiny · sentiment').getByRole('checkbox', { name: 'Compare' }).check();
  await chart('Reward').scrollIntoViewIfNeeded();
  const entries = legend('Reward').getByRole('listitem');
  await expect(entries).toHaveCount(2);
  await expect(entries.nth(0)).toHaveText('ppo lr 1e-4 · tiny · sentiment');
  await expect(entries.nth(1)).toHaveText('grpo G=2 lr 1e-4 · tiny · sentiment (current)');
  const lines = chart('Reward').locator('.recharts-line-curve');
  await expect(lines).toHaveCount(2);
  for (let i = 0; i < 2; i++) await expect(lines.nth(i)).toHaveAttribute('d', /L/);
  // The current run has no value model; the ppo run's value loss is still drawn.
  await expect(chart('Value loss')).toContainText('current run: no value model (GRPO)');
  await expect(legend('Value loss').getByRole('listitem')).toHaveCount(2);
  // The link holds both configs (read back as the app reads a shared link).
  const compared = readComparisonHash(new URL(page.url()).hash);
  expect(compared.error).toBeNull();
  expect(compared.configs.map((c) => c.algorithm)).toEqual(['ppo', 'grpo']);
  // Their settings side by side, the differing ones marked (issue #33).
  const side = page.getByTestId('settings-side-by-side');
  await side.locator('summary').click();
  const algorithm = side.getByRole('row', { name: /^algorithm/ });
  await expect(algorithm).toHaveAttribute('data-differs', 'true');
  await expect(algorithm.getByRole('cell')).toHaveText(['ppo', 'grpo']);
  await expect(side.getByRole('row', { name: /^learningRate/ })).not.toHaveAttribute('data-differs', 'true');
});

test('"Run again with…" starts a run from a kept config with one setting changed, in the comparison', async () => {
  test.setTimeout(2 * RUN_MS);
  await runRow('grpo G=2 lr 1e-4 · tiny · sentiment').getByRole('checkbox', { name: 'Compare' }).check();
  await runRow('ppo lr 1e-4 · tiny · sentiment').getByRole('button', { name: 'Run again with…' }).click();
  const form = page.getByRole('form', { name: 'Run again with…' });
  await form.getByLabel('Setting', { exact: true }).selectOption('learningRate');
  await form.getByLabel('Value', { exact: true }).fill('3e-4');
  await form.getByRole('button', { name: 'Start run' }).click();
  await expect(form).toHaveCount(0);
  await finished();
  await expect(runRow('ppo lr 3e-4 · tiny · sentiment')).toBeVisible();
  await expect(page.getByRole('textbox', { name: 'learningRate value', exact: true })).toHaveValue('0.0003');

  await chart('Reward').scrollIntoViewIfNeeded();
  const entries = legend('Reward').getByRole('listitem');
  await expect(entries).toHaveText([
    'ppo lr 1e-4 · tiny · sentiment',
    'grpo G=2 lr 1e-4 · tiny · sentiment',
    'ppo lr 3e-4 · tiny · sentiment (current)',
  ]);
  await expect(chart('Reward').locator('.recharts-line-curve')).toHaveCount(3);
  await expect(chart('Reward').locator('.run-line-current .recharts-line-curve')).toHaveAttribute(
    'stroke-width',
    '2.75',
  );
});

test('the comparison CSV has a run column with every compared run', async () => {
  const download = page.waitForEvent('download');
  await button('Comparison CSV').click();
  const file = await download;
  expect(file.suggestedFilename()).toBe('ppo-comparison.csv');
  const lines = readFileSync(await file.path(), 'utf8')
    .trimEnd()
    .split('\n');
  const header = lines[0].split(',');
  expect(header.slice(0, 3)).toEqual(['run', 'step', 'reward']);
  const runs = lines.slice(1).map((l) => l.split(',').slice(0, 2).join(' @ '));
  expect(runs).toEqual([
    'ppo lr 1e-4 · tiny · sentiment @ 1',
    'ppo lr 1e-4 · tiny · sentiment @ 2',
    'grpo G=2 lr 1e-4 · tiny · sentiment @ 1',
    'grpo G=2 lr 1e-4 · tiny · sentiment @ 2',
    'ppo lr 3e-4 · tiny · sentiment @ 1',
    'ppo lr 3e-4 · tiny · sentiment @ 2',
  ]);
  // The grpo rows have no value loss; the ppo rows do.
  const valueLoss = header.indexOf('valueLoss');
  expect(lines[3].split(',')[valueLoss]).toBe('');
  expect(lines[1].split(',')[valueLoss]).not.toBe('');
});
