/**
 * The update's gradients recorded once and replayed (issue #31, item 2): graph capture for a minibatch's forward
 * and backward on WebGPU.
 *
 * Why: on a GPU the update is bound by tfjs's host cost per program (~90–140 µs each on an H200; a GPT-2 124M
 * LoRA minibatch's forward and backward is ~1 000 programs), not by the GPU. Within a run the minibatch's shapes
 * rarely change (the query length is bucketed, the response length and minibatch size are settings), so the same
 * programs run over the same kinds of buffers at every minibatch of every epoch and step. Recorded once with
 * src/core/kernels/webgpu-replay.ts, a later minibatch writes its rows into the recorded input buffers and replays
 * the dispatches in one command buffer.
 *
 * What a recording holds, and when it is made again:
 * - the key: the part (policy / value), the inputs' shapes, and every number the objective bakes into its
 *   programs (the config's loss settings, the KL coefficient of GRPO's k3 term, the plan's recompute): a change of
 *   any of them records afresh (the old recording is freed);
 * - the inputs (token ids, attention mask, response tokens, masks, advantages, old log-probs, returns, old values,
 *   reference log-probs) are the recording's input buffers, written before each replay;
 * - the outputs (loss, gradients, statistics, GRPO's kept old log-probs) are the recording's own tensors: each call
 *   hands out clones sharing their buffers, valid until the next call with the same key. The update uses them before
 *   then: the optimiser step that reads the gradients is queued before the next replay is submitted;
 * - everything else the programs read is read where it was recorded: the frozen base, and the trained variables,
 *   which the fused Adam updates in place (src/core/kernels/webgpu-adam-inplace.ts). A buffer the recording read
 *   that tfjs releases (an adapter replaced, a weight disposed) makes the frame stale: the next call records again.
 *
 * Only whole-minibatch updates replay (one micro-batch per minibatch: the WebGPU default plan); with micro-batches
 * the update runs through tfjs as before. A recording that tries to read back, or anything else the recorder
 * refuses, is remembered and that key runs through tfjs from then on. Elsewhere (WASM, CPU) nothing here runs.
 */
import * as tf from '@tensorflow/tfjs-core';
import { ReplayFrame, replayBackend, tensorBuffer } from '../kernels/webgpu-replay';

/** An input's values as the host has them: what a replay writes into the recorded buffer. */
export interface HostTensor {
  values: Float32Array | Int32Array;
  shape: number[];
  dtype: 'float32' | 'int32';
}

/** What one micro-batch's differentiation gives (update.ts microGrads), and tensors kept beside it. */
export interface GradOutputs {
  value: tf.Scalar;
  grads: tf.NamedTensorMap;
  stats: Record<string, tf.Scalar>;
  /** Further tensors the objective kept (GRPO's old log-probs from the update's forward). */
  kept: tf.Tensor[];
}

interface Recording {
  frame: ReplayFrame;
  outputs: GradOutputs;
  /** The buffers of the watched tensors (the trained variables) when recorded. */
  watched: GPUBuffer[];
}

function shareOutputs(o: GradOutputs): GradOutputs {
  const grads: tf.NamedTensorMap = {};
  for (const [k, g] of Object.entries(o.grads)) grads[k] = tf.clone(g);
  const stats: Record<string, tf.Scalar> = {};
  for (const [k, s] of Object.entries(o.stats)) stats[k] = tf.clone(s);
  return { value: tf.clone(o.value), grads, stats, kept: o.kept.map((t) => tf.clone(t)) };
}

function disposeOutputs(o: GradOutputs): void {
  tf.dispose([o.value, ...Object.values(o.grads), ...Object.values(o.stats), ...o.kept]);
}

/** The recordings of a trainer's update, by key. */
export class GradReplays {
  private readonly recordings = new Map<string, Recording>();
  /** Keys whose recording was refused (a readback inside): they run through tfjs. */
  private readonly refused = new Set<string>();
  /** Recordings made and replays run (for tests and the step's metrics). */
  recorded = 0;
  replayed = 0;

  /** Whether replays can run here (the WebGPU backend is the current one). */
  static available(): boolean {
    return replayBackend() !== null;
  }

  /**
   * `differentiate(inputs)`'s outputs for these inputs: a replay of the recording for `key` when there is a valid
   * one, else `differentiate` run through tfjs once while it is recorded; null when this key cannot be recorded
   * (run it through tfjs). The tensors returned are the caller's to dispose; their values hold until the next
   * call with the same key. `watch`: tensors whose buffer must still be the recorded one for a replay (the trained
   * variables: an update that could not write one in place, because another tensor shared its buffer, gave it a new
   * buffer without releasing the old, which a release watch cannot see).
   */
  run(
    key: string,
    inputs: Record<string, HostTensor>,
    differentiate: (inputs: Record<string, tf.Tensor>) => GradOutputs,
    watch: readonly tf.Tensor[] = [],
  ): GradOutputs | null {
    const backend = replayBackend();
    if (!backend || this.refused.has(key)) return null;
    const names = Object.keys(inputs);
    const fullKey = `${key}|${names.map((n) => `${n}:${inputs[n].dtype}[${inputs[n].shape}]`).join(',')}`;
    const had = this.recordings.get(fullKey);
    if (had && had.frame.valid && watch.every((t, i) => tensorBuffer(backend, t) === had.watched[i])) {
      names.forEach((n, i) => had.frame.write(i, inputs[n].values));
      had.frame.replay();
      this.replayed++;
      return shareOutputs(had.outputs);
    }
    if (had) this.drop(fullKey);
    // One recording per part at a time: another key of the same part (a new shape or setting) replaces it.
    const part = key.split('|')[0];
    for (const k of [...this.recordings.keys()]) if (k.split('|')[0] === part) this.drop(k);
    const tensors = names.map((n) => tf.tensor(inputs[n].values, inputs[n].shape, inputs[n].dtype));
    const named = Object.fromEntries(names.map((n, i) => [n, tensors[i]]));
    let rec: { frame: ReplayFrame; result: GradOutputs };
    try {
      rec = ReplayFrame.record(backend, () => differentiate(named), tensors);
    } catch (e) {
      tf.dispose(tensors);
      if (e instanceof Error && e.message.startsWith('webgpu-replay:')) {
        this.refused.add(key);
        return null;
      }
      throw e;
    }
    tf.dispose(tensors); // the frame holds its own handles on the input buffers
    const watched = watch.map((t) => tensorBuffer(backend, t));
    this.recordings.set(fullKey, { frame: rec.frame, outputs: rec.result, watched });
    this.recorded++;
    return shareOutputs(rec.result);
  }

  private drop(fullKey: string): void {
    const r = this.recordings.get(fullKey);
    if (!r) return;
    this.recordings.delete(fullKey);
    r.frame.dispose();
    disposeOutputs(r.outputs);
  }

  /** Free every recording (the trainer's dispose; a device that ran out of memory). */
  dispose(): void {
    for (const k of [...this.recordings.keys()]) this.drop(k);
  }

  /** Recordings held now. */
  get size(): number {
    return this.recordings.size;
  }
}
