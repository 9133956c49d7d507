/**
 * How the end-to-end tests launch Debian's Chromium (playwright.config.ts): the WebGPU-through-SwiftShader flags
 * of src/cli/chromium-args.ts (slow but correct, so the specs keep shapes tiny and assert that the backend really is
 * WebGPU), under the tests' Dawn toggles.
 */
import { CHROMIUM_ARGS } from '../src/cli/chromium-args';

export { CHROMIUM_ARGS };

/**
 * The Dawn toggles the tests run under, in Chromium and in Node (vitest.config.ts sets `PPO_DAWN_TOGGLES` from
 * it). `disable_workgroup_init`: Dawn stops zeroing each workgroup's shared memory at the start of every
 * dispatch. On SwiftShader that zeroing made most WebGPU tests 3–10× slower (tests/webgpu-matmul.test.ts 153 s →
 * 14 s; e2e/playground.spec.ts's first step 51 → 20 s). It can only make a test fail, never pass: a kernel that
 * read workgroup memory before writing it would read garbage instead of zeros. No kernel of ours or of tfjs's
 * relies on the zeros, and e2e/webgpu-kernels.spec.ts checks every fused kernel again under Dawn's defaults, as a
 * browser runs them (docs/architecture.md, "Tests").
 */
export const TEST_DAWN_TOGGLES = 'disable_workgroup_init';

/** The launch arguments of every spec: the WebGPU flags and the test toggles. */
export const CHROMIUM_TEST_ARGS = [...CHROMIUM_ARGS, `--enable-dawn-features=${TEST_DAWN_TOGGLES}`];
