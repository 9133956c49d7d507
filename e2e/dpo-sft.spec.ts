import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';

/**
 * DPO and SFT in the playground (issue #23, docs/dpo.md "In the app", docs/sft.md), on the built-in tiny model
 * (WebGPU through SwiftShader, tiny shapes): a preference file picked in the DPO and SFT card trains 2 DPO steps
 * with Start, and the charts are DPO's (TRL's names) — a bad file first, whose line the banner names; an SFT
 * file trains 2 SFT steps (its loss falls), and "Continue with PPO" starts a PPO run from the SFT'd weights that
 * takes its step, the RL charts back: its step-1 KL is exactly 0, so the policy it samples from is the reference,
 * the SFT'd model (tests/worker-dpo-sft.test.ts reads the weights back).
 */
const RUN = 'task=sentiment&batchSize=4&miniBatches=1&ppoEpochs=1&responseLength=4&steps=1';
const RUN_MS = 240_000;

let page: Page;
let consoleWatch: { errors: string[] };

const button = (name: string) => page.getByRole('button', { name, exact: true });
const card = () => page.getByRole('region', { name: 'DPO and SFT' });
const chart = (title: string) => page.getByRole('figure', { name: title, exact: true });
const field = (label: string) => card().getByLabel(label, { exact: true });

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  consoleWatch = watchConsole(page);
});

test.afterAll(async () => {
  await page.close();
});

test('DPO from a preference file, then SFT and continue with PPO', async () => {
  test.setTimeout(4 * RUN_MS);
  await page.goto(`/?backend=webgpu#${RUN}`);
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny', { timeout: 120_000 });

  // A bad preference file: the banner names its line.
  await card().scrollIntoViewIfNeeded();
  await card().getByTestId('dpo-file').setInputFiles('tests/fixtures/dpo-sft/pairs-bad.jsonl');
  await expect(card()).toContainText('Preference pairs (JSONL): pairs-bad.jsonl');
  await button('Train with DPO').click();
  await expect(page.getByRole('alert')).toContainText('pairs-bad.jsonl: 1 bad line: line 2', {
    timeout: RUN_MS,
  });
  await expect(card().getByTestId('supervised-status')).toContainText('RL algorithm');
  await page.getByRole('button', { name: 'Dismiss error' }).click();

  // DPO: 2 steps of 2 pairs, evaluated at every step.
  await card().getByTestId('dpo-file').setInputFiles('tests/fixtures/dpo-sft/pairs.jsonl');
  await expect(card()).toContainText('Preference pairs (JSONL): pairs.jsonl');
  await field('DPO steps').fill('2');
  await field('pairs per step').fill('2');
  await field('eval every').fill('1');
  await button('Train with DPO').click();
  await expect(card().getByTestId('supervised-status')).toContainText('DPO on pairs.jsonl (6 pairs)', {
    timeout: RUN_MS,
  });
  await button('Start').click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 2', { timeout: RUN_MS });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: RUN_MS });
  await expect(page.getByRole('heading', { name: 'Training (DPO)' })).toBeVisible();
  for (const title of ['DPO loss', 'Reward accuracy', 'Reward margin', 'Held-out accuracy']) {
    await expect(chart(title).getByTestId('chart-latest')).toHaveAttribute('data-value', /^-?\d/);
  }
  await expect(chart('Reward')).toHaveCount(0);

  // SFT: 2 steps of 2 examples, then Continue with PPO.
  await card().getByTestId('sft-file').setInputFiles('tests/fixtures/dpo-sft/sft.jsonl');
  await expect(card()).toContainText('SFT examples (JSONL): sft.jsonl');
  // Every example in each step (4 of 4), so that the loss of step 2, after one update, is below step 1's.
  await field('SFT steps').fill('2');
  await field('examples per step').fill('4');
  await field('SFT learning rate').fill('0.001');
  await button('Train with SFT').click();
  await expect(card().getByTestId('supervised-status')).toContainText('SFT on sft.jsonl (4 examples)', {
    timeout: RUN_MS,
  });
  await expect(page.getByTestId('step-counter')).toHaveText('Step 0');
  const sftLoss = chart('SFT loss').getByTestId('chart-latest');
  await button('Step').click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 1', { timeout: RUN_MS });
  await expect(sftLoss).toHaveAttribute('data-value', /^\d/);
  const first = Number(await sftLoss.getAttribute('data-value'));
  await button('Step').click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 2', { timeout: RUN_MS });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: RUN_MS });
  await expect(sftLoss).not.toHaveAttribute('data-value', String(first));
  expect(Number(await sftLoss.getAttribute('data-value'))).toBeLessThan(first);

  await button('Continue with PPO').click();
  await expect(card().getByTestId('supervised-status')).toContainText('RL algorithm', { timeout: RUN_MS });
  await expect(page.getByTestId('step-counter')).toHaveText('Step 1', { timeout: RUN_MS });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: RUN_MS });
  await expect(chart('Reward').getByTestId('chart-latest')).toHaveAttribute('data-value', /^-?\d/);
  await expect(chart('KL').getByTestId('chart-latest')).toHaveAttribute('data-value', '0');
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});
