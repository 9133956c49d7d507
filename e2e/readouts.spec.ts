import { test, expect, type Browser, type Page } from '@playwright/test';
import { formatTick } from '../src/ui/lib/format';
import { watchConsole } from './console';

/**
 * Issue #33, defect 10, as a person reads the charts and the evaluation table (WASM, the built-in tiny model):
 * - the Response length axis never repeats a tick label (its values sit within a token or two, so two-digit
 *   labels used to read "15 16 16 17");
 * - the KL coefficient chart steps where the setting changed instead of ramping to it;
 * - an empty answer in the held-out evaluation table reads "(empty)", not a blank cell;
 * - every chart reads out its step and values on hover (on the first test's run: a run of its own cost 32 s).
 */
const STEP_MS = 120_000;

test.describe.configure({ mode: 'serial' });

let page!: Page;
let consoleWatch: { errors: string[] } = { errors: [] };

const button = (name: string) => page.getByRole('button', { name, exact: true });
const chart = (title: string) => page.getByRole('figure', { name: title, exact: true });

/** A fresh page in a context of its own (a hash change alone keeps the run), on WASM with `hash`'s settings. */
async function load(browser: Browser, hash: string): Promise<void> {
  if (page !== undefined) {
    expect(consoleWatch.errors, 'console errors').toEqual([]);
    await page.context().close();
  }
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  consoleWatch = watchConsole(page);
  await page.goto(`/?backend=wasm#${hash}`);
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny', { timeout: 90_000 });
  await expect(button('Start')).toBeEnabled({ timeout: 90_000 });
}

async function oneStep(expected: number): Promise<void> {
  await button('Step').click();
  await expect(page.getByTestId('step-counter')).toHaveText(`Step ${expected}`, { timeout: STEP_MS });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: STEP_MS });
}

/** The y-axis tick labels of a chart, bottom to top. */
async function yTickLabels(title: string): Promise<string[]> {
  return chart(title)
    .locator('.recharts-yAxis-tick-labels .recharts-cartesian-axis-tick-value')
    .evaluateAll((els) => els.map((e) => e.textContent ?? ''));
}

/** The points of an SVG path of straight segments ("M x,y L x,y …"); a curve command fails the test. */
function pathPoints(d: string): [number, number][] {
  expect(d, 'a path of straight segments').toMatch(/^M[\d.,\s\-eLMVH]*$/);
  const points: [number, number][] = [];
  for (const [, cmd, args] of d.matchAll(/([MLHV])([^MLHV]*)/g)) {
    const n = args
      .trim()
      .split(/[\s,]+/)
      .filter((x) => x !== '')
      .map(Number);
    const last = points[points.length - 1];
    if (cmd === 'H') points.push([n[0], last[1]]);
    else if (cmd === 'V') points.push([last[0], n[0]]);
    else for (let i = 0; i + 1 < n.length; i += 2) points.push([n[i], n[i + 1]]);
  }
  return points;
}

test.afterAll(async () => {
  expect(consoleWatch.errors, 'console errors').toEqual([]);
  await page?.context().close();
});

test('every chart reads out its step on hover; response length ticks read apart; the KL coefficient steps at a change (3 default steps)', async ({
  browser,
}) => {
  test.setTimeout(4 * STEP_MS);
  await load(browser, 'steps=3');
  await oneStep(1);
  await oneStep(2);
  // Hover, after two steps (before step 3's change of klCoef puts its marker where the pointer goes).
  for (const title of ['Reward', 'KL', 'Clip fraction', 'Value loss', 'Entropy', 'Approx KL']) {
    const c = chart(title);
    await c.scrollIntoViewIfNeeded();
    const surface = c.locator('.recharts-surface').first();
    const box = (await surface.boundingBox())!;
    // The right end of the plot: the last step's point is the nearest.
    await surface.hover({ position: { x: box.width - 12, y: box.height / 2 } });
    const tip = c.locator('.chart-tooltip');
    await expect(tip, title).toBeVisible();
    await expect(tip, title).toContainText('step 2');
    await expect(tip, title).toContainText(/-?\d[\d.e+-]* smoothed/);
    await expect(tip, title).toContainText(/-?\d[\d.e+-]* raw/);
  }
  await page.mouse.move(0, 0);
  const kl = page.getByRole('textbox', { name: 'klCoef value', exact: true });
  await kl.fill('0.1');
  await kl.press('Enter');
  await oneStep(3);

  const lengths = chart('Response length');
  await lengths.scrollIntoViewIfNeeded();
  await expect(lengths.locator('path.recharts-line-curve').first()).toHaveAttribute('d', /L/);
  const labels = await yTickLabels('Response length');
  expect(labels.length, labels.join(' ')).toBeGreaterThanOrEqual(3);
  expect(new Set(labels).size, `labels ${labels.join(' ')}`).toBe(labels.length);
  // The case that needed the fix: these ticks at two significant digits (the old labels) read alike.
  const twoDigits = labels.map((l) => formatTick(Number(l), 2));
  expect(new Set(twoDigits).size, `two-digit labels ${twoDigits.join(' ')}`).toBeLessThan(labels.length);

  // KL coefficient: 0.05 for steps 1–2, 0.1 from step 3. One line of horizontal and vertical segments only,
  // with the rise straight up at step 3 (a ramp would be a slanted segment from step 2 to step 3).
  const klChart = chart('KL coefficient');
  await klChart.scrollIntoViewIfNeeded();
  await expect(klChart.getByTestId('chart-latest')).toHaveAttribute('data-value', '0.1');
  const curves = klChart.locator('path.recharts-line-curve');
  await expect(curves).toHaveCount(1);
  const points = pathPoints((await curves.getAttribute('d')) ?? '');
  const slanted = points
    .slice(1)
    .filter(([x, y], i) => Math.abs(x - points[i][0]) > 0.5 && Math.abs(y - points[i][1]) > 0.5);
  expect(slanted, `segments of ${JSON.stringify(points)}`).toEqual([]);
  const rises = points
    .slice(1)
    .filter(([x, y], i) => Math.abs(x - points[i][0]) <= 0.5 && y < points[i][1] - 5);
  expect(rises.length, `a vertical rise in ${JSON.stringify(points)}`).toBe(1);
});

test('an empty answer in the held-out evaluation table reads "(empty)"', async ({ browser }) => {
  test.setTimeout(3 * STEP_MS);
  // Sampled at evalTemperature 10 the first token is close to uniform over the tiny model's 258 byte tokens, and
  // with the space (byte 32) as the stop token a few answers are a lone space: nothing a person can see. (Greedy,
  // the model answers every held-out question with "The…".)
  await load(
    browser,
    'task=arithmetic-chat&evalEvery=1&evalPrompts=heldout&evalTemperature=10&stopToken=32&batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=1',
  );
  await oneStep(1);
  const panel = page.getByRole('region', { name: 'Held-out evaluation' });
  await panel.scrollIntoViewIfNeeded();
  const table = panel.getByTestId('eval-table');
  await expect(table.locator('tbody tr')).toHaveCount(8);
  await button('Show all 50').click();
  await expect(table.locator('tbody tr')).toHaveCount(50);
  const answers = table.locator('tbody td.answer');
  const texts = await answers.allInnerTexts();
  // No blank answer cell; the empty ones say so.
  expect(texts.filter((t) => t.trim() === '')).toEqual([]);
  await expect(answers.filter({ hasText: /^\(empty\)$/ }).first()).toBeVisible();
  expect(texts.filter((t) => t === '(empty)').length, texts.join(' | ')).toBeGreaterThan(0);
});

test('the task picker says each task’s reward range and what a good run reaches', async () => {
  // The page of the test above (task arithmetic-chat); choosing another task changes the words at once.
  const data = page.getByRole('region', { name: 'Data' });
  const task = data.getByRole('combobox', { name: 'Task', exact: true });
  const success = data.getByTestId('task-success');
  await expect(task).toHaveValue('arithmetic-chat');
  await expect(success).toContainText('Reward0 or 1 per answer');
  await expect(success).toContainText('rises from 0.25 to 0.70 in 80 GRPO steps');
  await task.selectOption('keywords');
  await expect(success).toContainText(
    'Reward−2 to 2 (+1 each for "happy" and "love", −1 each for "sad" and "hate")',
  );
  await expect(success).toContainText(
    'A good runthe default run (built-in tiny model, 100 steps) rises from 0.04 to 0.91',
  );
  await task.selectOption('sentiment');
  await expect(success).toContainText('Reward−1 to 1');
  await expect(success).toContainText('rises from 0.17 (first 10 steps) to 0.71 (last 10)');
  await expect(success).toBeVisible();
  // Your own prompts: no task, nothing to promise.
  await task.selectOption('');
  await expect(success).toHaveCount(0);
});

test('a step in parts shows its progress: samples generated and scored, then minibatch updates', async ({
  browser,
}) => {
  test.setTimeout(3 * STEP_MS);
  // Batch 8 in micro-batches of 2, two minibatches: generation and scoring in 4 parts, then 2 updates.
  await load(browser, 'steps=2&batchSize=8&microBatchSize=2&miniBatches=2&ppoEpochs=1&responseLength=8');
  // What the top bar showed at any moment of the step (the step is fast here: record every change).
  await page.evaluate(() => {
    const seen: string[] = [];
    (window as unknown as { phaseProgressSeen: string[] }).phaseProgressSeen = seen;
    const note = () => {
      const el = document.querySelector('[data-testid="phase-progress"]');
      const phase = document.querySelector('[data-testid="run-phase"]')?.textContent ?? '';
      const text = el ? `${phase} ${el.textContent}` : null;
      if (text && seen[seen.length - 1] !== text) seen.push(text);
    };
    new MutationObserver(note).observe(document.body, {
      subtree: true,
      childList: true,
      characterData: true,
    });
  });
  await oneStep(1);
  const seen = await page.evaluate(
    () => (window as unknown as { phaseProgressSeen: string[] }).phaseProgressSeen,
  );
  console.log(`the top bar's progress during step 1: ${seen.join(' | ')}`);
  // Renders are coalesced (at most one per 50 ms), so a part may be skipped, but what shows is in order and true.
  expect(seen.length).toBeGreaterThan(0);
  for (const s of seen)
    expect(s).toMatch(/^(generating|scoring) [2468] \/ 8 samples$|^updating [12] \/ 2 updates$/);
  const order = seen.map((s) => ['generating', 'scoring', 'updating'].indexOf(s.split(' ')[0]));
  expect([...order].sort((a, b) => a - b)).toEqual(order);
  // Each phase's parts take longer than a render's 50 ms here (all 10 showed in a run alone), so each phase shows.
  expect([...new Set(order)]).toEqual([0, 1, 2]);
  // Between steps it is gone.
  await expect(page.getByTestId('phase-progress')).toHaveCount(0);
});
