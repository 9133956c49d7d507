/**
 * One PPO minibatch update over several models with ONE global gradient clip (CleanRL's ppo.py and TRL:
 * loss = pg − entropyCoef·entropy + vfCoef·vloss, one clip_grad_norm over all parameters). Policy and value are
 * separate models with their own Adam (learningRate, valueLearningRate); each model's part of the joint loss
 * is differentiated with respect to its own variables only, which gives the same gradients as differentiating
 * the sum (no variable is shared). The clip factor min(1, maxGradNorm / ‖g‖) uses the norm over every part,
 * so `vfCoef` sets how much of the clipping budget the value loss takes (docs/engine.md, step 7).
 *
 * One readback per update: every part's loss, gradient norm and named statistics, as one tensor. When a loss
 * or a norm is NaN/Inf, no part is applied, so a bad batch reaches neither weights nor Adam moments.
 */
import * as tf from '@tensorflow/tfjs-core';
import { hasScaledApply } from '../fused-adam';
import { clipScale } from '../optim';

/** A part's loss (already weighted as it enters the joint loss) and statistics to read back with it. */
export interface Objective<K extends string> {
  loss: tf.Scalar;
  /** Carried along, never differentiated. */
  stats: Record<K, tf.Scalar>;
}

/** One model's part: its optimizer, its variables, and its objective (a part may name only some of the stats). */
export interface UpdatePart<K extends string> {
  optimizer: tf.Optimizer;
  vars: tf.Variable[];
  objective: () => { loss: tf.Scalar; stats: Partial<Record<K, tf.Scalar>> };
}

export interface JointStepResult<K extends string> {
  /** false when a loss or a gradient norm was NaN/Inf and nothing was applied. */
  applied: boolean;
  /** Each part's weighted loss, in the order of `parts`. */
  losses: number[];
  /** Each part's global gradient norm before clipping. */
  gradNorms: number[];
  /** √(Σ gradNorms²): what `maxGradNorm` clips. */
  jointGradNorm: number;
  /** The factor every gradient was multiplied by (1 = not clipped). */
  clipScale: number;
  /** Every part's statistics, by name. */
  stats: Record<K, number>;
}

function gradsOf<K extends string>(part: UpdatePart<K>) {
  let stats: Record<string, tf.Scalar> = {};
  const { value, grads } = tf.variableGrads(() => {
    const o = part.objective();
    stats = Object.fromEntries(
      Object.entries(o.stats as Record<string, tf.Scalar>).map(([k, t]) => [k, tf.keep(t)]),
    );
    return o.loss;
  }, part.vars);
  const norm = tf.tidy(
    () => tf.sqrt(tf.addN(Object.values(grads).map((g) => tf.sum(tf.square(g))))) as tf.Scalar,
  );
  return { value, grads, norm, stats };
}

/**
 * Differentiate each part, clip all gradients together to `maxGradNorm` (0 = no clipping) and apply each part's
 * optimizer. Statistic names must be distinct across parts.
 */
export async function jointGuardedStep<K extends string>(
  parts: UpdatePart<K>[],
  maxGradNorm: number,
): Promise<JointStepResult<K>> {
  const done = parts.map(gradsOf);
  const names: K[] = done.flatMap((d) => Object.keys(d.stats) as K[]);
  const all = tf.tidy(() =>
    tf.stack([
      ...done.map((d) => d.value),
      ...done.map((d) => d.norm),
      ...done.flatMap((d) => Object.values(d.stats)),
    ]),
  );
  const host = await all.data();
  all.dispose();
  const n = parts.length;
  const losses = Array.from(host.subarray(0, n));
  const gradNorms = Array.from(host.subarray(n, 2 * n));
  const stats = {} as Record<K, number>;
  names.forEach((k, i) => (stats[k] = host[2 * n + i]));
  const jointGradNorm = Math.sqrt(gradNorms.reduce((s, g) => s + g * g, 0));
  const applied = [...losses, ...gradNorms].every(Number.isFinite);
  const scale = applied ? clipScale(jointGradNorm, maxGradNorm) : 1;
  try {
    if (applied) {
      done.forEach((d, i) => {
        const opt = parts[i].optimizer;
        // The fused Adam scales inside its kernel (no multiply per variable).
        if (hasScaledApply(opt)) opt.applyScaled(d.grads, scale);
        else if (scale === 1) opt.applyGradients(d.grads);
        else {
          tf.tidy(() => {
            const scaled: tf.NamedTensorMap = {};
            for (const [name, g] of Object.entries(d.grads)) scaled[name] = tf.mul(g, scale);
            opt.applyGradients(scaled);
          });
        }
      });
    }
  } finally {
    for (const d of done) {
      tf.dispose([d.value, d.norm, ...Object.values(d.stats)]);
      tf.dispose(d.grads);
    }
  }
  return { applied, losses, gradNorms, jointGradNorm, clipScale: scale, stats };
}
