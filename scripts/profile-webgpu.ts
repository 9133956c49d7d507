/**
 * Where a GPT-2-sized step spends its time on WebGPU in Node (Dawn), on whatever adapter is present: the trunk +
 * LM head forward, generation (greedy and sampled, per token, dispatches per token), and a kernel profile of a
 * short generation (tf.profile; GPU times where the adapter has timestamp queries). A development tool beside
 * `bench --gpu` (which says how fast; this says where). Usage: npx tsx scripts/profile-webgpu.ts [gpt2|tiny]
 * (PPO_LINEAR_SMALL_ROWS=N moves the fused Conv1D's few-rows threshold, for trying it on a GPU).
 */
import * as tf from '@tensorflow/tfjs-core';
import { setNodeWebGpuBackend, adapterLabel } from '../src/cli/backend-webgpu-node';
import { GPT2 } from '../src/core/model/gpt2';
import { SHAPES, shapeConfig } from '../src/bench/perf/memory';
import { generate } from '../src/core/model/sampling';
import { countDispatches } from '../src/bench/webgpu-dispatch';
import { setWebGpuLinearSmallRows } from '../src/core/kernels/webgpu-linear';

const shape = process.argv[2] ?? 'gpt2';
// PPO_LINEAR_SMALL_ROWS=N: the fused Conv1D's few-rows program up to N rows (kernels/webgpu-linear.ts).
if (process.env.PPO_LINEAR_SMALL_ROWS) setWebGpuLinearSmallRows(Number(process.env.PPO_LINEAR_SMALL_ROWS));
const adapter = await setNodeWebGpuBackend();
console.log(`adapter: ${adapterLabel(adapter)}`);
const config = shapeConfig(
  shape === 'gpt2'
    ? SHAPES.gpt2
    : {
        ...SHAPES.gpt2,
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        vocab_size: 258,
        tokenizer: 'bytes',
        bos_token_id: 256,
        eos_token_id: 256,
      },
);
const model = GPT2.random(config, 1, false, 'profile');
const B = 16;
const Tp = 8;
const N = 24;
const ids = tf.tensor2d(
  Array.from({ length: B * (Tp + N) }, (_, i) => (i * 7919) % (config.vocab_size - 1)),
  [B, Tp + N],
  'int32',
);
const mask = tf.onesLike(ids);
const time = async (label: string, f: () => Promise<unknown>, reps = 3): Promise<number> => {
  await f();
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) await f();
  const ms = (performance.now() - t0) / reps;
  console.log(`${label}: ${ms.toFixed(1)} ms`);
  return ms;
};
await time(`forward (trunk + LM head) [${B}, ${Tp + N}]`, async () => {
  const l = model.logits(ids as tf.Tensor2D, mask as tf.Tensor2D);
  await l.data();
  l.dispose();
});
await time(`forward trunk only [${B}, ${Tp + N}]`, async () => {
  const h = model.trunk(ids as tf.Tensor2D, mask as tf.Tensor2D);
  await h.data();
  h.dispose();
});
const prompts = Array.from({ length: B }, (_, b) =>
  Array.from({ length: Tp }, (_, t) => (b * 31 + t * 17) % 250),
);
for (const temperature of [0, 1]) {
  const opts = { maxNewTokens: N, temperature, padId: config.vocab_size - 1, rng: 1, stopToken: null };
  const ms = await time(
    `generate ${B} × ${N} tokens, temperature ${temperature}`,
    () => generate(model, prompts, opts),
    2,
  );
  const c = await countDispatches(() => generate(model, prompts, opts));
  console.log(
    `  ${(ms / N).toFixed(1)} ms per token; ${(c.dispatches / N).toFixed(0)} dispatches per token, ${c.readbacks} readbacks per generation`,
  );
}
const prof = await tf.profile(async () => {
  await generate(model, prompts, {
    maxNewTokens: 4,
    temperature: 1,
    padId: config.vocab_size - 1,
    rng: 1,
    stopToken: null,
  });
  return tf.scalar(0);
});
const by = new Map<string, { ms: number; n: number }>();
let timed = 0;
for (const k of prof.kernels) {
  const t = await (k.kernelTimeMs as unknown as Promise<number | { error: string }>);
  const ms = typeof t === 'number' ? t : 0;
  if (typeof t === 'number') timed++;
  const key = `${k.name} ${JSON.stringify(k.inputShapes)}`;
  const e = by.get(key) ?? { ms: 0, n: 0 };
  e.ms += ms;
  e.n++;
  by.set(key, e);
}
console.log(`profile of a 4-token generation: ${prof.kernels.length} kernels, ${timed} with GPU times`);
for (const [k, v] of [...by.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 15))
  console.log(`  ${v.ms.toFixed(2)} ms  ×${v.n}  ${k.slice(0, 140)}`);
model.dispose();
tf.dispose([ids, mask]);
