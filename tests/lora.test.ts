/**
 * LoRA on GPT-2's Conv1D layers (src/core/model/lora.ts, ops.ts conv1d, gpt2.ts withLora; docs/formats.md §6):
 * PEFT's initialisation, the forward against a plain-loop W + (B·A)ᵀ·scaling, B = 0 and adapters off giving
 * the base bit for bit, gradients reaching A and B only, the decode step against the full forward, the merged
 * model against the adapted one, and a value model with its own adapters on the same base.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { GPT2 } from '../src/core/model/gpt2';
import { ScalarModel } from '../src/core/model/heads';
import { conv1d } from '../src/core/model/ops';
import {
  LoraAdapters,
  LORA_DEFAULTS,
  LORA_TARGETS,
  checkLoraConfig,
  kaimingUniformBound,
  loraModules,
  type LoraTarget,
} from '../src/core/model/lora';
import { mergedWeights } from '../src/core/model/peft';
import { parseGPT2Config } from '../src/core/model/config';
import { generate } from '../src/core/model/sampling';

const cfg = parseGPT2Config({
  vocab_size: 258,
  n_positions: 40,
  n_embd: 32,
  n_layer: 2,
  n_head: 4,
  tokenizer: 'bytes',
  bos_token_id: 256,
  eos_token_id: 256,
  pad_token_id: 257,
});
const IDS = [
  [257, 257, 72, 101, 108],
  [87, 104, 121, 33, 10],
];
const MASK = [
  [0, 0, 1, 1, 1],
  [1, 1, 1, 1, 1],
];

/** Deterministic values in [−1, 1). */
function rand(n: number, seed: number): Float32Array {
  let x = seed;
  return Float32Array.from({ length: n }, () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);
}

async function logitsOf(model: GPT2): Promise<Float32Array> {
  const out = tf.tidy(() =>
    model.logits(tf.tensor2d(IDS, undefined, 'int32'), tf.tensor2d(MASK, undefined, 'int32')),
  );
  const d = (await out.data()) as Float32Array;
  out.dispose();
  return d;
}

function maxAbs(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const bitEqual = (a: Float32Array, b: Float32Array): boolean =>
  a.length === b.length && a.every((x, i) => Object.is(x, b[i]));

/** Give every B random non-zero values (scale `s`), so the adapters change the model. */
function randomizeB(ad: LoraAdapters, seed: number, s = 0.5): void {
  let k = seed;
  for (const m of ad.modules.values())
    m.b.assign(tf.tidy(() => tf.mul(tf.tensor2d(rand(m.b.size, k++), m.b.shape as [number, number]), s)));
}

/** Plain-loop merge: W [in, out] + (B [out, r] · A [r, in])ᵀ · s, in float64. */
function mergeLoop(
  w: Float32Array,
  a: Float32Array,
  b: Float32Array,
  nIn: number,
  nOut: number,
  r: number,
  s: number,
): Float32Array {
  const out = new Float32Array(w.length);
  for (let i = 0; i < nIn; i++) {
    for (let o = 0; o < nOut; o++) {
      let d = 0;
      for (let k = 0; k < r; k++) d += b[o * r + k] * a[k * nIn + i];
      out[i * nOut + o] = w[i * nOut + o] + d * s;
    }
  }
  return out;
}

describe('LoRA adapters on GPT-2', () => {
  let base: GPT2;
  beforeAll(async () => {
    await useCpu();
    base = GPT2.random(cfg, 3, false, 'base'); // frozen: LoRA trains the adapters alone
    for (const v of base.params.values()) if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 8)));
  });

  it('kaiming_uniform_(a = √5) bound is 1/√fan_in (hand-worked: √(6 / ((1 + 5) · 64)) = 1/8)', () => {
    expect(kaimingUniformBound(64, Math.sqrt(5))).toBeCloseTo(1 / 8, 15);
    expect(kaimingUniformBound(100, 0)).toBeCloseTo(Math.sqrt(6 / 100), 15); // a = 0: He-uniform
  });

  it('A is uniform(−1/√in, 1/√in), B is zero, the same seed gives the same A and another seed another', async () => {
    const ad = LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 1);
    const again = LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 1);
    const other = LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 2);
    expect(ad.scaling).toBe(2);
    expect(ad.targets).toEqual([...LORA_TARGETS]);
    expect(ad.modules.size).toBe(4 * cfg.n_layer);
    for (const [key, m] of ad.modules) {
      const a = (await m.a.data()) as Float32Array;
      const b = (await m.b.data()) as Float32Array;
      expect(m.a.shape).toEqual([4, m.in]);
      expect(m.b.shape).toEqual([m.out, 4]);
      const bound = 1 / Math.sqrt(m.in);
      let max = 0;
      let sum = 0;
      let sq = 0;
      for (const x of a) {
        max = Math.max(max, Math.abs(x));
        sum += x;
        sq += x * x;
      }
      expect(max).toBeLessThanOrEqual(bound);
      expect(max).toBeGreaterThan(0.9 * bound); // ≥ 128 draws reach near the edge
      expect(Math.abs(sum / a.length)).toBeLessThan(0.2 * bound);
      expect(sq / a.length / ((bound * bound) / 3)).toBeGreaterThan(0.7); // variance of U(−b, b) = b²/3
      expect(sq / a.length / ((bound * bound) / 3)).toBeLessThan(1.3);
      expect(b.every((x) => x === 0)).toBe(true);
      expect(bitEqual(a, (await again.modules.get(key)!.a.data()) as Float32Array)).toBe(true);
      expect(bitEqual(a, (await other.modules.get(key)!.a.data()) as Float32Array)).toBe(false);
    }
    [ad, again, other].forEach((x) => x.dispose());
  });

  it('conv1d with a LoRA pair equals x·(W + (B·A)ᵀ·s) + b from plain loops', async () => {
    const [N, nIn, nOut, r, s] = [5, 7, 6, 3, 1.75];
    const x = rand(N * nIn, 1);
    const w = rand(nIn * nOut, 2);
    const bias = rand(nOut, 3);
    const a = rand(r * nIn, 4);
    const b = rand(nOut * r, 5);
    const y = tf.tidy(() =>
      conv1d(tf.tensor2d(x, [N, nIn]), tf.tensor2d(w, [nIn, nOut]), tf.tensor1d(bias), {
        a: tf.tensor2d(a, [r, nIn]),
        b: tf.tensor2d(b, [nOut, r]),
        scaling: s,
      }),
    );
    const got = (await y.data()) as Float32Array;
    y.dispose();
    const weff = mergeLoop(w, a, b, nIn, nOut, r, s);
    const want = new Float32Array(N * nOut);
    for (let n = 0; n < N; n++) {
      for (let o = 0; o < nOut; o++) {
        let acc = bias[o];
        for (let i = 0; i < nIn; i++) acc += x[n * nIn + i] * weff[i * nOut + o];
        want[n * nOut + o] = acc;
      }
    }
    expect(maxAbs(got, want)).toBeLessThan(1e-5);
    // Not the base alone: the LoRA term is large enough to see.
    const plain = tf.tidy(() =>
      conv1d(tf.tensor2d(x, [N, nIn]), tf.tensor2d(w, [nIn, nOut]), tf.tensor1d(bias)),
    );
    expect(maxAbs((await plain.data()) as Float32Array, want)).toBeGreaterThan(0.1);
    plain.dispose();
  });

  it('the adapted model equals a plain model built from plain-loop W + (B·A)ᵀ·s (random non-zero B), each target set', async () => {
    const sets: LoraTarget[][] = [[...LORA_TARGETS], ['c_attn'], ['attn.c_proj', 'mlp.c_proj'], ['c_fc']];
    const baseArrays = await base.toArrays();
    const baseLogits = await logitsOf(base);
    for (const targets of sets) {
      const view = base.withLora(
        LoraAdapters.create(cfg, { lora: 3, loraAlpha: 6, loraTargets: targets }, 7),
      );
      randomizeB(view.lora!, 11);
      const ref = new Map(baseArrays);
      for (const [key, m] of view.lora!.modules) {
        const a = (await m.a.data()) as Float32Array;
        const b = (await m.b.data()) as Float32Array;
        ref.set(`${key}.weight`, mergeLoop(baseArrays.get(`${key}.weight`)!, a, b, m.in, m.out, 3, 2));
      }
      const plain = GPT2.fromArrays(cfg, ref, false, 'ref');
      const [got, want] = [await logitsOf(view), await logitsOf(plain)];
      expect(maxAbs(got, want), targets.join()).toBeLessThan(1e-5); // logits of size ~3: float32 rounding
      expect(maxAbs(got, baseLogits), targets.join()).toBeGreaterThan(1e-2); // the adapters do something
      plain.dispose();
      view.dispose();
    }
  });

  it('B = 0 gives the base bit for bit; adapters switched off give the base bit for bit; the base is untouched', async () => {
    const baseLogits = await logitsOf(base);
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 32 }, 5));
    expect(bitEqual(await logitsOf(view), baseLogits)).toBe(true);
    randomizeB(view.lora!, 3);
    const adapted = await logitsOf(view);
    expect(bitEqual(adapted, baseLogits)).toBe(false);
    view.lora!.enabled = false;
    expect(bitEqual(await logitsOf(view), baseLogits)).toBe(true);
    view.lora!.enabled = true;
    expect(bitEqual(await logitsOf(view), adapted)).toBe(true);
    expect(bitEqual(await logitsOf(base), baseLogits)).toBe(true); // the reference is the base itself
    view.dispose();
    expect(bitEqual(await logitsOf(base), baseLogits)).toBe(true); // disposing a view frees its adapters only
  });

  it("a view holds no copy of the base: it adds exactly the adapters' bytes", () => {
    const before = tf.memory().numBytes;
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 5));
    const C = cfg.n_embd;
    const perLayer = 4 * (C + 3 * C) + 4 * (C + C) + 4 * (C + 4 * C) + 4 * (4 * C + C); // r · (in + out), four Conv1Ds
    expect(view.lora!.bytes()).toBe(perLayer * cfg.n_layer * 4);
    expect(tf.memory().numBytes - before).toBe(view.lora!.bytes());
    expect(view.params).toBe(base.params);
    view.dispose();
    expect(tf.memory().numBytes).toBe(before);
  });

  it("gradients reach A and B only: tf.variableGrads over every trainable variable returns the adapters' (count, bytes)", async () => {
    for (const targets of [[...LORA_TARGETS], ['c_attn', 'c_fc']] as LoraTarget[][]) {
      const view = base.withLora(
        LoraAdapters.create(cfg, { lora: 2, loraAlpha: 4, loraTargets: targets }, 9),
      );
      randomizeB(view.lora!, 1, 0.1);
      const ids = tf.tensor2d(IDS, undefined, 'int32');
      const mask = tf.tensor2d(MASK, undefined, 'int32');
      const w = tf.randomNormal([2, 5, cfg.vocab_size], 0, 1, 'float32', 4);
      // No var list: tfjs differentiates with respect to every trainable variable alive.
      const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(view.logits(ids, mask), w)) as tf.Scalar);
      const names = Object.keys(grads).sort();
      const want = view
        .lora!.variables()
        .map((v) => v.name)
        .sort();
      expect(names).toEqual(want);
      expect(names.length).toBe(2 * targets.length * cfg.n_layer);
      let bytes = 0;
      for (const n of names) {
        bytes += grads[n].size * 4;
        const g = (await grads[n].data()) as Float32Array;
        expect(
          g.some((x) => x !== 0),
          n,
        ).toBe(true);
      }
      expect(bytes).toBe(view.lora!.bytes());
      expect(
        view
          .trainableVariables()
          .map((v) => v.name)
          .sort(),
      ).toEqual(want);
      expect(base.params.get('h.0.attn.c_attn.weight')!.trainable).toBe(false);
      tf.dispose([value, ids, mask, w, ...Object.values(grads)]);
      view.dispose();
    }
  });

  it('the decode step with adapters equals the full forward with adapters (greedy tokens and logprobs)', async () => {
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 13));
    randomizeB(view.lora!, 21);
    const prompts = [[72, 101, 108, 108, 111], [87, 104, 121], [65]];
    const a = await generate(view, prompts, { maxNewTokens: 10, temperature: 0, padId: 257, rng: 1 });
    const b = await generate(view, prompts, {
      maxNewTokens: 10,
      temperature: 0,
      padId: 257,
      rng: 1,
      useCache: false,
    });
    const plain = await generate(base, prompts, { maxNewTokens: 10, temperature: 0, padId: 257, rng: 1 });
    expect(a.tokens).toEqual(b.tokens);
    expect(a.tokens).not.toEqual(plain.tokens); // the adapters change what is generated
    for (let i = 0; i < prompts.length; i++) {
      for (let t = 0; t < a.logprobs[i].length; t++)
        expect(Math.abs(a.logprobs[i][t] - b.logprobs[i][t])).toBeLessThan(1e-4);
    }
    view.dispose();
  });

  it('the merged model (mergedWeights, toArrays, clone) equals the adapted model: logits within 1e-5', async () => {
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 17));
    randomizeB(view.lora!, 5, 0.05);
    const adapted = await logitsOf(view);
    const mergedHost = GPT2.fromArrays(cfg, await mergedWeights(view), false, 'merged');
    const mergedDevice = GPT2.fromArrays(cfg, await view.toArrays(), false, 'merged');
    const cloned = view.clone(false, 'merged');
    for (const m of [mergedHost, mergedDevice, cloned]) {
      expect(maxAbs(await logitsOf(m), adapted)).toBeLessThan(1e-5);
      expect(m.lora).toBeNull();
      m.dispose();
    }
    expect(maxAbs(adapted, await logitsOf(base))).toBeGreaterThan(1e-3);
    // Switched off, mergedWeights still merges the given adapters; toArrays gives what the view computes (the base).
    view.lora!.enabled = false;
    const off = await view.toArrays();
    const baseArrays = await base.toArrays();
    for (const [k, v] of baseArrays) expect(bitEqual(off.get(k)!, v), k).toBe(true);
    expect(
      bitEqual(
        (await mergedWeights(view)).get('h.0.mlp.c_fc.weight')!,
        baseArrays.get('h.0.mlp.c_fc.weight')!,
      ),
    ).toBe(false);
    view.dispose();
  });

  it('a value model on the same base with its own adapters: shared weights, its own gradients, zero head', async () => {
    const policy = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 1), 'policy');
    const before = tf.memory().numBytes;
    const valueAd = LoraAdapters.create(cfg, { lora: 2, loraAlpha: 2, loraTargets: ['c_attn'] }, 2);
    const value = ScalarModel.onSharedBase(base, valueAd, 'value');
    expect(tf.memory().numBytes - before).toBe(valueAd.bytes() + cfg.n_embd * 4);
    expect(value.trunkModel.params).toBe(base.params);
    const ids = tf.tensor2d(IDS, undefined, 'int32');
    const mask = tf.tensor2d(MASK, undefined, 'int32');
    const v0 = tf.tidy(() => value.values(ids, mask));
    expect(Array.from(await v0.data()).every((x) => x === 0)).toBe(true); // zero head
    // Its trainable variables and gradients: its adapters and its head, nothing of the policy or the base.
    value.score.assign(tf.tidy(() => tf.randomNormal([1, cfg.n_embd], 0, 1, 'float32', 3)));
    randomizeB(valueAd, 8, 0.1);
    const { value: loss, grads } = tf.variableGrads(
      () => tf.sum(tf.square(value.values(ids, mask))) as tf.Scalar,
      value.trainableVariables(),
    );
    expect(Object.keys(grads).sort()).toEqual(
      [...valueAd.variables().map((v) => v.name), value.score.name].sort(),
    );
    expect(value.trainableVariables().length).toBe(2 * cfg.n_layer + 1);
    // The policy's adapters do not reach the value model and the reverse.
    const v1 = tf.tidy(() => value.values(ids, mask));
    const p1 = await logitsOf(policy);
    randomizeB(policy.lora!, 4);
    const v2 = tf.tidy(() => value.values(ids, mask));
    expect(bitEqual((await v1.data()) as Float32Array, (await v2.data()) as Float32Array)).toBe(true);
    randomizeB(valueAd, 9, 0.1);
    expect(bitEqual(await logitsOf(policy), p1)).toBe(false); // changed by its own randomizeB above
    const p2 = await logitsOf(policy);
    randomizeB(valueAd, 10, 0.1);
    expect(bitEqual(await logitsOf(policy), p2)).toBe(true);
    tf.dispose([ids, mask, v0, v1, v2, loss, ...Object.values(grads)]);
    const live = tf.memory().numBytes;
    const own = valueAd.bytes() + cfg.n_embd * 4;
    value.dispose();
    expect(live - tf.memory().numBytes).toBe(own);
    expect(base.params.get('wte.weight')!.isDisposed).toBe(false);
    policy.dispose();
  });

  it('config keys: defaults, normalised order, and errors that name the key', () => {
    expect(LORA_DEFAULTS).toEqual({
      lora: 0,
      loraAlpha: 16,
      loraTargets: ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'],
    });
    expect(checkLoraConfig({ lora: 8, loraTargets: ['mlp.c_proj', 'c_attn'] })).toEqual({
      lora: 8,
      loraAlpha: 16,
      loraTargets: ['c_attn', 'mlp.c_proj'],
    });
    expect(() => checkLoraConfig({ lora: 1.5 })).toThrow(/"lora" is 1.5/);
    expect(() => checkLoraConfig({ lora: 4, loraAlpha: 0 })).toThrow(/"loraAlpha" is 0/);
    expect(() => checkLoraConfig({ lora: 4, loraTargets: ['fc_out' as LoraTarget] })).toThrow(
      /"loraTargets" names "fc_out"/,
    );
    // A Llama-family layer name is a valid key value, but not on a GPT-2 model.
    expect(() => LoraAdapters.create(cfg, { lora: 4, loraTargets: ['q_proj'] }, 1)).toThrow(
      /"loraTargets" names \["q_proj"\], which a gpt2 model does not have/,
    );
    expect(() => checkLoraConfig({ lora: 4, loraTargets: [] })).toThrow(/non-empty/);
    expect(() => LoraAdapters.create(cfg, { lora: 0 }, 1)).toThrow(/rank "lora" ≥ 1/);
    expect(loraModules(cfg, ['c_fc']).map((m) => [m.key, m.in, m.out])).toEqual([
      ['h.0.mlp.c_fc', 32, 128],
      ['h.1.mlp.c_fc', 32, 128],
    ]);
  });

  it('adapters built for another width are refused by withLora', () => {
    const other = parseGPT2Config({ ...cfg, n_embd: 16, n_head: 2 });
    const ad = LoraAdapters.create(other, { lora: 2, loraAlpha: 2 }, 1);
    expect(() => base.withLora(ad)).toThrow(/h\.0\.attn\.c_attn has A \[2,16\].*\[32,96\]/);
    ad.dispose();
  });
});
