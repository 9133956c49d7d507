import { defineConfig } from '@playwright/test';
import { CHROMIUM_TEST_ARGS } from './e2e/chromium';
import { DEV_PORT, PREVIEW_PORT } from './e2e/ports';

/**
 * End-to-end tests in Debian's full Chromium (Playwright's own browser download does not work on these machines,
 * and its headless shell has no WebGPU), launched with the flags of e2e/chromium.ts: WebGPU through SwiftShader,
 * under the tests' Dawn toggles.
 *
 * The app's specs open the production build (`vite preview`: what a person is served, its Content-Security-Policy
 * in force, React's production build: the health spec's 30-step run took 60 s there against 72 s on the dev
 * server, measured on these 2 cores, which the page shares with the model worker). The specs that drive the model worker from a test page
 * (e2e/pages/*.html, which only the dev server serves) open those on the dev server (e2e/worker-page.ts).
 */
export default defineConfig({
  testDir: 'e2e',
  outputDir: 'test-results',
  // Two spec files at a time, each file's tests in order, generous timeouts. On these 2 cores one worker left
  // about a quarter of the machine idle (1.48 cores busy on average: a test waits on its page's timers, polls and
  // the worker's messages); two keep both busy (1.91) and the tier took 13.9 min against 19.8–20.0 with one, every
  // test passing, the slowest at a quarter of its timeout (health's 30-step run: 148 s of 570).
  workers: 2,
  fullyParallel: false,
  timeout: 120_000,
  expect: { timeout: 60_000 },
  retries: 0,
  forbidOnly: !!process.env.CI,
  reporter: process.env.CI ? [['list'], ['html', { open: 'never' }]] : 'list',
  use: {
    baseURL: `http://localhost:${PREVIEW_PORT}`,
    browserName: 'chromium',
    channel: undefined,
    headless: true,
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: CHROMIUM_TEST_ARGS,
    },
    // A failed test's last screen and trace, for a person debugging it here (nobody reads a passing test's).
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
    viewport: { width: 1200, height: 820 },
  },
  webServer: [
    {
      // The worker specs' test pages (e2e/pages) and the dev server itself.
      command: `npx vite --port ${DEV_PORT} --strictPort`,
      url: `http://localhost:${DEV_PORT}`,
      reuseExistingServer: !process.env.CI,
      // vite.config.ts: no HMR or file watching for this server (edits during a run must not reload the page).
      env: { PPO_E2E: '1' },
      timeout: 120_000,
      stdout: 'ignore',
      stderr: 'pipe',
    },
    {
      // The production build (with its Content-Security-Policy and hashed WASM assets): the app's specs.
      // `npm test` (scripts/test-all.sh) builds dist/ beside the typecheck and sets PPO_E2E_PREBUILT; alone, the
      // tier builds it here.
      command: `${process.env.PPO_E2E_PREBUILT ? '' : 'npx vite build --logLevel warn && '}npx vite preview --port ${PREVIEW_PORT} --strictPort`,
      url: `http://localhost:${PREVIEW_PORT}`,
      reuseExistingServer: !process.env.CI,
      timeout: 240_000,
      stdout: 'ignore',
      stderr: 'pipe',
    },
  ],
});
