/**
 * Token log-probs and entropies straight from the final hidden states and the tied LM head, over vocabulary
 * chunks, so the [N, V] logits (GPT-2: V = 50257) are never held whole, neither in the forward nor in the
 * backward (issue #20, point 3). The unchunked path is `lmHead` then `logprobsFromLogits` /
 * `entropyFromLogits` (losses.ts); this computes the same numbers:
 *
 *   z = h·Wᵀ / T (the logits divided by the temperature, as the trainer does), lse = logsumexp_v z,
 *   logprob = z[token] − lse, entropy H = lse − Σ_v p_v z_v with p = softmax(z).
 *
 * Forward, one chunk c of Vc vocabulary rows at a time (an online logsumexp, as the fused WebGPU kernel does per
 * row): with m the running max and, relative to it, s = Σ exp(z − m) and u = Σ exp(z − m)·(z − m), a chunk with
 * new max m' = max(m, max z_c) updates
 *   s ← e^{m − m'}·s + Σ_c exp(z − m'),
 *   u ← e^{m − m'}·(u + s_old·(m − m')) + Σ_c exp(z − m')·(z − m'),
 * (each old term exp(z − m)(z − m) becomes exp(z − m')·((z − m) + (m − m'))). s is kept as r = s − 1, the sum
 * without the max's own exp(0) = 1, so that log s = log1p(r) keeps its digits when one token dominates (s = 1 +
 * something small, which float32 would round first). At the end lse = m + log s, Σ p·z = m + u/s and
 * H = log s − u/s: two non-negative terms, no cancellation between two large numbers (the unchunked lse − Σ p·z
 * loses digits when the logits are large), and logprob = (z_token − m) − log s. The token's logit is picked from
 * the chunk that holds it (a flat gather of N entries).
 *
 * Backward, with upstream a = ∂L/∂logprob and b = ∂L/∂H (per token), recomputing each chunk's z:
 *   ∂logprob/∂z_v = onehot(token)_v − p_v,
 *   ∂H/∂z_v = ∂lse/∂z_v − ∂(Σ_k p_k z_k)/∂z_v = p_v − (p_v + Σ_k z_k·p_k(δ_kv − p_v)) = −p_v·(z_v − Σ_k p_k z_k),
 * so G = ∂L/∂z = a·onehot − p·(a + b·(z − Σ p·z)), and with ∂z/∂logits = 1/T:
 *   ∂L/∂h = Σ_c (G_c/T)·W_c  [N, D],   ∂L/∂W_c = (G_c/T)ᵀ·h  [Vc, D].
 * p is rebuilt as exp((z − m) − log s) from the m and log s saved by the forward ([N] floats each), so nothing
 * [N, V] is saved.
 *
 * The largest tensors are one chunk's [N, Vc] (under four alive at once: each temporary is disposed as soon as
 * the next is made) and, when a W block is longer than the chunk, its [Vc, D] row slice. The gradient of a W
 * block is the block's own size (it is that parameter's gradient); when a block is cut into several pieces it is
 * the concat of the pieces' gradients, so for a moment both are alive (twice the block): blocks of at most
 * `chunkRows` rows (GPT2's wte chunks) avoid that. Under LoRA the head is frozen and `weightGrad: false`
 * computes no W gradient at all.
 *
 * Cost: the backward recomputes each chunk's logits, one more [N, D]·[D, V] matmul than the unchunked path (four
 * head matmuls per step instead of three; three instead of two under LoRA, which has no ∂L/∂W). On WebGPU every
 * op is a dispatch (about 60 kernels per chunk forward, most of them on the [N] running statistics, and 30
 * backward), where the fused kernels of webgpu-logprob.ts do a whole row in one dispatch forward and one backward.
 */
import * as tf from '@tensorflow/tfjs-core';
import { headRowsBackward, headRowsLogits } from '../model/vocab-chunks';
import { f16Rows, isPackedF16, packedShape } from '../kernels/webgpu-f16';

export interface ChunkedLogprobOptions {
  /** Logits are divided by this (> 0) before the softmax, as logprobsFromLogits does. Default 1. */
  temperature?: number;
  /**
   * Vocabulary rows per chunk (default 8192). A W block with at most this many rows is used whole; a longer one is
   * cut into slices of this many rows (the last one shorter).
   */
  chunkRows?: number;
  /** Also return the per-token entropy. Default false. */
  entropy?: boolean;
  /**
   * Whether the entropy carries a gradient (default true when `entropy`). False: it is computed but autodiff takes
   * its gradient as zero, which skips its part of the backward (the trainer only measures the entropy when
   * entropyCoef is 0).
   */
  entropyGrad?: boolean;
  /**
   * Whether W gets a gradient (default true: full fine-tuning, where the tied wte is trained). False (LoRA, where
   * the head is frozen): the W blocks are not inputs of the custom gradient, so no ∂L/∂W is computed at all.
   */
  weightGrad?: boolean;
}

export interface ChunkedLogprobResult {
  /** log softmax(h·Wᵀ/T) at each token, [N]; NaN for a token outside [0, V). */
  logprobs: tf.Tensor1D;
  /** Entropy of softmax(h·Wᵀ/T) per row, [N], when asked for. */
  entropy?: tf.Tensor1D;
}

/** One chunk of the vocabulary: rows [lo, hi) of W block `block`, which are vocabulary ids offset + 0 … */
interface Piece {
  block: number;
  lo: number;
  hi: number;
  offset: number;
}

function pieces(blockRows: number[], chunkRows: number): Piece[] {
  const out: Piece[] = [];
  let offset = 0;
  blockRows.forEach((rows, block) => {
    for (let lo = 0; lo < rows; lo += chunkRows) {
      const hi = Math.min(rows, lo + chunkRows);
      out.push({ block, lo, hi, offset: offset + lo });
    }
    offset += rows;
  });
  return out;
}

/** A piece's rows of its block: the block itself when the piece is all of it (no copy). */
function pieceRows(w: tf.Tensor2D, p: Piece): tf.Tensor2D {
  if (p.lo === 0 && p.hi === w.shape[0]) return w;
  // A packed-f16 block (baseDtype "f16") is cut by its own kernel: tf.slice would round its words through f32.
  if (isPackedF16(w)) return f16Rows(w, p.lo, p.hi - p.lo);
  return tf.slice(w, [p.lo, 0], [p.hi - p.lo, w.shape[1]]);
}

/**
 * `f(x)`, then x disposed. The chunk loops dispose each [N, Vc] temporary as soon as the next one exists, so a
 * chunk holds about three of them at once instead of every one until its tidy ends.
 */
function consume<T extends tf.Tensor>(x: tf.Tensor, f: (x: tf.Tensor) => T): T {
  const y = f(x);
  x.dispose();
  return y;
}

/** z = h·Wcᵀ / T for one piece, [N, Vc]: the same matmul then division as lmHead then logprobsFromLogits. */
function pieceLogits(h: tf.Tensor2D, wc: tf.Tensor2D, temperature: number): tf.Tensor2D {
  // f32, or packed f16 rows of a frozen base (baseDtype "f16": vocab-chunks.ts headRowsLogits).
  const logits = headRowsLogits(h, wc);
  return temperature === 1 ? logits : consume(logits, (l) => tf.div(l, temperature) as tf.Tensor2D);
}

/**
 * The token's column in this piece (0 where the token is elsewhere, so it is always a valid index), and whether
 * it is really there; both [N]. `where`, not clipByValue: WASM's ClipByValue does not clip int32.
 */
function localTokens(tokens: tf.Tensor1D, p: Piece): { local: tf.Tensor1D; inPiece: tf.Tensor1D } {
  const vc = p.hi - p.lo;
  const rel = tf.sub(tokens, tf.scalar(p.offset, 'int32'));
  const inPiece = tf.logicalAnd(tf.greaterEqual(rel, 0), tf.less(rel, vc)) as tf.Tensor1D;
  return { local: tf.where(inPiece, rel, tf.zerosLike(rel)) as tf.Tensor1D, inPiece };
}

/**
 * a at each row's token column of a piece, 0 elsewhere, [N, depth]: onehot(local)·a, with the one-hot all 0 in a
 * row whose token is in another piece (`inPiece` false). The one-hot is exactly 0 or 1 and is multiplied by a
 * as a whole, so every entry is what `cast(equal(local, cols) ∧ inPiece)·a` gives, bit for bit (a NaN a makes its
 * whole row NaN either way). Built with tf.oneHot (an index of −1 gives a row of zeros) rather than that
 * comparison against a broadcast [1, depth] range: tfjs-backend-wasm 4.22 runs broadcasting comparison and
 * logical ops at ≈ 65 ns an element, 15× its same-shape speed (≈ 200 ms a [192, 8192] piece against ≈ 4 with
 * oneHot; issue #24). tf.oneHot refuses a depth of 1 (a last piece of one vocabulary row): there the one-hot is
 * the [N, 1] column inPiece ∧ local = 0, a comparison of N elements. The one-hot is made int32 and cast: WASM's
 * OneHot writes int32 bits whatever the dtype asked (a float32 one-hot of 1s reads 1.4e−45 there).
 */
export function tokenHit(local: tf.Tensor1D, inPiece: tf.Tensor1D, a: tf.Tensor, depth: number): tf.Tensor2D {
  // The [N, depth] temporaries go as soon as the next exists (consume), as in the chunk loops.
  const oh =
    depth === 1
      ? tf.tidy(() => tf.expandDims(tf.cast(tf.logicalAnd(tf.equal(local, 0), inPiece), 'float32'), 1))
      : consume(
          tf.tidy(() =>
            tf.oneHot(tf.where(inPiece, local, tf.fill(local.shape, -1, 'int32')) as tf.Tensor1D, depth),
          ),
          (x) => tf.cast(x, 'float32'),
        );
  return consume(oh, (x) => tf.mul(x, a) as tf.Tensor2D);
}

/**
 * Per-token log-prob (and entropy) of softmax(h·Wᵀ / T) over vocabulary chunks, with gradients wrt h and (unless
 * `weightGrad` is false) the W blocks. h: final hidden states after ln_f [N, D]; wBlocks: the LM head's rows in
 * vocabulary order, [V_k, D] each (the wte chunks, or one [V, D]); tokens: [N] int32.
 */
export function chunkedTokenLogprobs(
  h: tf.Tensor2D,
  wBlocks: tf.Tensor2D[],
  tokens: tf.Tensor1D,
  opts: ChunkedLogprobOptions = {},
): ChunkedLogprobResult {
  const temperature = opts.temperature ?? 1;
  const chunkRows = opts.chunkRows ?? 8192;
  const wantEntropy = opts.entropy ?? false;
  const entropyGrad = wantEntropy && (opts.entropyGrad ?? true);
  const weightGrad = opts.weightGrad ?? true;
  if (!(temperature > 0))
    throw new Error(`chunkedTokenLogprobs: temperature must be > 0, got ${temperature}`);
  if (!(Number.isInteger(chunkRows) && chunkRows > 0))
    throw new Error(`chunkedTokenLogprobs: chunkRows must be a positive integer, got ${chunkRows}`);
  if (wBlocks.length === 0) throw new Error('chunkedTokenLogprobs: no W blocks');
  const [N, D] = h.shape;
  for (const w of wBlocks) {
    // A packed-f16 block (baseDtype "f16") holds its D columns as D / 2 words.
    const cols = isPackedF16(w) ? packedShape(w)[1] : w.shape[1];
    if (w.rank !== 2 || cols !== D)
      throw new Error(
        `chunkedTokenLogprobs: W block of shape [${isPackedF16(w) ? packedShape(w) : w.shape}] for hidden size ${D}`,
      );
    if (weightGrad && isPackedF16(w))
      throw new Error('chunkedTokenLogprobs: a packed-f16 W block is frozen; weightGrad must be false.');
  }
  if (tokens.rank !== 1 || tokens.shape[0] !== N)
    throw new Error(`chunkedTokenLogprobs: ${tokens.shape[0]} tokens for ${N} rows of h`);
  if (tokens.dtype !== 'int32') throw new Error('chunkedTokenLogprobs: tokens must be int32');
  const V = wBlocks.reduce((a, w) => a + w.shape[0], 0);
  const plan = pieces(
    wBlocks.map((w) => w.shape[0]),
    chunkRows,
  );
  const nBlocks = wBlocks.length;

  // Inputs of the custom gradient: h, then the W blocks when they get a gradient (tfjs computes a gradient for
  // every input of a custom gradient, so frozen ones are left out and read through `save` instead).
  const inputs: tf.Tensor[] = weightGrad ? [h, ...wBlocks] : [h];

  const op = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const save = args[args.length - 1] as tf.GradSaveFunc;
    const hIn = args[0] as tf.Tensor2D;
    const ws = weightGrad ? (args.slice(1, 1 + nBlocks) as tf.Tensor2D[]) : wBlocks;

    // Running statistics [N]: the max m, r = Σ exp(z − m) − 1, u = Σ exp(z − m)·(z − m), the token's logit zt.
    // r leaves out the max's own exp(0) = 1: with one dominant token Σ exp(z − m) = 1 + (something small), and
    // float32 would round that something to a few digits before the log (log1p(r) keeps them); this is what
    // keeps a near-zero entropy or log-prob accurate to a few ulps.
    let m: tf.Tensor1D | null = null;
    let r: tf.Tensor1D | null = null;
    let u: tf.Tensor1D | null = null;
    let zt: tf.Tensor1D | null = null;
    const rows = tf.range(0, N, 1, 'int32') as tf.Tensor1D;
    for (const p of plan) {
      const next = tf.tidy(() => {
        const vc = p.hi - p.lo;
        const z = pieceLogits(hIn, pieceRows(ws[p.block], p), temperature);
        // This chunk's own statistics, relative to its max mc: rc = Σ exp(z − mc) − 1 summed without the 1 (the
        // entries below the max, plus one for each further entry equal to it), uc = Σ exp(z − mc)·(z − mc).
        const mc = tf.max(z, 1) as tf.Tensor1D;
        const { local, inPiece } = localTokens(tokens, p);
        const flat = tf.add(tf.mul(rows, tf.scalar(vc, 'int32')), local);
        // (The flat view shares z's buffer, so it goes too, or z's buffer would outlive z.)
        const picked = tf.where(
          inPiece,
          consume(tf.reshape(z, [-1]), (zFlat) => tf.gather(zFlat, flat)),
          tf.zerosLike(mc),
        );
        const d = consume(z, (x) => tf.sub(x, tf.expandDims(mc, 1))); // ≤ 0
        const e = tf.exp(d);
        const uc = wantEntropy ? consume(tf.mul(e, d), (ed) => tf.sum(ed, 1) as tf.Tensor1D) : null;
        const below = consume(
          consume(d, (x) => tf.less(x, 0)),
          (x) => tf.cast(x, 'float32'),
        ); // 1 below the max, 0 at it
        const ties = tf.sub(tf.sub(vc, tf.sum(below, 1)), 1); // entries at the max, less the one counted as 1
        const eBelow = consume(e, (x) => tf.mul(x, below));
        below.dispose();
        const rc = tf.add(
          consume(eBelow, (x) => tf.sum(x, 1)),
          ties,
        ) as tf.Tensor1D;
        // [m, r, zt] and u when the entropy is wanted (a tidy returns tensors, not nulls).
        if (m === null || r === null || zt === null) return uc ? [mc, rc, picked, uc] : [mc, rc, picked];
        // Merge (m, r, u) with (mc, rc, uc) at m' = max(m, mc). The side whose max is m' keeps its r and adds the
        // other side's whole sum scaled by exp(its max − m'), so the 1 is never added to r and taken off again.
        const mNew = tf.maximum(m, mc) as tf.Tensor1D;
        const shiftOld = tf.sub(m, mNew); // ≤ 0, 0 when the running max stays
        const shiftC = tf.sub(mc, mNew); // ≤ 0, 0 when this chunk holds the new max
        const alphaOld = tf.exp(shiftOld);
        const alphaC = tf.exp(shiftC);
        const chunkWins = tf.greater(mc, m);
        const rNew = tf.where(
          chunkWins,
          tf.add(rc, tf.mul(alphaOld, tf.add(r, 1))),
          tf.add(r, tf.mul(alphaC, tf.add(rc, 1))),
        ) as tf.Tensor1D;
        // Each old term exp(z − m)(z − m) becomes exp(z − m')·((z − m) + (m − m')); the same for the chunk's.
        const ztNew = tf.add(zt, picked);
        if (u === null || uc === null) return [mNew, rNew, ztNew];
        const uOld = tf.mul(alphaOld, tf.add(u, tf.mul(tf.add(r, 1), shiftOld)));
        return [mNew, rNew, ztNew, tf.add(uOld, tf.mul(alphaC, tf.add(uc, tf.mul(tf.add(rc, 1), shiftC))))];
      }) as tf.Tensor1D[];
      tf.dispose([m, r, u, zt].filter((t): t is tf.Tensor1D => t !== null));
      [m, r, zt] = next;
      u = next[3] ?? null;
    }
    const mF = m as tf.Tensor1D;
    const logS = tf.log1p(r as tf.Tensor1D); // log Σ exp(z − m)
    const valid = tf.logicalAnd(tf.greaterEqual(tokens, 0), tf.less(tokens, V));
    // (zt − m) − log s rather than zt − lse: exact 0 − log s for the top token.
    const lp = tf.where(valid, tf.sub(tf.sub(zt as tf.Tensor1D, mF), logS), tf.fill([N], NaN));
    let value: tf.Tensor = lp;
    // ū = u/s = Σ p·(z − m) ≤ 0, so Σ p·z = m + ū; saved for the entropy's backward.
    let uBar: tf.Tensor1D | null = null;
    if (wantEntropy) {
      uBar = tf.div(u as tf.Tensor1D, tf.add(r as tf.Tensor1D, 1)) as tf.Tensor1D;
      value = tf.stack([lp, tf.sub(logS, uBar)]);
    }
    // m, log s and ū are saved apart, not as lse = m + log s and Σ p·z = m + ū: the backward forms
    // z − lse = (z − m) − log s and z − Σ p·z = (z − m) − ū, and z − m is exact near the max where rounding
    // m + (something small) to float32 would cost the small part's digits (p's and the entropy gradient's).
    save([hIn, tokens, mF, logS, ...(entropyGrad && uBar ? [uBar] : []), ...ws]);

    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const hS = saved[0] as tf.Tensor2D;
        const tokS = saved[1] as tf.Tensor1D;
        const mS = saved[2] as tf.Tensor1D;
        const logSS = saved[3] as tf.Tensor1D;
        const uBarS = entropyGrad ? (saved[4] as tf.Tensor1D) : null;
        const wS = saved.slice(entropyGrad ? 5 : 4) as tf.Tensor2D[];
        // Upstream per token, [N, 1]: a for the log-prob, b for the entropy.
        const up = tf.tidy(() => {
          if (!wantEntropy) return [tf.expandDims(dy, 1)];
          const [dLp, dEnt] = tf.unstack(dy);
          return entropyGrad ? [tf.expandDims(dLp, 1), tf.expandDims(dEnt, 1)] : [tf.expandDims(dLp, 1)];
        });
        const a = up[0];
        const b = up[1] ?? null;
        const mCol = tf.expandDims(mS, 1);
        const logSCol = tf.expandDims(logSS, 1);
        const uBarCol = uBarS ? tf.expandDims(uBarS, 1) : null;
        let dh: tf.Tensor2D | null = null;
        const dW: tf.Tensor2D[][] = wS.map(() => []);
        for (const p of plan) {
          const next = tf.tidy(() => {
            const wc = pieceRows(wS[p.block], p);
            const zm = consume(pieceLogits(hS, wc, temperature), (z) => tf.sub(z, mCol)); // z − m
            const prob = consume(tf.sub(zm, logSCol), (x) => tf.exp(x));
            // p·(a + b·(z − Σ p·z)), or p·a when the entropy has no gradient.
            let pCoef: tf.Tensor;
            if (b && uBarCol) {
              const zc = consume(zm, (x) => tf.sub(x, uBarCol));
              const coef = consume(
                consume(zc, (x) => tf.mul(b, x)),
                (x) => tf.add(a, x),
              );
              pCoef = consume(prob, (x) => tf.mul(x, coef));
              coef.dispose();
            } else {
              zm.dispose();
              pCoef = consume(prob, (x) => tf.mul(x, a));
            }
            // a at the token's column, 0 elsewhere (and in every column of a row whose token is in another piece).
            const { local, inPiece } = localTokens(tokS, p);
            const hit = tokenHit(local, inPiece, a, p.hi - p.lo);
            let g = consume(hit, (x) => tf.sub(x, pCoef));
            pCoef.dispose();
            if (temperature !== 1) g = consume(g, (x) => tf.div(x, temperature));
            const dhc = headRowsBackward(g as tf.Tensor2D, wc);
            const dhNew = (dh === null ? dhc : tf.add(dh, dhc)) as tf.Tensor2D;
            return weightGrad ? [dhNew, tf.matMul(g, hS, true, false)] : [dhNew];
          }) as tf.Tensor2D[];
          if (dh !== null) dh.dispose();
          dh = next[0];
          if (next[1]) dW[p.block].push(next[1]);
        }
        tf.dispose([a, b, mCol, logSCol, uBarCol].filter((t): t is tf.Tensor => t !== null));
        if (!weightGrad) return [dh as tf.Tensor2D];
        const dWBlocks = dW.map((parts) => {
          if (parts.length === 1) return parts[0];
          const whole = tf.concat(parts, 0);
          tf.dispose(parts);
          return whole;
        });
        return [dh as tf.Tensor2D, ...dWBlocks];
      },
    };
  });

  return tf.tidy(() => {
    const out = (op as (...x: tf.Tensor[]) => tf.Tensor)(...inputs);
    if (!wantEntropy) return { logprobs: out as tf.Tensor1D };
    const [logprobs, entropy] = tf.unstack(out) as tf.Tensor1D[];
    return { logprobs, entropy };
  });
}
