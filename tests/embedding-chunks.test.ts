/**
 * GPT-2's token embedding held as vocabulary chunks under a binding limit (GPT2Options.maxBindingBytes;
 * docs/tfjs.md trap 8): a forced small limit on a tiny model, on the CPU and the WASM backends, must give the
 * unsplit model's logits, decode-step results and gradients bit for bit, hold no second copy of wte, and keep
 * the names in files (`wte.weight`) unchanged.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { registerWasmExtraKernels } from '../src/core/kernels/wasm-extra';
import { GPT2, embeddingChunkRows, embeddingChunks, wteChunkName } from '../src/core/model/gpt2';
import { ScalarModel } from '../src/core/model/heads';
import { LoraAdapters } from '../src/core/model/lora';
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
const ROW = 32 * 4; // bytes of one wte row
const LIMIT = 100 * ROW + 60; // 100 rows per chunk: [100, 100, 58]
// Every chunk's first and last rows, and padding.
const IDS = [
  [257, 257, 0, 99, 100, 199],
  [200, 257, 256, 5, 150, 42],
];
const MASK = [
  [0, 0, 1, 1, 1, 1],
  [1, 1, 1, 1, 1, 1],
];

const bitEqual = (a: ArrayLike<number>, b: ArrayLike<number>): boolean =>
  a.length === b.length && Array.prototype.every.call(a, (x: number, i: number) => Object.is(x, b[i]));

describe('wte chunk layout (pure)', () => {
  it('rows per chunk, count and largest chunk for a limit (hand-worked)', () => {
    expect(embeddingChunks(cfg, LIMIT)).toEqual({ rows: 100, count: 3, largestBytes: 12800 });
    expect(embeddingChunks(cfg, 129 * ROW)).toEqual({ rows: 129, count: 2, largestBytes: 129 * ROW });
    expect(embeddingChunks(cfg)).toEqual({ rows: 258, count: 1, largestBytes: 258 * ROW });
    expect(embeddingChunks(cfg, 10 ** 9).count).toBe(1);
    // GPT-2 124M under WebGPU's guaranteed 128 MiB: ⌊134217728 / 3072⌋ = 43690 rows, two chunks.
    expect(embeddingChunks({ vocab_size: 50257, n_embd: 768 }, 128 * 1024 ** 2)).toEqual({
      rows: 43690,
      count: 2,
      largestBytes: 43690 * 3072,
    });
    expect(() => embeddingChunkRows(cfg, ROW - 1)).toThrow(
      /rows are 128 bytes .* more than the 127-byte limit/,
    );
  });
});

describe.each(['cpu', 'wasm'])('wte in vocabulary chunks on %s', (backend) => {
  let whole: GPT2;
  let chunked: GPT2;
  let wholeBytes: number;
  let chunkedBytes: number;
  beforeAll(async () => {
    tf.env().set('PROD', true);
    if (backend === 'wasm') registerWasmExtraKernels();
    await tf.setBackend(backend);
    await tf.ready();
    const src = GPT2.random(cfg, 3, true, `src_${backend}`);
    for (const v of src.params.values()) if (v.shape.length === 2) v.assign(tf.tidy(() => tf.mul(v, 8)));
    const arrays = await src.toArrays();
    src.dispose();
    let before = tf.memory().numBytes;
    whole = GPT2.fromArrays(cfg, arrays, true, `whole_${backend}`);
    wholeBytes = tf.memory().numBytes - before;
    before = tf.memory().numBytes;
    chunked = GPT2.fromArrays(cfg, arrays, true, `chunked_${backend}`, { maxBindingBytes: LIMIT });
    chunkedBytes = tf.memory().numBytes - before;
  });
  afterAll(() => {
    whole.dispose();
    chunked.dispose();
  });

  it('holds wte as chunks of at most the limit, and no second copy', () => {
    expect(tf.getBackend()).toBe(backend);
    expect(chunked.params.has('wte.weight')).toBe(false);
    expect([0, 1, 2].map((k) => chunked.params.get(wteChunkName(k))!.shape)).toEqual([
      [100, 32],
      [100, 32],
      [58, 32],
    ]);
    // The shapes are the check: 100 rows (12800 bytes) fit LIMIT and 101 (12928) would not, so no chunk is over it
    // or smaller than allowed.
    expect(chunked.params.has(wteChunkName(3))).toBe(false);
    expect(chunkedBytes).toBe(wholeBytes);
  });

  it("logits are the unsplit model's, bit for bit", async () => {
    const run = (m: GPT2) =>
      tf.tidy(() => m.logits(tf.tensor2d(IDS, undefined, 'int32'), tf.tensor2d(MASK, undefined, 'int32')));
    const [a, b] = [run(whole), run(chunked)];
    const [x, y] = [await a.data(), await b.data()];
    expect(x.length).toBe(2 * 6 * 258);
    expect(bitEqual(x, y)).toBe(true);
    tf.dispose([a, b]);
  });

  /** Gradients of `loss` for both models: wte's (the chunks' concatenated for the chunked one) and the rest, by name. */
  async function gradsOf(
    loss: (m: GPT2) => () => tf.Scalar,
  ): Promise<[Map<string, Float32Array>, Map<string, Float32Array>]> {
    const out: Map<string, Float32Array>[] = [];
    for (const m of [whole, chunked]) {
      const { value, grads } = tf.variableGrads(loss(m), m.trainableVariables());
      const byName = new Map(Object.entries(grads).map(([k, v]) => [k.slice(m.id.length + 1), v]));
      const res = new Map<string, Float32Array>();
      if (m === chunked) {
        expect(byName.has('wte.weight')).toBe(false);
        const cat = tf.concat(
          [0, 1, 2].map((k) => byName.get(wteChunkName(k))!),
          0,
        );
        res.set('wte.weight', (await cat.data()) as Float32Array);
        cat.dispose();
        for (let k = 0; k < 3; k++) byName.delete(wteChunkName(k));
      }
      for (const [k, v] of byName) res.set(k, (await v.data()) as Float32Array);
      tf.dispose([value, ...Object.values(grads)]);
      out.push(res);
    }
    expect([...out[1].keys()].sort()).toEqual([...out[0].keys()].sort());
    return [out[0], out[1]];
  }

  it('gradients through the chunked gather (the trunk alone) are the unsplit ones, bit for bit', async () => {
    const ids = tf.tensor2d(IDS, undefined, 'int32');
    const mask = tf.tensor2d(MASK, undefined, 'int32');
    const w = tf.randomNormal([12, 32], 0, 1, 'float32', 7);
    const [a, b] = await gradsOf((m) => () => tf.sum(tf.mul(m.trunk(ids, mask), w)) as tf.Scalar);
    expect(a.size).toBe(whole.params.size);
    for (const [name, g] of a) expect(bitEqual(g, b.get(name)!), name).toBe(true);
    const wte = a.get('wte.weight')!;
    for (const row of [0, 99, 100, 199, 200, 256])
      expect(
        wte.slice(row * 32, row * 32 + 32).some((x) => x !== 0),
        `row ${row}`,
      ).toBe(true);
    tf.dispose([ids, mask, w]);
  });

  it("the chunked LM head's weight gradient is the unsplit one, bit for bit", async () => {
    const h = tf.randomNormal([7, 32], 0, 1, 'float32', 8) as tf.Tensor2D;
    const w = tf.randomNormal([7, 258], 0, 1, 'float32', 9);
    const [a, b] = await gradsOf((m) => () => tf.sum(tf.mul(m.lmHead(h), w)) as tf.Scalar);
    expect([...a.keys()]).toEqual(['wte.weight']);
    expect(bitEqual(a.get('wte.weight')!, b.get('wte.weight')!)).toBe(true);
    tf.dispose([h, w]);
  });

  it("gradients of the full model agree to float32 rounding (the head's vocabulary sum for dh is split into chunk partial sums)", async () => {
    const ids = tf.tensor2d(IDS, undefined, 'int32');
    const mask = tf.tensor2d(MASK, undefined, 'int32');
    const w = tf.randomNormal([2, 6, 258], 0, 1, 'float32', 7);
    const [a, b] = await gradsOf((m) => () => tf.sum(tf.mul(m.logits(ids, mask), w)) as tf.Scalar);
    expect(a.size).toBe(whole.params.size);
    for (const [name, g] of a) {
      const h = b.get(name)!;
      let diff = 0;
      let scale = 0;
      for (let i = 0; i < g.length; i++) {
        diff = Math.max(diff, Math.abs(g[i] - h[i]));
        scale = Math.max(scale, Math.abs(g[i]));
      }
      expect(scale, name).toBeGreaterThan(0);
      expect(diff, name).toBeLessThanOrEqual(16 * 2 ** -23 * scale); // 16 ulps of the largest entry
    }
    tf.dispose([ids, mask, w]);
  });

  it('the KV-cache decode gives the same tokens and logprobs, bit for bit', async () => {
    const prompts = [[72, 101, 199], [100], [257 - 1, 3]];
    const o = { maxNewTokens: 8, temperature: 0, padId: 257, rng: 1 };
    const a = await generate(whole, prompts, o);
    const b = await generate(chunked, prompts, o);
    expect(b.tokens).toEqual(a.tokens);
    for (let i = 0; i < prompts.length; i++) expect(bitEqual(a.logprobs[i], b.logprobs[i])).toBe(true);
  });

  it('files keep wte.weight whole: toArrays and clone give the unsplit weights', async () => {
    const [x, y] = [await whole.toArrays(), await chunked.toArrays()];
    expect([...y.keys()].sort()).toEqual([...x.keys()].sort());
    for (const [k, v] of x) expect(bitEqual(v, y.get(k)!), k).toBe(true);
    const c = chunked.clone(false, `clone_${backend}`);
    expect(c.wteChunkRows).toBe(100);
    const z = await c.toArrays();
    expect(bitEqual(z.get('wte.weight')!, x.get('wte.weight')!)).toBe(true);
    c.dispose();
  });

  it('a LoRA view and a scalar model on a chunked base match those on the unsplit base', async () => {
    const ids = tf.tensor2d(IDS, undefined, 'int32');
    const mask = tf.tensor2d(MASK, undefined, 'int32');
    const views = [whole, chunked].map((m) => {
      const ad = LoraAdapters.create(cfg, { lora: 2, loraAlpha: 4 }, 5, `lora_${backend}`);
      for (const mod of ad.modules.values())
        mod.b.assign(tf.tidy(() => tf.randomNormal(mod.b.shape, 0, 0.5, 'float32', 1)));
      return m.withLora(ad, `view_${backend}`);
    });
    const [la, lb] = views.map((v) => tf.tidy(() => v.logits(ids, mask)));
    expect(bitEqual(await la.data(), await lb.data())).toBe(true);
    const arrays = await whole.toArrays();
    arrays.set('score.weight', new Float32Array(32).fill(0.25));
    const sa = ScalarModel.fromArrays(cfg, arrays, false, `sa_${backend}`);
    const sb = ScalarModel.fromArrays(cfg, arrays, false, `sb_${backend}`, { maxBindingBytes: LIMIT });
    expect(sb.trunkModel.wteChunkRows).toBe(100);
    const [va, vb] = [sa, sb].map((s) => tf.tidy(() => s.values(ids, mask)));
    expect(bitEqual(await va.data(), await vb.data())).toBe(true);
    tf.dispose([ids, mask, la, lb, va, vb]);
    [...views, sa, sb].forEach((m) => m.dispose());
  });

  it('random init under a limit: the same tensors as unchunked except wte, which is drawn per chunk', async () => {
    const a = GPT2.random(cfg, 9, false, `ra_${backend}`);
    const b = GPT2.random(cfg, 9, false, `rb_${backend}`, { maxBindingBytes: LIMIT });
    const [x, y] = [await a.toArrays(), await b.toArrays()];
    for (const [k, v] of x) if (k !== 'wte.weight') expect(bitEqual(v, y.get(k)!), k).toBe(true);
    const wte = y.get('wte.weight')!;
    let sq = 0;
    for (const v of wte) sq += v * v;
    expect(Math.sqrt(sq / wte.length)).toBeGreaterThan(0.018); // N(0, 0.02)
    expect(Math.sqrt(sq / wte.length)).toBeLessThan(0.022);
    a.dispose();
    b.dispose();
  });
});
