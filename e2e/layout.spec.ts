import AxeBuilder from '@axe-core/playwright';
import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';

/**
 * Issue #33: the playground a newcomer understands at a glance. One page (WASM, tiny shapes) goes through the
 * layout checks in order: nothing overflows sideways, every slider answers the arrow keys, the top bar's memory
 * readout stays visible during a run.
 */
const TINY = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=1000';

// Steps on WASM take seconds, but CI machines are shared: room for a slow one.
test.describe.configure({ mode: 'serial', timeout: 300_000 });

let page: Page;
let consoleWatch: { errors: string[] };

test.beforeAll(async ({ browser }) => {
  // A page of its own context: @axe-core/playwright needs one (browser.newPage's is implicit).
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  consoleWatch = watchConsole(page);
  await page.goto(`/?backend=wasm#${TINY}`);
  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'wasm', {
    timeout: 90_000,
  });
  await expect(page.getByRole('button', { name: 'Start', exact: true })).toBeEnabled({ timeout: 90_000 });
});

test.afterAll(async () => {
  expect(consoleWatch.errors).toEqual([]);
  await page.context().close();
});

/**
 * In the page: panels whose content is wider than their box (scrollWidth > clientWidth), with the numbers. With
 * `focusEach`, then each visible, enabled control in turn is focused and, a macrotask later (React has rendered what
 * the focus changed), the panels are checked again, and so is the control's label (cut at its start: its left edge
 * outside its column's box). One evaluation for the whole walk: a round trip per check made the two walks take
 * 77 s of the tier, the same checks in one evaluation seconds.
 */
async function layoutProblems(
  focusEach: boolean,
): Promise<{ problems: string[]; controls: number; focused: number }> {
  const overflows = (): string[] => {
    const out: string[] = [];
    const panels = document.querySelectorAll<HTMLElement>(
      '.topbar, .run-readout, .col, .card, .charts, .columns, .app',
    );
    for (const el of Array.from(panels)) {
      if (el.scrollWidth > el.clientWidth || el.scrollLeft > 0) {
        const name =
          el.getAttribute('aria-label') ??
          el.querySelector('h2')?.textContent ??
          `${el.tagName.toLowerCase()}.${el.className.split(' ').join('.')}`;
        out.push(
          `${name}: scrollWidth ${el.scrollWidth} > clientWidth ${el.clientWidth} (scrollLeft ${el.scrollLeft})`,
        );
      }
    }
    return out;
  };
  const problems = new Set<string>(overflows());
  const query = 'main input:not([type=file]), main select, main button, main textarea';
  const n = document.querySelectorAll(query).length;
  let focused = 0;
  if (!focusEach) return { problems: [...problems], controls: n, focused };
  for (let i = 0; i < n; i++) {
    // Found again each time, as a locator's nth(i) is: a focus may change what is on the page.
    const el = document.querySelectorAll<HTMLElement>(query)[i];
    if (!el) break;
    // Playwright's isVisible (a box, not visibility: hidden) and isEnabled (not :disabled, fieldsets included).
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0 || !el.checkVisibility({ visibilityProperty: true })) continue;
    if (el.matches(':disabled')) continue;
    el.focus();
    focused++;
    await new Promise((r) => setTimeout(r, 0));
    for (const p of overflows()) problems.add(`after focusing control ${i}: ${p}`);
    const col = el.closest('.col');
    const name = el.closest('.control')?.querySelector('.control-name');
    if (col && name) {
      const a = name.getBoundingClientRect();
      const b = col.getBoundingClientRect();
      if (a.left < b.left - 0.5)
        problems.add(`${name.textContent} starts ${b.left - a.left}px left of its column`);
    }
  }
  return { problems: [...problems], controls: n, focused };
}

/** Panels whose content is wider than their box, with the numbers. */
async function overflowing(): Promise<string[]> {
  return (await page.evaluate(layoutProblems, false)).problems;
}

for (const [width, height] of [
  [1280, 800],
  [1440, 1000],
] as const) {
  test(`${width}×${height}: no panel overflows sideways, before and after focusing every control`, async () => {
    await page.setViewportSize({ width, height });
    expect(await overflowing()).toEqual([]);
    // Accessibility of the idle view (axe: no serious or critical violation).
    if (width === 1280) expect(await axeProblems()).toEqual([]);
    const { problems, controls, focused } = await page.evaluate(layoutProblems, true);
    console.log(`${width}×${height}: ${focused} of ${controls} controls visible and enabled, each focused`);
    expect(controls).toBeGreaterThan(50);
    expect(focused).toBeGreaterThan(40);
    expect(problems).toEqual([]);
  });
}

test('every slider moves with ArrowRight and back with ArrowLeft (defect 4)', async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  const sliders = page.locator('.hyperparameters input[type=range]');
  const n = await sliders.count();
  expect(n).toBeGreaterThanOrEqual(25);
  const stuck: string[] = [];
  for (let i = 0; i < n; i++) {
    const s = sliders.nth(i);
    const key = await s.evaluate((el) => el.closest('.control')?.getAttribute('data-key') ?? '?');
    const box = page.locator(`.control[data-key="${key}"] .number-box`);
    const before = await box.inputValue();
    const pos = await s.inputValue();
    // From the top end a right press cannot move: go left first there.
    const [first, second] =
      pos === (await s.getAttribute('max')) ? ['ArrowLeft', 'ArrowRight'] : ['ArrowRight', 'ArrowLeft'];
    /** The box shows a value other than `from` (the number box follows the slider after React renders). */
    const movedFrom = async (from: string) =>
      expect(box)
        .not.toHaveValue(from, { timeout: 3000 })
        .then(() => true)
        .catch(() => false);
    await s.focus();
    await s.press(first);
    if (!(await movedFrom(before))) stuck.push(`${key}: ${first} left ${before}`);
    const moved = await box.inputValue();
    await s.press(second);
    if (!(await movedFrom(moved))) stuck.push(`${key}: ${second} left ${moved}`);
    const back = await box.inputValue();
    // Put it back where it was, so the next checks run on the defaults.
    if (back !== before) {
      await box.fill(before);
      await box.press('Enter');
    }
  }
  expect(stuck).toEqual([]);
});

test('1280×800, while a run goes: the memory readout is whole and clear of the backend badge (defect 2)', async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.getByRole('button', { name: 'Start', exact: true }).click();
  await expect(page.getByTestId('step-counter')).not.toHaveText('Step 0', { timeout: 120_000 });
  const line = page.getByTestId('memory-line');
  await expect(line).toBeVisible();
  const geometry = await page.evaluate(() => {
    const m = document.querySelector('[data-testid=memory-line]')!;
    const readout = m.closest('.run-readout')!;
    const badge = document.querySelector('[data-testid=backend-badge]')!;
    const r = (e: Element) => e.getBoundingClientRect();
    return {
      memoryRight: r(m).right,
      readoutRight: r(readout).right,
      badgeLeft: r(badge).left,
      memoryCut: (m as HTMLElement).scrollWidth > (m as HTMLElement).clientWidth,
    };
  });
  expect(geometry.memoryCut, JSON.stringify(geometry)).toBe(false);
  expect(geometry.memoryRight).toBeLessThanOrEqual(geometry.readoutRight + 0.5);
  expect(geometry.memoryRight).toBeLessThanOrEqual(geometry.badgeLeft);
  expect(await overflowing()).toEqual([]);
  await page.getByRole('button', { name: 'Pause', exact: true }).click();
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 120_000 });
});

test('"Autosaved at step N" sits in the Checkpoint card, not loose above the columns (defect 3)', async () => {
  const status = page.getByTestId('autosave-status');
  await expect(status).toHaveText(/^Autosaved at step \d+\.$/);
  const card = page.getByRole('region', { name: 'Checkpoint' });
  await expect(card.getByTestId('autosave-status')).toBeVisible();
  // Nothing between the top strips and the columns.
  expect(await page.locator('.app > p, .app > .adapter').count()).toBe(0);
});

test('one TRL button per file: no near-twin "Export as TRL config" beside the engine list (defect 9)', async () => {
  const card = page.getByRole('region', { name: 'Checkpoint' });
  await expect(card.getByRole('button', { name: /PPOConfig/ })).toHaveCount(1);
  await expect(card.getByRole('button', { name: /Export as TRL config/ })).toHaveCount(0);
});

test('settings charts step, and no axis repeats a tick label (defect 10)', async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  // One more step, so every chart has at least two points.
  await page.getByRole('button', { name: 'Step', exact: true }).click();
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 120_000 });
  const kl = page.getByRole('figure', { name: 'KL coefficient', exact: true });
  await kl.scrollIntoViewIfNeeded();
  // One stepped line, no faint raw line under a smoothed ramp.
  await expect(kl.locator('path.recharts-line-curve')).toHaveCount(1);
  // Tick labels are found where recharts draws them (a layer of their own, outside the axis's group).
  await expect(kl.locator('.recharts-yAxis-tick-labels .recharts-cartesian-axis-tick-value')).not.toHaveCount(
    0,
  );
  const repeated = await page.evaluate(() =>
    Array.from(document.querySelectorAll('figure.chart')).flatMap((f) => {
      const labels = Array.from(
        f.querySelectorAll('.recharts-yAxis-tick-labels .recharts-cartesian-axis-tick-value'),
      ).map((t) => t.textContent ?? '');
      return new Set(labels).size === labels.length
        ? []
        : [`${f.getAttribute('data-metric')}: ${labels.join(' ')}`];
    }),
  );
  expect(repeated).toEqual([]);
});

test('a live change draws a marker at its step on the charts, with the change on hover', async () => {
  const box = page.getByRole('textbox', { name: 'klCoef value', exact: true });
  const before = await box.inputValue();
  await box.fill('0.1');
  await box.press('Enter');
  await page.getByRole('button', { name: 'Step', exact: true }).click();
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 120_000 });
  for (const title of ['Reward', 'KL coefficient']) {
    const chart = page.getByRole('figure', { name: title, exact: true });
    await chart.scrollIntoViewIfNeeded();
    const mark = chart.locator('.change-mark');
    await expect(mark).toHaveCount(1);
    await expect(mark.locator('title')).toHaveText(new RegExp(`^step \\d+: klCoef ${before} → 0\\.1$`));
  }
});

test('SFT: more examples per step than the file has is a clear error, not a silent run (defect 11)', async () => {
  const card = page.getByRole('region', { name: 'DPO and SFT' });
  await card.getByTestId('sft-file').setInputFiles('tests/fixtures/dpo-sft/sft.jsonl');
  await card.getByLabel('examples per step', { exact: true }).fill('8');
  await expect(card.getByTestId('sft-problem')).toHaveText(
    'examples per step is 8, but sft.jsonl has 4 examples: choose at most 4, or add examples.',
  );
  await expect(card.getByRole('button', { name: 'Train with SFT', exact: true })).toBeDisabled();
  await card.getByLabel('examples per step', { exact: true }).fill('4');
  await expect(card.getByTestId('sft-problem')).toHaveCount(0);
  await expect(card.getByRole('button', { name: 'Train with SFT', exact: true })).toBeEnabled();
});

test('a DPO job is listed as dpo, and the RL-only panels leave while it runs (defect 5)', async () => {
  const card = page.getByRole('region', { name: 'DPO and SFT' });
  await card.getByTestId('dpo-file').setInputFiles('tests/fixtures/dpo-sft/pairs.jsonl');
  await card.getByLabel('DPO steps', { exact: true }).fill('1');
  await card.getByLabel('pairs per step', { exact: true }).fill('2');
  await card.getByRole('button', { name: 'Train with DPO', exact: true }).click();
  await expect(card.getByTestId('supervised-status')).toContainText('DPO on pairs.jsonl', {
    timeout: 120_000,
  });
  await page.getByRole('button', { name: 'Step', exact: true }).click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 1', { timeout: 120_000 });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 120_000 });
  const runs = page.getByRole('region', { name: 'Runs' });
  const row = runs.getByRole('row', { name: /^dpo on pairs\.jsonl/ });
  await expect(row).toHaveCount(1);
  await expect(row.getByRole('cell').nth(2)).toHaveText('dpo');
  await expect(page.getByRole('region', { name: 'Samples' })).toHaveCount(0);
  await expect(page.getByTestId('eval-panel')).toHaveCount(0);
  expect(await axeProblems(), 'axe, during DPO').toEqual([]);
  await expect(page.getByTestId('weights-in-force')).toHaveText(
    'DPO on pairs.jsonl, step 1, from built-in tiny',
  );
});

test('after DPO, "Continue with PPO" trains the DPO result, and the model card says so (defect 6)', async () => {
  const card = page.getByRole('region', { name: 'DPO and SFT' });
  await expect(card.getByRole('button', { name: 'Continue with GRPO', exact: true })).toBeVisible();
  await card.getByRole('button', { name: 'Continue with PPO', exact: true }).click();
  await expect(card.getByTestId('supervised-status')).toContainText('RL algorithm', { timeout: 120_000 });
  await expect(page.getByTestId('model-summary')).toContainText('DPO result');
  await expect(page.getByTestId('step-counter')).not.toHaveText('Step 0', { timeout: 120_000 });
  await page.getByRole('button', { name: 'Pause', exact: true }).click();
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 120_000 });
  // The RL panels are back.
  await expect(page.getByRole('region', { name: 'Samples' })).toHaveCount(1);
});

test('a model picked as loose files is named from its config, and run names say model and task (defect 7)', async () => {
  const model = page.getByRole('region', { name: 'Model' });
  await model.getByRole('radio', { name: /Local files/ }).check();
  await model
    .getByLabel('Model files')
    .setInputFiles(['public/models/tiny/config.json', 'public/models/tiny/model.safetensors']);
  await model.getByRole('button', { name: 'Load model', exact: true }).click();
  await expect(page.getByTestId('model-summary')).toContainText('gpt2-4x160', { timeout: 120_000 });
  await page.getByRole('button', { name: 'Step', exact: true }).click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 1', { timeout: 120_000 });
  await expect(page.getByTestId('run-phase')).toHaveText('paused', { timeout: 120_000 });
  const runs = page.getByRole('region', { name: 'Runs' });
  await expect(
    runs.getByRole('row', { name: 'ppo lr 1e-4 · gpt2-4x160 · sentiment', exact: true }),
  ).toHaveCount(1);
});

/** Serious and critical axe violations of the page as it is now, one line each. */
async function axeProblems(): Promise<string[]> {
  const result = await new AxeBuilder({ page }).analyze();
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map(
      (v) =>
        `${v.impact} ${v.id}: ${v.help} — ${v.nodes
          .map((n) => n.target.join(' '))
          .slice(0, 4)
          .join(', ')}`,
    );
}

test('accessibility: no serious or critical axe violation after training (idle and DPO: above)', async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  expect(await axeProblems()).toEqual([]);
});

test('the basic view: a few settings by default, the rest under Advanced with a filter box', async () => {
  // A page of its own, with no settings in the link: every advanced key is at its default.
  const p = await page.context().newPage();
  try {
    await p.goto('/?backend=wasm');
    const panel = p.getByRole('complementary', { name: 'Hyperparameters' });
    await expect(panel.getByTestId('basic-settings')).toBeVisible({ timeout: 90_000 });
    const visibleKeys = async () =>
      panel.locator('.control[data-key]').evaluateAll((els) =>
        // checkVisibility: the content of a closed <details> keeps its boxes but is not rendered.
        els.filter((e) => e.checkVisibility()).map((e) => e.getAttribute('data-key')),
      );
    expect(await visibleKeys()).toEqual([
      'algorithm',
      'learningRate',
      'klCoef',
      'batchSize',
      'responseLength',
      'steps',
      'lora',
      'seed',
    ]);
    await panel.getByTestId('advanced-toggle').click();
    await panel.getByRole('searchbox', { name: 'Filter settings' }).fill('clip');
    const shown = await visibleKeys();
    expect(shown).toEqual(expect.arrayContaining(['clipRange', 'clipRangeValue', 'maxGradNorm']));
    expect(shown).not.toContain('gamma');
    await panel.getByRole('searchbox', { name: 'Filter settings' }).fill('no such setting');
    await expect(panel).toContainText('No setting matches “no such setting”.');
  } finally {
    await p.close();
  }
});
