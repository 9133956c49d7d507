import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { TEST_DAWN_TOGGLES } from './e2e/chromium';
import { orderFiles } from './tests/helpers/file-order';

/** Starts the longest files first (tests/helpers/file-order.ts says why and how they are known). */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rel = (f: TestSpecification): string => f.moduleId.slice(f.moduleId.lastIndexOf('/tests/') + 1);
    // A path's place in the order; a file in two projects keeps both of its specifications, side by side.
    const place = new Map(orderFiles([...new Set(sorted.map(rel))]).map((p, i) => [p, i]));
    return [...sorted].sort((a, b) => place.get(rel(a))! - place.get(rel(b))!);
  }
}

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
    sequence: { sequencer: LongestFirst },
    // Dawn in Node (and the CLI processes tests spawn) runs under the tests' toggles: workgroup memory is not
    // zeroed per dispatch, which on SwiftShader cost most WebGPU files 3–10× their time (e2e/chromium.ts says why
    // that cannot hide a fault). A toggle set in the environment wins.
    env: { PPO_DAWN_TOGGLES: process.env.PPO_DAWN_TOGGLES ?? TEST_DAWN_TOGGLES },
    // Names a test that holds a worker's event loop for long (tests/helpers/loop-watchdog.ts).
    setupFiles: ['tests/helpers/loop-watchdog.ts'],
  },
});
