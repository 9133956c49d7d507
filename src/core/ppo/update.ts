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

/**
 * One model's part: its optimizer, its variables, and its objective (a part may name only some of the stats).
 * With micro-batches (`JointStepOptions.microBatches` > 1) the objective is called once per micro-batch, with the
 * micro-batch's index; each call returns that micro-batch's SHARE of the minibatch's loss and statistics (sums
 * over its rows divided by the whole minibatch's count: `Denominators` in src/core/ppo/losses.ts), so that the
 * sum over micro-batches is the minibatch's loss exactly as one micro-batch would compute it.
 */
export interface UpdatePart<K extends string> {
  optimizer: tf.Optimizer;
  vars: tf.Variable[];
  objective: (micro: number) => { loss: tf.Scalar; stats: Partial<Record<K, tf.Scalar>> };
}

/** Options of one guarded step. */
export interface JointStepOptions<K extends string> {
  /** How many micro-batches the minibatch is cut into (default 1: the objective is called once, with 0). */
  microBatches?: number;
  /** Statistics that are maxima over the minibatch (combined by max); the others are shares, combined by sum. */
  maxStats?: readonly K[];
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

/** One micro-batch's loss, gradients and statistics for one part (every tensor returned is kept). */
function microGrads<K extends string>(part: UpdatePart<K>, micro: number) {
  let stats: Record<string, tf.Scalar> = {};
  const { value, grads } = tf.variableGrads(() => {
    const o = part.objective(micro);
    stats = Object.fromEntries(
      Object.entries(o.stats as Record<string, tf.Scalar>).map(([k, t]) => [k, tf.keep(t)]),
    );
    return o.loss;
  }, part.vars);
  // A statistic may be the loss tensor itself (policyLoss without other terms): give it its own handle, so the
  // running sums below can free the loss and the statistic separately.
  for (const k of Object.keys(stats)) if (stats[k] === value) stats[k] = tf.clone(value);
  return { value, grads, stats };
}

/** `acc` + `add`, name by name, freeing both (the running sums of gradient accumulation). */
function addInto(acc: tf.NamedTensorMap | null, add: tf.NamedTensorMap): tf.NamedTensorMap {
  if (!acc) return add;
  const out: tf.NamedTensorMap = {};
  for (const [name, g] of Object.entries(add)) {
    out[name] = tf.add(acc[name], g);
    g.dispose();
    acc[name].dispose();
  }
  return out;
}

/**
 * A part's loss, gradients and statistics over the whole minibatch: the micro-batches' shares summed (gradient
 * accumulation), maxima combined by max. Only one micro-batch's activations are live at a time; the running sums
 * (one gradient per trained variable, a few scalars) stay between micro-batches.
 */
function gradsOf<K extends string>(part: UpdatePart<K>, micros: number, maxStats: ReadonlySet<string>) {
  let value: tf.Scalar | null = null;
  let grads: tf.NamedTensorMap | null = null;
  let stats: Record<string, tf.Scalar> = {};
  for (let m = 0; m < micros; m++) {
    const g = microGrads(part, m);
    grads = addInto(grads, g.grads);
    if (value === null) {
      value = g.value;
      stats = g.stats;
      continue;
    }
    const prevValue: tf.Scalar = value;
    value = tf.add(prevValue, g.value) as tf.Scalar;
    tf.dispose([prevValue, g.value]);
    const prev = stats;
    const next: Record<string, tf.Scalar> = {};
    for (const k of Object.keys(prev)) {
      next[k] = (
        maxStats.has(k) ? tf.maximum(prev[k], g.stats[k]) : tf.add(prev[k], g.stats[k])
      ) as tf.Scalar;
    }
    tf.dispose([...Object.values(prev), ...Object.values(g.stats)]);
    stats = next;
  }
  const summed = grads!;
  // The norm of the SUMMED gradient: what the clip acts on (never a sum of the micro-batches' norms).
  const norm = tf.tidy(
    () => tf.sqrt(tf.addN(Object.values(summed).map((x) => tf.sum(tf.square(x))))) as tf.Scalar,
  );
  return { value: value!, grads: summed, norm, stats };
}

/**
 * Differentiate each part (over its micro-batches, gradients summed), clip all summed gradients together to
 * `maxGradNorm` (0 = no clipping) and apply each part's optimizer ONCE. Statistic names must be distinct across
 * parts.
 */
export async function jointGuardedStep<K extends string>(
  parts: UpdatePart<K>[],
  maxGradNorm: number,
  opts: JointStepOptions<K> = {},
): Promise<JointStepResult<K>> {
  const micros = opts.microBatches ?? 1;
  if (!Number.isInteger(micros) || micros < 1) {
    throw new Error(`jointGuardedStep: microBatches must be a whole number >= 1, got ${micros}`);
  }
  const maxStats = new Set<string>(opts.maxStats ?? []);
  const done = parts.map((p) => gradsOf(p, micros, maxStats));
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
