import { configDefaults, defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config';

/**
 * The fast tier, `npm run test:fast` (after `tsc -b`): what to run while working, a few minutes on two cores.
 * Left out: files named `*.slow.test.ts` (the soak, the learning test, Chromium launches, the CLI bench, …)
 * and the files listed below, whole models on the software WebGPU adapter or several-step training runs per case.
 * `npm test` runs everything; nothing here is dropped, only left to the full run.
 */
export const SLOW_FILES = [
  'tests/**/*.slow.test.ts',
  'tests/**/*.slow.test.tsx',
  // Spawns the CLI for each case (generate, train with checkpoints and a resume): a `.slow` split is due.
  'tests/cli.test.ts',
  // Whole models or many kernel shapes on SwiftShader (Node's software WebGPU): 25 s to 5 min each on 2 cores.
  'tests/webgpu-matmul.test.ts',
  'tests/webgpu-linear.test.ts',
  'tests/webgpu-llama-kernels.test.ts',
  'tests/webgpu-logprob.test.ts',
  'tests/decode-dispatches.test.ts',
  'tests/llama-decode-dispatches.test.ts',
  'tests/sample-device.test.ts',
  'tests/generate-device-sampling.test.ts',
  'tests/update-device-guard.test.ts',
  // Small Qwen2 / Qwen3 models with the f16 base beside the f32 one, forward, backward and decode (2–3 min).
  'tests/f16-base.test.ts',
  // Several-step training runs per case (resume equality, every algorithm under LoRA, measured peaks).
  'tests/trainer.test.ts',
  'tests/lora-trainer.test.ts',
  'tests/llama-trainer.test.ts',
  'tests/dpo-trainer.test.ts',
  'tests/size.test.ts',
  'tests/perf-grpo-old-logprobs.test.ts',
  // TRL's config classes in Python (40 s where torch and trl are installed).
  'tests/engine-exports.test.ts',
  'tests/exports-python.test.ts',
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
