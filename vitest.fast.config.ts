import { configDefaults, defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config';

/**
 * The fast tier, `npm run test:fast` (after `tsc -b`): what to run while working, a few minutes on two cores.
 * Left out: files named `*.slow.test.ts` (the soak, the learning test, Chromium launches, the CLI bench, …)
 * and the files listed below, whose slow cases cannot be split off yet. `npm test` runs everything.
 */
export const SLOW_FILES = [
  'tests/**/*.slow.test.ts',
  'tests/**/*.slow.test.tsx',
  // Spawns the CLI for each case (generate, train with checkpoints and a resume): a `.slow` split is due.
  'tests/cli.test.ts',
];

export default mergeConfig(
  base,
  defineConfig({
    test: {
      exclude: [...configDefaults.exclude, ...SLOW_FILES],
      // Read by tests that keep a slow case in the table they belong to but skip it here.
      env: { PPO_TEST_TIER: 'fast' },
      testTimeout: 30_000,
      hookTimeout: 30_000,
    },
  }),
);
