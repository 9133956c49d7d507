/**
 * The order in which the unit tier starts its files (the sequencer of vitest.config.ts). Two workers take the next
 * file as each becomes free, so the run ends soonest when the longest files start first (longest-processing-time
 * order): a long file started late leaves the other worker idle at the end. Vitest orders by the last run's
 * durations when it has them cached, but a clean clone (CI) has none and orders by file size, which put the Qwen-
 * and GPT-2-sized runs (small files, the longest runs) last.
 *
 * FILE_SECONDS holds each long file's duration in one isolated run of the unit tier's second half
 * (`npx vitest run --config vitest.unit-isolated.config.ts --reporter=json --outputFile=…`, 2026-11-29, 2 cores,
 * two workers): only the order among them matters, not the figures. A slow file missing from it (a new one) starts
 * first of all, since it may be long; every other file keeps Vitest's own order after the listed ones.
 */
export const FILE_SECONDS: Readonly<Record<string, number>> = {
  'tests/default-run-health.slow.test.ts': 310,
  'tests/algorithms-learning.slow.test.ts': 234,
  'tests/qwen-0.5b.slow.test.ts': 233,
  'tests/gpt2-124m.slow.test.ts': 197,
  'tests/f16-base-trainer.slow.test.ts': 173,
  'tests/f16-base-qwen3.slow.test.ts': 168,
  'tests/f16-base-qwen25.slow.test.ts': 153,
  'tests/arithmetic-chat-learning.slow.test.ts': 133,
  'tests/llama-decode-dispatches.test.ts': 95,
  'tests/gpu-plan-fallback.slow.test.ts': 94,
  'tests/soak.slow.test.ts': 87,
  'tests/update-replay.slow.test.ts': 84,
  'tests/sample-device.test.ts': 67,
  'tests/perf-webgpu.slow.test.ts': 54,
  'tests/cli.test.ts': 45,
  'tests/microbatch-step.slow.test.ts': 38,
  'tests/f16-base.test.ts': 38,
  'tests/wasm-gemm-training.slow.test.ts': 37,
  'tests/perf-grpo-old-logprobs.test.ts': 36,
  'tests/parity-llama-webgpu.slow.test.ts': 34,
  'tests/webgpu-replay.slow.test.ts': 34,
  'tests/decode-dispatches.test.ts': 33,
  'tests/webgpu-linear-columns.test.ts': 32,
  'tests/webgpu-node.slow.test.ts': 32,
  'tests/webgpu-llama-kernels.test.ts': 28,
  'tests/live-config-path.test.ts': 28,
  'tests/webgpu-pool-trim.slow.test.ts': 27,
  'tests/update-device-guard.test.ts': 26,
  'tests/dpo-learning.slow.test.ts': 20,
  'tests/size.test.ts': 18,
  // Python's peers: skipped where no interpreter with torch is found, minutes where one is.
  'tests/torch-ppo-step.slow.test.ts': 0,
  'tests/torch-grpo-step.slow.test.ts': 0,
  'tests/bench-vs-trl.slow.test.ts': 0,
};

const SLOW = /\.slow\.test\.tsx?$/;

/**
 * `files` (paths relative to the repository, in Vitest's order) in the order to start them: slow files not in
 * FILE_SECONDS, then the listed ones from the longest, then the rest. Each group keeps Vitest's relative order
 * (the shared half's files, none of them listed, run in exactly the order Vitest gives them).
 */
export function orderFiles(files: readonly string[]): string[] {
  const known = (f: string) => Object.prototype.hasOwnProperty.call(FILE_SECONDS, f);
  const unknownSlow = files.filter((f) => SLOW.test(f) && !known(f));
  // Array.prototype.sort is stable: equal durations keep Vitest's order.
  const listed = files.filter(known).sort((a, b) => FILE_SECONDS[b] - FILE_SECONDS[a]);
  const rest = files.filter((f) => !SLOW.test(f) && !known(f));
  return [...unknownSlow, ...listed, ...rest];
}
