/**
 * Where a replayed decode token's GPU time goes (issues #31 and #36; docs/gpu.md, "Where a replayed token's time
 * goes"): each model below generates greedily with the recorded decode (model/decode-replay.ts), and its recorded
 * step is profiled before it is freed (kernels/webgpu-replay-profile.ts): the wall time of a replay as decode runs
 * it (one compute pass), each dispatch's kernel time from timestamp queries (a pass of its own each), the difference
 * per dispatch, and the time per program. Cases:
 * - GPT-2 124M's shape (random weights), batch 16 and batch 1: issue #31's greedy decode (≤ 3 ms a token at B16);
 * - Qwen2.5-1.5B's shape (random BF16 weights), batch 1, base in f16 then in f32: issue #36's "decode reads half the
 *   bytes" (f16 ≤ 0.6 × f32), which a fixed cost a dispatch bounds (docs/gpu.md);
 * - the same f16 base under LoRA r 8 on its seven projections, batch 16, sampled at temperature 1: the generation of
 *   issue #36's GRPO step (1.87 s of its 3.93 s on the third lease, about 29 ms a token).
 * On a software adapter the shapes shrink (GPT-2 at width 64 with 2 layers, Qwen's dry-run slice): a check that it
 * runs, not a measurement. Timestamps are not quantised (PPO_DAWN_DISABLE=timestamp_quantization unless set). The kernel forms
 * are the device's (core/backend/webgpu-tune.ts: remembered for the adapter, else timed at start), as decode runs.
 * Ends with one JSON line. Usage: npx tsx scripts/profile-replay.ts [gpt2,qwen] [tokens=24]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

process.env.PPO_DAWN_DISABLE ??= 'timestamp_quantization';
const tf = await import('@tensorflow/tfjs-core');

const { setNodeWebGpuBackend, adapterLabel } = await import('../src/cli/backend-webgpu-node');
const { GPT2 } = await import('../src/core/model/gpt2');
const { SHAPES, shapeConfig } = await import('../src/bench/perf/memory');
const { generate } = await import('../src/core/model/sampling');
const { setDecodeReplay, setDecodeReplayProbe } = await import('../src/core/model/decode-replay');
const { profileReplayFrame, describeReplayProfile } =
  await import('../src/core/kernels/webgpu-replay-profile');
const { writeRandomBf16LlamaFolder } = await import('../src/cli/random-bf16-folder');
const { f16BenchShape } = await import('../src/bench/torch-grpo');
const { loadLM } = await import('../src/core/model/folder');
const { nodeFiles } = await import('../src/cli/files-node');
const { nodeResources } = await import('../src/cli/train');
const { LoraAdapters, familyLoraTargets } = await import('../src/core/model/lora');
type CausalLM = import('../src/core/model/lm').CausalLM;
type ReplayProfile = import('../src/core/kernels/webgpu-replay-profile').ReplayProfile;

const which = (process.argv[2] ?? 'gpt2,qwen').split(',');
const N = Number(process.argv[3] ?? 24);
const adapter = await setNodeWebGpuBackend();
const dry = adapter.software;
console.log(`adapter: ${adapterLabel(adapter)}${dry ? ' (software: small shapes, not a measurement)' : ''}`);
setDecodeReplay(true);

const results: Record<string, ReplayProfile & { msPerToken: number }> = {};
async function profileCase(
  key: string,
  model: CausalLM,
  B: number,
  vocab: number,
  temperature = 0,
): Promise<void> {
  const prompts = Array.from({ length: B }, (_, b) =>
    Array.from({ length: 16 }, (_, t) => (b * 31 + t * 7 + 5) % vocab),
  );
  const opts = { maxNewTokens: N, temperature, topK: 0, stopToken: null, padId: 0, rng: 1 };
  await generate(model, prompts, opts); // compile, warm
  const t0 = performance.now();
  await generate(model, prompts, { ...opts, maxNewTokens: 8 });
  const t8 = performance.now() - t0;
  const t1 = performance.now();
  let p: ReplayProfile | null = null;
  setDecodeReplayProbe(async (frame) => {
    const t = performance.now();
    p = await profileReplayFrame(frame, { reps: 5, top: 8 });
    probeMs += performance.now() - t;
  });
  let probeMs = 0;
  try {
    await generate(model, prompts, opts);
  } finally {
    setDecodeReplayProbe(null);
  }
  // ms a token of the generation itself: the N-token run (less its profile) against the 8-token one.
  const msPerToken = (performance.now() - t1 - probeMs - t8) / (N - 8);
  if (!p) throw new Error(`${key}: the generation did not replay its decode`);
  const prof = p as ReplayProfile;
  results[key] = { ...prof, msPerToken };
  console.log(`${key}: ${msPerToken.toFixed(3)} ms a token; ${describeReplayProfile(prof, 8)}`);
  for (const t of prof.top)
    console.log(`  #${t.index} ${t.label} [${t.workgroups.join(', ')}] ${t.us.toFixed(1)} µs`);
}

if (which.includes('gpt2')) {
  const shape = dry ? { ...SHAPES.gpt2, n_embd: 64, n_layer: 2, n_head: 2 } : SHAPES.gpt2;
  const m = GPT2.random(shapeConfig(shape), 1234, false, 'profile-replay');
  try {
    for (const B of [16, 1]) await profileCase(`gpt2.b${B}`, m, B, 50257);
  } finally {
    m.dispose();
  }
}
if (which.includes('qwen')) {
  const dir = join(await mkdtemp(join(tmpdir(), 'ppo-profile-replay-')), 'qwen2.5-1.5b');
  const shape = f16BenchShape('qwen2.5-1.5b', dry);
  console.log(
    `writing a Qwen2.5-1.5B-shaped folder (random BF16 weights${dry ? ', dry run' : ''}) to ${dir}`,
  );
  await writeRandomBf16LlamaFolder(dir, shape);
  try {
    for (const baseDtype of ['f16', 'f32'] as const) {
      const { model } = await loadLM(nodeFiles(dir), {
        trainable: false,
        maxBindingBytes: nodeResources.maxBindingBytes,
        ...(baseDtype === 'f16' ? { baseDtype } : {}),
      });
      try {
        await profileCase(`qwen2.5-1.5b.${baseDtype}.b1`, model, 1, shape.vocab_size as number);
        if (baseDtype === 'f16') {
          // GRPO's generation: the adapters' B's made non-zero, as after an update.
          const adapters = LoraAdapters.create(
            model.config,
            { lora: 8, loraTargets: [...familyLoraTargets(model.config)] },
            5,
          );
          for (const m of adapters.modules.values())
            tf.tidy(() => m.b.assign(tf.mul(tf.onesLike(m.b), 0.01)));
          try {
            const lora = model.withLora(adapters);
            await profileCase('qwen2.5-1.5b.f16.lora.b16.sampled', lora, 16, shape.vocab_size as number, 1);
          } finally {
            adapters.dispose();
          }
        }
      } finally {
        model.dispose();
      }
    }
    const f16 = results['qwen2.5-1.5b.f16.b1'];
    const f32 = results['qwen2.5-1.5b.f32.b1'];
    console.log(
      `f16 ÷ f32 a token: ${(f16.msPerToken / f32.msPerToken).toFixed(3)} (generation), ${(f16.wallUsPerReplay / f32.wallUsPerReplay).toFixed(3)} (replay wall)`,
    );
  } finally {
    await rm(join(dir, '..'), { recursive: true, force: true });
  }
}
console.log(JSON.stringify({ adapter: adapterLabel(adapter), software: dry, tokens: N, profiles: results }));
process.exit(0);
