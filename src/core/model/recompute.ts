/**
 * Activation recomputation ("gradient checkpointing"): run a function's forward without keeping its
 * intermediate tensors for the backward, and run it again inside the backward to get them. A transformer's
 * update then holds, per block, only the block's input, instead of every tensor the block made (the layer norms'
 * intermediates, q/k/v, the attention scores, the MLP's 4·C hidden, and the copies autodiff keeps of each); the
 * price is one more forward per block in the backward. PyTorch's torch.utils.checkpoint does the same.
 *
 * How it works in tfjs (docs/tfjs.md, "recompute"): `tf.customGrad` runs its forward with the tape off (the
 * engine's kernel depth is raised), inside a tidy, so nothing the block makes outlives the forward except its
 * output and what `save` keeps (the input and the context tensors, cloned). Its gradient function then calls the
 * engine's `gradients` on the same function, over the saved input and the variables that train. That nested
 * call starts a tape of its own and, at its end, clears the engine's active tape — which is the OUTER backward's
 * tape — so the outer tape is put back afterwards (without it the outer backward fails when it frees its
 * saved tensors).
 *
 * Values are exact: the recomputed forward is the same computation on the same inputs, so the gradients equal
 * those without recomputation (tests/recompute.test.ts).
 */
import * as tf from '@tensorflow/tfjs-core';

/** The engine's internals this module touches (not in tfjs's public types). */
interface EngineInternals {
  state: { gradientDepth: number; kernelDepth: number; activeTape: unknown };
  gradients(
    f: () => tf.Tensor,
    xs: tf.Tensor[],
    dy?: tf.Tensor,
    allowNoGradients?: boolean,
  ): { value: tf.Tensor; grads: (tf.Tensor | undefined)[] };
}

const engine = (): EngineInternals => tf.engine() as unknown as EngineInternals;

/** Whether ops run now are recorded for a backward (inside tf.grads / variableGrads, outside a kernel). */
export function recordingGradients(): boolean {
  const s = engine().state;
  return s.gradientDepth > 0 && s.kernelDepth === 0;
}

/**
 * `fn(x, ...context)` computed with its activations recomputed in the backward. `context` tensors (a mask, …)
 * get no gradient; `vars` are the variables `fn` reads whose gradients may be asked for (only the trainable
 * ones are differentiated: frozen weights cost no gradient). Outside a gradient computation this is `fn` itself.
 */
export function recomputed(
  fn: (x: tf.Tensor, ...context: tf.Tensor[]) => tf.Tensor,
  x: tf.Tensor,
  context: tf.Tensor[],
  vars: readonly tf.Variable[],
): tf.Tensor {
  if (!recordingGradients()) return fn(x, ...context);
  const trained = vars.filter((v) => v.trainable);
  const op = tf.customGrad((...args: unknown[]) => {
    const save = args[args.length - 1] as (ts: tf.Tensor[]) => void;
    const input = args[0] as tf.Tensor;
    // Kept for the backward: the block input and its context, as clones the engine frees after the backward.
    save([input, ...context]);
    const value = fn(input, ...context);
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [xs, ...ctx] = saved;
        const e = engine();
        const outerTape = e.state.activeTape;
        try {
          const { value: y, grads } = e.gradients(
            () => tf.sum(tf.mul(fn(xs, ...ctx), dy)),
            [xs, ...trained],
            undefined,
            true,
          );
          y.dispose();
          return [grads[0] ?? tf.zerosLike(xs), ...trained.map((v, i) => grads[i + 1] ?? tf.zerosLike(v))];
        } finally {
          e.state.activeTape = outerTape;
        }
      },
    };
  });
  return op(x, ...trained) as tf.Tensor;
}
