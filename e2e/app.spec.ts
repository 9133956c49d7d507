import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';

// SwiftShader runs WebGPU in software on the CPU: keep generations short.
const WEBGPU_TOKENS = 4;

const badge = (page: Page) => page.getByTestId('backend-badge');
const output = (page: Page) => page.getByRole('status', { name: 'Output' });
/** The "Try the policy" card (the hyperparameter column has its own seed, temperature, topK and topP). */
const tryPanel = (page: Page) => page.getByRole('region', { name: 'Try the policy' });

async function generate(page: Page, prompt: string, maxNewTokens: number): Promise<void> {
  await tryPanel(page).getByLabel('Prompt', { exact: true }).fill(prompt);
  await tryPanel(page).getByLabel('Max new tokens').fill(String(maxNewTokens));
  await tryPanel(page).getByLabel('Seed', { exact: true }).fill('7');
  const button = page.getByRole('button', { name: 'Generate' });
  await expect(button).toBeEnabled();
  await button.click();
  await expect(output(page).getByTestId('output-text')).toBeVisible();
}

test.describe('the playground page', () => {
  let consoleWatch: { errors: string[] };

  test.beforeEach(({ page }) => {
    consoleWatch = watchConsole(page);
  });

  test.afterEach(() => {
    expect(consoleWatch.errors, 'console errors').toEqual([]);
  });

  test('auto on a software adapter picks WASM, says why, and generates', async ({ page }, testInfo) => {
    await page.goto('/');
    await expect(page.getByRole('heading', { name: 'PPO Playground' })).toBeVisible();
    await expect(badge(page)).toHaveAttribute('data-backend', 'wasm');
    await expect(page.getByTestId('backend-name')).toHaveText('WASM');
    await expect(page.getByTestId('backend-adapter')).toContainText(/swiftshader/i);
    await expect(page.getByTestId('backend-notice')).toHaveText(
      'WebGPU is only available through a software adapter (SwiftShader) here, so training uses WASM. Choose WebGPU to try it anyway.',
    );
    await expect(page.getByTestId('model-summary')).toContainText('built-in tiny');

    await generate(page, 'Hello there', 16);
    const text = await output(page).getByTestId('output-text').textContent();
    expect(text?.length ?? 0).toBeGreaterThan(0);
    await expect(output(page).getByTestId('output-stats')).toContainText(/\d+ tokens · [\d.]+ tokens\/s/);
    await expect(output(page)).toContainText('Hello there');

    const shot = testInfo.outputPath('main-page.png');
    await page.screenshot({ path: shot, fullPage: true });
    await testInfo.attach('main page', { path: shot, contentType: 'image/png' });
  });

  test('?backend=webgpu runs on WebGPU (SwiftShader) and generates', async ({ page }) => {
    await page.goto('/?backend=webgpu');
    // The badge reports tf.getBackend() after setBackend succeeded: a silent WebGL fallback would show here.
    await expect(badge(page)).toHaveAttribute('data-backend', 'webgpu');
    await expect(page.getByTestId('backend-name')).toHaveText('WebGPU');
    await expect(page.getByRole('combobox', { name: 'Backend' })).toHaveValue('webgpu');
    await expect(page.getByTestId('backend-adapter')).toContainText(/swiftshader/i);
    await expect(page.getByTestId('backend-adapter')).toContainText('software');
    await expect(page.getByTestId('backend-notice')).toContainText('software adapter (SwiftShader)');
    // Nothing is timed on a software adapter: both kernel forms stay off, and the page says why.
    await expect(page.getByTestId('backend-kernels')).toHaveText(
      'Kernels: vector loads in the few-rows program, the tile kernel for the tiled products and the few-rows program for the f32 LM head at decode off: not timed: a software adapter (its speed says nothing of a GPU’s).',
    );
    await expect(page.getByTestId('model-summary')).toBeVisible();

    await generate(page, 'Once upon a time', WEBGPU_TOKENS);
    await expect(output(page).getByTestId('output-stats')).toContainText(/^[1-4] tokens/);
    await expect(
      output(page).getByRole('list', { name: 'Generated tokens' }).getByRole('listitem'),
    ).not.toHaveCount(0);
  });

  test('?tuneKernels=1 times the kernel forms in the worker, and the page shows the choice', async ({
    page,
  }) => {
    await page.goto('/?backend=webgpu&tuneKernels=1');
    await expect(badge(page)).toHaveAttribute('data-backend', 'webgpu');
    // Each form timed from recorded replays in the worker's WebGPU device, on or off, with both times.
    const kernels = page.getByTestId('backend-kernels');
    await expect(kernels).toContainText(/^Kernels: vector loads in the few-rows program (on|off): /);
    await expect(kernels).toContainText(
      /the tile kernel for the tiled products (on|off): [^;]*\([\d.]+ ms without, [\d.]+ ms with\); /,
    );
    await expect(kernels).toContainText(
      /the few-rows program for the f32 LM head at decode (on|off): [^;]*\([\d.]+ ms without, [\d.]+ ms with\) \(timed in [\d.]+ s\)\.$/,
    );
    await expect(page.getByTestId('model-summary')).toBeVisible();
  });

  test('choosing a backend re-initialises the worker and keeps the model', async ({ page }) => {
    await page.goto('/');
    await expect(badge(page)).toHaveAttribute('data-backend', 'wasm');
    await page.getByRole('combobox', { name: 'Backend' }).selectOption('cpu');
    await expect(badge(page)).toHaveAttribute('data-backend', 'cpu');
    await expect(page).toHaveURL(/[?&]backend=cpu\b/);
    await expect(page.getByTestId('backend-notice')).toHaveCount(0);
    await generate(page, 'abc', 4);
    await expect(output(page).getByTestId('output-stats')).toContainText(/^[1-4] tokens/);
  });

  test('a mistake is shown as a plain message, without a stack', async ({ page }) => {
    await page.goto('/?backend=wasm');
    await expect(badge(page)).toHaveAttribute('data-backend', 'wasm');
    await expect(page.getByTestId('model-summary')).toBeVisible();
    await tryPanel(page).getByLabel('Max new tokens').fill('1000');
    await page.getByRole('button', { name: 'Generate' }).click();
    const alert = page.getByRole('alert');
    // The message and nothing else: no "Something went wrong", no stack (in this build a stack names bundled .js files).
    await expect(alert.locator('span')).toHaveText(
      /^generate: prompt \(\d+ tokens\) \+ maxNewTokens \(1000\) exceeds the model's n_positions \(128\)\.$/,
    );
    await alert.getByRole('button', { name: 'Dismiss error' }).click();
    await expect(alert).toHaveCount(0);
  });

  test('Resume clicked while the page is still starting waits for it: the resumed run is not dropped', async ({
    page,
    context,
  }) => {
    test.setTimeout(180_000);
    const TINY = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=100';
    await page.goto(`/?backend=wasm#${TINY}&seed=7`);
    await expect(page.getByTestId('model-summary')).toBeVisible({ timeout: 60_000 });
    for (const n of [1, 2]) {
      await page.getByRole('button', { name: 'Step', exact: true }).click();
      await expect(page.getByTestId('step-counter')).toHaveText(`Step ${n}`, { timeout: 60_000 });
    }
    await expect(page.getByTestId('autosave-status')).toHaveText('Autosaved at step 2.');
    await page.close();

    // The next tab's WASM backend is held back: the offer arrives while the page still sets up its backend,
    // model and first run, each queued in the worker ahead of (or behind) a resume.
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    await context.route('**/*.wasm', async (route) => {
      await held;
      await route.continue();
    });
    const next = await context.newPage();
    const nextConsole = watchConsole(next);
    // Another seed: the page's first configure would start a new run if it came after the resume.
    await next.goto(`/?backend=wasm#${TINY}&seed=9`);
    const offer = next.getByTestId('autosave-offer');
    await expect(offer).toContainText('An autosaved run is in this browser: step 2 of 100');
    const resume = offer.getByRole('button', { name: 'Resume', exact: true });
    await expect(resume).toBeDisabled();
    await expect(resume).toHaveAttribute('title', 'Ready once the page’s model has loaded');
    release();
    await resume.click();
    await expect(next.getByTestId('step-counter')).toHaveText('Step 2', { timeout: 60_000 });
    await expect(offer).toHaveCount(0);
    // Still the resumed run once everything queued has answered, and it trains on from there.
    await expect(next.getByTestId('model-summary')).toBeVisible();
    await next.getByRole('button', { name: 'Step', exact: true }).click();
    await expect(next.getByTestId('step-counter')).toHaveText('Step 3', { timeout: 60_000 });
    expect(nextConsole.errors).toEqual([]);
  });

  test("two tabs train at once: each keeps its autosave; the banner offers a closed tab's run, never an open one's", async ({
    page,
    context,
  }) => {
    test.setTimeout(180_000);
    const TINY = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=100';
    const offer = (p: Page) => p.getByTestId('autosave-offer');
    const step = async (p: Page, n: number) => {
      await p.getByRole('button', { name: 'Step', exact: true }).click();
      await expect(p.getByTestId('step-counter')).toHaveText(`Step ${n}`, { timeout: 60_000 });
      await expect(p.getByTestId('autosave-status')).toHaveText(`Autosaved at step ${n}.`);
    };
    const open = async (p: Page, hash: string) => {
      await p.goto(`/?backend=wasm#${hash}`);
      await expect(p.getByTestId('model-summary')).toBeVisible({ timeout: 60_000 });
    };
    await open(page, `${TINY}&seed=7`);
    await step(page, 1);

    const other = await context.newPage();
    const otherConsole = watchConsole(other);
    await open(other, `${TINY}&seed=8`);
    await step(other, 1);
    await step(other, 2);
    // The first tab is open, so its run is not offered in the second.
    await expect(offer(other)).toHaveCount(0);

    // Both tabs go: each run is offered once, newest first, in the next tab.
    await page.close();
    await other.reload();
    await expect(offer(other)).toContainText('An autosaved run is in this browser: step 2 of 100');
    await other.getByRole('button', { name: 'Resume', exact: true }).click();
    await expect(other.getByTestId('step-counter')).toHaveText('Step 2');
    const third = await context.newPage();
    const thirdConsole = watchConsole(third);
    await open(third, TINY);
    await expect(offer(third)).toContainText('An autosaved run is in this browser: step 1 of 100');
    await third.getByRole('button', { name: 'Resume', exact: true }).click();
    await expect(third.getByTestId('step-counter')).toHaveText('Step 1');
    await step(third, 2);
    expect(otherConsole.errors).toEqual([]);
    expect(thirdConsole.errors).toEqual([]);
  });
});
