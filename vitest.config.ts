import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { TEST_DAWN_TOGGLES } from './e2e/chromium';

/**
 * Files that take minutes (measured on 2 cores): started first, so that two workers end together instead of one
 * finishing a 5-minute file alone at the end. Vitest orders files by their last durations when it has a cache,
 * but a clean clone (CI) has none and orders by file size, which put the Qwen and GPT-2-sized runs (small files,
 * the longest runs) last. Besides every `*.slow.test.ts`, in order of their durations:
 */
const LONG_FILES = [
  'tests/llama-decode-dispatches.test.ts',
  'tests/cli.test.ts',
  'tests/sample-device.test.ts',
  'tests/webgpu-linear-columns.test.ts',
];

class LongFilesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification): number => {
      const rel = f.moduleId.slice(f.moduleId.lastIndexOf('/tests/') + 1);
      if (/\.slow\.test\.tsx?$/.test(rel)) return 0;
      return LONG_FILES.includes(rel) ? 1 : 2;
    };
    // A stable partition: within each rank, Vitest's own order (durations when cached, else size).
    return [0, 1, 2].flatMap((r) => sorted.filter((f) => rank(f) === r));
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
    sequence: { sequencer: LongFilesFirst },
    // Dawn in Node (and the CLI processes tests spawn) runs under the tests' toggles: workgroup memory is not
    // zeroed per dispatch, which on SwiftShader cost most WebGPU files 3–10× their time (e2e/chromium.ts says why
    // that cannot hide a fault). A toggle set in the environment wins.
    env: { PPO_DAWN_TOGGLES: process.env.PPO_DAWN_TOGGLES ?? TEST_DAWN_TOGGLES },
    // Names a test that holds a worker's event loop for long (tests/helpers/loop-watchdog.ts).
    setupFiles: ['tests/helpers/loop-watchdog.ts'],
  },
});
