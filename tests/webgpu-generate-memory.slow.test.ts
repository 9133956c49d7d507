/**
 * Generation's memory on WebGPU against the estimate (RunMemoryOptions.inPlaceCache, model/size.ts): on Node's
 * Dawn (SwiftShader here), the most bytes of tfjs's buffers in use at once while a Qwen2-shaped model with grouped
 * KV heads generates for 16 rows (src/bench/perf/gpu-buffer-peak.ts), the replayed decode's frame included, stay
 * within what the estimate counts beyond the weights, with the cache held once (written in place, heads not
 * repeated). Slow: a generation of 64 tokens on the software adapter.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import { Llama } from '../src/core/model/llama';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { estimateGenerateMemory } from '../src/core/model/size';
import { GpuBufferPeakMeter } from '../src/bench/perf/gpu-buffer-peak';
import { generate } from '../src/core/model/sampling';

const adapter = await webGpuAdapter();

describe('generation memory on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('a GQA model at batch 16: the buffers in use stay within the in-place estimate', async () => {
    const c = parseLlamaConfig({
      model_type: 'qwen2',
      vocab_size: 2048,
      hidden_size: 256,
      intermediate_size: 512,
      num_hidden_layers: 2,
      num_attention_heads: 8,
      num_key_value_heads: 2,
      max_position_embeddings: 256,
      tie_word_embeddings: true,
      bos_token_id: 1,
      eos_token_id: 2,
      pad_token_id: 0,
    });
    const m = Llama.random(c, 1, false, 'genmem');
    const meter = new GpuBufferPeakMeter();
    try {
      const B = 16;
      const Tp = 32;
      const N = 64;
      const prompts = Array.from({ length: B }, (_, b) =>
        Array.from({ length: Tp }, (_, i) => 3 + ((b * 7 + i) % 100)),
      );
      await generate(m, prompts.slice(0, 2), { maxNewTokens: 4, temperature: 0, padId: 0, rng: 1 }); // kernels built
      expect(meter.install()).toBe(true);
      const before = meter.read()!.usedBytes;
      await generate(m, prompts, { maxNewTokens: N, temperature: 1, padId: 0, rng: 1, sharePrompts: false });
      const used = meter.read()!.usedBytes - before;
      const est = estimateGenerateMemory(
        c,
        { batchSize: B, promptLength: Tp, maxNewTokens: N },
        { inPlaceCache: true },
      );
      const cpu = estimateGenerateMemory(c, { batchSize: B, promptLength: Tp, maxNewTokens: N });
      console.log(
        `generation on WebGPU: ${(used / 1e6).toFixed(2)} MB in use at most; estimated ${(est.parts.activations / 1e6).toFixed(2)} MB (the CPU's count ${(cpu.parts.activations / 1e6).toFixed(2)} MB)`,
      );
      // The cache alone: 2 layers × 2 (keys, values) × 16 rows × 96 positions × 2 KV heads × 32 × 4 bytes = 3.1 MB.
      expect(used).toBeGreaterThan(2 * 2 * 16 * 96 * 64 * 4);
      expect(used).toBeLessThanOrEqual(est.parts.activations);
      expect(est.parts.activations).toBeLessThan(cpu.parts.activations);
    } finally {
      meter.uninstall();
      m.dispose();
    }
  }, 600_000);
});
