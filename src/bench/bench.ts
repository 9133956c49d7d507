/**
 * Benchmarks that run on any backend: the Node CLI (`npm run bench`) and the browser bench page
 * (e2e/pages/bench.ts) run the same sections through `runBenchSections`. Speed numbers come from here, never
 * from unit tests. Sections:
 *   matmul  the backend's matmul peak (GFLOP/s at 512² and 1024²), the denominator of MFU
 *   gen     generation tokens/s with the KV cache vs full recompute
 *   ppo     one PPO step by phase, update FLOPs and MFU (perf/ppo.ts, perf/flops.ts)
 *   lm      supervised next-token training tokens/s, ours vs @genai-fi/nanogpt (perf/lm-train.ts)
 *   memory  tensor bytes of the four-model PPO after one step and growth over many (perf/memory.ts)
 */
import * as tf from '@tensorflow/tfjs-core';
import { generate } from '../core/model/sampling';
import { GPT2 } from '../core/model/gpt2';
import type { GPT2Config } from '../core/model/config';
import type { PpoTrainer } from '../core/ppo/trainer';
import type { Tokenizer } from '../core/tokenizer/types';
import { benchMatmul, type MatmulBench } from './perf/matmul';
import { benchPpoStep, type PpoBench } from './perf/ppo';
import {
  benchOurLmTraining,
  benchNanoGptTraining,
  type LmShape,
  type LmTrainBench,
  type NanoGptPeer,
} from './perf/lm-train';
import { benchFourModelMemory, type FourModelMemory } from './perf/memory';
import { FusedAdamOptimizer } from '../core/optim/fused-adam';
import { relDiff } from '../core/backend/webgpu-fused';

export interface GenBench {
  batch: number;
  newTokens: number;
  cacheTokensPerSecond: number;
  recomputeTokensPerSecond: number;
  kvSpeedup: number;
  /** The tiny shape with random weights and a longer position table (prompt + new tokens > the model's 128). */
  randomWeights?: boolean;
}

/** Prompt tokens of the generation benchmark. */
export const GEN_PROMPT = 8;

/**
 * Time generate() with and without the KV cache after one warm-up call each (shader/kernel compilation).
 * `rounds` > 1 alternates cache and recompute runs and keeps each one's best, so that load from other jobs on a
 * shared machine, which comes and goes, skews the ratio less.
 */
export async function benchGeneration(
  model: GPT2,
  batch: number,
  newTokens: number,
  promptLen = 8,
  rounds = 1,
): Promise<GenBench> {
  const prompts = Array.from({ length: batch }, (_, b) =>
    Array.from({ length: promptLen }, (_, t) => (b * 7 + t * 13) % 250),
  );
  const opts = {
    maxNewTokens: newTokens,
    temperature: 1,
    padId: model.config.vocab_size - 1,
    rng: 1,
    stopToken: null,
  };
  const time = async (useCache: boolean): Promise<number> => {
    const t0 = performance.now();
    await generate(model, prompts, { ...opts, useCache });
    return (batch * newTokens) / ((performance.now() - t0) / 1000);
  };
  await generate(model, prompts, { ...opts, maxNewTokens: Math.min(4, newTokens), useCache: true });
  await generate(model, prompts, { ...opts, maxNewTokens: Math.min(4, newTokens), useCache: false });
  let cache = 0;
  let recompute = 0;
  for (let r = 0; r < rounds; r++) {
    cache = Math.max(cache, await time(true));
    recompute = Math.max(recompute, await time(false));
  }
  return {
    batch,
    newTokens,
    cacheTokensPerSecond: cache,
    recomputeTokensPerSecond: recompute,
    kvSpeedup: cache / recompute,
  };
}

export type Section = 'matmul' | 'gen' | 'ppo' | 'lm' | 'memory';
export const SECTIONS: Section[] = ['matmul', 'gen', 'ppo', 'lm', 'memory'];

/** What each section runs; `planFor` picks sizes by platform, backend and --quick. */
export interface BenchPlan {
  /** Sections this plan leaves out (said in the notes). */
  skip: Section[];
  matmulSizes: number[];
  gen: [batch: number, newTokens: number][];
  /** Alternating timed rounds per generation size (best of each kept). */
  genRounds: number;
  /** Training config overrides for the PPO step (on the tiny model and the sentiment task). */
  ppoConfig: Record<string, unknown>;
  ppoWarmup: number;
  ppoSteps: number;
  lm: { B: number; T: number; steps: number; warmup: number };
  /** Also time our step with tf.train.adam instead of the fused Adam. */
  lmFusedVariant: boolean;
  /** Also time our step on nanogpt's backend (WebGPU: its patched backend). */
  lmOursOnNanoBackend: boolean;
  /** Memory of the four-model PPO at the tiny shape: batch, response length, total steps. */
  memoryTiny: { batchSize: number; responseLength: number; steps: number };
}

/**
 * Sizes per platform and backend. WebGPU here is SwiftShader (a CPU emulation of a GPU: every dispatch costs
 * milliseconds), so its plan is small and the tables say which sizes ran; Node's WASM runs the sizes.
 */
export function planFor(platform: string, backend: string, quick: boolean): BenchPlan {
  if (backend === 'webgpu') {
    return {
      // --quick: the headline numbers only (KV speed-up, ours vs nanogpt); PPO and memory on WebGPU in a full run.
      skip: quick ? ['ppo', 'memory'] : [],
      matmulSizes: quick ? [512] : [512, 1024],
      gen: quick ? [[8, 16]] : [[8, 64]],
      genRounds: 1,
      ppoConfig: { batchSize: 4, miniBatches: 1, ppoEpochs: 1, responseLength: 8 },
      ppoWarmup: 1,
      ppoSteps: 1,
      lm: quick ? { B: 2, T: 16, steps: 1, warmup: 1 } : { B: 4, T: 32, steps: 2, warmup: 1 },
      lmFusedVariant: !quick,
      lmOursOnNanoBackend: !quick,
      memoryTiny: quick
        ? { batchSize: 2, responseLength: 4, steps: 1 }
        : { batchSize: 2, responseLength: 8, steps: 5 },
    };
  }
  const node = platform === 'node';
  return {
    // The browser's WASM page in --quick: the speed sections; LM and memory are Node's and WebGPU's job there.
    skip: quick && !node ? ['lm', 'memory'] : [],
    matmulSizes: [512, 1024],
    gen: quick
      ? [[8, 64]]
      : [
          [8, 64],
          [8, 128],
          [32, 64],
          [32, 128],
        ],
    genRounds: 2,
    ppoConfig: {},
    ppoWarmup: 1,
    ppoSteps: quick ? 1 : 3,
    lm: { B: 8, T: 64, steps: quick ? 3 : 6, warmup: 1 },
    lmFusedVariant: true,
    lmOursOnNanoBackend: false,
    // Growth over 200 steps is the Node run's job; the browser's WASM page checks a few.
    memoryTiny: { batchSize: 2, responseLength: 4, steps: node ? 200 : 20 },
  };
}

export interface BenchEnv {
  /** 'node' or 'chromium'. */
  platform: string;
  /** The tiny preset's config (the shipped model's shape). */
  tinyConfig: GPT2Config;
  tinyTokenizer: Tokenizer;
  /** Prompts for the memory section (the sentiment task's). */
  prompts: string[];
  /** Build a trainer from training-config overrides (core's buildTrainer with the platform's Resources). */
  buildPpoTrainer(overrides: Record<string, unknown>): Promise<PpoTrainer>;
  /** Load the tiny preset as an inference model (for generation). */
  loadTinyModel(): Promise<GPT2>;
  /** The nanogpt peer, or why it cannot run here. Called only when the lm section runs. */
  nanogpt?(): Promise<NanoGptPeer>;
  /** Switch to nanogpt's own backend before its run (WebGPU: its patched backend); undefined = same backend. */
  beforeNanogpt?(): Promise<void>;
  log(msg: string): void;
}

export interface SectionResults {
  platform: string;
  backend: string;
  skipped: Section[];
  matmul: MatmulBench[];
  generation: GenBench[];
  ppo: PpoBench | null;
  ppoConfig: Record<string, unknown> | null;
  lm: LmTrainBench[];
  memory: FourModelMemory[];
  /** The largest matmul measured again right after the PPO step (part of MFU's denominator). */
  matmulAfterPpo?: MatmulBench;
  /** Fused Adam vs tfjs Adam on this backend (max |Δw| / max |w| after 3 steps); null when not checked. */
  fusedAdamCheck: {
    maxRelDiff: number;
    plainMs: number;
    fusedMs: number;
    variables: number;
    fusedCalls: number;
  } | null;
  notes: string[];
  errors: Record<string, string>;
  /** Tensors alive at the end minus at the start, not counting nanogpt's (0 = no leaks in our code). */
  tensorLeak: number;
  /** Tensors nanogpt's run left alive (its layers build variables lazily; a failed step strands them). */
  nanogptTensorLeak: number;
}

const peak = (m: MatmulBench[]): number | null => (m.length ? Math.max(...m.map((x) => x.gflops)) : null);

/**
 * Run the chosen sections on the current backend; a failing section is recorded and the rest go on. The lm
 * section runs last: nanogpt may switch the backend to its own (env.beforeNanogpt).
 */
export async function runBenchSections(
  env: BenchEnv,
  sections: Section[],
  plan: BenchPlan,
  extra: { fusedAdamCheck?: boolean; onPartial?: (r: SectionResults) => void } = {},
): Promise<SectionResults> {
  const backend = tf.getBackend();
  const tensors0 = tf.memory().numTensors;
  sections = sections.filter((x) => !plan.skip.includes(x));
  const out: SectionResults = {
    platform: env.platform,
    backend,
    skipped: plan.skip,
    matmul: [],
    generation: [],
    ppo: null,
    ppoConfig: null,
    lm: [],
    memory: [],
    fusedAdamCheck: null,
    notes: [],
    errors: {},
    tensorLeak: 0,
    nanogptTensorLeak: 0,
  };
  const guard = async (name: string, f: () => Promise<void>): Promise<void> => {
    try {
      await f();
    } catch (e) {
      out.errors[name] = (e as Error).message ?? String(e);
      env.log(`${name} failed: ${out.errors[name]}`);
    }
    extra.onPartial?.(out); // what is done so far survives a time limit
  };
  if (sections.includes('matmul')) {
    await guard('matmul', async () => {
      for (const n of plan.matmulSizes) {
        env.log(`${env.platform}/${backend} matmul ${n}²`);
        out.matmul.push(
          await benchMatmul(n, {
            iters: backend === 'webgpu' ? 1 : 2,
            minSeconds: backend === 'webgpu' ? 0 : 1,
          }),
        );
      }
    });
  }
  if (sections.includes('gen')) {
    await guard('gen', async () => {
      const model = await env.loadTinyModel();
      try {
        for (const [b, n] of plan.gen) {
          env.log(`${env.platform}/${backend} generation batch ${b}, ${n} new tokens`);
          if (GEN_PROMPT + n <= model.config.n_positions) {
            out.generation.push(await benchGeneration(model, b, n, GEN_PROMPT, plan.genRounds));
            continue;
          }
          // The shipped tiny model has 128 positions; prompt + 128 new tokens needs more. The same shape with a
          // longer position table and random weights does the same arithmetic per token (no stop token is used).
          const longer = GPT2.random(
            { ...model.config, n_positions: GEN_PROMPT + n },
            1,
            false,
            'bench-long',
          );
          try {
            out.generation.push({
              ...(await benchGeneration(longer, b, n, GEN_PROMPT, plan.genRounds)),
              randomWeights: true,
            });
          } finally {
            longer.dispose();
          }
        }
      } finally {
        model.dispose();
      }
    });
  }
  if (extra.fusedAdamCheck)
    await guard('fusedAdam', async () => void (out.fusedAdamCheck = await checkFusedAdam()));
  if (sections.includes('ppo')) {
    await guard('ppo', async () => {
      out.ppoConfig = plan.ppoConfig;
      const trainer = await env.buildPpoTrainer(plan.ppoConfig);
      try {
        env.log(`${env.platform}/${backend} PPO step (${plan.ppoWarmup} warm-up + ${plan.ppoSteps} timed)`);
        out.ppo = await benchPpoStep(trainer, {
          steps: plan.ppoSteps,
          warmup: plan.ppoWarmup,
          peakGflops: null,
          onStep: (i, s) => env.log(`  ${i < 0 ? 'warm-up' : 'step'} ${s.toFixed(1)} s`),
        });
        // MFU's denominator: the best matmul rate seen in this run, including one measured right after the step
        // (on a shared machine the rate drifts; the highest is the conservative choice).
        if (out.matmul.length) {
          const again = await benchMatmul(Math.max(...plan.matmulSizes), {
            iters: 1,
            minSeconds: backend === 'webgpu' ? 0 : 1,
          });
          out.matmulAfterPpo = again;
          const p = Math.max(peak(out.matmul)!, again.gflops);
          out.ppo = { ...out.ppo, peakGflops: p, updateMfu: out.ppo.updateGflopsPerSecond / p };
        }
      } finally {
        const { policy, ref, value } = trainer.models;
        trainer.disposeOptimizers();
        policy.dispose();
        ref.dispose();
        value?.dispose();
      }
    });
  }
  if (sections.includes('memory')) {
    await guard('memory', async () => {
      const m = plan.memoryTiny;
      out.memory.push(
        await benchFourModelMemory({
          label: 'tiny',
          config: env.tinyConfig,
          tokenizer: env.tinyTokenizer,
          prompts: env.prompts,
          batchSize: m.batchSize,
          responseLength: m.responseLength,
          steps: m.steps,
          profilePeak: backend !== 'webgpu',
          onProgress: (s) => env.log(`  ${s}`),
        }),
      );
    });
  }
  if (sections.includes('lm')) {
    const c = env.tinyConfig;
    const shape: LmShape = {
      n_layer: c.n_layer,
      n_embd: c.n_embd,
      n_head: c.n_head,
      vocab_size: c.vocab_size,
      T: plan.lm.T,
      B: plan.lm.B,
    };
    const o = { steps: plan.lm.steps, warmup: plan.lm.warmup };
    await guard('lm', async () => {
      env.log(`${env.platform}/${backend} LM training, ours (B ${shape.B}, T ${shape.T})`);
      out.lm.push(await benchOurLmTraining(shape, o));
      if (plan.lmFusedVariant) {
        env.log(`${env.platform}/${backend} LM training, ours with tf.train.adam`);
        out.lm.push(await benchOurLmTraining(shape, { ...o, tfjsAdam: true }));
      }
    });
    if (env.nanogpt) {
      const before = tf.memory().numTensors;
      await guard('nanogpt', async () => {
        const peer = await env.nanogpt!();
        if (env.beforeNanogpt) await env.beforeNanogpt();
        env.log(`${env.platform}/${tf.getBackend()} LM training, nanogpt`);
        out.lm.push(await benchNanoGptTraining(peer, shape, o));
        if (env.beforeNanogpt && plan.lmOursOnNanoBackend) {
          // The same step of ours on nanogpt's backend, to tell its kernels from its backend patches.
          env.log(`${env.platform}/${tf.getBackend()} LM training, ours on nanogpt's backend`);
          const r = await benchOurLmTraining(shape, o);
          out.lm.push({ ...r, impl: "ours on nanogpt's backend" });
        }
      });
      out.nanogptTensorLeak = tf.memory().numTensors - before;
    }
  }
  out.tensorLeak = tf.memory().numTensors - tensors0 - out.nanogptTensorLeak;
  return out;
}

/**
 * The fused Adam against tfjs's Adam on the current backend: the same random variables and gradients, three
 * steps each; returns the largest weight difference relative to the largest weight, and the time of one step
 * of each over the tiny model's variable shapes (after a warm-up step).
 */
export async function checkFusedAdam(
  shapes: number[][] = [[258, 128], [128, 384], [384], [128, 128], [512, 128], [128]],
): Promise<SectionResults['fusedAdamCheck']> {
  // tf.variable keeps its initial tensor alive unless that tensor is disposed: make it inside tidy.
  const mk = (tag: string) =>
    shapes.map((s, i) =>
      tf.tidy(() =>
        tf.variable(
          tf.randomNormal(s, 0, 1, 'float32', i + 1),
          true,
          `adamcheck_${tag}_${i}_${Math.random()}`,
        ),
      ),
    );
  const a = mk('plain');
  const b = mk('fused');
  const pa = tf.train.adam(1e-2);
  const pb = new FusedAdamOptimizer(1e-2);
  const grads = shapes.map((s, i) => tf.randomNormal(s, 0, 1, 'float32', 100 + i));
  // Step 2 clips: the fused Adam takes the factor as an argument (applyScaled), tfjs's Adam the scaled gradients.
  const step = async (opt: tf.Optimizer, vars: tf.Variable[], scale: number): Promise<number> => {
    const t0 = performance.now();
    if (opt === pb) pb.applyScaled(Object.fromEntries(vars.map((v, i) => [v.name, grads[i]])), scale);
    else
      tf.tidy(() =>
        opt.applyGradients(
          Object.fromEntries(vars.map((v, i) => [v.name, scale === 1 ? grads[i] : tf.mul(grads[i], scale)])),
        ),
      );
    await vars[vars.length - 1].data();
    return performance.now() - t0;
  };
  let plainMs = 0;
  let fusedMs = 0;
  for (let s = 0; s < 3; s++) {
    const scale = s === 1 ? 0.5 : 1;
    const x = await step(pa, a, scale);
    const y = await step(pb, b, scale);
    if (s > 0) {
      plainMs += x / 2;
      fusedMs += y / 2;
    }
  }
  // Every variable's weights as one vector: the difference relative to the largest weight of all, the plain
  // Adam's weights the reference (relDiff, the fused-kernel checks' measure; a NaN reads as Infinity).
  const flat = (vars: tf.Variable[]) => tf.tidy(() => tf.concat(vars.map((v) => tf.reshape(v, [-1]))));
  const [plainW, fusedW] = [flat(a), flat(b)];
  const maxRelDiff = await relDiff(fusedW, plainW);
  tf.dispose([...a, ...b, ...grads, plainW, fusedW]);
  pa.dispose();
  pb.dispose();
  // fusedCalls > 0 proves the fused kernel ran (without one, FusedAdamOptimizer falls back to tfjs's Adam).
  return { maxRelDiff, plainMs, fusedMs, variables: shapes.length, fusedCalls: pb.fusedCalls };
}
