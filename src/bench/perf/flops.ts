/**
 * Model FLOPs: how much arithmetic a forward or training pass of our GPT-2 does, to turn seconds into
 * achieved FLOP/s and MFU (model FLOPs utilisation = achieved FLOP/s ÷ the backend's measured matmul peak).
 *
 * Counted: the matrix products, as the code computes them (one multiply-add = 2 FLOPs). Not counted:
 * element-wise ops, softmax, layer norm, gathers and their scatter gradients (they are memory-bound and are
 * the conventional exclusions of MFU). Per token of a sequence of T tokens, one layer's forward costs
 *   24·C²   (c_attn C→3C, attn.c_proj C→C, mlp.c_fc C→4C, mlp.c_proj 4C→C: 2·12·C²)
 *   + 4·T·C (q·kᵀ and att·v over all T keys: tfjs computes the full T×T score matrix, masked, not half of it)
 * and a head costs 2·C·V per row it is applied to (the tied LM head) or 2·C (a scalar head).
 * A training pass (forward + backward) is 3× the forward: the backward of a product needs two products of
 * the same size (gradients of the input and of the weight). With N = 12·L·C² non-embedding parameters this is
 * the usual "6·N·tokens + attention" rule, with the LM head counted only on the rows that compute it.
 */
import type { GPT2Config } from '../../core/model/config';

export type ModelShape = Pick<GPT2Config, 'n_layer' | 'n_embd' | 'vocab_size'>;

/** Non-embedding matmul parameters (12·L·C²); biases and norms excluded. */
export function matmulParams(c: ModelShape): number {
  return 12 * c.n_layer * c.n_embd * c.n_embd;
}

/**
 * Forward FLOPs of the trunk over `rows` sequences of `T` tokens, plus an LM head on `lmRows` rows and a
 * scalar head on `scalarRows` rows.
 */
export function forwardFlops(c: ModelShape, rows: number, T: number, lmRows = 0, scalarRows = 0): number {
  const C = c.n_embd;
  const trunk = rows * T * c.n_layer * (24 * C * C + 4 * T * C);
  return trunk + lmRows * 2 * C * c.vocab_size + scalarRows * 2 * C;
}

/** Forward + backward FLOPs (3× forward). */
export function trainFlops(c: ModelShape, rows: number, T: number, lmRows = 0, scalarRows = 0): number {
  return 3 * forwardFlops(c, rows, T, lmRows, scalarRows);
}

/**
 * FLOPs of one PPO step's update phase (step 7 of the trainer), for `epochs` PPO epochs over a batch of `batch`
 * rollouts of T = Tq + R tokens (queries left-padded to Tq, R = responseLength):
 *   per epoch, over all minibatches together (the count is linear in the rows, so minibatching does not change it):
 *     policy: 3·[batch·T·L·(24C² + 4TC) + batch·R·2CV]   (trunk on every token, LM head on the R response rows)
 *     value:  3·[batch·T·L·(24C² + 4TC) + batch·T·2C]    (trunk on every token, scalar head on every position)
 * ≈ epochs · 2 · (6·N·batch·T + attention) for a small vocabulary, as the formula says.
 */
export function ppoUpdateFlops(
  c: ModelShape,
  o: { batch: number; Tq: number; R: number; epochs: number },
): number {
  const T = o.Tq + o.R;
  const policy = trainFlops(c, o.batch, T, o.batch * o.R, 0);
  const value = trainFlops(c, o.batch, T, 0, o.batch * T);
  return o.epochs * (policy + value);
}

/** FLOPs of one next-token training step (lmLoss): B windows of T tokens, LM head on every position. */
export function lmTrainStepFlops(c: ModelShape, B: number, T: number): number {
  return trainFlops(c, B, T, B * T, 0);
}

/** 2·n³: one n×n by n×n product. */
export function matmulFlops(m: number, k: number, n: number): number {
  return 2 * m * k * n;
}

/**
 * FLOPs of sampling `R` tokens for `batch` rows with the KV cache (core/model/sampling.ts): a prefill over the
 * `Tp`-token prompts (trunk on every position, LM head on the last), then R − 1 decode steps; decode step k
 * (1 ≤ k < R) runs one token per row through the trunk, attending to the Tp + k keys written so far, and the LM
 * head on it:
 *   batch · [Tp·L·(24C² + 4·Tp·C) + 2CV]  +  Σ_{k=1}^{R−1} batch · [L·(24C² + 4·(Tp + k)·C) + 2CV].
 * The useful arithmetic: the attention over cache slots not yet written (ours computes them, masked) is not
 * counted, so the same count holds for TRL's generate (HF's dynamic cache).
 */
export function generateFlops(c: ModelShape, o: { batch: number; Tp: number; R: number }): number {
  const C = c.n_embd;
  const L = c.n_layer;
  const head = 2 * C * c.vocab_size;
  let perRow = o.Tp * L * (24 * C * C + 4 * o.Tp * C) + head;
  for (let k = 1; k < o.R; k++) perRow += L * (24 * C * C + 4 * (o.Tp + k) * C) + head;
  return o.batch * perRow;
}

/**
 * FLOPs of a critic-free scoring phase: `forwards` forward passes (policy and/or reference) over `batch` rows of
 * T = Tq + R tokens with the LM head on the R response rows.
 */
export function grpoScoreFlops(
  c: ModelShape,
  o: { batch: number; Tq: number; R: number; forwards: number },
): number {
  return o.forwards * forwardFlops(c, o.batch, o.Tq + o.R, o.batch * o.R, 0);
}

/** FLOPs of a critic-free update: `epochs` forward + backward passes of the policy (LM head on the response rows). */
export function grpoUpdateFlops(
  c: ModelShape,
  o: { batch: number; Tq: number; R: number; epochs: number },
): number {
  return o.epochs * trainFlops(c, o.batch, o.Tq + o.R, o.batch * o.R, 0);
}
