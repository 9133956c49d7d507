/**
 * A backward that frees as it goes: the engine's `gradients` (behind tf.variableGrads, tf.grads and the
 * recomputed blocks of model/recompute.ts) with two frees that tfjs-core 4.22 leaves to the end of the backward.
 *
 * tfjs walks the tape from the loss back to the inputs and keeps, until the whole backward ends, (1) the gradient
 * of every intermediate tensor it passed and (2) every tensor a kernel saved for its gradient. So the backward's
 * peak is the forward's saved tensors plus a gradient for every activation: model/size.ts counts that as
 * UPDATE_FORWARDS = 3 forward-sized sets. Here, once a tape node's gradient has been computed:
 * - the gradients of its outputs are freed: every node that reads an output comes later on the tape, so it has
 *   already been walked, and nothing walked after reads them (a gradient shared by object with another entry, or
 *   asked for as a result, or the caller's `dy`, stays);
 * - the tensors it saved are freed (at gradient depth 0 only, where tfjs frees them at the end anyway);
 * - a partial gradient added into an accumulated one is freed once added.
 * The operations, their order and their inputs are tfjs's, so the gradients are the same to the bit
 * (tests/lean-gradients.test.ts); only when tensors are freed changes.
 *
 * `setLeanGradients(mode)`: "webgpu" (the default: the GPU backend, whose memory issue #36 measured), "all", or
 * "off" (tfjs's own). The WASM heap plan's estimate (model/size.ts) is calibrated on tfjs's own backward, so WASM
 * keeps it by default.
 */
import * as tf from '@tensorflow/tfjs-core';
import { getFilteredNodesXToY } from '@tensorflow/tfjs-core/dist/tape';

/** A node of the engine's tape (tfjs-core's TapeNode). */
interface TapeNode {
  id: number;
  kernelName: string;
  outputs: tf.Tensor[];
  inputs: Record<string, tf.Tensor>;
  gradient?: (dys: (tf.Tensor | null)[]) => Record<string, () => tf.Tensor>;
  saved?: tf.Tensor[];
}

type GradientsFn = (
  f: () => tf.Tensor,
  xs: tf.Tensor[],
  dy?: tf.Tensor,
  allowNoGradients?: boolean,
) => { value: tf.Tensor; grads: tf.Tensor[] };

/** The engine's internals used here (not in tfjs's public types). */
interface EngineInternals {
  state: { activeTape: TapeNode[] | null; gradientDepth: number };
  scopedRun<T>(start: () => void, end: () => void, f: () => T): T;
  startTape(): void;
  endTape(): void;
  tidy<T extends tf.TensorContainer>(nameOrFn: string | (() => T), fn?: () => T): T;
  gradients: GradientsFn;
}

export type LeanGradientsMode = 'webgpu' | 'all' | 'off';
let mode: LeanGradientsMode = 'webgpu';
/** Backward passes run by the lean walk, counted for the tests. */
export const leanGradientStats = { calls: 0 };

/** Where the lean backward runs (see the module's comment); returns the previous mode. */
export function setLeanGradients(m: LeanGradientsMode): LeanGradientsMode {
  if (m !== 'webgpu' && m !== 'all' && m !== 'off')
    throw new Error(`setLeanGradients: mode must be "webgpu", "all" or "off", got ${JSON.stringify(m)}.`);
  const was = mode;
  mode = m;
  return was;
}

function leanNow(): boolean {
  return mode === 'all' || (mode === 'webgpu' && tf.getBackend() === 'webgpu');
}

const installed = new WeakSet<object>();

/** Put the lean walk in front of the current engine's `gradients` (idempotent; it defers to tfjs's when off). */
export function installLeanGradients(): void {
  const e = tf.engine() as unknown as EngineInternals;
  if (installed.has(e)) return;
  installed.add(e);
  const original = e.gradients.bind(e);
  e.gradients = function (f, xs, dy, allowNoGradients = false) {
    if (!leanNow()) return original(f, xs, dy, allowNoGradients);
    return leanGradients(e, f, xs, dy, allowNoGradients);
  };
}

/** tfjs-core 4.22's Engine.gradients with the frees above (its checks and messages kept). */
function leanGradients(
  e: EngineInternals,
  f: () => tf.Tensor,
  xs: tf.Tensor[],
  dy: tf.Tensor | undefined,
  allowNoGradients: boolean,
): { value: tf.Tensor; grads: tf.Tensor[] } {
  if (xs.length === 0) throw new Error('gradients() received an empty list of xs.');
  if (dy != null && dy.dtype !== 'float32')
    throw new Error(`dy must have 'float32' dtype, but has '${dy.dtype}'`);
  const y = e.scopedRun(
    () => e.startTape(),
    () => e.endTape(),
    () => e.tidy('forward', f),
  );
  if (!(y instanceof tf.Tensor)) throw new Error('The result y returned by f() must be a tensor.');
  const filteredTape = getFilteredNodesXToY(
    e.state.activeTape as unknown as Parameters<typeof getFilteredNodesXToY>[0],
    xs,
    y,
  ) as unknown as TapeNode[];
  if (!allowNoGradients && filteredTape.length === 0 && xs.length > 0) {
    throw new Error(
      'Cannot compute gradient of y=f(x) with respect to x. Make sure that the f you passed encloses all ' +
        'operations that lead from x to y.',
    );
  }
  leanGradientStats.calls++;
  return e.tidy('backward', () => {
    const grad = new Map<number, tf.Tensor>();
    // How many entries of `grad` hold each tensor object (a gradient function may return its dy as is).
    const refs = new Map<tf.Tensor, number>();
    const put = (id: number, t: tf.Tensor) => {
      grad.set(id, t);
      refs.set(t, (refs.get(t) ?? 0) + 1);
    };
    const release = (id: number) => {
      const t = grad.get(id)!;
      grad.delete(id);
      const n = refs.get(t)! - 1;
      if (n > 0) refs.set(t, n);
      else {
        refs.delete(t);
        if (t !== dy) t.dispose();
      }
    };
    put(y.id, dy ?? tf.ones(y.shape));
    const asked = new Set(xs.map((x) => x.id));
    const freeSaved = e.state.gradientDepth === 0;
    for (let i = filteredTape.length - 1; i >= 0; i--) {
      const node = filteredTape[i];
      const dys = node.outputs.map((o) => grad.get(o.id) ?? null);
      if (node.gradient == null) {
        throw new Error(`Cannot compute gradient: gradient function not found for ${node.kernelName}.`);
      }
      const inputGradients = node.gradient(dys);
      for (const inputName in node.inputs) {
        if (!(inputName in inputGradients)) {
          throw new Error(
            `Cannot backprop through input ${inputName}. Available gradients found: ${Object.keys(inputGradients)}.`,
          );
        }
        const dx = e.tidy(() => inputGradients[inputName]());
        if (dx.dtype !== 'float32') {
          throw new Error(
            `Error in gradient for op ${node.kernelName}. The gradient of input ${inputName} must have 'float32' dtype, but has '${dx.dtype}'`,
          );
        }
        const x = node.inputs[inputName];
        if (!tf.util.arraysEqual(dx.shape, x.shape)) {
          throw new Error(
            `Error in gradient for op ${node.kernelName}. The gradient of input '${inputName}' has shape '${dx.shape}', which does not match the shape of the input '${x.shape}'`,
          );
        }
        if (!grad.has(x.id)) put(x.id, dx);
        else {
          const sum = tf.add(grad.get(x.id)!, dx);
          release(x.id);
          put(x.id, sum);
          if (!refs.has(dx) && dx !== dy) dx.dispose();
        }
      }
      // The outputs' gradients are final and read by no node still to walk.
      for (const o of node.outputs) if (!asked.has(o.id) && grad.has(o.id)) release(o.id);
      // Its saved tensors, unless a gradient function handed one on as a gradient (then it lives as that).
      if (freeSaved) for (const t of node.saved ?? []) if (!refs.has(t)) t.dispose();
    }
    const grads = xs.map((x) => grad.get(x.id)!);
    if (e.state.gradientDepth === 0) {
      const returned = new Set<tf.Tensor>(grads);
      for (const node of e.state.activeTape ?? [])
        for (const t of node.saved ?? []) if (!returned.has(t)) t.dispose();
      e.state.activeTape = null;
    }
    return { value: y, grads };
  });
}
