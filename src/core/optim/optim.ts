/**
 * One optimisation step with global gradient-norm clipping, the tfjs way (snake-dqn):
 * variableGrads(f, vars) → check → clip by the global norm → applyGradients → dispose.
 */
import * as tf from '@tensorflow/tfjs-core';
import { installLeanGradients } from './lean-gradients';

export interface StepResult {
  /** The loss before the update, plus any extra scalars the loss function returned. */
  scalars: tf.Tensor1D;
  gradNorm: tf.Scalar;
  /** Always true here: the guarded update that can skip a NaN/Inf step is jointGuardedStep (ppo/update.ts). */
  applied: boolean;
}

function gradsAndNorm(vars: tf.Variable[], lossFn: () => tf.Scalar[]) {
  let extras: tf.Scalar[] = [];
  installLeanGradients();
  const { value, grads } = tf.variableGrads(() => {
    const [loss, ...rest] = lossFn();
    extras = rest.map((t) => tf.keep(t));
    return loss;
  }, vars);
  const norm = tf.tidy(
    () => tf.sqrt(tf.addN(Object.values(grads).map((g) => tf.sum(tf.square(g))))) as tf.Scalar,
  );
  return { value, extras, grads, norm };
}

function apply(
  optimizer: tf.Optimizer,
  grads: tf.NamedTensorMap,
  norm: tf.Scalar,
  maxGradNorm: number,
): void {
  tf.tidy(() => {
    let applied: tf.NamedTensorMap = grads;
    if (maxGradNorm > 0) {
      const scale = tf.minimum(1, tf.div(maxGradNorm, tf.add(norm, 1e-6)));
      applied = {};
      for (const n of Object.keys(grads)) applied[n] = tf.mul(grads[n], scale);
    }
    optimizer.applyGradients(applied);
  });
}

/**
 * Run `lossFn` (returning [loss, ...extra scalars]), clip gradients to `maxGradNorm` (0 = no clipping)
 * and apply them. Returns a 1-D tensor [loss, ...extras] and the pre-clip global grad norm; the caller
 * reads them back once (batched with other metrics) and disposes them. No readback here.
 */
export function clippedStep(
  optimizer: tf.Optimizer,
  vars: tf.Variable[],
  lossFn: () => tf.Scalar[],
  maxGradNorm: number,
): StepResult {
  const { value, extras, grads, norm } = gradsAndNorm(vars, lossFn);
  apply(optimizer, grads, norm, maxGradNorm);
  const scalars = tf.tidy(() => tf.stack([value, ...extras]) as tf.Tensor1D);
  tf.dispose([value, ...extras]);
  tf.dispose(grads);
  return { scalars, gradNorm: norm, applied: true };
}

/**
 * The clipping factor min(1, maxGradNorm / (norm + 1e-6)) as the device computes it in float32 (0 = no clipping).
 */
export function clipScale(norm: number, maxGradNorm: number): number {
  if (!(maxGradNorm > 0)) return 1;
  return Math.min(1, Math.fround(Math.fround(maxGradNorm) / Math.fround(norm + 1e-6)));
}

/** True when every value of every variable is finite (one reduction, one readback). */
export async function allFinite(vars: tf.Variable[]): Promise<boolean> {
  const t = tf.tidy(() => tf.all(tf.stack(vars.map((v) => tf.all(tf.isFinite(v))))));
  const ok = (await t.data())[0] === 1;
  t.dispose();
  return ok;
}
