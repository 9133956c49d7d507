/**
 * `npm run bench` / `cli bench`: benchmarks on the Node backends (WASM by default). Speed is measured here,
 * never in unit tests. Prints a markdown table on stderr/stdout and, with --json, one JSON object last.
 */
import * as tf from '@tensorflow/tfjs-core';
import { parse, str } from './args';
import { setNodeBackend } from './backend-node';
import { parseGPT2Config, type GPT2Config } from '../core/model/config';
import { GPT2 } from '../core/model/gpt2';
import { benchGeneration, TINY_SHAPE, type GenBench } from '../core/bench';
import { nodeFiles } from './files-node';
import { resolveModel } from './models';
import { loadLM } from '../core/model/folder';

export const BENCH_HELP = `bench [--quick] [--backend wasm|cpu] [--json]
  Generation tokens/s with the KV cache vs full recompute (batch 8, 64 new tokens) on the tiny model shape.`;

export async function cmdBench(argv: string[]): Promise<void> {
  const v = parse('bench', argv, { quick: { type: 'boolean' }, backend: { type: 'string' }, json: { type: 'boolean' }, model: { type: 'string' } });
  const backend = await setNodeBackend(str('bench', v, 'backend') ?? 'wasm');
  let model: GPT2;
  const modelArg = str('bench', v, 'model');
  if (modelArg) model = (await loadLM(nodeFiles(resolveModel(modelArg)), { trainable: false })).model;
  else model = GPT2.random(parseGPT2Config(TINY_SHAPE) as GPT2Config, 1, false);
  const rows: GenBench[] = [];
  const cases: [number, number][] = v.quick ? [[8, 64]] : [[8, 64], [8, 128], [32, 64]];
  for (const [b, n] of cases) {
    process.stderr.write(`generation: batch ${b}, ${n} new tokens…\n`);
    rows.push(await benchGeneration(model, b, n));
  }
  model.dispose();
  const table = [
    `| backend | batch | new tokens | KV cache tok/s | recompute tok/s | speed-up |`,
    `|---|---|---|---|---|---|`,
    ...rows.map((r) => `| ${backend} (Node) | ${r.batch} | ${r.newTokens} | ${r.cacheTokensPerSecond.toFixed(0)} | ${r.recomputeTokensPerSecond.toFixed(0)} | ${r.kvSpeedup.toFixed(2)}× |`),
  ].join('\n');
  process.stdout.write(table + '\n');
  if (v.json) {
    const main = rows[0];
    process.stdout.write(JSON.stringify({ backend, kvSpeedup: main.kvSpeedup, generation: rows, numTensors: tf.memory().numTensors }) + '\n');
  }
}
