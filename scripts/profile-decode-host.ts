/**
 * What one KV-cache decode token costs the HOST on WebGPU (Node, Dawn): the JavaScript that tfjs and our model run
 * to encode a token's kernels, apart from what the GPU then does with them. tfjs's WebGPU backend encodes every
 * kernel synchronously when the op is called (a bind group, a uniform buffer, the dispatch), so the wall time of
 * the synchronous calls `decodeStep` and `lmHead` is the host's share of a token; `runWebGPUProgram` is timed
 * apart (tfjs's program path: shader lookup, uniforms, bind group, encode), and what is left is the engine's
 * bookkeeping (tensors, tidy scopes, kernel lookup) and ours. A narrow model with GPT-2's 12 layers and vocabulary
 * keeps the device's work small, so that on a software adapter too the numbers are the host's: the ops, their
 * count and their order do not depend on the width. On a GPU, run it at width 768 as well: if the host's time per
 * token is most of the measured ms/token, decode is bound by the host, not by the GPU (docs/gpu.md, "What bounds
 * decode").
 * It runs the unrecorded path (every token through tfjs's ops) and then the replayed one (model/decode-replay.ts: the
 * first decode token recorded, the rest replayed), and ends with one JSON line: `hostMsPerToken`, `hostUsPerDispatch`
 * and `dispatchesPerToken` of the replayed path (what issue #31 drives down), the unrecorded path's beside them.
 * Usage: npx tsx scripts/profile-decode-host.ts [width=64] [batch=16] [tokens=24]
 */
import * as tf from '@tensorflow/tfjs-core';
import { setNodeWebGpuBackend, adapterLabel } from '../src/cli/backend-webgpu-node';
import { GPT2 } from '../src/core/model/gpt2';
import { SHAPES, shapeConfig } from '../src/bench/perf/memory';
import { generate } from '../src/core/model/sampling';
import { countDispatches } from '../src/bench/webgpu-dispatch';
import { lastDecodeReplayStats, setDecodeReplay } from '../src/core/model/decode-replay';

const width = Number(process.argv[2] ?? 64);
const B = Number(process.argv[3] ?? 16);
const N = Number(process.argv[4] ?? 24);
const Tp = 8;
const adapter = await setNodeWebGpuBackend();
console.log(
  `adapter: ${adapterLabel(adapter)}; GPT-2 12 layers, width ${width}, vocabulary 50257, batch ${B}`,
);
const config = shapeConfig({
  ...SHAPES.gpt2,
  n_embd: width,
  n_head: width % 12 === 0 && width >= 384 ? 12 : 4,
});
const model = GPT2.random(config, 1, false, 'profile-host');

// Host time of the synchronous calls, and of tfjs's program path inside them.
const host = { decode: 0, head: 0, program: 0, programs: 0, steps: 0 };
const byProgram = new Map<string, { ms: number; n: number }>();
const wrap = <A extends unknown[], R>(f: (...a: A) => R, add: (ms: number) => void) =>
  function (this: unknown, ...a: A): R {
    const t0 = performance.now();
    try {
      return f.apply(this, a);
    } finally {
      add(performance.now() - t0);
    }
  };
const m = model as unknown as Record<string, (...a: unknown[]) => unknown>;
m.decodeStep = wrap(m.decodeStep.bind(model), (ms) => {
  host.decode += ms;
  host.steps++;
});
m.lmHead = wrap(m.lmHead.bind(model), (ms) => (host.head += ms));
const backend = tf.backend() as unknown as Record<string, (...a: unknown[]) => unknown>;
const run = backend.runWebGPUProgram.bind(backend);
backend.runWebGPUProgram = function (...a: unknown[]) {
  const t0 = performance.now();
  try {
    return run(...a);
  } finally {
    const ms = performance.now() - t0;
    host.program += ms;
    host.programs++;
    const key = String((a[0] as { shaderKey?: string }).shaderKey ?? 'unknown').slice(0, 60);
    const e = byProgram.get(key) ?? { ms: 0, n: 0 };
    e.ms += ms;
    e.n++;
    byProgram.set(key, e);
  }
};

const prompts = Array.from({ length: B }, (_, b) =>
  Array.from({ length: Tp }, (_, t) => (b * 31 + t * 17) % 250),
);
const opts = { maxNewTokens: N, temperature: 0, padId: config.vocab_size - 1, rng: 1, stopToken: null };

// 1. The unrecorded path (every token through tfjs's ops): what the host pays per program.
setDecodeReplay(false);
await generate(model, prompts, opts); // warm: shaders compiled, buffer pools filled
const counted = await countDispatches(() => generate(model, prompts, opts));
for (const k of Object.keys(host) as (keyof typeof host)[]) host[k] = 0;
byProgram.clear();
let t0 = performance.now();
const plain = await generate(model, prompts, opts);
const plainWall = performance.now() - t0;
const steps = host.steps; // decode steps (N − 1: the first token comes from the prefill's logits)
const per = (ms: number) => (ms / steps).toFixed(2);
const plainHostMs = (host.decode + host.head) / steps;
const plainPrograms = host.programs / steps;
console.log(
  `unrecorded: greedy generation of ${N} tokens: ${(plainWall / N).toFixed(2)} ms per token (wall, all phases)`,
);
console.log(
  `per decode step (${steps} steps): host ${per(host.decode + host.head)} ms in decodeStep + lmHead ` +
    `(decodeStep ${per(host.decode)}, lmHead ${per(host.head)}); of which tfjs's program path ${per(host.program)} ms ` +
    `over ${plainPrograms.toFixed(0)} programs (${((1000 * host.program) / host.programs).toFixed(1)} µs each)`,
);
console.log(
  `dispatches per token ${(counted.dispatches / N).toFixed(0)}, readbacks per generation ${counted.readbacks}`,
);
console.log('host time by program, per decode step:');
for (const [k, v] of [...byProgram.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 12))
  console.log(`  ${per(v.ms)} ms  ×${(v.n / steps).toFixed(1)}  ${k}`);

// 2. The replayed path (model/decode-replay.ts): the first decode token recorded, the others replayed; the host's
// share of a replayed token is writing its inputs, encoding the recorded dispatches and submitting them.
setDecodeReplay(true);
await generate(model, prompts, opts); // warm
const countedReplay = await countDispatches(() => generate(model, prompts, opts));
t0 = performance.now();
const replayed = await generate(model, prompts, opts);
const replayWall = performance.now() - t0;
const st = lastDecodeReplayStats();
const same = JSON.stringify(replayed.tokens) === JSON.stringify(plain.tokens);
const hostMsPerToken = st.replayHostMs / st.replays;
console.log(
  `replayed: greedy generation of ${N} tokens: ${(replayWall / N).toFixed(2)} ms per token (wall, all phases); ` +
    `${st.recordings} recording, ${st.replays} replays of ${st.dispatchesPerReplay} dispatches; host ` +
    `${hostMsPerToken.toFixed(3)} ms per replayed token (${((1000 * hostMsPerToken) / st.dispatchesPerReplay).toFixed(2)} µs per dispatch); ` +
    `dispatches per token ${(countedReplay.dispatches / N).toFixed(0)}, readbacks per generation ${countedReplay.readbacks}; ` +
    `tokens equal to the unrecorded path's: ${same}`,
);
model.dispose();
if (!same) throw new Error('the replayed decode chose other tokens than the unrecorded path');
// One JSON line (issue #31): the replayed path's host cost; the unrecorded path's beside it under its own names.
console.log(
  JSON.stringify({
    hostMsPerToken: +hostMsPerToken.toFixed(3),
    hostUsPerDispatch: +((1000 * hostMsPerToken) / st.dispatchesPerReplay).toFixed(2),
    dispatchesPerToken: st.dispatchesPerReplay,
    unrecordedHostMsPerToken: +plainHostMs.toFixed(3),
    unrecordedHostUsPerProgram: +((1000 * host.program) / host.programs).toFixed(2),
    unrecordedProgramsPerToken: +plainPrograms.toFixed(1),
    replayedWallMsPerToken: +(replayWall / N).toFixed(2),
    unrecordedWallMsPerToken: +(plainWall / N).toFixed(2),
  }),
);
