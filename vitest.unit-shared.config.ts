import { defineConfig } from 'vitest/config';
import { GLOBAL, sharedProject } from './vitest.fast.config';

/**
 * The unit tier's first half (`npm run test:unit`): the files the fast tier runs in shared workers
 * (vitest.fast.config.ts: every file but the slow ones and those that need a worker of their own), run the same way
 * — forks without isolation, tfjs and the engine imported once per worker rather than once per file — but with the
 * full run's options (10 minutes a test, no `PPO_TEST_TIER`, so every case runs). The other half, every slow and
 * own-worker file, each isolated: vitest.unit-isolated.config.ts.
 */
export default defineConfig({
  test: {
    ...GLOBAL,
    poolOptions: { forks: { isolate: false } },
    projects: [sharedProject()],
  },
});
