/**
 * The KV-cache decode loop recorded once and replayed per token on WebGPU (issue #31; kernels/webgpu-replay.ts).
 *
 * One token of `generate` — choose from the logits (device sampling or argmax), mask rows that stopped, then the
 * model's `decodeStep` and `lmHead` for the chosen ids — has the same shapes at every token: the cache keeps
 * [B, heads, S, d], and what changes (the position ids, the slot's one-hot, the key mask, the rows' uniforms) comes
 * in as four small input tensors. So the first token runs through tfjs as usual and is recorded; every later token
 * writes its four inputs (queue.writeBuffer) and replays the recorded dispatches in one command buffer. State is
 * carried by buffer copies appended to the same command buffer: the new logits, the stopped rows and the new caches
 * into the tensors the recording reads, and the token and its log-prob into row s of two [N, B] accumulators that
 * are read back once at the end. The last token only chooses (no decode after it) and runs through tfjs.
 *
 * The recording is the plain path's own ops, so the tokens are the plain path's; a frame made stale (a weight or
 * LoRA adapter it read was released: an update replaced it) is recorded again from the current state. Each call of
 * `generate` records anew, so adapters changed by an update between calls are picked up (their bind groups are
 * made once per generation, never per token). `setDecodeReplay(false)` turns it off (the unrecorded path, for
 * comparisons); every other backend never takes it.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LayerKV } from '../kernels/definitions';
import {
  ReplayFrame,
  flushTfjs,
  replayBackend,
  submitCopies,
  tensorBuffer,
  type ReplayBackend,
  type ReplayCopy,
} from '../kernels/webgpu-replay';
import type { CausalLM } from './lm';
import { maybeYield } from '../base/yield';

let enabled = true;

/** Turn the replayed decode on or off (default on; it applies on the webgpu backend only). */
export function setDecodeReplay(on: boolean): void {
  enabled = on;
}

/** Whether `generate` replays its decode here and now. */
export function decodeReplayApplies(): boolean {
  return enabled && replayBackend() !== null;
}

/** What the last replayed generation did (tests, profiles). */
export interface DecodeReplayStats {
  recordings: number;
  replays: number;
  dispatchesPerReplay: number;
  /** Host milliseconds of the replayed tokens: writing their inputs, encoding and submitting (summed). */
  replayHostMs: number;
}

let lastStats: DecodeReplayStats = { recordings: 0, replays: 0, dispatchesPerReplay: 0, replayHostMs: 0 };

export function lastDecodeReplayStats(): DecodeReplayStats {
  return { ...lastStats };
}

let replayTotal = 0;

/** Replayed decode tokens (each one replay over the batch) since the process started: a step's count is a difference. */
export function decodeReplayCount(): number {
  return replayTotal;
}

export interface ReplayLoopArgs {
  model: CausalLM;
  B: number;
  Tp: number;
  N: number;
  /** Prompt lengths (the first new token's position is realLen[b]). */
  realLen: number[];
  /** The prompts' key mask [B, Tp] (1 real, 0 padding). */
  promptMask: Int32Array;
  /** The prefill's logits [B, V] and cache (taken over: this loop disposes them). */
  logits: tf.Tensor2D;
  cache: LayerKV[];
  padId: number;
  stop: number[] | null;
  checkEvery: number;
  /** The rows' uniforms for the next token (null when greedy). */
  uniforms: () => Float32Array | null;
  /**
   * The per-token choice on the device, synchronous (generate's: argmax, or the fused sampling kernel): token ids
   * [B] int32 and their log-probs [B] from logits [B, V] and the rows' uniforms [B] (null when greedy).
   */
  pick: (logits: tf.Tensor2D, uniforms: tf.Tensor1D | null) => { tokens: tf.Tensor1D; logprobs: tf.Tensor1D };
}

/** Token ids and log-probs, [L][B] flattened row-major by step (L ≤ N steps taken). */
export interface ReplayLoopResult {
  tokens: Int32Array;
  logprobs: Float32Array;
  steps: number;
}

interface StepOut {
  tok: tf.Tensor1D;
  lp: tf.Tensor1D;
  fin: tf.Tensor1D;
  lg: tf.Tensor2D;
  cache: LayerKV[];
}

/**
 * Choose tokens from logits and mask the stopped rows (generate's per-token choice, synchronous on WebGPU). Without
 * a stop token no row ever stops (`finished` stays all false), so the choice is taken as it is: 3 dispatches a
 * token fewer than masking rows that cannot be masked.
 */
function choose(
  a: ReplayLoopArgs,
  logits: tf.Tensor2D,
  finished: tf.Tensor1D,
  u: tf.Tensor | null,
): { tok: tf.Tensor1D; lp: tf.Tensor1D; fin: tf.Tensor1D } {
  return tf.tidy(() => {
    const { tokens, logprobs } = a.pick(logits, u as tf.Tensor1D | null);
    if (a.stop === null) return { tok: tokens, lp: logprobs, fin: tf.clone(finished) };
    const tok = tf.where(finished, tf.fill([a.B], a.padId, 'int32'), tokens) as tf.Tensor1D;
    const lp = tf.where(finished, tf.zeros([a.B]), logprobs) as tf.Tensor1D;
    const fin = (
      a.stop === null
        ? tf.clone(finished)
        : a.stop.reduce<tf.Tensor>((f, id) => tf.logicalOr(f, tf.equal(tokens, id)), finished)
    ) as tf.Tensor1D;
    return { tok, lp, fin };
  });
}

/** The replayed decode loop; the caller has checked decodeReplayApplies(). */
export async function replayedDecode(a: ReplayLoopArgs): Promise<ReplayLoopResult> {
  const backend = replayBackend() as ReplayBackend;
  const { B, Tp, N } = a;
  const S = Tp + N;
  const stats: DecodeReplayStats = { recordings: 0, replays: 0, dispatchesPerReplay: 0, replayHostMs: 0 };
  // The state the recording reads; copies put each step's results back into these buffers.
  const logits = a.logits;
  const cache = a.cache;
  const finished = tf.zeros([B], 'bool') as tf.Tensor1D;
  const accTok = tf.zeros([N, B], 'int32');
  const accLp = tf.zeros([N, B]);
  const rowBytes = B * 4;
  // Host-side inputs of a step: the key mask grows by one column per token.
  const km = new Float32Array(B * S);
  for (let b = 0; b < B; b++) for (let t = 0; t < Tp; t++) km[b * S + t] = a.promptMask[b * Tp + t];
  const pos = new Int32Array(B);
  const oh = new Float32Array(S);
  let frame: ReplayFrame | null = null;
  let outs: StepOut | null = null;
  let copies: ReplayCopy[] = [];
  const dropFrame = () => {
    frame?.dispose();
    frame = null;
    if (outs) tf.dispose([outs.tok, outs.lp, outs.fin, outs.lg, ...outs.cache.flatMap((c) => [c.k, c.v])]);
    outs = null;
  };
  const accCopies = (tok: tf.Tensor, lp: tf.Tensor, s: number): ReplayCopy[] => [
    {
      src: tensorBuffer(backend, tok),
      dst: tensorBuffer(backend, accTok),
      dstOffset: s * rowBytes,
      size: rowBytes,
    },
    {
      src: tensorBuffer(backend, lp),
      dst: tensorBuffer(backend, accLp),
      dstOffset: s * rowBytes,
      size: rowBytes,
    },
  ];
  let steps = 0;
  try {
    for (const t of [logits, finished, accTok, accLp, ...cache.flatMap((c) => [c.k, c.v])])
      tensorBuffer(backend, t);
    for (let s = 0; s < N; s++) {
      await maybeYield();
      const u = a.uniforms();
      if (s === N - 1) {
        // The last token: choose only.
        const uT = u ? tf.tensor1d(u) : null;
        const c = choose(a, logits, finished, uT);
        uT?.dispose();
        submitCopies(backend, accCopies(c.tok, c.lp, s));
        tf.dispose([c.tok, c.lp, c.fin]);
        steps = s + 1;
        break;
      }
      const slot = Tp + s;
      for (let b = 0; b < B; b++) {
        pos[b] = a.realLen[b] + s;
        km[b * S + slot] = 1;
      }
      oh.fill(0);
      oh[slot] = 1;
      if (frame && !frame.valid) dropFrame();
      if (!frame) {
        // Record this token: the plain path's ops, run once through tfjs.
        const inputs = [tf.tensor1d(pos, 'int32'), tf.tensor1d(oh), tf.tensor2d(km, [B, S])];
        if (u) inputs.push(tf.tensor1d(u));
        const [posT, ohT, kmT] = inputs;
        const uT = u ? inputs[3] : null;
        const rec = ReplayFrame.record(
          backend,
          (): StepOut =>
            tf.tidy(() => {
              const c = choose(a, logits, finished, uT);
              const out = a.model.decodeStep(c.tok, posT as tf.Tensor1D, ohT, kmT as tf.Tensor2D, cache);
              return { ...c, lg: a.model.lmHead(out.hidden), cache: out.cache };
            }),
          inputs,
        );
        tf.dispose(inputs); // the frame holds its own references
        frame = rec.frame;
        outs = rec.result;
        stats.recordings++;
        const o = outs;
        copies = [
          { src: tensorBuffer(backend, o.lg), dst: tensorBuffer(backend, logits) },
          { src: tensorBuffer(backend, o.fin), dst: tensorBuffer(backend, finished) },
          ...o.cache.flatMap((c, i) => [
            { src: tensorBuffer(backend, c.k), dst: tensorBuffer(backend, cache[i].k) },
            { src: tensorBuffer(backend, c.v), dst: tensorBuffer(backend, cache[i].v) },
          ]),
        ];
        submitCopies(backend, [...copies, ...accCopies(o.tok, o.lp, s)]);
      } else {
        const t0 = performance.now();
        frame.write(0, pos);
        frame.write(1, oh);
        frame.write(2, km);
        if (u) frame.write(3, u);
        frame.replay([...copies, ...accCopies(outs!.tok, outs!.lp, s)]);
        stats.replayHostMs += performance.now() - t0;
        stats.replays++;
        replayTotal++;
      }
      stats.dispatchesPerReplay = frame.size;
      steps = s + 1;
      if (a.stop !== null && (s + 1) % a.checkEvery === 0) {
        const anyLeft = tf.tidy(() => tf.any(tf.logicalNot(finished)));
        const left = (await anyLeft.data())[0];
        anyLeft.dispose();
        if (!left) break;
      }
    }
    flushTfjs(backend);
    const [tokT, lpT] = tf.tidy(() => [
      tf.slice(accTok, [0, 0], [steps, B]),
      tf.slice(accLp, [0, 0], [steps, B]),
    ]);
    try {
      const [tokens, logprobs] = await Promise.all([tokT.data(), lpT.data()]);
      return { tokens: tokens as Int32Array, logprobs: logprobs as Float32Array, steps };
    } finally {
      tf.dispose([tokT, lpT]);
    }
  } finally {
    dropFrame();
    tf.dispose([logits, finished, accTok, accLp, ...cache.flatMap((c) => [c.k, c.v])]);
    lastStats = stats;
  }
}
