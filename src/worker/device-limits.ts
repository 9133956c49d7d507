/**
 * What the chosen backend can hold, checked against a model's config before any weight is read (pure: the
 * limits come in as numbers, so Node tests cover it).
 *
 * - WebGPU: tfjs keeps every tensor in one GPU buffer and binds it whole as a storage buffer, so the largest
 *   tensor must fit both `maxBufferSize` and `maxStorageBufferBindingSize`. GPT-2's token embedding `wte`
 *   (50257 × 768 float32 = 154 MB) is over the 128 MiB that WebGPU guarantees and that many devices allow
 *   (docs/tfjs.md trap 8); past the limit the buffer is invalid and the results are silently wrong,
 *   so refuse first.
 * - WASM: every tensor lives in one WebAssembly heap of at most 4 GB (wasm32), so the weights of the four
 *   models and the two Adam moments must fit, with room left for activations.
 * The total budget against the device's memory (size.ts checkTrainingMemory) applies on every backend.
 * Sizes and estimates: src/core/model/size.ts.
 */
import type { GPT2Config } from '../core/model/config';
import {
  estimateRunMemory,
  fixedBytes,
  formatParts,
  formatGB,
  largestTensor,
  paramCount,
  PPO_DEFAULTS,
  WASM_HEAP_BYTES,
  WASM_HEAP_SHARE,
} from '../core/model/size';
import { UserError } from '../core/errors';
import type { BackendName } from './protocol';

export interface DeviceLimits {
  backend: BackendName;
  /** WebGPU device limits (tfjs asks the adapter for its maximum of both). */
  maxBufferSize?: number;
  maxStorageBufferBindingSize?: number;
  /** WASM: the most bytes the heap can grow to. */
  heapBytes?: number;
}

export { largestTensor, WASM_HEAP_BYTES, WASM_HEAP_SHARE };

const mib = (n: number): string => `${(n / 1024 ** 2).toFixed(0)} MiB`;

/**
 * Throws a UserError naming the limit when `config` cannot be held by the backend described by `limits`.
 * `purpose`: 'train' checks the whole training state; 'load' (generate only) one model's weights.
 */
export function checkDeviceLimits(
  config: GPT2Config,
  label: string,
  limits: DeviceLimits | null,
  purpose: 'train' | 'load' = 'train',
): void {
  if (!limits) return;
  if (limits.backend === 'webgpu') {
    const t = largestTensor(config);
    const caps: [string, number | undefined][] = [
      ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
      ['maxBufferSize', limits.maxBufferSize],
    ];
    for (const [name, cap] of caps) {
      if (cap !== undefined && cap > 0 && t.bytes > cap) {
        throw new UserError(
          `${label} cannot run on this GPU with WebGPU: its largest weight, ${t.name} ` +
            `[${t.shape.join(' × ')}], takes ${mib(t.bytes)}, over this device's ${mib(cap)} limit for one ` +
            `buffer (${name}). GPT-2's token embedding (wte, 154 MB) is over the 128 MiB many GPUs allow. ` +
            'Choose the WASM backend, or a model with a smaller vocabulary or width.',
        );
      }
    }
  }
  if (limits.backend === 'wasm') {
    const heap = limits.heapBytes ?? WASM_HEAP_BYTES;
    const params = paramCount(config);
    const estimate = estimateRunMemory(
      config,
      { batchSize: 0, miniBatches: 1, promptLength: 0, responseLength: 0 },
      PPO_DEFAULTS,
    );
    const need = fixedBytes(estimate);
    if (purpose === 'load') {
      // The weights, and their copy on the way in.
      if (params * 4 * 2 > heap * WASM_HEAP_SHARE) {
        throw new UserError(
          `${label} has ${(params / 1e6).toFixed(1)} M parameters (${formatGB(params * 4)} of weights), more than the ` +
            `WASM backend can hold (its memory stops at ${formatGB(heap)}). Choose WebGPU on a GPU, or a smaller model.`,
        );
      }
      return;
    }
    if (need > heap * WASM_HEAP_SHARE) {
      throw new UserError(
        `${label} has ${(params / 1e6).toFixed(1)} M parameters; training it needs ≈ ${formatGB(need)} of ` +
          `weights, gradients and optimiser state (${formatParts(estimate)}), more than the WASM backend can hold (its memory stops at ` +
          `${formatGB(heap)}, and ${Math.round(WASM_HEAP_SHARE * 100)}% of it, ${formatGB(heap * WASM_HEAP_SHARE)}, ` +
          'may go to the run). Choose WebGPU on a GPU, or a smaller model (e.g. distilbert/distilgpt2 or tiny).',
      );
    }
  }
}
