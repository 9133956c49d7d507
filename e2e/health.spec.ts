import { test, expect, type Browser, type Page } from '@playwright/test';
import { watchConsole } from './console';

/**
 * Issue #33, defect 8, as a person sees it in the app (WASM, the built-in tiny model): the health alerts stay
 * quiet on a healthy run and speak up on a broken one.
 * - The default run (the settings a fresh page starts with) trains with the reward rising and no alert.
 * - The same run at a learning rate 100× too high raises "the updates moved the policy far…" at its first step.
 * - A reward that gives every sample the same score raises, after 10 steps and not before, an alert that says so
 *   and what to change.
 */

/**
 * Steps of the default run: 30, not the 100 (the default `steps`). 100 steps took over 10 minutes in
 * Chromium on this shared 2-core machine (96 steps in 600 s at a load average near 10), too long for every CI run;
 * 30 keep the point. In Node (tests/default-run-health.slow.test.ts, the same config and seed) the mean reward of
 * the first 10 steps is 0.166, of steps 21–30 already 0.447 (of steps 91–100 0.705), and approxKl stays below
 * 0.033 over all 100. `PPO_E2E_DEFAULT_RUN_STEPS=100 npx playwright test e2e/health.spec.ts` runs the full 100.
 */
const DEFAULT_RUN_STEPS = Number(process.env.PPO_E2E_DEFAULT_RUN_STEPS ?? 30);
const STEP_MS = 120_000;

test.describe.configure({ mode: 'serial' });

let page!: Page;
let consoleWatch: { errors: string[] } = { errors: [] };

const button = (name: string) => page.getByRole('button', { name, exact: true });
const stepCounter = () => page.getByTestId('step-counter');
const phase = () => page.getByTestId('run-phase');
const alerts = () => page.getByRole('region', { name: 'Health alerts' });
const alert = (id: string) => page.locator(`.health-alert[data-alert-id="${id}"]`);

/**
 * A fresh page in a context of its own (a page.goto that changes only the hash keeps the run, and a context's
 * autosave would carry it over), on WASM with the settings of `hash`.
 */
async function load(browser: Browser, hash: string): Promise<void> {
  if (page !== undefined) {
    expect(consoleWatch.errors, 'console errors').toEqual([]);
    await page.context().close();
  }
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  consoleWatch = watchConsole(page);
  await page.goto(`/?backend=wasm#${hash}`);
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'wasm', {
    timeout: 90_000,
  });
  await expect(page.getByTestId('model-summary')).toContainText('built-in tiny', { timeout: 90_000 });
  await expect(button('Start')).toBeEnabled({ timeout: 90_000 });
}

/** One step with the Step button, waiting until it is done. */
async function oneStep(expected: number): Promise<void> {
  await button('Step').click();
  await expect(stepCounter()).toHaveText(`Step ${expected}`, { timeout: STEP_MS });
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });
}

test.afterAll(async () => {
  await page?.context().close();
});

test.afterEach(() => {
  expect(consoleWatch.errors, 'console errors').toEqual([]);
});

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

test(`the default run trains ${DEFAULT_RUN_STEPS} steps with the reward rising and no health alert`, async ({
  browser,
}) => {
  test.setTimeout(DEFAULT_RUN_STEPS * 15_000 + 120_000);
  // Only the steps differ from a fresh page's settings (none when DEFAULT_RUN_STEPS is the default 100).
  await load(browser, DEFAULT_RUN_STEPS === 100 ? '' : `steps=${DEFAULT_RUN_STEPS}`);
  await expect(page.getByRole('textbox', { name: 'learningRate value', exact: true })).toHaveValue('0.0001');
  // The reward of every step as the Reward chart's newest value shows it, with the step counter beside it.
  await page.evaluate(() => {
    const seen: { step: number; reward: number }[] = [];
    (window as unknown as { rewardsSeen: typeof seen }).rewardsSeen = seen;
    const latest = () =>
      document
        .querySelector('figure[data-metric="reward"] [data-testid="chart-latest"]')
        ?.getAttribute('data-value');
    const record = () => {
      const v = latest();
      const step = Number(
        /\d+/.exec(document.querySelector('[data-testid="step-counter"]')?.textContent ?? '')?.[0],
      );
      if (v && (seen.length === 0 || seen[seen.length - 1].reward !== Number(v)))
        seen.push({ step, reward: Number(v) });
    };
    new MutationObserver(record).observe(document.body, {
      subtree: true,
      attributes: true,
      attributeFilter: ['data-value'],
    });
  });
  const started = Date.now();
  await button('Start').click();
  await expect(stepCounter()).toHaveText(`Step ${DEFAULT_RUN_STEPS}`, {
    timeout: DEFAULT_RUN_STEPS * 15_000,
  });
  await expect(phase()).toHaveText('paused', { timeout: STEP_MS });
  const seconds = (Date.now() - started) / 1000;
  console.log(`default run: ${DEFAULT_RUN_STEPS} steps in ${seconds.toFixed(0)} s`);
  await expect(alerts()).toHaveCount(0);
  const seen = await page.evaluate(
    () => (window as unknown as { rewardsSeen: { step: number; reward: number }[] }).rewardsSeen,
  );
  const first = seen.filter((s) => s.step <= 10).map((s) => s.reward);
  const last = seen.filter((s) => s.step > DEFAULT_RUN_STEPS - 10).map((s) => s.reward);
  console.log(
    `default run: ${seen.length} rewards seen; mean of the first 10 steps ${mean(first).toFixed(3)}, ` +
      `of the last 10 ${mean(last).toFixed(3)}; ${JSON.stringify(seen.map((s) => [s.step, Number(s.reward.toFixed(3))]))}`,
  );
  expect(first.length, 'rewards seen in the first 10 steps').toBeGreaterThanOrEqual(3);
  expect(last.length, 'rewards seen in the last 10 steps').toBeGreaterThanOrEqual(3);
  expect(mean(last) - mean(first), 'reward rise').toBeGreaterThan(0.15);
});

test('the same run at a learning rate 100× too high raises the policy-shift alert at its first step', async ({
  browser,
}) => {
  test.setTimeout(3 * STEP_MS);
  await load(browser, 'learningRate=0.01');
  await oneStep(1);
  const shift = alert('policy-shift');
  await expect(shift).toHaveCount(1);
  await expect(shift).toContainText('The updates moved the policy far from the one that sampled: approxKl');
  await expect(shift.getByText(/^step \d+$/)).toHaveText('step 1');
  await expect(shift).toContainText('Lower the learning rate');
});

test('a reward that scores every sample the same raises, after 10 steps, an alert saying so and what to change', async ({
  browser,
}) => {
  test.setTimeout(12 * STEP_MS);
  // Tiny shapes: the alert is about the rewards, not the model.
  await load(browser, 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=1000');
  await page.getByRole('textbox', { name: 'Reward code' }).fill('return 0.5;');
  await button('Use this code').click();
  await expect(page.getByTestId('reward-source')).toContainText('your reward code');
  for (let step = 1; step < 10; step++) await oneStep(step);
  // Nine equal steps are not yet a streak.
  await expect(alert('rewards-equal')).toHaveCount(0);
  await oneStep(10);
  const equal = alert('rewards-equal');
  await expect(equal).toHaveCount(1);
  await expect(equal).toContainText(
    'Every sample has scored the same (0.5) for 10 steps in a row: there is no learning signal',
  );
  await expect(equal.getByText(/^step \d+$/)).toHaveText('step 10');
  await expect(equal).toContainText('Check that the reward gives different answers different scores');
  await expect(equal).toContainText('raise temperature (or groupSize)');
});
