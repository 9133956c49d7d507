/**
 * DPO's loss and metrics over a batch of preference pairs (contracts §9; docs/dpo.md), from each completion's
 * log-probability summed over its tokens under the policy (differentiable) and under the reference (numbers,
 * computed once per pair and cached). With h_i = (π_c − π_r) − (ref_c − ref_r) per pair:
 * - `sigmoid` (DPO, with label smoothing ε as cDPO): −(1−ε)·log σ(β·h) − ε·log σ(−β·h);
 * - `ipo`: (h̄ − 1/(2β))², where h̄ uses each completion's log-ratio AVERAGED over its tokens (TRL 1.13's IPO:
 *   (π_c − ref_c)/n_c − (π_r − ref_r)/n_r);
 * - `hinge` (SLiC): max(0, 1 − β·h).
 * The loss is the mean over the batch's pairs; with micro-batches, Σ over the micro-batch's pairs / `pairs` (the
 * whole batch's count), so the shares sum to the batch's mean (as ppo/losses.ts Denominators).
 * Metrics (TRL's names): rewards/chosen = mean β·(π_c − ref_c), rewards/rejected likewise, rewards/accuracies =
 * share of pairs with chosen reward > rejected reward, rewards/margins = mean difference, logps/chosen and
 * logps/rejected = mean summed policy log-probabilities. At the reference (h = 0): sigmoid ln 2, IPO (1/(2β))²,
 * hinge 1, margins 0.
 */
import * as tf from '@tensorflow/tfjs-core';
import { DPO_LOSSES, type DpoLossType } from '../../common/config/jobs';

export const DPO_METRICS = [
  'rewards/chosen',
  'rewards/rejected',
  'rewards/accuracies',
  'rewards/margins',
  'logps/chosen',
  'logps/rejected',
] as const;
export type DpoMetric = (typeof DPO_METRICS)[number];

export interface DpoLossOptions {
  beta: number;
  loss: DpoLossType;
  /** cDPO's ε, sigmoid only (default 0). */
  labelSmoothing?: number;
  /** Counted tokens of each chosen / rejected completion (IPO's averages); required for `ipo`. */
  chosenTokens?: ArrayLike<number>;
  rejectedTokens?: ArrayLike<number>;
  /** The whole batch's pair count when these pairs are one micro-batch of it; absent: these pairs are the batch. */
  pairs?: number;
}

export interface DpoLossResult {
  loss: tf.Scalar;
  /** Each a share of the batch's mean (sums over these pairs / the batch's pair count). */
  metrics: Record<DpoMetric, tf.Scalar>;
}

/** Checks the options: a clear error naming the field and what it must be. */
export function checkDpoOptions(o: DpoLossOptions, n: number): void {
  if (!(o.beta > 0) || !Number.isFinite(o.beta))
    throw new Error(`dpo: beta must be a number > 0, got ${o.beta}`);
  if (!DPO_LOSSES.includes(o.loss))
    throw new Error(
      `dpo: dpoLoss must be one of ${DPO_LOSSES.map((l) => `"${l}"`).join(', ')}, got ${JSON.stringify(o.loss)}`,
    );
  const ls = o.labelSmoothing ?? 0;
  if (!(ls >= 0 && ls < 0.5)) throw new Error(`dpo: labelSmoothing must be in [0, 0.5), got ${ls}`);
  if (ls !== 0 && o.loss !== 'sigmoid')
    throw new Error(
      `dpo: labelSmoothing applies to dpoLoss "sigmoid" only (got dpoLoss "${o.loss}" with ${ls})`,
    );
  if (o.loss === 'ipo') {
    for (const [name, t] of [
      ['chosenTokens', o.chosenTokens],
      ['rejectedTokens', o.rejectedTokens],
    ] as const) {
      if (!t || t.length !== n)
        throw new Error(`dpo: dpoLoss "ipo" needs ${name} for each of the ${n} pairs`);
    }
  }
  if (o.pairs !== undefined && !(Number.isInteger(o.pairs) && o.pairs >= n))
    throw new Error(`dpo: pairs (the batch's pair count) must be a whole number >= ${n}, got ${o.pairs}`);
}

/**
 * The DPO loss and metrics. `policyChosen` / `policyRejected` [n]: summed log-probabilities of each pair's
 * completions under the policy (gradients flow through them); `refChosen` / `refRejected`: the reference's.
 */
export function dpoLoss(
  policyChosen: tf.Tensor1D,
  policyRejected: tf.Tensor1D,
  refChosen: ArrayLike<number>,
  refRejected: ArrayLike<number>,
  opts: DpoLossOptions,
): DpoLossResult {
  const n = policyChosen.shape[0];
  checkDpoOptions(opts, n);
  if (policyRejected.shape[0] !== n || refChosen.length !== n || refRejected.length !== n)
    throw new Error(
      `dpo: ${n} chosen log-probabilities, ${policyRejected.shape[0]} rejected, ${refChosen.length} / ${refRejected.length} reference`,
    );
  const { beta } = opts;
  const eps = opts.labelSmoothing ?? 0;
  const denom = opts.pairs ?? n;
  return tf.tidy(() => {
    const rc = tf.tensor1d(Array.from(refChosen), 'float32');
    const rr = tf.tensor1d(Array.from(refRejected), 'float32');
    const chosenRatio = tf.sub(policyChosen, rc);
    const rejectedRatio = tf.sub(policyRejected, rr);
    let perPair: tf.Tensor1D;
    switch (opts.loss) {
      case 'sigmoid': {
        const z = tf.mul(beta, tf.sub(chosenRatio, rejectedRatio));
        // −log σ(z) = softplus(−z)
        const clean = tf.softplus(tf.neg(z));
        perPair = (
          eps === 0 ? clean : tf.add(tf.mul(1 - eps, clean), tf.mul(eps, tf.softplus(z)))
        ) as tf.Tensor1D;
        break;
      }
      case 'ipo': {
        const nc = tf.tensor1d(Array.from(opts.chosenTokens!).map((x) => Math.max(x, 1)));
        const nr = tf.tensor1d(Array.from(opts.rejectedTokens!).map((x) => Math.max(x, 1)));
        const h = tf.sub(tf.div(chosenRatio, nc), tf.div(rejectedRatio, nr));
        perPair = tf.square(tf.sub(h, 1 / (2 * beta))) as tf.Tensor1D;
        break;
      }
      case 'hinge':
        perPair = tf.relu(tf.sub(1, tf.mul(beta, tf.sub(chosenRatio, rejectedRatio)))) as tf.Tensor1D;
        break;
    }
    const share = (x: tf.Tensor) => tf.div(tf.sum(x), denom) as tf.Scalar;
    const rewC = tf.mul(beta, chosenRatio);
    const rewR = tf.mul(beta, rejectedRatio);
    return {
      loss: share(perPair!),
      metrics: {
        'rewards/chosen': share(rewC),
        'rewards/rejected': share(rewR),
        'rewards/accuracies': share(tf.cast(tf.greater(rewC, rewR), 'float32')),
        'rewards/margins': share(tf.sub(rewC, rewR)),
        'logps/chosen': share(policyChosen),
        'logps/rejected': share(policyRejected),
      },
    };
  });
}
