import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { configDefaults, defineConfig, type UserWorkspaceConfig } from 'vitest/config';
import type { InlineConfig } from 'vitest/node';
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
  // Whole models or many kernel shapes on SwiftShader (Node's software WebGPU): 20 s to 2 min each on 2 cores.
  // (webgpu-matmul and webgpu-linear, 12–15 s since the tests stopped Dawn's workgroup zeroing, are fast.)
  'tests/webgpu-linear-columns.test.ts',
  'tests/webgpu-linear-vec.test.ts',
  'tests/webgpu-linear-tile.test.ts',
  'tests/webgpu-llama-kernels.test.ts',
  'tests/webgpu-logprob.test.ts',
  'tests/decode-dispatches.test.ts',
  'tests/llama-decode-dispatches.test.ts',
  'tests/sample-device.test.ts',
  'tests/generate-device-sampling.test.ts',
  'tests/update-device-guard.test.ts',
  // Replayed greedy generations of GPT-2, Qwen2 and Qwen3 on SwiftShader with the head's kernels (about 70 s).
  'tests/webgpu-head-rows.test.ts',
  // GRPO runs on SwiftShader with the share on and off, replayed (about 25 s).
  'tests/webgpu-shared-prefix.test.ts',
  // Small Qwen2 / Qwen3 models with the f16 base beside the f32 one, forward, backward and decode (2–3 min).
  'tests/f16-base.test.ts',
  // Several-step training runs per case. The PPO, LoRA, DPO and Llama-family trainer files (4, 12, 1.3 and 6 s since
  // they train on WASM rather than the CPU backend) and size (measured peaks, 6 s on WASM against 100 s on the CPU
  // backend) are fast.
  'tests/perf-grpo-old-logprobs.test.ts',
  // GRPO, RLOO and PPO runs with the shared prefix on and off (about 20 s in the fast tier's two workers).
  'tests/shared-prefix-trainer.test.ts',
  // TRL's config classes in Python (40 s where torch and trl are installed).
  'tests/engine-exports.test.ts',
  'tests/exports-python.test.ts',
];

/** The fast tier's own options. */
const FAST = {
  // Read by tests that keep a slow case in the table they belong to but skip it here.
  env: { ...base.test!.env, PPO_TEST_TIER: 'fast' },
  testTimeout: 30_000,
  hookTimeout: 30_000,
};

/**
 * Files that need a worker of their own (each file a fresh module graph and tfjs engine, as in the full run): they
 * read the engine's first state (wasm-gemm-default: nothing registered yet), register or remove backends
 * (gpu-plan's stand-in device), install a memory meter, or measure peaks and backends that a file before them in
 * the same worker would have moved. Every other fast file shares its worker's modules with the files before it
 * (`isolate: false`): importing tfjs and the engine's modules once per worker instead of once per file saves about
 * a third of the tier's time on 2 cores (5 min 16 s → 3 min 39 s). A fast file that fails only after another one
 * belongs here (a shuffled order, `--sequence.shuffle.files`, finds such pairs; it passed with seed 11).
 */
const EXPLICIT_OWN_WORKER_FILES = [
  'tests/wasm-gemm-default.test.ts',
  'tests/wasm-bmm.test.ts',
  'tests/gpu-plan.test.ts',
  'tests/peak-bytes.test.ts',
  'tests/size.test.ts',
  'tests/recompute.test.ts',
  'tests/oom.test.ts',
  'tests/chunked-logprob.test.ts',
  'tests/perf-onehot-wasm.test.ts',
];

/**
 * Files that load the model worker's API (src/worker/api.ts, reliability.ts): importing it sets the WASM backend's
 * file paths and thread count for the browser (src/worker/backend-web.ts), after which a WASM test in the same
 * worker would fail to start its backend; files that set the worker globals `self` / `navigator` on globalThis;
 * and files that mock a module (`vi.mock`): a mock replaces a module only where it has not been imported yet, and
 * in a shared worker a file before it may have imported it (tests/algorithms.test.ts failed so once the order
 * changed). Worker threads have no WebGPU adapter in Node: a file here that needs one skips.
 */
const NEEDS_OWN_WORKER =
  /helpers\/worker'|src\/worker\/(api|reliability)'|\.(self|navigator) \?\?=|\bvi\.(mock|doMock)\(/;
const ownWorkerByContent = readdirSync('tests')
  .filter(
    (f) => /\.test\.tsx?$/.test(f) && NEEDS_OWN_WORKER.test(readFileSync(path.join('tests', f), 'utf8')),
  )
  .map((f) => `tests/${f}`);

export const OWN_WORKER_FILES = [...EXPLICIT_OWN_WORKER_FILES, ...ownWorkerByContent];

// The projects below do not `extends: true` the root: Vitest would concatenate their include and exclude lists
// with the root's; each names its files itself, with the root's test options.
const { include, sequence: _sequence, ...shared } = base.test!;

/** Global options (the pool's workers, the order of files), as the full run's config has them. */
export const GLOBAL: Pick<InlineConfig, 'maxWorkers' | 'minWorkers' | 'sequence'> = {
  maxWorkers: base.test!.maxWorkers,
  minWorkers: base.test!.minWorkers,
  sequence: base.test!.sequence,
};

/**
 * The files that share their worker's modules (every unit test file but the slow and the own-worker ones), on
 * forks without isolation, with the full run's test options and `over`. The full unit tier runs them so too
 * (vitest.unit-shared.config.ts).
 */
export function sharedProject(over: Partial<InlineConfig> = {}): UserWorkspaceConfig {
  return {
    test: {
      ...shared,
      ...over,
      name: 'shared',
      include,
      exclude: [...configDefaults.exclude, ...SLOW_FILES, ...OWN_WORKER_FILES],
      pool: 'forks',
    },
  };
}

export default defineConfig({
  test: {
    ...GLOBAL,
    // Vitest reads isolation per pool, for every project on it: forks share, threads isolate.
    poolOptions: { forks: { isolate: false }, threads: { isolate: true } },
    projects: [
      sharedProject(FAST),
      // Worker threads, which stay isolated: a new thread per file.
      { test: { ...shared, ...FAST, name: 'own-worker', include: OWN_WORKER_FILES, pool: 'threads' } },
    ],
  },
});
