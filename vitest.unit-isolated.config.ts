import { defineConfig } from 'vitest/config';
import base from './vitest.config';
import { OWN_WORKER_FILES, SLOW_FILES } from './vitest.fast.config';

/**
 * The unit tier's second half (`npm run test:unit`): every slow file and every file that needs a worker of its own
 * (vitest.fast.config.ts), each in a fresh forked process, as vitest.config.ts runs every file. Together with
 * vitest.unit-shared.config.ts this is every file vitest.config.ts runs (tests/unit-tier-split.test.ts).
 */
export default defineConfig({
  test: {
    ...base.test!,
    include: [...SLOW_FILES, ...OWN_WORKER_FILES],
  },
});
