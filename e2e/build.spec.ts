import { test, expect, type Worker } from '@playwright/test';
import { watchConsole } from './console';
import { DEV_PORT, PREVIEW_PORT } from './ports';
import { CONTENT_SECURITY_POLICY, SANDBOX_CONTENT_SECURITY_POLICY } from '../vite.config';

/**
 * The production build served by `vite preview`: the Content-Security-Policy is in force (a violation is a
 * console error), and the WASM backend loads its binary from the app's own hashed assets (works offline).
 * The workers take their policy from their own script's response header (a page's <meta> does not reach them):
 * the model worker refuses eval and other origins; the reward sandbox may compile the person's code, nothing
 * more.
 */
test.use({ baseURL: `http://localhost:${PREVIEW_PORT}` });

test('the production build runs under its CSP with bundled WASM binaries', async ({ page }) => {
  const consoleWatch = watchConsole(page);
  const wasmRequests: string[] = [];
  page.on('request', (r) => {
    if (new URL(r.url()).pathname.endsWith('.wasm')) wasmRequests.push(r.url());
  });

  await page.goto('/');
  const csp = await page.locator('meta[http-equiv="Content-Security-Policy"]').getAttribute('content');
  expect(csp).toContain("script-src 'self' 'wasm-unsafe-eval'");
  expect(csp).toContain('https://huggingface.co');

  await expect(page.getByTestId('backend-badge')).toHaveAttribute('data-backend', 'wasm');
  await expect(page.getByTestId('model-summary')).toBeVisible();
  await page.getByLabel('Max new tokens').fill('4');
  await page.getByRole('button', { name: 'Generate' }).click();
  await expect(page.getByTestId('output-stats')).toContainText(/^[1-4] tokens/);

  expect(wasmRequests.length).toBeGreaterThan(0);
  for (const url of wasmRequests) {
    expect(url).toMatch(
      new RegExp(`^http://localhost:${PREVIEW_PORT}/assets/tfjs-backend-wasm[-a-z]*-[\\w-]+\\.wasm$`),
    );
  }
  expect(consoleWatch.errors).toEqual([]);
});

test('the workers run under the policy of their own response header: no eval or other origins in the model worker; the reward sandbox compiles code', async ({
  page,
  request,
}) => {
  test.setTimeout(180_000);
  const consoleWatch = watchConsole(page);
  const workerHeaders = new Map<string, string | undefined>();
  page.on('response', (r) => {
    if (/\.worker-[\w-]+\.js$/.test(new URL(r.url()).pathname)) {
      workerHeaders.set(new URL(r.url()).pathname, r.headers()['content-security-policy']);
    }
  });
  const response = await page.goto('/#batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=100');
  expect(response!.headers()['content-security-policy']).toBe(CONTENT_SECURITY_POLICY);
  await expect(page.getByTestId('model-summary')).toBeVisible({ timeout: 60_000 });

  const worker = (re: RegExp): Worker => {
    const w = page.workers().find((x) => re.test(new URL(x.url()).pathname));
    if (!w)
      throw new Error(
        `no worker matching ${re}: ${page
          .workers()
          .map((x) => x.url())
          .join(', ')}`,
      );
    return w;
  };
  const model = worker(/^\/assets\/model\.worker-[\w-]+\.js$/);
  const modelPath = new URL(model.url()).pathname;
  expect(workerHeaders.get(modelPath)).toBe(CONTENT_SECURITY_POLICY);
  expect((await request.get(model.url())).headers()['content-security-policy']).toBe(CONTENT_SECURITY_POLICY);

  // Inside the model worker: string code and a connection to another origin (the dev server, which is up and
  // would answer) are refused by the policy; its own files load.
  const inside = await model.evaluate(async (otherPort) => {
    const violations: string[] = [];
    self.addEventListener('securitypolicyviolation', (e) =>
      violations.push(`${e.effectiveDirective} ${e.blockedURI}`),
    );
    // From a task of the worker's own: code run by page.evaluate itself is exempt (CDP's Runtime.evaluate
    // allows eval that the policy blocks).
    const evalError = await new Promise<string>((resolve) =>
      setTimeout(() => {
        try {
          new Function('return 1')();
          resolve('');
        } catch (e) {
          resolve(`${(e as Error).name}: ${(e as Error).message}`);
        }
      }, 0),
    );
    let otherOrigin = '';
    try {
      await fetch(`http://localhost:${otherPort}/`);
      otherOrigin = 'fetched';
    } catch (e) {
      otherOrigin = `${(e as Error).name}: ${(e as Error).message}`;
    }
    const own = (await fetch('/models/tiny/config.json')).status;
    await new Promise((r) => setTimeout(r, 200));
    return { evalError, otherOrigin, own, violations };
  }, DEV_PORT);
  expect(inside.evalError).toMatch(/^EvalError: .*Content Security Policy/);
  expect(inside.otherOrigin).toMatch(/^TypeError: Failed to fetch/);
  expect(inside.own).toBe(200);
  expect(inside.violations).toEqual(
    expect.arrayContaining([`connect-src http://localhost:${DEV_PORT}/`, 'script-src eval']),
  );

  // The reward sandbox has its own policy: it may compile the person's code (and reach nothing). The app
  // trains a step on it under the build.
  await page.getByRole('textbox', { name: 'Reward code' }).fill('return 0.75;');
  await page.getByRole('button', { name: 'Use this code', exact: true }).click();
  await expect(page.getByTestId('reward-source')).toContainText('your reward code');
  const sandbox = worker(/^\/sandbox\/reward-sandbox\.worker-[\w-]+\.js$/);
  expect(workerHeaders.get(new URL(sandbox.url()).pathname)).toBe(SANDBOX_CONTENT_SECURITY_POLICY);
  await page.getByRole('button', { name: 'Step', exact: true }).click();
  await expect(page.getByTestId('step-counter')).toHaveText('Step 1', { timeout: 120_000 });
  await expect(
    page.getByRole('figure', { name: 'Reward', exact: true }).getByTestId('chart-latest'),
  ).toHaveAttribute('data-value', '0.75');

  // No console errors but (where the browser logs them) its reports of the two refusals above.
  expect(consoleWatch.errors.filter((e) => !/Refused to (connect to|evaluate)/.test(e))).toEqual([]);
});
