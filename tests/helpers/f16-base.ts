/**
 * Shared by tests/f16-base*.test.ts (issue #36, docs/models.md, "The frozen base in f16"): seeded weights, 2-layer slices of the published
 * shapes, and the exactness check of a packed-f16 base against the f32 base holding the same (f16-representable)
 * values: log-probs, LoRA gradients and greedy tokens (the replayed decode and the unrecorded one).
 */
import { expect } from 'vitest';
import { precompile } from './webgpu-node';
import * as tf from '@tensorflow/tfjs-core';
import { isPackedF16, roundToF16 } from '../../src/core/kernels/webgpu-f16';
import { Llama, llamaParamSpecs } from '../../src/core/model/llama';
import { LLAMA_SHAPES, parseLlamaConfig, type LlamaConfig } from '../../src/core/model/llama-config';
import { LoraAdapters } from '../../src/core/model/lora';
import { gatherRows } from '../../src/core/model/gather';
import { generate, type SampleOptions } from '../../src/core/model/sampling';
import { setDecodeReplay } from '../../src/core/model/decode-replay';
import type { GPT2Options } from '../../src/core/model/lm';
import { parseGPT2Config, parseModelConfig } from '../../src/core/model/config';
import { ScalarModel } from '../../src/core/model/heads';
import { readSafetensors, writeSafetensors } from '../../src/core/model/safetensors';
import { scalarSafetensors } from '../../src/core/model/folder';
import { REWARD_FILE } from '../../src/core/reward/reward-model';

/** Seeded normal(0, sd) values from a xorshift stream and Box–Muller (fast enough for ~100 M values). */
export function normals(n: number, seed: number, sd: number): Float32Array {
  let s = (seed * 2654435761) >>> 0 || 1;
  const next = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(next()));
    const t = 2 * Math.PI * next();
    out[i] = sd * r * Math.cos(t);
    if (i + 1 < n) out[i + 1] = sd * r * Math.sin(t);
  }
  return out;
}

/** A small Qwen2's config.json (q/k/v biases, untied head): 2 layers, width 64, 4 heads over 2 KV heads. */
export const TINY_QWEN2_JSON = {
  model_type: 'qwen2',
  vocab_size: 300,
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 64,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  tie_word_embeddings: false,
  bos_token_id: 297,
  eos_token_id: 298,
  pad_token_id: 299,
};
export const tinyQwen2 = parseLlamaConfig(TINY_QWEN2_JSON);
/** The same shape as Qwen3 (q_norm / k_norm, head_dim 16, tied head). */
export const tinyQwen3 = parseLlamaConfig({
  ...TINY_QWEN2_JSON,
  model_type: 'qwen3',
  head_dim: 16,
  tie_word_embeddings: true,
});

/** A small GPT-2 (2 layers, width 48, 3 heads, a 300-entry byte vocabulary): the fused linear's model tests. */
export const tinyGpt2 = parseGPT2Config({
  vocab_size: 300,
  n_positions: 64,
  n_embd: 48,
  n_layer: 2,
  n_head: 3,
  tokenizer: 'bytes',
  bos_token_id: 297,
  eos_token_id: 298,
  pad_token_id: 299,
});

/** Non-zero LoRA B's (normal, sd 0.05, seeded), so that the LoRA terms take part in every output. */
export function liven(adapters: LoraAdapters): void {
  for (const mod of adapters.modules.values()) {
    const v = tf.randomNormal(mod.b.shape, 0, 0.05, 'float32', 13);
    mod.b.assign(v);
    v.dispose();
  }
}

/** A 2-layer slice of a published shape (every block dimension the real one), optionally a smaller vocabulary. */
export function sliceConfig(shape: 'qwen2.5-1.5b' | 'qwen3-1.7b', vocab?: number): LlamaConfig {
  const V = vocab ?? LLAMA_SHAPES[shape].vocab_size;
  return parseLlamaConfig({
    ...LLAMA_SHAPES[shape],
    num_hidden_layers: 2,
    vocab_size: V,
    bos_token_id: V - 3,
    eos_token_id: V - 2,
    pad_token_id: V - 1,
  });
}

/**
 * Host weights for `config`: matrices normal(0, sd), norm weights 1 + normal(0, 0.1), biases normal(0, 0.05); with
 * `representable` every value rounded to f16 first (then the f32 and the packed model hold the same numbers).
 */
export function hostWeights(
  config: LlamaConfig,
  seed: number,
  sd: number,
  representable: boolean,
): Map<string, Float32Array> {
  const arrays = new Map<string, Float32Array>();
  let k = seed;
  for (const spec of llamaParamSpecs(config)) {
    const n = spec.shape.reduce((a, b) => a * b, 1);
    let v: Float32Array;
    if (spec.name.endsWith('norm.weight')) v = normals(n, k++, 0.1).map((x) => 1 + x);
    else if (spec.name.endsWith('.bias')) v = normals(n, k++, 0.05);
    else v = normals(n, k++, sd);
    arrays.set(spec.name, representable ? roundToF16(v) : v);
  }
  return arrays;
}

/** n deterministic values in [−scale, scale] (a sine of the index): test inputs without a random generator. */
export function seeded(n: number, seed: number, scale = 1): Float32Array {
  return Float32Array.from(
    { length: n },
    (_, i) => scale * Math.sin(seed * 12.9898 + i * 78.233 + i * i * 1e-7),
  );
}

/** max |a − b| / max |b|. */
export function relDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / m;
}

/** max |a − b|. */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

/** A fixed batch for `config`: ids, mask (row 1 left-padded), next-token targets, B and T. */
export function batchFor(config: LlamaConfig): {
  ids: number[];
  mask: number[];
  targets: number[];
  B: number;
  T: number;
} {
  const V = config.vocab_size;
  const t = (i: number) => (i * 7919 + 13) % (V - 3);
  const B = 2;
  const T = 4;
  const ids = [t(1), t(2), t(3), t(4), 0, t(5), t(6), t(7)];
  const mask = [1, 1, 1, 1, 0, 1, 1, 1];
  const targets = [t(2), t(3), t(4), t(8), 0, t(6), t(7), t(9)];
  return { ids, mask, targets, B, T };
}

/** Per-token log-probs [B·T] of `targets` under `m` (differentiable in the LoRA adapters). */
export function tokenLogprobs(m: Llama, b: ReturnType<typeof batchFor>): tf.Tensor1D {
  return tf.tidy(() => {
    const ids = tf.tensor2d(b.ids, [b.B, b.T], 'int32');
    const mask = tf.tensor2d(b.mask, [b.B, b.T], 'int32');
    const logits = tf.reshape(m.logits(ids, mask), [b.B * b.T, m.config.vocab_size]) as tf.Tensor2D;
    const lp = tf.sub(gatherRows(logits, tf.tensor1d(b.targets, 'int32')), tf.logSumExp(logits, 1));
    return lp as tf.Tensor1D;
  });
}

export interface ExactResult {
  logprobRel: number;
  gradRel: number;
  tokens32: number[][];
  tokens16: number[][];
}

/**
 * The packed-f16 base against the f32 base on the same f16-representable weights, under one LoRA set with non-zero
 * B: log-probs, every adapter's gradient of Σ wᵢ·logprobᵢ, and greedy tokens (replayed, and with `unrecorded` the
 * f16 base's unrecorded decode too: the replay only changes how the same kernels are dispatched, so the slices of
 * the published shapes, where each decode takes a minute on SwiftShader, leave that to the small models of
 * tests/f16-base.test.ts). Returns the
 * worst relative differences; the caller asserts them. Leaves no tensor behind.
 */
export async function exactCheck(
  config: LlamaConfig,
  opts: GPT2Options = {},
  newTokens = 4,
  unrecorded = true,
): Promise<ExactResult> {
  const before = tf.memory().numTensors;
  const arrays = hostWeights(config, 7, 0.05, true);
  const f32 = Llama.fromArrays(config, arrays, false, 'f32base', opts);
  const f16 = Llama.fromArrays(config, arrays, false, 'f16base', { ...opts, baseDtype: 'f16' });
  arrays.clear();
  const adapters = LoraAdapters.create(config, { lora: 8 }, 5);
  for (const m of adapters.modules.values()) {
    const v = tf.randomNormal(m.b.shape, 0, 0.02, 'float32', 9);
    m.b.assign(v);
    v.dispose();
  }
  const a32 = f32.withLora(adapters);
  const a16 = f16.withLora(adapters);
  const b = batchFor(config);
  const weights = tf.tensor1d(b.mask.map((v, i) => v * Math.sin(i + 1)));
  const run = (m: Llama) => {
    let lp: tf.Tensor1D | null = null;
    const g = tf.variableGrads(() => {
      const l = tokenLogprobs(m, b);
      lp = tf.keep(l);
      return tf.sum(tf.mul(l, weights)) as tf.Scalar;
    }, adapters.variables());
    return { lp: lp! as tf.Tensor1D, g };
  };
  // The loop gets a turn after the build (seconds on SwiftShader), then both paths' programs compile off the
  // event loop (see precompile) before they run for their values.
  await new Promise((r) => setTimeout(r, 0));
  await precompile(() => {
    const p = [run(a32), run(a16)];
    return p.flatMap((r) => [r.lp, r.g.value, ...Object.values(r.g.grads)]);
  });
  const r32 = run(a32);
  const r16 = run(a16);
  const logprobRel = relDiff(await r16.lp.data(), await r32.lp.data());
  let gradRel = 0;
  for (const v of adapters.variables()) {
    gradRel = Math.max(gradRel, relDiff(await r16.g.grads[v.name].data(), await r32.g.grads[v.name].data()));
  }
  tf.dispose([r32.lp, r16.lp, r32.g.value, r16.g.value, ...Object.values(r32.g.grads)]);
  tf.dispose([...Object.values(r16.g.grads), weights]);
  // Greedy tokens: the replayed decode on both, and the unrecorded decode of the f16 base.
  const prompts = [b.ids.slice(0, 4), b.ids.slice(5, 8)];
  const sample: SampleOptions = {
    maxNewTokens: newTokens,
    temperature: 0,
    padId: config.pad_token_id ?? 0,
    rng: 1,
  };
  const g32 = await generate(a32, prompts, sample);
  const g16 = await generate(a16, prompts, sample);
  if (unrecorded) {
    setDecodeReplay(false);
    let g16plain;
    try {
      g16plain = await generate(a16, prompts, sample);
    } finally {
      setDecodeReplay(true);
    }
    expect(g16plain.tokens).toEqual(g16.tokens);
  }
  a32.dispose(); // the adapters (a16 shares them)
  f32.dispose();
  f16.dispose();
  expect(tf.memory().numTensors).toBe(before);
  return { logprobRel, gradRel, tokens32: g32.tokens, tokens16: g16.tokens };
}

export interface TorchBound {
  /** max |lp_f16 − lp_f32| of the engine (packed f16 base, f32 arithmetic) over the real tokens; NaN when absent. */
  ours: number;
  /** The same for PyTorch eager on the same weights (`model.half()` vs float32), or null without Python/torch. */
  torch: number | null;
  /** max |lp_f32 (engine) − lp_f32 (PyTorch)|: the two f32 paths agree. */
  f32VsTorch: number | null;
  /** true: no Python at TORCH_PYTHON (the bound cannot be measured here); a failed run is not absent. */
  absent: boolean;
  why?: string;
}

/** The Python with torch and transformers the bound is measured with (absent: the bound is not measured). */
export const TORCH_PYTHON = process.env.PPO_TORCH_PYTHON ?? '/tmp/venv/bin/python';

/**
 * The accuracy bound of issue #36 on `config` with random weights normal(0, 0.02) that f16 does NOT represent
 * exactly: the engine's f32 and packed-f16 bases (adapters off: the reference model's path) against PyTorch's own
 * float32 and float16 (`model.half()`) on the same weights, over the same batch, PyTorch run by
 * scripts/torch_f16_base_diff.py in a subprocess.
 */
export async function torchBound(config: LlamaConfig): Promise<TorchBound> {
  const { mkdtempSync, rmSync, writeFileSync, existsSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const path = await import('node:path');
  const { spawnSync } = await import('node:child_process');
  const { exportLM } = await import('../../src/core/model/folder');
  const { writeFolder } = await import('../../src/cli/files-node');
  // Without PyTorch there is no bound to hold our difference to: say so before building two slices for nothing.
  if (!existsSync(TORCH_PYTHON)) {
    const why = `no Python at ${TORCH_PYTHON} (set PPO_TORCH_PYTHON to one with torch and transformers)`;
    return { ours: NaN, torch: null, f32VsTorch: null, absent: true, why };
  }
  const before = tf.memory().numTensors;
  const arrays = hostWeights(config, 11, 0.02, false);
  const f32 = Llama.fromArrays(config, arrays, false, 'f32base');
  const f16 = Llama.fromArrays(config, arrays, false, 'f16base', { baseDtype: 'f16' });
  arrays.clear();
  const b = batchFor(config);
  const lp32 = tokenLogprobs(f32, b);
  const lp16 = tokenLogprobs(f16, b);
  const h32 = await lp32.data();
  const h16 = await lp16.data();
  tf.dispose([lp32, lp16]);
  f16.dispose();
  const real = (i: number) => b.mask[i] === 1;
  let ours = 0;
  for (let i = 0; i < h32.length; i++) if (real(i)) ours = Math.max(ours, Math.abs(h16[i] - h32[i]));
  const out: TorchBound = { ours, torch: null, f32VsTorch: null, absent: false };
  const dir = mkdtempSync(path.join(tmpdir(), 'ppo-f16-'));
  try {
    await writeFolder(dir, await exportLM(f32));
    f32.dispose();
    const rows = (a: number[]) => [a.slice(0, b.T), a.slice(b.T, 2 * b.T)];
    const batchPath = path.join(dir, 'batch.json');
    writeFileSync(
      batchPath,
      JSON.stringify({ ids: rows(b.ids), mask: rows(b.mask), targets: rows(b.targets) }),
    );
    const r = spawnSync(TORCH_PYTHON, ['scripts/torch_f16_base_diff.py', dir, batchPath], {
      encoding: 'utf8',
      timeout: 600_000,
      maxBuffer: 1 << 26,
    });
    if (r.status !== 0) {
      out.why = `PyTorch run failed: ${r.error?.message ?? ''} ${r.stderr.slice(-2000)}`;
      return out;
    }
    const t = JSON.parse(r.stdout.trim().split('\n').pop()!) as { lp32: number[][]; lp16: number[][] };
    const t32 = t.lp32.flat();
    const t16 = t.lp16.flat();
    let torch = 0;
    let agree = 0;
    for (let i = 0; i < t32.length; i++) {
      if (!real(i)) continue;
      torch = Math.max(torch, Math.abs(t16[i] - t32[i]));
      agree = Math.max(agree, Math.abs(h32[i] - t32[i]));
    }
    out.torch = torch;
    out.f32VsTorch = agree;
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
    expect(tf.memory().numTensors).toBe(before);
  }
}

/** The Qwen3 parity fixture's folder with every tensor rounded to f16, in a new temp dir (storing it in f16 loses nothing). */
export async function f16ExactFolder(): Promise<string> {
  const { mkdtempSync, readFileSync, readdirSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const path = await import('node:path');
  const from = 'tests/fixtures/parity-llama/qwen3-tiny';
  const to = mkdtempSync(path.join(tmpdir(), 'ppo-f16-exact-'));
  for (const f of readdirSync(from)) {
    if (f.startsWith('expected')) continue;
    const bytes = readFileSync(path.join(from, f));
    if (f !== 'model.safetensors') {
      writeFileSync(path.join(to, f), bytes);
      continue;
    }
    const file = readSafetensors(new Uint8Array(bytes), f);
    const tensors = [...file.tensors.entries()].map(([name, t]) => ({
      name,
      shape: t.shape,
      data: roundToF16(Float32Array.from(t.data as ArrayLike<number>)),
    }));
    writeFileSync(path.join(to, f), writeSafetensors(tensors));
  }
  return to;
}

/**
 * A reward-model folder's files on `policyDir`'s config and tokenizer: a trunk of seeded f16-exact weights and a
 * head normal(0, 0.5) that tells short responses apart.
 */
export async function f16RewardFiles(policyDir: string): Promise<Map<string, Uint8Array>> {
  const { readFileSync, readdirSync } = await import('node:fs');
  const path = await import('node:path');
  const files = new Map<string, Uint8Array>();
  for (const f of readdirSync(policyDir)) {
    if (f !== 'model.safetensors') files.set(f, new Uint8Array(readFileSync(path.join(policyDir, f))));
  }
  const config = parseModelConfig(JSON.parse(readFileSync(path.join(policyDir, 'config.json'), 'utf8')));
  const arrays = hostWeights(config as LlamaConfig, 21, 0.08, true);
  arrays.set('score.weight', normals(config.n_embd, 5, 0.5));
  const model = ScalarModel.fromArrays(config, arrays, false, 'rm-src');
  files.set(REWARD_FILE, await scalarSafetensors(model));
  model.dispose();
  return files;
}

/** Packed-f16 tensors among a scalar model's trunk parameters. */
export function packedTrunkParams(m: ScalarModel): number {
  return [...(m.trunkModel as unknown as { params: Map<string, tf.Tensor> }).params.values()].filter((p) =>
    isPackedF16(p),
  ).length;
}
