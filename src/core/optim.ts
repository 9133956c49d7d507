/**
 * One optimisation step with global gradient-norm clipping, the tfjs way (snake-dqn):
 * variableGrads(f, vars) → clip by the global norm → applyGradients → dispose.
 */
import * as tf from '@tensorflow/tfjs-core';

export interface StepResult {
  /** The loss before the update, plus any extra scalars the loss function returned. */
  scalars: tf.Tensor1D;
  gradNorm: tf.Scalar;
}

/**
 * Run `lossFn` (returning [loss, ...extra scalars]), clip gradients to `maxGradNorm` (0 = no clipping)
 * and apply them. Returns a 1-D tensor [loss, ...extras] and the pre-clip global grad norm; the caller
 * reads them back once (batched with other metrics) and disposes them.
 */
export function clippedStep(
  optimizer: tf.Optimizer,
  vars: tf.Variable[],
  lossFn: () => tf.Scalar[],
  maxGradNorm: number,
): StepResult {
  let extras: tf.Scalar[] = [];
  const { value, grads } = tf.variableGrads(() => {
    const [loss, ...rest] = lossFn();
    extras = rest.map((t) => tf.keep(t));
    return loss;
  }, vars);
  const out = tf.tidy(() => {
    const names = Object.keys(grads);
    const sq = tf.addN(names.map((n) => tf.sum(tf.square(grads[n]))));
    const norm = tf.sqrt(sq) as tf.Scalar;
    let applied: tf.NamedTensorMap = grads;
    if (maxGradNorm > 0) {
      const scale = tf.minimum(1, tf.div(maxGradNorm, tf.add(norm, 1e-6)));
      applied = {};
      for (const n of names) applied[n] = tf.mul(grads[n], scale);
    }
    optimizer.applyGradients(applied);
    return { norm, scalars: tf.stack([value, ...extras]) as tf.Tensor1D };
  });
  tf.dispose([value, ...extras]);
  tf.dispose(grads);
  return { scalars: out.scalars, gradNorm: out.norm };
}
