/**
 * What running a pair's prompt once saves in DPO (DpoTrainer.sharedPrefix, src/core/model/shared-prefix.ts): steps
 * on a random GPT-2-shaped model (bytes tokenizer) over pairs with a `prompt`-byte prompt and completions of about
 * `completion` bytes, batch 8 pairs, LoRA r 8 or full fine-tuning, with the share on and off (two trainers, each
 * first step untimed; the steps alternate between them), on the backend given.
 * Usage: npx tsx scripts/dpo-shared-prefix-step.ts [wasm|webgpu] [n_embd=512] [n_layer=6] [prompt=96]
 *   [completion=32] [steps=3] [lora=8]
 * Prints each step's time, then one JSON line with the medians and their ratio.
 */
import { rmSync } from 'node:fs';
import { setNodeBackend } from '../src/cli/backend-node';
import { letters, randomBytesGpt2Folder } from './random-bytes-gpt2';
import { nodeFiles } from '../src/cli/files-node';
import { validateDpoConfig } from '../src/common/config/dpo';
import { DpoTrainer } from '../src/core/dpo/trainer';
import { setSharedPrefixDefault } from '../src/core/model/shared-prefix';

const [
  backend = 'wasm',
  embd = '512',
  layers = '6',
  promptLen = '96',
  compLen = '32',
  stepsArg = '3',
  loraArg = '8',
] = process.argv.slice(2);
const [C, L, P, Rc, steps, lora] = [embd, layers, promptLen, compLen, stepsArg, loraArg].map(Number);
await setNodeBackend(backend);
const dir = await randomBytesGpt2Folder(C, L, 512, 'ppo-dpo-shared-');
const text = letters;
const data = {
  text: Array.from({ length: 40 }, (_, i) =>
    JSON.stringify({
      prompt: text(P - (i % 5), i),
      chosen: text(Rc - (i % 3), i + 1),
      rejected: text(Rc - (i % 4), i + 2),
    }),
  ).join('\n'),
  source: 'pairs.jsonl',
};
const cfg = validateDpoConfig({
  algorithm: 'dpo',
  data: 'pairs.jsonl',
  batchSize: 8,
  steps: 100,
  evalEvery: 1000,
  heldOut: 0.1,
  learningRate: 1e-4,
  lora,
});
const trainers: Record<'on' | 'off', DpoTrainer> = {} as Record<'on' | 'off', DpoTrainer>;
for (const k of ['on', 'off'] as const) {
  setSharedPrefixDefault(k === 'on');
  trainers[k] = await DpoTrainer.build(cfg, nodeFiles(dir), data);
}
const times: Record<'on' | 'off', number[]> = { on: [], off: [] };
try {
  for (let s = -1; s < steps; s++) {
    for (const k of ['on', 'off'] as const) {
      const t = (await trainers[k].trainStep(false)).timeStep;
      console.log(`${s < 0 ? 'warm-up' : `step ${s}`}, share ${k}: ${t.toFixed(3)} s`);
      if (s >= 0) times[k].push(t);
    }
  }
} finally {
  trainers.on.dispose();
  trainers.off.dispose();
  rmSync(dir, { recursive: true, force: true });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const [on, off] = [median(times.on), median(times.off)];
console.log(
  JSON.stringify({
    backend,
    shape: { n_embd: C, n_layer: L, prompt: P, completion: Rc, pairs: 8, lora },
    on,
    off,
    onOverOff: on / off,
  }),
);
