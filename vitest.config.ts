import { defineConfig } from 'vitest/config';

/**
 * The whole unit pass (`npm run test:unit`, part of `npm test`): every test, slow ones included. The fast tier
 * (`npm run test:fast`) is vitest.fast.config.ts, which starts from this file. How tests are tiered:
 * docs/architecture.md.
 */
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts', 'tests/**/*.test.tsx', 'src/**/*.test.ts'],
    environment: 'node',
    // The slow tier trains for minutes (the soak: 500 PPO steps on WASM) and launches Chromium.
    testTimeout: 600_000,
    hookTimeout: 300_000,
    // 2-core machines: run files in parallel on two workers at most.
    maxWorkers: 2,
    minWorkers: 1,
  },
});
