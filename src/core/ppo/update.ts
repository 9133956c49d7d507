/**
 * One PPO minibatch update over several models with ONE global gradient clip (CleanRL's ppo.py and TRL:
 * loss = pg − entropyCoef·entropy + vfCoef·vloss, one clip_grad_norm over all parameters). Policy and value are
 * separate models with their own Adam (learningRate, valueLearningRate); each model's part of the joint loss
 * is differentiated with respect to its own variables only, which gives the same gradients as differentiating
 * the sum (no variable is shared). The clip factor min(1, maxGradNorm / ‖g‖) uses the norm over every part,
 * so `vfCoef` sets how much of the clipping budget the value loss takes (docs/engine.md, step 7).
 *
 * When a loss or a norm is NaN/Inf, no part is applied, so a bad batch reaches neither weights nor Adam moments.
 * That decision and the clip factor are made ON THE DEVICE (jointGuardedStepDeferred): with the fused Adam, whose
 * kernel takes [clip factor, apply] as an input tensor, nothing is read back inside the update; every
 * minibatch's loss, norms and statistics wait as one small tensor each until the caller reads them all at once
 * (readJointSteps: one readback for an epoch or a whole step). docs/engine.md, "No readback inside the update".
 */
import * as tf from '@tensorflow/tfjs-core';
import { sumOfSquares } from '../kernels/webgpu-sumsq';
import { fusedAdamAvailable, hasScaledApply, type FusedAdamOptimizer } from '../optim/fused-adam';
import { clipScale } from '../optim/optim';
import { installLeanGradients } from '../optim/lean-gradients';
import { maybeYield } from '../base/yield';

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
  /**
   * A micro-batch's differentiation made elsewhere (a replay of a recorded one: src/core/ppo/update-replay.ts), or
   * null to differentiate `objective` here. Its tensors are the caller's, as microGrads' are.
   */
  grads?: (micro: number) => MicroGrads | null;
}

/** One micro-batch's loss, gradients (by variable name) and statistics. */
export interface MicroGrads {
  value: tf.Scalar;
  grads: tf.NamedTensorMap;
  stats: Record<string, tf.Scalar>;
}

/** Options of one guarded step. */
export interface JointStepOptions<K extends string> {
  /** How many micro-batches the minibatch is cut into (default 1: the objective is called once, with 0). */
  microBatches?: number;
  /** Statistics that are maxima over the minibatch (combined by max); the others are shares, combined by sum. */
  maxStats?: readonly K[];
  /**
   * Awaited after every part's gradients are summed and before anything is applied (the trainer checks the
   * device's out-of-memory scope here: src/core/ppo/gpu-plan.ts). When it throws, nothing is applied, every
   * tensor of the step is freed, and the error goes to the caller.
   */
  beforeApply?: () => Promise<void>;
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
export function microGrads<K extends string>(
  part: Pick<UpdatePart<K>, 'objective' | 'vars'>,
  micro: number,
): MicroGrads {
  let stats: Record<string, tf.Scalar> = {};
  installLeanGradients();
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
async function gradsOf<K extends string>(part: UpdatePart<K>, micros: number, maxStats: ReadonlySet<string>) {
  let value: tf.Scalar | null = null;
  let grads: tf.NamedTensorMap | null = null;
  let stats: Record<string, tf.Scalar> = {};
  try {
    for (let m = 0; m < micros; m++) {
      if (m > 0) await maybeYield(); // a turn for the event loop between micro-batches (src/core/base/yield.ts)
      const g = part.grads?.(m) ?? microGrads(part, m);
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
  } catch (e) {
    // A micro-batch that throws (a device out of memory) leaves nothing behind: the running sums are freed.
    tf.dispose([...(value ? [value] : []), ...Object.values(stats), ...Object.values(grads ?? {})]);
    throw e;
  }
  const summed = grads!;
  // The norm of the SUMMED gradient: what the clip acts on (never a sum of the micro-batches' norms).
  // On WebGPU one program per 7 gradients (kernels/webgpu-sumsq.ts), elsewhere addN(sum(square(g))).
  const norm = tf.tidy(() => tf.sqrt(sumOfSquares(Object.values(summed))) as tf.Scalar);
  return { value: value!, grads: summed, norm, stats };
}

/**
 * A step taken (or skipped) on the device whose figures have not been read yet: `values` holds every part's loss,
 * every part's gradient norm, the statistics in `names` order, the clip factor applied and the apply flag (1/0).
 * Read with readJointSteps (which frees `values`).
 */
export interface PendingJointStep<K extends string> {
  readonly values: tf.Tensor1D;
  readonly parts: number;
  readonly names: K[];
  /** The optimizers that stepped with the device's flag: their iteration count is taken back if it was 0. */
  readonly onDevice: FusedAdamOptimizer[];
}

/** True when every part's optimizer can take its clip factor and apply flag from the device. */
function decidedOnDevice(parts: UpdatePart<string>[]): boolean {
  return fusedAdamAvailable() && parts.every((p) => hasScaledApply(p.optimizer));
}

/**
 * Differentiate each part (over its micro-batches, gradients summed), clip all summed gradients together to
 * `maxGradNorm` (0 = no clipping) and apply each part's optimizer ONCE, without reading anything back: the
 * finiteness check, the joint norm and the clip factor are computed on the device and handed to the fused Adam
 * as [factor, apply]. Statistic names must be distinct across parts. With an optimizer that cannot take them
 * (tfjs's own Adam), this reads back and decides on the host (jointGuardedStep's older path), so the result is
 * the same either way.
 */
export async function jointGuardedStepDeferred<K extends string>(
  parts: UpdatePart<K>[],
  maxGradNorm: number,
  opts: JointStepOptions<K> = {},
): Promise<PendingJointStep<K>> {
  const micros = opts.microBatches ?? 1;
  if (!Number.isInteger(micros) || micros < 1) {
    throw new Error(`jointGuardedStep: microBatches must be a whole number >= 1, got ${micros}`);
  }
  const maxStats = new Set<string>(opts.maxStats ?? []);
  const done: Awaited<ReturnType<typeof gradsOf<K>>>[] = [];
  const n = parts.length;
  try {
    for (const p of parts) done.push(await gradsOf(p, micros, maxStats));
    if (opts.beforeApply) await opts.beforeApply();
    const names: K[] = done.flatMap((d) => Object.keys(d.stats) as K[]);
    if (decidedOnDevice(parts as UpdatePart<string>[])) {
      const { values, controls } = tf.tidy(() => {
        const losses = done.map((d) => d.value);
        const norms = tf.stack(done.map((d) => d.norm));
        const ok = tf.all(tf.isFinite(tf.concat([tf.stack(losses), norms])));
        // The joint norm √(Σ‖g_i‖²) and min(1, maxGradNorm / (norm + 1e-6)), in float32 as optim.ts clipScale.
        const joint = tf.sqrt(tf.sum(tf.square(norms)));
        const factor =
          maxGradNorm > 0 ? tf.minimum(1, tf.div(maxGradNorm, tf.add(joint, 1e-6))) : tf.scalar(1);
        const okF = tf.cast(ok, 'float32');
        // A skipped step's factor is 0, never NaN: the kernel multiplies before it selects.
        const controls = tf.stack([tf.where(ok, factor, tf.scalar(0)), okF]) as tf.Tensor1D;
        const values = tf.concat([
          tf.stack(losses),
          norms,
          ...done.flatMap((d) => Object.values(d.stats).map((t) => tf.reshape(t, [1]))),
          controls,
        ]) as tf.Tensor1D;
        return { values, controls };
      });
      try {
        done.forEach((d, i) => (parts[i].optimizer as FusedAdamOptimizer).applyControlled(d.grads, controls));
      } finally {
        controls.dispose();
      }
      return {
        values,
        parts: n,
        names,
        onDevice: parts.map((p) => p.optimizer as FusedAdamOptimizer),
      };
    }
    // Decided on the host: one readback, then the (scaled) step or none.
    const all = tf.tidy(() =>
      tf.stack([
        ...done.map((d) => d.value),
        ...done.map((d) => d.norm),
        ...done.flatMap((d) => Object.values(d.stats)),
      ]),
    );
    const host = await all.data();
    all.dispose();
    const ok = Array.from(host.subarray(0, 2 * n)).every(Number.isFinite);
    const gradNorms = Array.from(host.subarray(n, 2 * n));
    const scale = ok ? clipScale(Math.sqrt(gradNorms.reduce((a, g) => a + g * g, 0)), maxGradNorm) : 0;
    if (ok) {
      done.forEach((d, i) => {
        const opt = parts[i].optimizer;
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
    return {
      values: tf.tensor1d([...host, scale, ok ? 1 : 0], 'float32'),
      parts: n,
      names,
      onDevice: [],
    };
  } finally {
    for (const d of done) {
      tf.dispose([d.value, d.norm, ...Object.values(d.stats)]);
      tf.dispose(d.grads);
    }
  }
}

/**
 * Read pending steps' figures in ONE readback (and free them), in order. A step the device skipped (a NaN/Inf loss
 * or norm) gives `applied: false`, and its optimizers' iteration counts are taken back.
 */
export async function readJointSteps<K extends string>(
  pending: PendingJointStep<K>[],
): Promise<JointStepResult<K>[]> {
  await maybeYield(); // a turn for the event loop once per optimiser step at least (src/core/base/yield.ts)
  if (pending.length === 0) return [];
  const joined = pending.length === 1 ? pending[0].values : tf.concat(pending.map((p) => p.values));
  let host: Float32Array;
  try {
    host = (await joined.data()) as Float32Array;
  } finally {
    if (joined !== pending[0].values) joined.dispose();
    for (const p of pending) p.values.dispose();
  }
  const out: JointStepResult<K>[] = [];
  let at = 0;
  for (const p of pending) {
    const n = p.parts;
    const row = host.subarray(at, at + p.values.size);
    at += p.values.size;
    const losses = Array.from(row.subarray(0, n));
    const gradNorms = Array.from(row.subarray(n, 2 * n));
    const stats = {} as Record<K, number>;
    p.names.forEach((k, i) => (stats[k] = row[2 * n + i]));
    const factor = row[2 * n + p.names.length];
    const applied = row[2 * n + p.names.length + 1] === 1;
    if (!applied) for (const o of p.onDevice) o.uncountSkipped(1);
    out.push({
      applied,
      losses,
      gradNorms,
      jointGradNorm: Math.sqrt(gradNorms.reduce((s, g) => s + g * g, 0)),
      clipScale: applied ? factor : 1,
      stats,
    });
  }
  return out;
}

/**
 * jointGuardedStepDeferred and its one readback: for callers that need the figures before the next step (DPO,
 * SFT, tests). The PPO trainer defers the reads to the end of an epoch or of the step.
 */
export async function jointGuardedStep<K extends string>(
  parts: UpdatePart<K>[],
  maxGradNorm: number,
  opts: JointStepOptions<K> = {},
): Promise<JointStepResult<K>> {
  const [r] = await readJointSteps([await jointGuardedStepDeferred(parts, maxGradNorm, opts)]);
  return r;
}
