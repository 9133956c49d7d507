import { test, expect } from '@playwright/test';
import { watchConsole } from './console';
import { PREVIEW_PORT } from './ports';

/**
 * The production build served by `vite preview`: the Content-Security-Policy is in force (a violation is a
 * console error), and the WASM backend loads its binary from the app's own hashed assets (works offline).
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
