// Temporary (reliability engineer): the repo's Playwright config on a dev server of its own (port 5188).
import base from './playwright.config';
import { defineConfig } from '@playwright/test';
export default defineConfig({
  ...base,
  use: { ...base.use, baseURL: 'http://localhost:5188' },
  outputDir: '/tmp/rel-test-results',
  reporter: 'list',
  webServer: [
    {
      command: 'npx vite --port 5188 --strictPort',
      url: 'http://localhost:5188',
      reuseExistingServer: true,
      env: { PPO_E2E: '1' },
      timeout: 120_000,
      stdout: 'ignore',
      stderr: 'pipe',
    },
  ],
});
