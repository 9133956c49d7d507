import { readFileSync } from 'node:fs';
import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';

/**
 * Held-out evaluation in the playground (issue #23, docs/eval.md): with the arithmetic-chat task (it has a
 * held-out split), evalEvery set to 1 and evalPrompts chosen as "heldout" in their controls, a 2-step run on the built-in
 * tiny model (WASM, tiny shapes) shows the evaluation panel: eval/reward, eval/kl and eval/winRate drawn as curves
 * over the two evaluated steps, and the newest evaluation's reference and policy answers side by side.
 */
const RUN = 'task=arithmetic-chat&batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=2';
const RUN_MS = 240_000;

let page: Page;
let consoleWatch: { errors: string[] };

const button = (name: string) => page.getByRole('button', { name, exact: true });
const panel = () => page.getByRole('region', { name: 'Held-out evaluation' });
const chart = (title: string) => panel().getByRole('figure', { name: title, exact: true });

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  consoleWatch = watchConsole(page);
});

test.afterAll(async () => {
  await page.close();
});

test('a run with evalEvery shows the eval curves and the reference vs policy table', async () => {
  test.setTimeout(3 * RUN_MS);
  await page.goto(`/?backend=wasm#${RUN}`);
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny', { timeout: 120_000 });
  // evalEvery without evalPrompts is a config problem until "heldout" is chosen.
  const every = page.getByRole('textbox', { name: 'evalEvery value', exact: true });
  await every.fill('1');
  await every.press('Enter');
  await expect(page.getByTestId('config-problem')).toContainText('"evalEvery" (1) needs "evalPrompts"');
  const prompts = page.getByRole('combobox', { name: 'evalPrompts', exact: true });
  await expect(prompts.locator('option[value="heldout"]')).toHaveText('heldout (the task’s held-out split)');
  await prompts.selectOption('heldout');
  await expect(page.getByTestId('config-problem')).toHaveCount(0);
  await expect(panel()).toBeVisible();

  await button('Start').click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 2', { timeout: RUN_MS });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: RUN_MS });

  await panel().scrollIntoViewIfNeeded();
  for (const title of ['Eval reward', 'Eval KL', 'Eval win rate']) {
    // Two evaluated steps: a line through two points.
    await expect(chart(title).locator('.recharts-line-curve').last()).toHaveAttribute('d', /L/);
    await expect(chart(title).getByTestId('chart-latest')).toHaveAttribute('data-value', /^-?\d/);
  }
  const table = panel().getByTestId('eval-table');
  await expect(table.getByRole('columnheader')).toHaveText([
    'Prompt',
    'Reference',
    'Score',
    'Policy',
    'Score',
  ]);
  // arithmetic-chat holds out 50 prompts; the first 8 are shown, the rest behind "Show all 50".
  await expect(table.locator('tbody tr')).toHaveCount(8);
  // The task file's held-out prompts, in order.
  const task = JSON.parse(readFileSync('public/tasks/arithmetic-chat.json', 'utf8')) as {
    evalPrompts: string[];
  };
  await expect(table.locator('tbody tr').first().locator('td').first()).toHaveText(task.evalPrompts[0]);
  await expect(panel()).toContainText('Step 2: 50 prompts');
  await button('Show all 50').click();
  await expect(table.locator('tbody tr')).toHaveCount(50);
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});
