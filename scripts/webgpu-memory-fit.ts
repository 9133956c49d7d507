/**
 * What a LoRA GRPO step's phases hold on WebGPU, shape by shape, for fitting the estimate's WebGPU terms
 * (src/core/model/size.ts, "On WebGPU"): on Node's Dawn (SwiftShader here), tfjs's buffers in use at most in each
 * phase (src/bench/perf/gpu-buffer-peak.ts) less what was in use when the phase began (weights, adapters, Adam,
 * the recordings kept between steps), over two steps (the first records the update and the decode, the second
 * replays them), beside the estimate's phase floats for the same shape. Every row runs in full (the shared
 * prompt off: the estimate counts rows in full).
 * Usage: npx tsx scripts/webgpu-memory-fit.ts '<json list of shapes>'   (see SHAPE below for the keys)
 * Prints one JSON line per shape.
 */
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { GpuBufferPeakMeter } from '../src/bench/perf/gpu-buffer-peak';
import { Llama } from '../src/core/model/llama';
import { GPT2 } from '../src/core/model/gpt2';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { validateConfig } from '../src/common/config';
import { LoraAdapters } from '../src/core/model/lora';
import { ScalarModel } from '../src/core/model/heads';
import { phaseFloats, runMemoryOptions, scorersOf, type RunShape } from '../src/core/model/size';
import { PpoTrainer, type RewardSource } from '../src/core/ppo/trainer';
import { registerFusedAdamKernels } from '../src/core/optim/fused-adam';
import { bytesModulo } from '../tests/helpers/trainer-fixture';
import type { GPT2Config, LMConfig } from '../src/core/model/config';

interface Shape {
  type: 'llama' | 'qwen2' | 'qwen3' | 'gpt2';
  C: number;
  L: number;
  nh: number;
  nkv?: number;
  d?: number;
  I?: number;
  V?: number;
  B?: number;
  R?: number;
  prompt?: number;
  recompute?: boolean;
  entropy?: boolean;
  /** LoRA's targets (default: the config's, every linear layer). */
  targets?: string[];
  /** LoRA's rank (default 4; 0: full fine-tuning, the policy a trainable copy of the reference). */
  lora?: number;
  /** PPO with a value model ('shared': on the policy's base under its own adapters; 'separate': a trainable copy). */
  ppo?: 'shared' | 'separate';
}

const shapes = JSON.parse(process.argv[2] ?? '[]') as Shape[];
await setNodeBackend('webgpu');
registerFusedAdamKernels();

function configOf(s: Shape): LMConfig {
  const V = s.V ?? 2048;
  if (s.type === 'gpt2') {
    return {
      model_type: 'gpt2',
      vocab_size: V,
      n_positions: 256,
      n_embd: s.C,
      n_layer: s.L,
      n_head: s.nh,
      layer_norm_epsilon: 1e-5,
      bos_token_id: 256,
      eos_token_id: 256,
      pad_token_id: 257,
    } as unknown as GPT2Config;
  }
  return parseLlamaConfig({
    model_type: s.type,
    vocab_size: V,
    hidden_size: s.C,
    intermediate_size: s.I ?? 3 * s.C,
    num_hidden_layers: s.L,
    num_attention_heads: s.nh,
    num_key_value_heads: s.nkv ?? s.nh,
    head_dim: s.d ?? s.C / s.nh,
    max_position_embeddings: 256,
    tie_word_embeddings: true,
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });
}

const letters = (n: number, seed: number) =>
  Array.from({ length: n }, (_, i) => String.fromCharCode(97 + ((seed * 7 + i * 3) % 26))).join('');

for (const s of shapes) {
  const c = configOf(s);
  const B = s.B ?? 8;
  const R = s.R ?? 16;
  const P = s.prompt ?? 24;
  const cfg = validateConfig(
    {
      model: 'random',
      task: null,
      prompts: [letters(P, 1), letters(P, 2), letters(P, 3), letters(P, 4)],
      reward: 'length',
      batchSize: B,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: R,
      stopToken: null,
      seed: 3,
      ...(s.ppo ? { algorithm: 'ppo', valueModel: s.ppo } : { algorithm: 'grpo', groupSize: 2 }),
      lora: s.lora ?? 4,
      ...(s.targets ? { loraTargets: s.targets } : {}),
      entropyCoef: s.entropy === false ? 0 : 0.01,
      ...(s.recompute ? { recompute: 'blocks' } : {}),
    },
    'memory fit',
  );
  const meter = new GpuBufferPeakMeter();
  meter.install();
  const ref =
    s.type === 'gpt2'
      ? GPT2.random(c as GPT2Config, 1, false, 'fit')
      : Llama.random(c as never, 1, false, 'fit');
  const policy =
    cfg.lora > 0
      ? ref.withLora(LoraAdapters.create(c, cfg, 3, 'policy'), 'policy')
      : (ref as Llama).clone(true, 'fit-policy');
  const reward: RewardSource = { kind: 'fn', fn: (x) => x.responseTokens.length, label: 'tokens' };
  const value = !s.ppo
    ? null
    : s.ppo === 'shared'
      ? ScalarModel.onSharedBase(
          (policy as unknown as { base: never }).base,
          LoraAdapters.create(c, cfg, 4, 'value'),
          'value',
        )
      : ScalarModel.fromTrunk(policy, true, 'value');
  const phases: Record<string, number[]> = { generating: [], scoring: [], updating: [] };
  const starts: Record<string, number[]> = { generating: [], scoring: [], updating: [], idle: [] };
  const absolute: Record<string, number[]> = { generating: [], scoring: [], updating: [] };
  let current: string | null = null;
  let start = 0;
  const close = () => {
    if (current && phases[current]) {
      phases[current].push(meter.read()!.usedBytes - start);
      absolute[current].push(meter.read()!.usedBytes);
    }
  };
  const backend = tf.backend() as unknown as { bufferManager: { numBytesUsed: number } };
  const trainer = new PpoTrainer(
    () => cfg,
    { policy, ref, value, reward } as never,
    bytesModulo(),
    cfg.prompts!,
    {
      phase: (p) => {
        close();
        current = p;
        start = backend.bufferManager.numBytesUsed;
        starts[p]?.push(start);
        meter.reset();
      },
    },
  );
  trainer.sharedPrefix = false;
  const before = backend.bufferManager.numBytesUsed;
  const t0 = Date.now();
  try {
    await trainer.trainStep();
    await trainer.trainStep();
    const shape = (trainer as unknown as { runShape(x: typeof cfg): RunShape }).runShape(cfg);
    const opts = runMemoryOptions(cfg, false);
    const est = phaseFloats(c, shape, {
      scorers: scorersOf(opts),
      wteTrains: false,
      lora: opts.lora,
      sharedTape: false,
      inPlaceCache: true,
      fusedLogprob: true,
      webgpu: true,
    });
    const total = trainer.memoryEstimate(cfg);
    const longest = Math.max(...trainer['promptTokens'].map((p: number[]) => p.length));
    console.log(
      JSON.stringify({
        shape: { ...s, B, R, prompt: longest, T: longest + R, V: c.vocab_size },
        plan: { micro: shape.microBatchSize, gen: shape.generateMicroBatchSize, recompute: shape.recompute },
        measured: {
          generate: Math.max(...phases.generating),
          score: Math.max(...phases.scoring),
          update: Math.max(...phases.updating),
          perStep: phases,
          starts,
          absolute,
          before,
        },
        estimateBytes: { generate: est.generate * 4, score: est.score * 4, update: est.update * 4 },
        // The whole step: the most of tfjs's buffers in use (either step) against the trainer's estimate on WebGPU.
        peakBytes: Math.max(...Object.values(absolute).flat()),
        estimateTotalBytes: total.total,
        estimatePeakPhase: total.peakPhase,
        seconds: (Date.now() - t0) / 1000,
      }),
    );
  } finally {
    trainer.disposeOptimizers();
    value?.dispose();
    policy.dispose();
    ref.dispose();
    meter.uninstall();
  }
}
process.exit(0);
