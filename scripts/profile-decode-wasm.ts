/**
 * Where a WASM decode step's time goes: GPT-2 124M, batch 8, 13-token prompt, generate 40 tokens under tf.profile,
 * kernels by total ms (split by input shapes). A development tool beside scripts/bench-decode-limit.ts.
 *   npx tsx scripts/profile-decode-wasm.ts [MODEL_DIR]
 */
import * as tf from '@tensorflow/tfjs-core';
import * as wasm from '@tensorflow/tfjs-backend-wasm';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeFiles } from '../src/cli/files-node';
import { loadLM } from '../src/core/model/folder';
import { generate } from '../src/core/model/sampling';

const dir = process.argv[2] ?? '.bench/models/gpt2-random-12-768-12-1024-50257';
wasm.setThreadsCount(1);
await setNodeBackend('wasm');
const { model } = await loadLM(nodeFiles(dir), { trainable: false, label: 'policy' });
const V = model.config.vocab_size;
const prompt = Array.from({ length: 13 }, (_, i) => (i * 7919 + 11) % V);
const batch = Number(process.argv[4] ?? 8);
const prompts = Array.from({ length: batch }, () => prompt);
const run = (n: number) =>
  generate(model, prompts, { maxNewTokens: n, temperature: 1, stopToken: null, padId: 0, rng: 7 });
await run(8);
const n = Number(process.argv[3] ?? 40);
let t = performance.now();
await run(n);
console.log(`unprofiled: ${n} tokens ${(performance.now() - t).toFixed(0)} ms`);
t = performance.now();
const info = await tf.profile(async () => {
  await run(n);
});
const wall = performance.now() - t;
const by = new Map<string, { ms: number; count: number }>();
let total = 0;
for (const k of info.kernels) {
  const ms = typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
  total += ms;
  const key = `${k.name} ${JSON.stringify(k.inputShapes)}`;
  const e = by.get(key) ?? { ms: 0, count: 0 };
  e.ms += ms;
  e.count++;
  by.set(key, e);
}
const byName = new Map<string, { ms: number; count: number }>();
for (const [key, e] of by) {
  const name = key.split(' ')[0];
  const f = byName.get(name) ?? { ms: 0, count: 0 };
  f.ms += e.ms;
  f.count += e.count;
  byName.set(name, f);
}
console.log(
  `profiled wall ${wall.toFixed(0)} ms, in kernels ${total.toFixed(0)} ms, ${info.kernels.length} kernels`,
);
for (const [name, e] of [...byName].sort((a, b) => b[1].ms - a[1].ms).slice(0, 25))
  console.log(`${e.ms.toFixed(1).padStart(8)} ms ${String(e.count).padStart(6)}× ${name}`);
console.log('--- by shape');
for (const [key, e] of [...by].sort((a, b) => b[1].ms - a[1].ms).slice(0, Number(process.env.TOP ?? 30)))
  console.log(`${e.ms.toFixed(1).padStart(8)} ms ${String(e.count).padStart(6)}× ${key}`);
model.dispose();
