/**
 * Issue #35's decode target on WASM, one thread: a GPT-2-124M-shaped model decoding batch 8 against its
 * memory-bound limit.
 *   npx tsx scripts/bench-decode-limit.ts [MODEL_DIR] [--rounds 3]
 * MODEL_DIR: a GPT-2 124M folder (default .bench/models/gpt2-random-12-768-12-1024-50257, which `bench --vs-trl`
 * makes). What is timed:
 * - the read bandwidth of this core: a WebAssembly SIMD loop summing a 512 MB buffer (loads only, 8 independent
 *   sums, best of `rounds`), the rate at which a token step can stream weights;
 * - a token step: generate(batch 8, a 13-token prompt) with 40 and with 8 new tokens (temperature 1, no early stop),
 *   (t40 − t8) / 32, best of `rounds`: everything a decode step does (the products, attention over the cache, the
 *   LM head, sampling);
 * - the limit: the bytes every token step must read — each weight a product multiplies by (the blocks' matrices
 *   and the LM head over wte), 4 bytes a value — over that bandwidth. The target is a token step within 2× of it.
 * Run nothing else heavy at the same time; the load average is printed. WASM_GEMM=0 times the XNNPACK route.
 */
import * as tf from '@tensorflow/tfjs-core';
import { loadavg } from 'node:os';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeFiles } from '../src/cli/files-node';
import { loadLM } from '../src/core/model/folder';
import { generate } from '../src/core/model/sampling';
import { wasmGemmEnabled } from '../src/core/kernels/wasm-extra';

const arg = (name: string, d: number): number => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};

/** Bytes per second a SIMD loop of loads reads from a buffer far larger than the caches (best of `rounds`). */
async function readBandwidth(rounds: number): Promise<number> {
  const { default: wabtInit } = await import('wabt');
  const wabt = await wabtInit();
  const bytes = 512 * 2 ** 20;
  const pages = bytes / 65536 + 1;
  const sums = Array.from({ length: 8 }, (_, i) => `(local $s${i} v128)`).join(' ');
  const body = Array.from(
    { length: 8 },
    (_, i) => `(local.set $s${i} (f32x4.add (local.get $s${i}) (v128.load offset=${16 * i} (local.get $p))))`,
  ).join(' ');
  const total = Array.from({ length: 8 }, (_, i) => `(local.get $s${i})`).reduce(
    (a, b) => `(f32x4.add ${a} ${b})`,
  );
  const text = `(module (memory (export "mem") ${pages})
    (func (export "sum") (param $n i32) (result f32) (local $p i32) ${sums}
      (loop $l ${body}
        (local.set $p (i32.add (local.get $p) (i32.const 128)))
        (br_if $l (i32.lt_u (local.get $p) (local.get $n))))
      (f32x4.extract_lane 0 ${total})))`;
  const mod = wabt.parseWat('bw', text, { simd: true });
  const instance = await WebAssembly.instantiate(
    await WebAssembly.compile(new Uint8Array(mod.toBinary({}).buffer)),
  );
  const mem = instance.exports.mem as WebAssembly.Memory;
  new Float32Array(mem.buffer, 0, bytes / 4).fill(1); // touch every page
  const sum = instance.exports.sum as (n: number) => number;
  let best = 0;
  for (let r = 0; r < rounds + 1; r++) {
    const t = performance.now();
    sum(bytes);
    const rate = bytes / ((performance.now() - t) / 1000);
    if (r > 0) best = Math.max(best, rate);
  }
  return best;
}

async function main(): Promise<void> {
  const dir =
    process.argv[2] && !process.argv[2].startsWith('--')
      ? process.argv[2]
      : '.bench/models/gpt2-random-12-768-12-1024-50257';
  const rounds = arg('--rounds', 3);
  const load0 = loadavg();
  const bw = await readBandwidth(rounds);
  await setNodeBackend('wasm');
  const { model } = await loadLM(nodeFiles(dir), { trainable: false, label: 'policy' });
  const c = model.config;
  // The weights a token step multiplies by: each block's c_attn, attn.c_proj, c_fc, mlp.c_proj, and the LM head.
  const C = c.n_embd;
  const perBlock = C * 3 * C + C * C + 2 * C * 4 * C;
  const weightBytes = 4 * (c.n_layer * perBlock + c.vocab_size * C);
  const limitMs = (weightBytes / bw) * 1000;
  const prompt = Array.from({ length: 13 }, (_, i) => (i * 7919 + 11) % c.vocab_size);
  const prompts = Array.from({ length: 8 }, () => prompt);
  const run = async (n: number): Promise<number> => {
    const t = performance.now();
    await generate(model, prompts, { maxNewTokens: n, temperature: 1, stopToken: null, padId: 0, rng: 7 });
    return performance.now() - t;
  };
  await run(8); // warm-up: kernels, packed panels
  let best = Infinity;
  for (let r = 0; r < rounds; r++) {
    const long = await run(40);
    const short = await run(8);
    best = Math.min(best, (long - short) / 32);
  }
  model.dispose();
  const load1 = loadavg();
  const out = {
    gemm: wasmGemmEnabled(),
    readGBps: bw / 1e9,
    weightMB: weightBytes / 1e6,
    limitMs,
    tokenStepMs: best,
    overLimit: best / limitMs,
    load0,
    load1,
    tensorsLeft: tf.memory().numTensors,
  };
  console.log(
    `read bandwidth ${out.readGBps.toFixed(1)} GB/s; weights per token step ${out.weightMB.toFixed(0)} MB; ` +
      `limit ${limitMs.toFixed(1)} ms; token step (batch 8) ${best.toFixed(1)} ms = ${out.overLimit.toFixed(2)}× ` +
      `the limit (target ≤ 2×); ${out.gemm ? 'gemm.wat' : 'XNNPACK'}; load average ${load0
        .map((x) => x.toFixed(1))
        .join(' ')} → ${load1.map((x) => x.toFixed(1)).join(' ')}`,
  );
  if (process.argv.includes('--json')) console.log(JSON.stringify(out));
}

await main();
