import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts', 'tests/**/*.test.tsx', 'src/**/*.test.ts'],
    environment: 'node',
    testTimeout: 600_000,
    hookTimeout: 300_000,
    // 2-core machines: run files in parallel on two workers at most.
    maxWorkers: 2,
    minWorkers: 1,
  },
});
