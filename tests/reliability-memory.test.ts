/**
 * Memory before loading (src/worker/device-limits.ts, src/core/model/size.ts): a model is refused with words, from its
 * config.json alone, when the backend cannot hold it — a training state over the WASM heap or over the
 * device-memory budget. GPT-2's wte under a 128 MiB WebGPU binding is held in chunks and accepted
 * (tests/worker-memory-check.test.ts covers the run-aware checks).
 */
import { describe, it, expect } from 'vitest';
import { parseGPT2Config } from '../src/core/model/config';
import { checkTrainingMemory, paramCount } from '../src/core/model/size';
import { checkDeviceLimits, largestTensor, WASM_HEAP_BYTES } from '../src/worker/device-limits';
import { isUserError } from '../src/common/errors';

const gpt2 = parseGPT2Config({ vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12 });
const distil = parseGPT2Config({ vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 6, n_head: 12 });
const tiny = parseGPT2Config({
  vocab_size: 258,
  n_positions: 256,
  n_embd: 160,
  n_layer: 4,
  n_head: 4,
  tokenizer: 'bytes',
  bos_token_id: 256,
  eos_token_id: 256,
});
const MiB = 1024 ** 2;

function messageOf(f: () => void): string {
  try {
    f();
  } catch (e) {
    expect(isUserError(e)).toBe(true);
    return (e as Error).message;
  }
  return '';
}

describe('memory and device limits, before loading', () => {
  it("finds GPT-2's largest tensor: wte, 50257 × 768 float32", () => {
    expect(largestTensor(gpt2)).toEqual({ name: 'wte.weight', shape: [50257, 768], bytes: 50257 * 768 * 4 });
    expect(paramCount(gpt2)).toBe(124_439_808);
  });

  it('WebGPU: GPT-2 fits a 128 MiB storage binding (wte held in vocabulary chunks); maxBufferSize still counts', () => {
    const limited = {
      backend: 'webgpu' as const,
      maxStorageBufferBindingSize: 128 * MiB,
      maxBufferSize: 256 * MiB,
    };
    expect(messageOf(() => checkDeviceLimits(gpt2, 'openai-community/gpt2', limited))).toBe('');
    expect(
      messageOf(() =>
        checkDeviceLimits(gpt2, 'gpt2', { ...limited, maxStorageBufferBindingSize: 256 * MiB }),
      ),
    ).toBe('');
    // A limit below one row of wte (768 float32 = 3072 bytes) cannot hold any chunk.
    expect(
      messageOf(() =>
        checkDeviceLimits(gpt2, 'gpt2', {
          ...limited,
          maxStorageBufferBindingSize: 1024 * MiB,
          maxBufferSize: 3000,
        }),
      ),
    ).toMatch(/rows are 3072 bytes .* more than the 3000-byte limit/);
    expect(messageOf(() => checkDeviceLimits(tiny, 'built-in tiny', limited))).toBe('');
    expect(messageOf(() => checkDeviceLimits(gpt2, 'gpt2', null))).toBe('');
  });

  it("WASM: GPT-2's training state on the heap (5.6 GB with XNNPACK's packed weights and the heap's growth) is over its 4.1 GB share; distilgpt2 fits", () => {
    const wasm = { backend: 'wasm' as const, heapBytes: WASM_HEAP_BYTES };
    expect(messageOf(() => checkDeviceLimits(gpt2, 'gpt2', wasm))).toMatch(
      /^gpt2 has 124\.4 M parameters; training it needs ≈ 5\.6 GB of weights, gradients and optimiser state \(policy 0\.50, reference 0\.50, value 0\.50, Adam 1\.99, gradients 1\.00, packed weights 1\.02, heap growth 0\.10 GB\), more than the WASM backend can hold \(its memory stops at 4\.3 GB, and 95% of it, 4\.1 GB, may go to the run\)\. Use LoRA \("lora": 8: 1\.2 M adapter parameters trained on one frozen base, ≈ 0\.98 GB of weights and optimiser state\)/,
    );
    expect(messageOf(() => checkDeviceLimits(distil, 'distilgpt2', wasm))).toBe('');
    // Loading GPT-2 to generate with is fine (0.5 GB of weights); a 3 B-parameter-sized one is not.
    expect(messageOf(() => checkDeviceLimits(gpt2, 'gpt2', wasm, 'load'))).toBe('');
    const huge = parseGPT2Config({
      vocab_size: 50257,
      n_positions: 1024,
      n_embd: 2560,
      n_layer: 32,
      n_head: 32,
    });
    expect(messageOf(() => checkDeviceLimits(huge, 'huge', wasm, 'load'))).toMatch(
      /^huge has 2\d{3}\.\d M parameters \(\d+\.\d GB of weights\), more than the WASM backend can hold/,
    );
  });

  it('the device-memory budget refuses with the numbers', () => {
    expect(messageOf(() => checkTrainingMemory(gpt2, 'gpt2', 2 * 1024 ** 3))).toMatch(
      /^gpt2 has 124\.4 M parameters; training it needs ≈ 4\.5 GB of weights, gradients and optimiser state .* over the 2\.1 GB budget here/,
    );
    expect(checkTrainingMemory(tiny, 'tiny', 2 * 1024 ** 3).params).toBeGreaterThan(1e6);
  });
});
