/**
 * The estimate on WebGPU against tfjs's buffers (model/size.ts RunMemoryOptions.inPlaceCache and fusedLogprob): on
 * Node's Dawn (SwiftShader here), the most bytes of tfjs's buffers in use at once (src/bench/perf/gpu-buffer-peak.ts;
 * the replayed decode's and update's frames included) stay within what the estimate counts: while a Qwen2-shaped
 * model with grouped KV heads generates for 16 rows (the cache held once: written in place, heads not repeated),
 * and over a LoRA GRPO step whose update takes whole logits through the fused log-prob (with the entropy's
 * gradient, the larger case). Slow: a 32-token generation and two training steps on the software adapter.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import { Llama } from '../src/core/model/llama';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { GpuBufferPeakMeter } from '../src/bench/perf/gpu-buffer-peak';
import { generate } from '../src/core/model/sampling';
import { validateConfig } from '../src/common/config';
import { LoraAdapters } from '../src/core/model/lora';
import {
  estimateGenerateMemory,
  estimateRunMemory,
  runMemoryOptions,
  type RunShape,
} from '../src/core/model/size';
import { PpoTrainer, type RewardSource } from '../src/core/ppo/trainer';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import { bytesModulo } from './helpers/trainer-fixture';

const adapter = await webGpuAdapter();

describe('the estimate against tfjs buffers on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
    registerFusedAdamKernels();
  });

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
      const N = 32;
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
      // The cache alone: 2 layers × 2 (keys, values) × 16 rows × 64 positions × 2 KV heads × 32 × 4 bytes = 2.1 MB.
      expect(used).toBeGreaterThan(2 * 2 * 16 * 64 * 64 * 4);
      expect(used).toBeLessThanOrEqual(est.parts.activations);
      expect(est.parts.activations).toBeLessThan(cpu.parts.activations);
    } finally {
      meter.uninstall();
      m.dispose();
    }
  }, 600_000);

  // Two LoRA GRPO steps (the first records the update, the second replays it while the recording holds its
  // buffers): whole logits of a large vocabulary (the fused log-prob's terms), and a small vocabulary where the blocks
  // and the held recording set the peak, its rows run in full as the estimate counts them (with the groups' prompts
  // shared, the default, that step held 1.51× less than the estimate; the first case shares them: 1.54×).
  it.each([
    { what: 'whole logits (V 16 384)', V: 16384, I: 384, share: true, bound: 1.6 },
    {
      what: 'the blocks, every row in full (V 2 048, intermediate 768)',
      V: 2048,
      I: 768,
      share: false,
      bound: 1.4,
    },
  ])(
    'a LoRA GRPO step, $what: the buffers in use stay within the estimate, and it within $bound× them',
    async ({ V, I, share, bound }) => {
      const c = parseLlamaConfig({
        model_type: 'qwen3',
        vocab_size: V,
        hidden_size: 128,
        intermediate_size: I,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 32,
        max_position_embeddings: 64,
        tie_word_embeddings: true,
        bos_token_id: 256,
        eos_token_id: 256,
        pad_token_id: 257,
      });
      const cfg = validateConfig(
        {
          model: 'random',
          task: null,
          prompts: ['the movie was really', 'a film that i thought', 'this story is quite'],
          reward: 'length',
          batchSize: 8,
          miniBatches: 1,
          ppoEpochs: 1,
          responseLength: 16,
          stopToken: null,
          seed: 3,
          algorithm: 'grpo',
          groupSize: 2,
          lora: 4,
          entropyCoef: 0.01,
        },
        'memory test',
      );
      // Ids past the bytes' 258 decode as bytes (the model's vocabulary is larger than the tokenizer's).
      const tokenizer = bytesModulo();
      const meter = new GpuBufferPeakMeter();
      expect(meter.install()).toBe(true);
      const before = meter.read()!.usedBytes;
      const ref = Llama.random(c, 1, false, 'memest');
      const policy = ref.withLora(LoraAdapters.create(c, cfg, 3, 'policy'), 'policy');
      const reward: RewardSource = { kind: 'fn', fn: (s) => s.responseTokens.length, label: 'tokens' };
      const trainer = new PpoTrainer(
        () => cfg,
        { policy, ref, value: null!, reward },
        tokenizer,
        cfg.prompts!,
      );
      trainer.sharedPrefix = share;
      try {
        await trainer.trainStep(); // recordings made
        await trainer.trainStep();
        const used = meter.read()!.usedBytes - before;
        const e = trainer.memoryEstimate(cfg);
        // The same shape counted as the CPU's ops hold it (the trainer's own shape: a private method, read here).
        const shape = (trainer as unknown as { runShape(x: typeof cfg): RunShape }).runShape(cfg);
        const cpu = estimateRunMemory(c, shape, runMemoryOptions(cfg, false));
        console.log(
          `GRPO step on WebGPU, V ${V}, I ${I}: ${(used / 1e6).toFixed(2)} MB in use at most; estimated ${(e.total / 1e6).toFixed(2)} MB (the CPU's count ${(cpu.total / 1e6).toFixed(2)} MB)`,
        );
        expect(used).toBeLessThanOrEqual(e.total);
        expect(e.total).toBeLessThan(cpu.total);
        // The WebGPU terms (webgpuActivations: the blocks as WebGPU holds them, the update's recording held through
        // generation and scoring) keep the estimate near the step, where the CPU's count read 2–5× over it.
        expect(e.total).toBeLessThanOrEqual(bound * used);
      } finally {
        trainer.disposeOptimizers();
        policy.dispose();
        ref.dispose();
        meter.uninstall();
      }
    },
    600_000,
  );
});
