/**
 * One dispatch point for choosing tokens from logits (issue #22): `sampleTokens(logits, {temperature, topK, topP,
 * uniforms})`. On WebGPU it is the fused kernel of src/core/kernels/webgpu-sample.ts (one dispatch, only ids and
 * log-probs produced, nothing read back); on CPU and WASM the logits are read back (a copy there) and the same
 * semantics computed in JavaScript (`sampleRowsHost`). docs/tfjs.md, "Sampling on the device".
 *
 * Semantics, per row (z = logits / T):
 * - T = 0: the argmax of the raw logits, ties to the lowest index (tf.argMax); log p_kept = 0 (a point mass),
 *   log p_all = log softmax(logits) at it (T = 1, generate()'s convention for greedy).
 * - top-k (K > 0, K < V): keep z ≥ the K-th largest z (ties at the threshold kept); then top-p (P < 1) over that
 *   set: keep z ≥ the smallest kept value whose mass strictly above it is < P of the kept mass (Hugging Face's
 *   order and filterLogits' thresholds).
 * - the token: inverse CDF of exp(z − max) over the kept set in vocabulary order, at u·(kept mass) for the row's
 *   uniform u ∈ [0, 1): the first kept j whose running sum exceeds it (so never a zero-mass entry), else the last
 *   kept entry with mass > 0.
 * - logprobs: log of the renormalised kept-set probability of the token (what it was drawn from);
 *   fullLogprobs: log softmax(z) at the token, unfiltered (what PPO trains against: generate()'s logprobs).
 * Same logits and uniforms → same tokens on a given backend; across backends the float32 sums differ in order, so a
 * uniform within a few ulps of a CDF boundary may pick the neighbouring token.
 */
import * as tf from '@tensorflow/tfjs-core';
import { MAX_ELEMENTS, MAX_VOCAB, sampleWebGpuPacked } from '../kernels/webgpu-sample';

export interface SampleTokenOptions {
  /** 0 = greedy (argmax). */
  temperature: number;
  /** 0 = off. */
  topK?: number;
  /** 1 = off. */
  topP?: number;
  /** One uniform in [0, 1) per row (from the seeded Rng), [B] or [B, 1]; unused (may be null) when greedy. */
  uniforms: tf.Tensor | ArrayLike<number> | null;
  /** `kernel` = the WGSL kernel (webgpu only), `host` = the JavaScript path, `auto` = the kernel on webgpu. */
  impl?: 'auto' | 'kernel' | 'host';
}

export interface SampledTokens {
  /** [B] int32. */
  tokens: tf.Tensor1D;
  /** [B] log-probability of each token under the renormalised kept-set distribution (0 when greedy). */
  logprobs: tf.Tensor1D;
  /** [B] log softmax(logits / T) at each token, before top-k/top-p (T = 1 when greedy). */
  fullLogprobs: tf.Tensor1D;
}

function check(
  logits: tf.Tensor,
  o: SampleTokenOptions,
): { B: number; V: number; topK: number; topP: number } {
  if (logits.rank !== 2 || logits.dtype !== 'float32')
    throw new Error(
      `sampleTokens: logits must be a float32 [B, V] tensor, got ${logits.dtype} of shape [${logits.shape}]`,
    );
  const [B, V] = logits.shape;
  if (V < 1 || V > MAX_VOCAB)
    throw new Error(`sampleTokens: the vocabulary must be 1 to 2^24 tokens, got ${V}`);
  if (!(o.temperature >= 0) || !Number.isFinite(o.temperature))
    throw new Error(`sampleTokens: temperature must be finite and ≥ 0 (0 = greedy), got ${o.temperature}`);
  const topK = o.topK ?? 0;
  if (!Number.isInteger(topK) || topK < 0)
    throw new Error(`sampleTokens: topK must be an integer ≥ 0 (0 = off), got ${topK}`);
  const topP = o.topP ?? 1;
  if (!(topP > 0 && topP <= 1))
    throw new Error(`sampleTokens: topP must be in (0, 1] (1 = off), got ${topP}`);
  if (o.temperature > 0) {
    if (o.uniforms == null) throw new Error('sampleTokens: uniforms are required when temperature > 0');
    const n = o.uniforms instanceof tf.Tensor ? o.uniforms.size : o.uniforms.length;
    if (n !== B) throw new Error(`sampleTokens: ${n} uniforms for ${B} rows; give one per row`);
  }
  return { B, V, topK, topP };
}

/** The rows' uniforms as float32 (the kernel's precision, so both paths see the same numbers). */
function uniformsOf(u: SampleTokenOptions['uniforms'], B: number): Float32Array {
  if (u == null) return new Float32Array(B);
  if (u instanceof tf.Tensor) return Float32Array.from(u.dataSync());
  return Float32Array.from(u);
}

/**
 * The JavaScript path: rows of `x` (row-major [B, V] float32) → tokens, log p_kept, log p_all, with the semantics
 * above (float64 sums; z rounded to float32 as the kernel computes it).
 */
export function sampleRowsHost(
  x: Float32Array,
  B: number,
  V: number,
  temperature: number,
  topK: number,
  topP: number,
  uniforms: ArrayLike<number>,
): { tokens: Int32Array; logprobs: Float32Array; fullLogprobs: Float32Array } {
  const tokens = new Int32Array(B);
  const logprobs = new Float32Array(B);
  const fullLogprobs = new Float32Array(B);
  const greedy = temperature === 0;
  const z = new Float32Array(V);
  const e = new Float64Array(V);
  for (let b = 0; b < B; b++) {
    const off = b * V;
    let m = -Infinity;
    let arg = -1;
    for (let j = 0; j < V; j++) {
      z[j] = greedy ? x[off + j] : Math.fround(x[off + j] / temperature);
      if (z[j] > m || (z[j] === m && arg < 0)) {
        m = z[j];
        arg = j;
      }
    }
    if (arg < 0) arg = 0; // a NaN row
    let sAll = 0;
    for (let j = 0; j < V; j++) {
      e[j] = Math.exp(z[j] - m);
      sAll += e[j];
    }
    let tok = arg;
    let lpKept = 0;
    if (!greedy) {
      let thr = -Infinity;
      if (topK > 0 && topK < V) thr = Float32Array.from(z).sort().reverse()[topK - 1];
      if (topP < 1) {
        const kept = Array.from({ length: V }, (_, j) => j).filter((j) => z[j] >= thr);
        kept.sort((a, c) => z[c] - z[a]);
        let sk = 0;
        for (const j of kept) sk += e[j];
        let before = 0;
        let t = thr;
        for (const j of kept) {
          if (before < topP * sk) t = z[j];
          before += e[j];
        }
        thr = t;
      }
      let s = 0;
      for (let j = 0; j < V; j++) if (z[j] >= thr) s += e[j];
      const target = uniforms[b] * s;
      let run = 0;
      let found = -1;
      let lastKept = -1;
      for (let j = 0; j < V; j++) {
        if (!(z[j] >= thr)) continue;
        run += e[j];
        if (e[j] > 0) lastKept = j;
        if (run > target) {
          found = j;
          break;
        }
      }
      if (found < 0) found = lastKept;
      if (found >= 0) tok = found;
      lpKept = z[tok] - m - Math.log(s);
    }
    tokens[b] = tok;
    logprobs[b] = lpKept;
    fullLogprobs[b] = z[tok] - m - Math.log(sAll);
  }
  return { tokens, logprobs, fullLogprobs };
}

/**
 * Greedy on WebGPU through the same kernel at temperature 0: per row the argmax of the logits (ties to the lowest
 * index, as the CPU backend's tf.argMax; tfjs-backend-webgpu's does not on ties) and log softmax(logits) at it —
 * 4 dispatches (the kernel, two column slices, the cast) where pickTokens' tfjs ops (logSoftmax, argMax, the
 * gather) take 9: a 2-layer Qwen3's decode token 33 → 28.
 * Null off WebGPU or past the kernel's limits (pickTokens then). The log-prob sums in another order than
 * tf.logSoftmax: within float32 rounding of it (tests/greedy-device.test.ts).
 */
export function greedyTokensWebGpu(
  logits: tf.Tensor2D,
): { tokens: tf.Tensor1D; logprobs: tf.Tensor1D } | null {
  const [B, V] = logits.shape;
  if (tf.getBackend() !== 'webgpu' || logits.dtype !== 'float32') return null;
  if (B < 1 || V < 1 || B * V > MAX_ELEMENTS || V > MAX_VOCAB) return null;
  return tf.tidy(() => {
    const packed = sampleWebGpuPacked(logits, tf.zeros([B]) as tf.Tensor1D, 0, 0, 1);
    return { tokens: tokenColumn(packed), logprobs: column(packed, 2) };
  });
}

/** Column c of the kernel's packed [B, 3] output (token, log p_kept, log p_all) as [B]. */
const column = (packed: tf.Tensor2D, c: number): tf.Tensor1D => {
  const B = packed.shape[0];
  return tf.reshape(tf.slice(packed, [0, c], [B, 1]), [B]) as tf.Tensor1D;
};

/** The packed output's token ids (float32, exact below 2²⁴) as int32 [B]. */
const tokenColumn = (packed: tf.Tensor2D): tf.Tensor1D => tf.cast(column(packed, 0), 'int32') as tf.Tensor1D;

/** Choose one token per row of logits [B, V]; see the module comment for the semantics. */
export function sampleTokens(logits: tf.Tensor2D, opts: SampleTokenOptions): SampledTokens {
  const { B, V, topK, topP } = check(logits, opts);
  const impl = opts.impl ?? 'auto';
  const onGpu = tf.getBackend() === 'webgpu';
  if (impl === 'kernel' && !onGpu)
    throw new Error(
      `sampleTokens: the WGSL kernel needs the webgpu backend, the current one is ${tf.getBackend()}`,
    );
  if (onGpu && impl !== 'host') {
    if (B * V > MAX_ELEMENTS) throw new Error(`sampleTokens: B·V = ${B * V} exceeds the kernel's 2^31 − 1`);
    return tf.tidy(() => {
      const u =
        opts.uniforms instanceof tf.Tensor
          ? tf.cast(tf.reshape(opts.uniforms, [B]), 'float32')
          : tf.tensor1d(opts.temperature === 0 ? new Float32Array(B) : uniformsOf(opts.uniforms, B));
      const packed = sampleWebGpuPacked(logits, u as tf.Tensor1D, opts.temperature, topK, topP);
      return { tokens: tokenColumn(packed), logprobs: column(packed, 1), fullLogprobs: column(packed, 2) };
    });
  }
  const x = logits.dataSync() as Float32Array;
  const r = sampleRowsHost(x, B, V, opts.temperature, topK, topP, uniformsOf(opts.uniforms, B));
  return {
    tokens: tf.tensor1d(r.tokens, 'int32'),
    logprobs: tf.tensor1d(r.logprobs),
    fullLogprobs: tf.tensor1d(r.fullLogprobs),
  };
}
