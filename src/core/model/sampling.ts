/**
 * Batched sampling with a preallocated KV cache.
 *
 * Prompts are left-padded to a common length Tp; the cache holds S = Tp + maxNewTokens slots per layer and
 * keeps that shape for the whole call. Tokens are chosen by greedy argmax, or by inverse-CDF sampling with one
 * uniform per row drawn from our seeded Rng (chooseTokens). On WebGPU sampling is one fused dispatch
 * (model/sample-op.ts) and there is no per-token readback except an occasional one-scalar "all rows stopped?"
 * check; on WASM and CPU the sampled rows' probabilities are read back (a copy there) and the CDF walked in
 * JavaScript, which chooses pickTokens' token. Returned logprobs are log softmax(logits / T) at the
 * sampled token, before top-k/top-p filtering (T = 1 when greedy) — the distribution PPO trains against.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LayerKV } from './gpt2';
import type { CausalLM } from './causal-lm';
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';
import { gatherRows } from './gather';
import { greedyTokensWebGpu, sampleTokens } from './sample-op';
import { maybeYield } from '../base/yield';
import { decodeReplayApplies, fusedChoiceApplies, replayedDecode } from './decode-replay';
import { whileGenerating } from '../kernels/wasm-extra';
import { decodeLogits } from './vocab-chunks';
import { queryGroups, sharedPrefixDefault } from './shared-prefix';

export interface SampleOptions {
  maxNewTokens: number;
  /** 0 = greedy. */
  temperature: number;
  /** 0 = off. */
  topK?: number;
  /** 1 = off. */
  topP?: number;
  /**
   * Stop after this token, or after any of these (it is included in the output); null/undefined/[] = never stop
   * early. A Hugging Face model has several: generation_config's eos ids and the chat template's end of turn.
   */
  stopToken?: number | readonly number[] | null;
  /** Id written after a row has stopped and at left padding; never compared to find padding. */
  padId: number;
  /**
   * Seed or a live Rng (a live one advances, so a training run keeps one stream), or one Rng per row: then row b
   * draws its uniforms from its own stream only, so its tokens do not depend on which rows are generated beside
   * it (generation in micro-batches gives the same tokens as one batch: `generateInMicroBatches`).
   */
  rng: Rng | number | Rng[];
  /**
   * Left-pad the prompts to this length (at least the longest prompt). Micro-batches of one batch pass the whole
   * batch's longest prompt, so every row runs with the same shapes (and the same float32 sums) either way.
   */
  padTo?: number;
  /** false = recompute the whole sequence each token (the slow baseline, for benchmarks and tests). */
  useCache?: boolean;
  /** Check for "every row stopped" every this many tokens (one scalar readback). Default 8. */
  stopCheckEvery?: number;
  /** On WebGPU, the decode loop recorded once and replayed (model/decode-replay.ts); default true. */
  replay?: boolean;
  /**
   * Rows holding the same prompt (GRPO's and RLOO's groups) run the prefill once: the trunk over each distinct
   * prompt, its keys, values and last hidden state then copied to every row that holds it (a causal model gives
   * them the same values). Default: sharedPrefixDefault() (true unless PPO_SHARED_PREFIX=0); nothing changes where
   * no prompt repeats.
   */
  sharePrompts?: boolean;
}

export interface GenerateResult {
  /** Generated ids per row, unpadded; includes the stop token when one was emitted. */
  tokens: number[][];
  /** log softmax(logits / T) of each generated token (T = 1 when greedy). */
  logprobs: number[][];
}

const FILTERED = -1e30;

/** Left-pad prompts to a common length: ids/mask [B, Tp] as flat arrays. */
export function leftPad(
  prompts: number[][],
  padId: number,
  padTo = 0,
): { ids: Int32Array; mask: Int32Array; Tp: number } {
  const Tp = Math.max(padTo, ...prompts.map((p) => p.length));
  const B = prompts.length;
  const ids = new Int32Array(B * Tp).fill(padId);
  const mask = new Int32Array(B * Tp);
  prompts.forEach((p, b) => {
    const off = b * Tp + (Tp - p.length);
    ids.set(p, off);
    mask.fill(1, off, off + p.length);
  });
  return { ids, mask, Tp };
}

/**
 * x < col for x [B, V] and a column col [B, 1], as tf.less gives it. On WASM and CPU as (x − col) < 0: the same
 * answer for every pair of float32 values (the difference of two floats rounds to a value of the exact difference's
 * sign and is 0 only when they are equal — subnormals are kept; ±∞ and NaN give what the comparison gives), where
 * tfjs-backend-wasm 4.22 runs a broadcasting Less at ≈ 65 ns an element and a broadcasting Sub at a few (issue
 * #24). Elsewhere (WebGPU may flush subnormals) the comparison itself.
 */
export function lessThanColumn(x: tf.Tensor2D, col: tf.Tensor2D): tf.Tensor2D {
  const backend = tf.getBackend();
  if (backend !== 'wasm' && backend !== 'cpu') return tf.less(x, col) as tf.Tensor2D;
  return tf.tidy(() => tf.less(tf.sub(x, col), 0) as tf.Tensor2D);
}

/** Apply top-k then top-p to temperature-scaled logits [B, V] (HF's order). */
export function filterLogits(scaled: tf.Tensor2D, topK: number, topP: number): tf.Tensor2D {
  const V = scaled.shape[1];
  let out = scaled;
  if (topK > 0 && topK < V) {
    const kth = tf.slice(tf.topk(out, topK).values, [0, topK - 1], [-1, 1]);
    out = tf.where(lessThanColumn(out, kth as tf.Tensor2D), tf.fill(out.shape, FILTERED), out) as tf.Tensor2D;
  }
  if (topP < 1) {
    const sorted = tf.topk(out, V).values; // descending
    const probs = tf.softmax(sorted, -1);
    const before = tf.sub(tf.cumsum(probs, 1), probs); // mass strictly above each entry
    const keep = tf.sum(tf.cast(tf.less(before, topP), 'int32'), 1); // ≥ 1
    const thr = tf.reshape(gatherRows(sorted, tf.sub(keep, tf.scalar(1, 'int32')) as tf.Tensor1D), [-1, 1]); // [B, 1]
    out = tf.where(lessThanColumn(out, thr as tf.Tensor2D), tf.fill(out.shape, FILTERED), out) as tf.Tensor2D;
  }
  return out;
}

/**
 * Where pickTokens walks the CDF: `device` with tensor ops (no readback: WebGPU/WebGL), `host` reading the [B, V]
 * probabilities back once and walking them in JavaScript (WASM and CPU, where the readback is a copy), `auto` the
 * one the backend suits. Both choose the same token from the same probabilities and uniform, bit for bit.
 */
export type CdfWalk = 'auto' | 'device' | 'host';

/**
 * The float32 cumulative sum of one row of `probs` (from `offset`, `V` entries) into `out`, as tfjs's Cumsum
 * kernels compute it on CPU and WASM: left to right, each partial sum rounded to float32.
 */
export function cumsumFloat32(probs: Float32Array, offset: number, V: number, out: Float32Array): void {
  let acc = probs[offset];
  out[0] = acc;
  for (let j = 1; j < V; j++) {
    acc = Math.fround(acc + probs[offset + j]);
    out[j] = acc;
  }
}

/**
 * The inverse-CDF choice of pickTokens on the host, from probabilities [B, V] (row-major float32) and one float32
 * uniform per row: per row, below = #{j : cdf[j] ≤ u·cdf[V−1]} (the product rounded to float32, as the tensor
 * multiply does), lastPositive = the last j with p[j] > 0 (−1 when none), token = max(min(below, lastPositive), 0) —
 * the device path's formula, term for term, so the same token.
 */
export function inverseCdfTokens(
  probs: Float32Array,
  uniforms: ArrayLike<number>,
  B: number,
  V: number,
): Int32Array {
  const out = new Int32Array(B);
  const cdf = new Float32Array(V);
  for (let b = 0; b < B; b++) {
    const off = b * V;
    cumsumFloat32(probs, off, V, cdf);
    const target = Math.fround(Math.fround(uniforms[b]) * cdf[V - 1]);
    let below = 0;
    for (let j = 0; j < V; j++) if (cdf[j] <= target) below++;
    let lastPositive = -1;
    for (let j = V - 1; j >= 0; j--)
      if (probs[off + j] > 0) {
        lastPositive = j;
        break;
      }
    out[b] = Math.max(Math.min(below, lastPositive), 0);
  }
  return out;
}

/**
 * Choose one token per row from logits [B, V]. `uniforms` [B, 1] in [0, 1) drive inverse-CDF sampling.
 * Returns the token ids [B] and log softmax(logits / T) at them (T = 1 when greedy). `walk`: see CdfWalk.
 */
export function pickTokens(
  logits: tf.Tensor2D,
  temperature: number,
  topK: number,
  topP: number,
  uniforms: tf.Tensor2D | null,
  walk: CdfWalk = 'auto',
): { tokens: tf.Tensor1D; logprobs: tf.Tensor1D } {
  return tf.tidy(() => {
    const [B, V] = logits.shape;
    const greedy = temperature === 0;
    const scaled = greedy ? logits : (tf.div(logits, temperature) as tf.Tensor2D);
    const logp = tf.logSoftmax(scaled, -1);
    let tokens: tf.Tensor1D;
    if (greedy) {
      tokens = tf.cast(tf.argMax(logits, 1), 'int32') as tf.Tensor1D;
    } else {
      if (!uniforms) throw new Error('pickTokens: uniforms are required when sampling');
      // Inverse CDF against the row's own total: the float32 cumsum ends a few ulps off 1, and comparing with
      // u alone sent all the missing mass to token V − 1 (EOS for GPT-2, PAD for bytes), filtered or not.
      // The token is the first j with cdf[j] > u·cdf[V−1]: strictly greater, so a zero-probability token
      // (its cdf equal to the one before) is never it; capped at the last token with probability > 0 for
      // the case u·cdf[V−1] rounds up to the total.
      const probs = tf.softmax(filterLogits(scaled as tf.Tensor2D, topK, topP), -1);
      const backend = tf.getBackend();
      const host = walk === 'host' || (walk === 'auto' && (backend === 'wasm' || backend === 'cpu'));
      if (host) {
        // WASM / CPU: read the probabilities back (a copy) and walk them in JavaScript. tfjs-backend-wasm 4.22
        // runs the device path's [B, V]-against-[B, 1] LessEqual and its Tile of a [1, V] range at ≈ 65 ns an
        // element (≈ 40 ms a GPT-2 decode step at B 8, against ≈ 5 here; issue #24).
        const p = probs.dataSync() as Float32Array;
        const u = uniforms.dataSync();
        tokens = tf.tensor1d(inverseCdfTokens(p, u, B, V), 'int32');
      } else {
        const cdf = tf.cumsum(probs, 1);
        const target = tf.mul(uniforms, tf.slice(cdf, [0, V - 1], [-1, 1]));
        const below = tf.sum(tf.cast(tf.lessEqual(cdf, target), 'int32'), 1);
        const lastPositive = tf.max(
          tf.where(
            tf.greater(probs, 0),
            tf.tile(tf.reshape(tf.range(0, V, 1, 'int32'), [1, V]), [probs.shape[0], 1]),
            tf.fill(probs.shape, -1, 'int32'),
          ),
          1,
        );
        // A row of NaN (a diverged policy) has no positive probability: token 0, as before, never an index −1.
        tokens = tf.maximum(tf.minimum(below, lastPositive), tf.scalar(0, 'int32')) as tf.Tensor1D;
      }
    }
    return { tokens, logprobs: gatherRows(logp as tf.Tensor2D, tokens) };
  });
}

/**
 * generate()'s choice of one token per row, pickTokens' rule on every backend, without a synchronous readback:
 * - WebGPU, sampling: one fused WGSL dispatch (model/sample-op.ts sampleTokens: top-k / top-p thresholds by
 *   bisection, the inverse-CDF draw over the kept set), nothing read back. The same rule as pickTokens; a token
 *   can differ only where u·total lands within float rounding of a CDF value, since the kernel sums in another
 *   order. (pickTokens' tensor path on WebGPU could pick a filtered token there: tf.cumsum over the zeroed
 *   entries did not stay flat, helper-18's finding in tests/sample-device.test.ts.)
 * - WASM and CPU, sampling: the [B, V] probabilities read back with `await data()` and walked in JavaScript
 *   (inverseCdfTokens: pickTokens' host walk, the same token bit for bit).
 * - Greedy: on WebGPU the same kernel at temperature 0 (sample-op.ts greedyTokensWebGpu: the argmax and the
 *   log-prob in 4 dispatches, not pickTokens' 8); elsewhere pickTokens (argmax on the device).
 * Returns the token ids [B] and log softmax(logits / T) at them (unfiltered), as pickTokens.
 */
export async function chooseTokens(
  logits: tf.Tensor2D,
  temperature: number,
  topK: number,
  topP: number,
  uniforms: tf.Tensor2D | null,
): Promise<{ tokens: tf.Tensor1D; logprobs: tf.Tensor1D }> {
  if (temperature === 0) {
    const g = greedyTokensWebGpu(logits);
    if (g) return g;
  }
  if (temperature === 0 || !uniforms) return pickTokens(logits, temperature, topK, topP, uniforms);
  const backend = tf.getBackend();
  if (backend === 'webgpu') {
    const s = sampleTokens(logits, { temperature, topK, topP, uniforms });
    s.logprobs.dispose(); // the kept set's log-prob; PPO trains against the unfiltered one
    return { tokens: s.tokens, logprobs: s.fullLogprobs };
  }
  if (backend !== 'wasm' && backend !== 'cpu') return pickTokens(logits, temperature, topK, topP, uniforms);
  const [B, V] = logits.shape;
  const { probs, logp } = tf.tidy(() => {
    const scaled = tf.div(logits, temperature) as tf.Tensor2D;
    return {
      probs: tf.softmax(filterLogits(scaled, topK, topP), -1),
      logp: tf.logSoftmax(scaled, -1) as tf.Tensor2D,
    };
  });
  try {
    const [p, u] = await Promise.all([probs.data() as Promise<Float32Array>, uniforms.data()]);
    const tokens = tf.tensor1d(inverseCdfTokens(p, u, B, V), 'int32');
    return { tokens, logprobs: tf.tidy(() => gatherRows(logp, tokens)) };
  } finally {
    tf.dispose([probs, logp]);
  }
}

function validate(model: CausalLM, prompts: number[][], o: SampleOptions): void {
  const c = model.config;
  if (prompts.length === 0) throw new UserError('generate: no prompts given; pass at least one prompt.');
  prompts.forEach((p, i) => {
    if (p.length === 0) throw new UserError(`generate: prompt ${i} is empty; give at least one token.`);
    for (const t of p) {
      if (!Number.isInteger(t) || t < 0 || t >= c.vocab_size) {
        throw new UserError(
          `generate: prompt ${i} has token id ${t}; ids must be integers from 0 to ${c.vocab_size - 1}.`,
        );
      }
    }
  });
  if (!Number.isInteger(o.maxNewTokens) || o.maxNewTokens < 1) {
    throw new UserError(`generate: maxNewTokens must be a positive integer, got ${o.maxNewTokens}.`);
  }
  const Tp = Math.max(o.padTo ?? 0, ...prompts.map((p) => p.length));
  if (Tp + o.maxNewTokens > c.n_positions) {
    throw new UserError(
      `generate: prompt (${Tp} tokens) + maxNewTokens (${o.maxNewTokens}) exceeds the model's n_positions (${c.n_positions}).`,
    );
  }
  if (!(o.temperature >= 0) || !Number.isFinite(o.temperature)) {
    throw new UserError(`generate: temperature must be ≥ 0 (0 = greedy), got ${o.temperature}.`);
  }
  const topK = o.topK ?? 0;
  if (!Number.isInteger(topK) || topK < 0)
    throw new UserError(`generate: topK must be an integer ≥ 0 (0 = off), got ${topK}.`);
  const topP = o.topP ?? 1;
  if (!(topP > 0 && topP <= 1))
    throw new UserError(`generate: topP must be in (0, 1] (1 = off), got ${topP}.`);
}

/**
 * Rows of generated ids and log-probs from L steps' values, laid out [B, L] (`byStep` false) or [L, B] (true), each
 * row cut after its first stop token.
 */
function rowsOf(
  tok: Int32Array,
  lp: Float32Array,
  B: number,
  L: number,
  isStop: (id: number) => boolean,
  byStep: boolean,
): GenerateResult {
  const tokens: number[][] = [];
  const logprobs: number[][] = [];
  for (let b = 0; b < B; b++) {
    const row: number[] = [];
    const lrow: number[] = [];
    for (let t = 0; t < L; t++) {
      const i = byStep ? t * B + b : b * L + t;
      row.push(tok[i]);
      lrow.push(lp[i]);
      if (isStop(tok[i])) break;
    }
    tokens.push(row);
    logprobs.push(lrow);
  }
  return { tokens, logprobs };
}

/**
 * The prefill's rows where some rows hold the same left-padded prompt: one row per distinct prompt (ids and mask
 * [U, Tp]), each row's group (`owner`) and each group's first row; null where no prompt repeats.
 */
export function sharedPrefill(
  ids: Int32Array,
  mask: Int32Array,
  B: number,
  Tp: number,
): { ids: Int32Array; mask: Int32Array; owner: Int32Array; first: number[] } | null {
  const { owner, first } = queryGroups(ids, mask, B, Tp, Tp);
  if (first.length === B) return null;
  const pick = (x: Int32Array) => {
    const out = new Int32Array(first.length * Tp);
    first.forEach((b, u) => out.set(x.subarray(b * Tp, (b + 1) * Tp), u * Tp));
    return out;
  };
  return { ids: pick(ids), mask: pick(mask), owner, first };
}

/** Sample continuations for a batch of prompts. */
export async function generate(
  model: CausalLM,
  prompts: number[][],
  opts: SampleOptions,
): Promise<GenerateResult> {
  // On WASM, decoding's few-row products with weights stored [out, in] run on gemm_nt (kernels/wasm-extra.ts).
  return whileGenerating(() => generateOnce(model, prompts, opts));
}

async function generateOnce(
  model: CausalLM,
  prompts: number[][],
  opts: SampleOptions,
): Promise<GenerateResult> {
  validate(model, prompts, opts);
  const B = prompts.length;
  const rowRngs = Array.isArray(opts.rng) ? opts.rng : null;
  if (rowRngs && rowRngs.length !== B) {
    throw new Error(`generate: ${rowRngs.length} per-row random streams for ${B} prompts`);
  }
  const rng = rowRngs ? null : typeof opts.rng === 'number' ? new Rng(opts.rng) : (opts.rng as Rng);
  const N = opts.maxNewTokens;
  const topK = opts.topK ?? 0;
  const topP = opts.topP ?? 1;
  const stopIds =
    opts.stopToken == null ? [] : typeof opts.stopToken === 'number' ? [opts.stopToken] : [...opts.stopToken];
  const stop = stopIds.length > 0 ? stopIds : null;
  const isStop = (id: number) => stopIds.includes(id);
  const checkEvery = opts.stopCheckEvery ?? 8;
  const { ids, mask, Tp } = leftPad(prompts, opts.padId, opts.padTo);
  const S = Tp + N;
  const realLen = prompts.map((p) => p.length);

  const draw = () => Array.from({ length: B }, (_, b) => (rowRngs ? rowRngs[b].next() : rng!.next()));
  const uniforms = (): tf.Tensor2D | null => (opts.temperature === 0 ? null : tf.tensor2d(draw(), [B, 1]));

  const stepTokens: tf.Tensor1D[] = [];
  const stepLogprobs: tf.Tensor1D[] = [];
  let finished: tf.Tensor1D = tf.zeros([B], 'bool');

  // Prefill: one forward over the prompts fills slots [0, Tp) of the cache.
  let cache: LayerKV[] = [];
  let keyMask: tf.Tensor2D;
  let logits: tf.Tensor2D;
  {
    const shared = (opts.sharePrompts ?? sharedPrefixDefault()) ? sharedPrefill(ids, mask, B, Tp) : null;
    const out = tf.tidy(() => {
      const U = shared ? shared.first.length : B;
      const idsT = tf.tensor2d(shared ? shared.ids : ids, [U, Tp], 'int32');
      const maskT = tf.tensor2d(mask, [B, Tp], 'int32');
      const kv: LayerKV[] = [];
      const hidden = model.trunk(
        idsT,
        shared ? tf.tensor2d(shared.mask, [U, Tp], 'int32') : maskT,
        opts.useCache === false ? undefined : kv,
      );
      // Each row's last prompt position: its group's where the prefill ran once per prompt.
      const lastRows = tf.tensor1d(
        Array.from({ length: B }, (_, b) => (shared ? shared.owner[b] : b) * Tp + Tp - 1),
        'int32',
      );
      const lg = decodeLogits(model, tf.gather(hidden, lastRows) as tf.Tensor2D);
      const ownerT = shared ? tf.tensor1d(shared.owner, 'int32') : null;
      const cacheOf = (x: tf.Tensor4D) =>
        tf.pad(ownerT ? tf.gather(x, ownerT) : x, [
          [0, 0],
          [0, 0],
          [0, S - Tp],
          [0, 0],
        ]) as tf.Tensor4D;
      const padded = kv.map(({ k, v }) => ({ k: cacheOf(k), v: cacheOf(v) }));
      const km = tf.concat([tf.cast(maskT, 'float32'), tf.zeros([B, N])], 1) as tf.Tensor2D;
      return { lg, padded, km };
    });
    cache = out.padded;
    keyMask = out.km;
    logits = out.lg;
  }
  if (opts.useCache !== false && opts.replay !== false && N > 1 && decodeReplayApplies()) {
    // WebGPU: the decode loop recorded once and replayed per token (model/decode-replay.ts); same tokens.
    const greedy = opts.temperature === 0;
    const r = await replayedDecode({
      model,
      B,
      Tp,
      N,
      realLen,
      promptMask: mask,
      logits,
      cache,
      padId: opts.padId,
      stop,
      checkEvery,
      uniforms: () => (opts.temperature === 0 ? null : Float32Array.from(draw())),
      fused: fusedChoiceApplies(B, logits.shape[1]) ? { temperature: opts.temperature, topK, topP } : null,
      pick: (lg, u) => {
        if (greedy) {
          const g = greedyTokensWebGpu(lg);
          if (g) return g;
        }
        if (greedy || !u) return pickTokens(lg, opts.temperature, topK, topP, null);
        const s = sampleTokens(lg, { temperature: opts.temperature, topK, topP, uniforms: u });
        s.logprobs.dispose(); // the kept set's log-prob; PPO trains against the unfiltered one
        return { tokens: s.tokens, logprobs: s.fullLogprobs };
      },
    });
    finished.dispose();
    keyMask.dispose(); // the replayed loop keeps the key mask on the host
    return rowsOf(r.tokens, r.logprobs, B, r.steps, isStop, true);
  }
  // For recompute mode: the growing sequence.
  const seqIds = Array.from({ length: B }, (_, b) => Array.from(ids.subarray(b * Tp, (b + 1) * Tp)));
  const seqMask = Array.from({ length: B }, (_, b) => Array.from(mask.subarray(b * Tp, (b + 1) * Tp)));

  try {
    for (let s = 0; s < N; s++) {
      await maybeYield(); // a turn for the event loop between tokens (src/core/base/yield.ts)
      const u = uniforms();
      const picked = await chooseTokens(logits, opts.temperature, topK, topP, u);
      u?.dispose();
      const chosen = tf.tidy(() => {
        const tok = tf.where(finished, tf.fill([B], opts.padId, 'int32'), picked.tokens) as tf.Tensor1D;
        const lp = tf.where(finished, tf.zeros([B]), picked.logprobs) as tf.Tensor1D;
        const fin =
          stop === null
            ? tf.clone(finished)
            : stop.reduce<tf.Tensor>((f, id) => tf.logicalOr(f, tf.equal(picked.tokens, id)), finished);
        return { tok, lp, fin };
      });
      picked.tokens.dispose();
      picked.logprobs.dispose();
      finished.dispose();
      finished = chosen.fin as tf.Tensor1D;
      stepTokens.push(chosen.tok);
      stepLogprobs.push(chosen.lp);
      if (s === N - 1) break;
      if (stop !== null && (s + 1) % checkEvery === 0) {
        const anyLeft = tf.tidy(() => tf.any(tf.logicalNot(finished)));
        const left = (await anyLeft.data())[0];
        anyLeft.dispose();
        if (!left) break;
      }

      if (opts.useCache === false) {
        const tokNow = (await chosen.tok.data()) as Int32Array;
        for (let b = 0; b < B; b++) {
          seqIds[b].push(tokNow[b]);
          seqMask[b].push(1);
        }
        const T = Tp + s + 1;
        const next = tf.tidy(() => {
          const idsT = tf.tensor2d(seqIds.flat(), [B, T], 'int32');
          const maskT = tf.tensor2d(seqMask.flat(), [B, T], 'int32');
          const hidden = model.trunk(idsT, maskT);
          const lastRows = tf.tensor1d(
            Array.from({ length: B }, (_, b) => b * T + T - 1),
            'int32',
          );
          return decodeLogits(model, tf.gather(hidden, lastRows) as tf.Tensor2D);
        });
        logits.dispose();
        logits = next;
        continue;
      }

      const slot = Tp + s;
      const next = tf.tidy(() => {
        const oh = tf.cast(tf.reshape(tf.oneHot(tf.tensor1d([slot], 'int32'), S), [S]), 'float32');
        const km = tf.add(keyMask, tf.reshape(oh, [1, S])) as tf.Tensor2D;
        const pos = tf.tensor1d(
          realLen.map((n) => n + s),
          'int32',
        );
        const out = model.decodeStep(chosen.tok, pos, oh, km, cache);
        return { lg: decodeLogits(model, out.hidden), cache: out.cache, km };
      });
      for (const { k, v } of cache) {
        k.dispose();
        v.dispose();
      }
      keyMask.dispose();
      logits.dispose();
      cache = next.cache;
      keyMask = next.km;
      logits = next.lg;
    }

    const [tokAll, lpAll] = tf.tidy(() => [tf.stack(stepTokens, 1), tf.stack(stepLogprobs, 1)]);
    const tokData = (await tokAll.data()) as Int32Array;
    const lpData = (await lpAll.data()) as Float32Array;
    tokAll.dispose();
    lpAll.dispose();
    return rowsOf(tokData, lpData, B, stepTokens.length, isStop, false);
  } finally {
    for (const t of stepTokens) t.dispose();
    for (const t of stepLogprobs) t.dispose();
    for (const { k, v } of cache) {
      k.dispose();
      v.dispose();
    }
    keyMask.dispose();
    logits.dispose();
    finished.dispose();
  }
}

/**
 * `generate` over slices of at most `microBatch` rows (0 or ≥ the batch: one slice), concatenated: only one
 * slice's KV cache and logits are live at a time. With per-row random streams (`opts.rng` an array) and the
 * whole batch's prompt length (`padTo`, set here), every row gets the tokens it would get in one batch.
 */
export async function generateInMicroBatches(
  model: CausalLM,
  prompts: number[][],
  opts: SampleOptions & { rng: Rng[] },
  microBatch: number,
  /** Called after each slice with the samples generated so far and the total (progress inside a long step). */
  onSlice?: (done: number, total: number) => void,
): Promise<GenerateResult> {
  const B = prompts.length;
  const size = microBatch > 0 ? Math.min(microBatch, B) : B;
  if (size === B) {
    const all = await generate(model, prompts, opts);
    onSlice?.(B, B);
    return all;
  }
  const padTo = Math.max(opts.padTo ?? 0, ...prompts.map((p) => p.length));
  const tokens: number[][] = [];
  const logprobs: number[][] = [];
  for (let s = 0; s < B; s += size) {
    const part = await generate(model, prompts.slice(s, s + size), {
      ...opts,
      padTo,
      rng: opts.rng.slice(s, s + size),
    });
    tokens.push(...part.tokens);
    logprobs.push(...part.logprobs);
    onSlice?.(tokens.length, B);
  }
  return { tokens, logprobs };
}
