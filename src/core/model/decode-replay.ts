/**
 * The KV-cache decode loop recorded once and replayed per token on WebGPU (issue #31; kernels/webgpu-replay.ts).
 *
 * One step of `generate` — the model's `decodeStep` and `lmHead` for the previous token's ids, then the choice of
 * this token from the logits (device sampling or argmax, stopped rows masked: one dispatch, chooseTokensWebGpu) —
 * has the same shapes at every token: the cache keeps [B, heads, S, d], and what changes (the position ids, the
 * slot's one-hot, the key mask, the rows' uniforms) comes in as four small input tensors. So token 0 is chosen from
 * the prefill's logits through tfjs, the first step runs through tfjs as usual and is recorded, and every later
 * step writes its four inputs (queue.writeBuffer) and replays the recorded dispatches in one command buffer. State
 * is carried by buffer copies appended to the same command buffer: the chosen ids into the tensor the next step
 * reads, the stopped rows (with a stop token), the new caches where they are not written in place, and the token
 * and its log-prob into row s of two [N, B] accumulators that are read back once at the end. The logits never
 * leave the step.
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
import { MAX_ELEMENTS, MAX_VOCAB, chooseTokensWebGpu } from '../kernels/webgpu-sample';
import { maybeYield } from '../base/yield';
import { decodeLogits } from './vocab-chunks';

let enabled = true;

/** Turn the replayed decode on or off (default on; it applies on the webgpu backend only). */
export function setDecodeReplay(on: boolean): void {
  enabled = on;
}

let fusedChoice = true;

/**
 * Choose each replayed token in one dispatch (kernels/webgpu-sample.ts chooseTokensWebGpu; default on), or through
 * `pick` and tfjs's ops (comparisons). Returns the previous setting.
 */
export function setDecodeReplayFusedChoice(on: boolean): boolean {
  const was = fusedChoice;
  fusedChoice = on;
  return was;
}

/** Whether the replayed decode chooses a [B, V] row of logits in one dispatch: on, and within the kernel's limits. */
export function fusedChoiceApplies(B: number, V: number): boolean {
  return fusedChoice && B >= 1 && V >= 1 && V <= MAX_VOCAB && B * V <= MAX_ELEMENTS;
}

/** What `setDecodeReplayProbe` is given: the recorded step's frame, after the generation's results were read. */
export type DecodeReplayProbe = (frame: ReplayFrame, info: { B: number; S: number }) => Promise<void>;
let probe: DecodeReplayProbe | null = null;

/**
 * Hand each replayed generation's frame to `p` once its tokens and log-probs are read, before the frame is freed
 * (scripts/profile-replay.ts times its dispatches: kernels/webgpu-replay-profile.ts). A replay then writes the
 * frame's outputs and cache slot again from the same inputs; the generation's results are already out. null: none.
 */
export function setDecodeReplayProbe(p: DecodeReplayProbe | null): void {
  probe = p;
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
   * The sampling settings, where the fused choice applies (kernels/webgpu-sample.ts chooseTokensWebGpu: the kernel's
   * limits hold): the whole choice, masking included, in one dispatch. Null: `pick` and tfjs's ops.
   */
  fused: { temperature: number; topK: number; topP: number } | null;
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

/** Where one token's choice put its results: a tensor and a byte offset in it, for each of the three. */
interface Choice {
  owned: tf.Tensor[];
  tok: ReplaySlot;
  lp: ReplaySlot;
  fin: ReplaySlot;
}
interface ReplaySlot {
  t: tf.Tensor;
  offset: number;
}

/**
 * Choose tokens from logits and mask the stopped rows (`finished` [B] int32, nonzero: stopped): generate's choice,
 * synchronous on WebGPU. Fused (chooseTokensWebGpu): one dispatch writing [tokens | log-prob bits | stopped]. Else
 * `pick` and tfjs's ops; without a stop token no row ever stops, so the choice is taken as it is.
 */
function choose(
  a: ReplayLoopArgs,
  logits: tf.Tensor2D,
  finished: tf.Tensor1D,
  u: tf.Tensor1D | null,
  k: { stops: tf.Tensor1D | null; greedyU: tf.Tensor1D },
): Choice {
  const rowBytes = a.B * 4;
  if (a.fused) {
    const out = chooseTokensWebGpu(logits, u ?? k.greedyU, finished, k.stops, { ...a.fused, padId: a.padId });
    return {
      owned: [out],
      tok: { t: out, offset: 0 },
      lp: { t: out, offset: rowBytes },
      fin: { t: out, offset: 2 * rowBytes },
    };
  }
  const r = tf.tidy(() => {
    const { tokens, logprobs } = a.pick(logits, u);
    if (a.stop === null) return { tok: tokens, lp: logprobs, fin: tf.clone(finished) };
    const done = tf.cast(finished, 'bool');
    const tok = tf.where(done, tf.fill([a.B], a.padId, 'int32'), tokens) as tf.Tensor1D;
    const lp = tf.where(done, tf.zeros([a.B]), logprobs) as tf.Tensor1D;
    const fin = tf.cast(
      a.stop.reduce<tf.Tensor>((f, id) => tf.logicalOr(f, tf.equal(tokens, id)), done),
      'int32',
    ) as tf.Tensor1D;
    return { tok, lp, fin };
  });
  return {
    owned: [r.tok, r.lp, r.fin],
    tok: { t: r.tok, offset: 0 },
    lp: { t: r.lp, offset: 0 },
    fin: { t: r.fin, offset: 0 },
  };
}

/**
 * The replayed decode loop; the caller has checked decodeReplayApplies().
 *
 * Token 0 is chosen from the prefill's logits through tfjs. Each later token s is one step: decode token s − 1
 * (its id read from `ids`), the LM head, choose token s; the first such step is recorded, the rest replay it. The
 * step's choice is carried by buffer copies in the same command buffer: its ids into `ids` (the next step's
 * input), its stopped rows into `finished` (with stop tokens), and the token and log-prob into row s of the two
 * [N, B] accumulators read back once at the end. The logits stay inside the step.
 */
export async function replayedDecode(a: ReplayLoopArgs): Promise<ReplayLoopResult> {
  const backend = replayBackend() as ReplayBackend;
  const { B, Tp, N } = a;
  const S = Tp + N;
  const stats: DecodeReplayStats = { recordings: 0, replays: 0, dispatchesPerReplay: 0, replayHostMs: 0 };
  // The state the recording reads; copies put each step's results back into these buffers.
  const cache = a.cache;
  const finished = tf.zeros([B], 'int32') as tf.Tensor1D;
  const ids = tf.zeros([B], 'int32') as tf.Tensor1D;
  const accTok = tf.zeros([N, B], 'int32');
  const accLp = tf.zeros([N, B]);
  const k = {
    stops: a.fused && a.stop?.length ? (tf.tensor1d(a.stop, 'int32') as tf.Tensor1D) : null,
    greedyU: tf.zeros([B]) as tf.Tensor1D, // the kernel's uniforms binding when greedy (never read)
  };
  const rowBytes = B * 4;
  // Host-side inputs of a step: the key mask grows by one column per token.
  const km = new Float32Array(B * S);
  for (let b = 0; b < B; b++) for (let t = 0; t < Tp; t++) km[b * S + t] = a.promptMask[b * Tp + t];
  const pos = new Int32Array(B);
  const oh = new Float32Array(S);
  let frame: ReplayFrame | null = null;
  let outs: { choice: Choice; cache: LayerKV[] } | null = null;
  let cacheCopies: ReplayCopy[] = [];
  const dropFrame = () => {
    frame?.dispose();
    frame = null;
    if (outs) tf.dispose([...outs.choice.owned, ...outs.cache.flatMap((c) => [c.k, c.v])]);
    outs = null;
  };
  const slot = (x: ReplaySlot) => ({ src: tensorBuffer(backend, x.t), srcOffset: x.offset });
  /** Token s's choice to where it goes: the next step's ids, the stopped rows, the accumulators' row s. */
  const carry = (c: Choice, s: number): ReplayCopy[] => [
    { ...slot(c.tok), dst: tensorBuffer(backend, ids), size: rowBytes },
    ...(a.stop !== null ? [{ ...slot(c.fin), dst: tensorBuffer(backend, finished), size: rowBytes }] : []),
    { ...slot(c.tok), dst: tensorBuffer(backend, accTok), dstOffset: s * rowBytes, size: rowBytes },
    { ...slot(c.lp), dst: tensorBuffer(backend, accLp), dstOffset: s * rowBytes, size: rowBytes },
  ];
  let steps = 0;
  try {
    for (const t of [finished, ids, accTok, accLp, ...cache.flatMap((c) => [c.k, c.v])])
      tensorBuffer(backend, t);
    for (let s = 0; s < N; s++) {
      await maybeYield();
      const u = a.uniforms();
      if (s === 0) {
        // Token 0: from the prefill's logits, through tfjs.
        const uT = u ? (tf.tensor1d(u) as tf.Tensor1D) : null;
        const c = choose(a, a.logits, finished, uT, k);
        uT?.dispose();
        submitCopies(backend, carry(c, 0));
        tf.dispose([...c.owned, a.logits]);
      } else {
        // Decode token s − 1 at its slot, then choose token s.
        const slotAt = Tp + s - 1;
        for (let b = 0; b < B; b++) {
          pos[b] = a.realLen[b] + s - 1;
          km[b * S + slotAt] = 1;
        }
        oh.fill(0);
        oh[slotAt] = 1;
        if (frame && !frame.valid) dropFrame();
        if (!frame) {
          // Record this step: the plain path's ops, run once through tfjs.
          const inputs = [tf.tensor1d(pos, 'int32'), tf.tensor1d(oh), tf.tensor2d(km, [B, S])];
          if (u) inputs.push(tf.tensor1d(u));
          const [posT, ohT, kmT] = inputs;
          const uT = u ? (inputs[3] as tf.Tensor1D) : null;
          const rec = ReplayFrame.record(
            backend,
            () => {
              // tidy keeps what the step returns (the choice's tensors, the new cache) and nothing else.
              let kept: { choice: Choice; cache: LayerKV[] } | null = null;
              tf.tidy(() => {
                const out = a.model.decodeStep(ids, posT as tf.Tensor1D, ohT, kmT as tf.Tensor2D, cache);
                const c = choose(a, decodeLogits(a.model, out.hidden), finished, uT, k);
                kept = { choice: c, cache: out.cache };
                return [...c.owned, ...out.cache.flatMap((kv) => [kv.k, kv.v])];
              });
              return kept! as { choice: Choice; cache: LayerKV[] };
            },
            inputs,
          );
          tf.dispose(inputs); // the frame holds its own references
          frame = rec.frame;
          outs = rec.result;
          stats.recordings++;
          cacheCopies = outs.cache.flatMap((c, i) => [
            { src: tensorBuffer(backend, c.k), dst: tensorBuffer(backend, cache[i].k) },
            { src: tensorBuffer(backend, c.v), dst: tensorBuffer(backend, cache[i].v) },
          ]);
          submitCopies(backend, [...cacheCopies, ...carry(outs.choice, s)]);
        } else {
          const t0 = performance.now();
          frame.write(0, pos);
          frame.write(1, oh);
          frame.write(2, km);
          if (u) frame.write(3, u);
          frame.replay([...cacheCopies, ...carry(outs!.choice, s)]);
          stats.replayHostMs += performance.now() - t0;
          stats.replays++;
          replayTotal++;
        }
        stats.dispatchesPerReplay = frame.size;
      }
      steps = s + 1;
      if (a.stop !== null && s < N - 1 && (s + 1) % a.checkEvery === 0) {
        const least = tf.min(finished);
        const allStopped = (await least.data())[0] !== 0;
        least.dispose();
        if (allStopped) break;
      }
    }
    flushTfjs(backend);
    const [tokT, lpT] = tf.tidy(() => [
      tf.slice(accTok, [0, 0], [steps, B]),
      tf.slice(accLp, [0, 0], [steps, B]),
    ]);
    try {
      const [tokens, logprobs] = await Promise.all([tokT.data(), lpT.data()]);
      const f = frame as ReplayFrame | null;
      if (probe && f?.valid) await probe(f, { B, S });
      return { tokens: tokens as Int32Array, logprobs: logprobs as Float32Array, steps };
    } finally {
      tf.dispose([tokT, lpT]);
    }
  } finally {
    dropFrame();
    if (!a.logits.isDisposed) a.logits.dispose();
    tf.dispose([finished, ids, accTok, accLp, k.greedyU, ...(k.stops ? [k.stops] : [])]);
    tf.dispose(cache.flatMap((c) => [c.k, c.v]));
    lastStats = stats;
  }
}
