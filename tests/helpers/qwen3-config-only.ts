/**
 * The worker's model sources over a Qwen3-1.7B-shaped folder that holds only config.json and a tokenizer (no
 * weights read), as tests/f16-base-estimate.test.ts and tests/f16-generate-load.test.ts drive it, with the
 * hand-worked byte counts both check against; and `refusal`, the message of a UserError a job throws.
 */
import { readFileSync } from 'node:fs';
import { expect } from 'vitest';
import { isUserError } from '../../src/common/errors';
import { memoryFiles, type ModelFiles } from '../../src/core/model/folder';
import { LLAMA_SHAPES } from '../../src/core/model/llama-config';
import { loadTaskNode } from '../../src/cli/tasks-node';
import type { ModelSources } from '../../src/worker/sources';
import type { DeviceLimits } from '../../src/worker/device-limits';

/**
 * Qwen3-1.7B by hand (LLAMA_SHAPES['qwen3-1.7b']: vocabulary 151 936, hidden 2048, 28 layers, 16 heads of 128, 8 KV
 * heads, MLP 6144, tied head). The matrices: embed_tokens 151 936 × 2048 = 311 164 928, and per layer q and o
 * 2048 × 2048, k and v 1024 × 2048, gate / up / down 6144 × 2048 = 50 331 648, × 28 = 1 409 286 144; together
 * 1 720 451 072. The norms (f32 in either case): per layer 2 × 2048 + q_norm 128 + k_norm 128 = 4352, × 28, and the
 * final 2048: 123 904.
 */
export const MATRICES = 311_164_928 + 28 * 50_331_648;
export const NORMS = 28 * 4352 + 2048;
export const BASE_F32 = 4 * (MATRICES + NORMS); // 6 882 299 904: "6.88 GB"
export const BASE_F16 = 2 * MATRICES + 4 * NORMS; // 3 441 397 760: "3.44 GB"
/** What the worker assumes when the browser reports 8 GB (navigator.deviceMemory's cap): 60% of 8 GiB. */
export const BUDGET_8GB = 8 * 1024 ** 3 * 0.6;

const FIXTURE = 'tests/fixtures/hf-tokenizer/';
export const GPT2_JSON = { vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12 };

/**
 * Model sources where "qwen3-1.7b" is the config-only Qwen3-1.7B folder and "gpt2-124m" a config-only GPT-2 124M,
 * on the device `limits()` reports, with the 8 GB budget; `fileBytes()` (when given) is the size of
 * model.safetensors as if its bytes were held (null: unknown, as for a Hub model); `ranged()` (when given) whether
 * it is read a tensor at a time (as picked Files are).
 */
export async function configOnlySources(
  limits: () => DeviceLimits,
  fileBytes?: () => number | null,
  ranged?: () => boolean,
): Promise<ModelSources> {
  // The worker's modules read `self` and `navigator` when they load.
  (globalThis as { self?: unknown }).self ??= globalThis;
  (globalThis as { navigator?: unknown }).navigator ??= {};
  const { ModelSources } = await import('../../src/worker/sources');
  const folder = new Map<string, Uint8Array>([
    ['config.json', new TextEncoder().encode(JSON.stringify(LLAMA_SHAPES['qwen3-1.7b']))],
    ...['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'].map(
      (n) => [n, new Uint8Array(readFileSync(`${FIXTURE}${n}`))] as [string, Uint8Array],
    ),
  ]);
  class ConfigOnly extends ModelSources {
    override files(name: string): ModelFiles {
      if (name === 'qwen3-1.7b') return memoryFiles('qwen3-1.7b', folder);
      if (name === 'gpt2-124m')
        return memoryFiles(
          'gpt2-124m',
          new Map([['config.json', new TextEncoder().encode(JSON.stringify(GPT2_JSON))]]),
        );
      return super.files(name);
    }
    override weightsFileBytes(name: string): number | null {
      return fileBytes ? fileBytes() : super.weightsFileBytes(name);
    }
    override readsWeightsByRanges(name: string): boolean {
      return ranged ? ranged() : super.readsWeightsByRanges(name);
    }
    override loadTask = loadTaskNode;
  }
  return new ConfigOnly(() => {}, { deviceLimits: limits, memoryBudgetBytes: BUDGET_8GB });
}

/** The message of the UserError `job` throws ('' when it throws nothing); any other error fails the test. */
export async function refusal(job: () => Promise<unknown>): Promise<string> {
  try {
    await job();
  } catch (e) {
    expect(isUserError(e), String(e)).toBe(true);
    return (e as Error).message;
  }
  return '';
}
