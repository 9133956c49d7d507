/**
 * A vocabulary-sized matrix ([V, C]: a token embedding, an LM head) held as row chunks that each fit one WebGPU
 * buffer binding (docs/tfjs.md trap 8). Shared by GPT-2's wte and the Llama families' embed_tokens / lm_head.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LazyTensor } from './safetensors';
import { f16Gather, f16LinearNT, f16MatMulNN, f16Rows, isPackedF16, unpackF16 } from '../kernels/webgpu-f16';
import {
  linearNtDecodeWebGpu,
  webGpuHeadRowsInForce,
  webGpuLinearNtDecodeApplies,
} from '../kernels/webgpu-linear';
import { tensorPieces } from '../kernels/wasm-read';

/**
 * Rows of hidden states up to which a head block goes through the decode linear (below) inside a generation
 * (decodeLogits; packed f16 always, f32 where the device chose it): a decode step's batch. f16LinearNT's 32 × 32
 * output tiles would compute 31 of 32 rows for nothing at one row, and step K in slices of 16 with a barrier each;
 * the decode linear reads the packed words once per row group, as the blocks' own projections do in decode.
 */
export const F16_HEAD_DECODE_ROWS = 64;

/**
 * Rows of a chunked [V, C] matrix for token ids [N] → [N, C]. Each chunk gathers at the ids it holds (others clipped
 * into range and replaced by exact zeros), and the chunks' results are summed: the same values and gradients as
 * one gather, with no kernel binding more than one chunk.
 */
export function gatherChunked(chunks: tf.Tensor[], rowsPerChunk: number, flatIds: tf.Tensor): tf.Tensor2D {
  if (isPackedF16(chunks[0])) {
    // Packed f16 (baseDtype "f16"): each chunk's kernel writes zeros outside its rows; the sum is one gather.
    let out: tf.Tensor2D | null = null;
    for (let k = 0; k < chunks.length; k++) {
      const part = f16Gather(chunks[k], flatIds, k * rowsPerChunk);
      out = out ? (tf.add(out, part) as tf.Tensor2D) : part;
    }
    return out!;
  }
  if (chunks.length === 1) return tf.gather(chunks[0], flatIds) as tf.Tensor2D;
  const ids = tf.cast(flatIds, 'int32');
  let out: tf.Tensor | null = null;
  for (let k = 0; k < chunks.length; k++) {
    const rows = chunks[k].shape[0];
    const local = tf.sub(ids, tf.scalar(k * rowsPerChunk, 'int32'));
    const inChunk = tf.reshape(
      tf.logicalAnd(tf.greaterEqual(local, tf.scalar(0, 'int32')), tf.less(local, tf.scalar(rows, 'int32'))),
      [-1, 1],
    );
    const clipped = tf.minimum(tf.maximum(local, tf.scalar(0, 'int32')), tf.scalar(rows - 1, 'int32'));
    const g = tf.gather(chunks[k], clipped);
    const part = tf.where(inChunk, g, tf.zerosLike(g));
    out = out ? tf.add(out, part) : part;
  }
  return out as tf.Tensor2D;
}

/** hidden [N, C] · Wᵀ for a chunked W [V, C] → logits [N, V] (each chunk's logits concatenated in order). */
export function headChunked(chunks: tf.Tensor[], hidden: tf.Tensor2D): tf.Tensor2D {
  if (chunks.length === 1) return headRowsLogits(hidden, chunks[0]);
  return tf.concat(
    chunks.map((w) => headRowsLogits(hidden, w)),
    1,
  ) as tf.Tensor2D;
}

let decodeDepth = 0;

/**
 * `model.lmHead(hidden)` as a generation runs it (model/sampling.ts, model/decode-replay.ts): the logits of the
 * tokens being chosen. Only here does a head block take the decode linear (headRowsLogits); a synchronous scope, so
 * nothing else that runs meanwhile (a training step's scoring between a generation's awaits) is inside it.
 */
export function decodeLogits(
  model: { lmHead(h: tf.Tensor2D): tf.Tensor2D },
  hidden: tf.Tensor2D,
): tf.Tensor2D {
  decodeDepth++;
  try {
    return model.lmHead(hidden);
  } finally {
    decodeDepth--;
  }
}

/**
 * hidden [N, C] · Wᵀ for W [rows, C] (a block of the LM head's rows, f32 or packed f16 as `lmHeadBlocks` gives
 * them; a row slice of a packed block is packed rows): logits [N, rows], differentiable in hidden (and in W when
 * W is f32).
 */
export function headRowsLogits(hidden: tf.Tensor2D, w: tf.Tensor): tf.Tensor2D {
  const packed = isPackedF16(w);
  // A generation's head (decodeLogits; no tape: nothing needs this product's gradient) at a decode step's few rows
  // takes the decode linear: a packed block always, an f32 one where the device's timing (or a setting) chose it
  // (kernels/webgpu-linear.ts setWebGpuHeadRows). Scoring and training keep f16LinearNT / tfjs's matMul at every
  // size, so that their log-probs agree to the bit whatever the device chose.
  if (
    decodeDepth > 0 &&
    (packed || webGpuHeadRowsInForce()) &&
    hidden.shape[0] <= F16_HEAD_DECODE_ROWS &&
    !tf.engine().isTapeOn()
  ) {
    const o = { w: [w as tf.Tensor2D] };
    if (webGpuLinearNtDecodeApplies(hidden, o)) return linearNtDecodeWebGpu(hidden, o);
  }
  return packed ? f16LinearNT(hidden, w) : tf.matMul(hidden, w as tf.Tensor2D, false, true);
}

/** g [N, rows] · W for W [rows, C] (f32 or packed f16): the head's backward to the hidden states, [N, C]. */
export function headRowsBackward(g: tf.Tensor2D, w: tf.Tensor): tf.Tensor2D {
  return isPackedF16(w) ? f16MatMulNN(g, w) : tf.matMul(g, w as tf.Tensor2D);
}

/** Row ranges [lo, hi) of V rows in chunks of `rows`. */
export function chunkRanges(V: number, rows: number): [number, number][] {
  const out: [number, number][] = [];
  for (let lo = 0; lo < V; lo += rows) out.push([lo, Math.min(V, lo + rows)]);
  return out;
}

/** Rows per piece when a checkpoint streams a vocabulary matrix (8192 × 768 floats: 25 MB for GPT-2). */
const PIECE_ROWS = 8192;

/**
 * A chunked [V, C] matrix as a LazyTensor named `name`: `data()` reads it whole (the chunks joined in order), and
 * `pieces()` yields it in pieces of PIECE_ROWS rows, so a streamed checkpoint never holds the whole matrix on the host.
 */
export function chunkedLazyTensor(
  name: string,
  chunks: tf.Tensor[],
  rowsPerChunk: number,
  V: number,
): LazyTensor {
  const packed = isPackedF16(chunks[0]);
  // A packed chunk holds C / 2 words per row; its values are widened to f32 as they are read.
  const C = (chunks[0].shape[1] as number) * (packed ? 2 : 1);
  const values = async (t: tf.Tensor): Promise<Float32Array> =>
    packed ? unpackF16((await t.data()) as Int32Array) : ((await t.data()) as Float32Array);
  /** Each piece's data as stored (packed words, or f32 values), in order. */
  const stored = async function* (
    scratch?: (n: number) => Float32Array,
  ): AsyncGenerator<Float32Array | Int32Array> {
    for (const w of chunks) {
      if (!packed && scratch) {
        // f32 rows in pieces of PIECE_ROWS, copied into the stream's scratch on WASM (kernels/wasm-read.ts).
        yield* tensorPieces(w, scratch, PIECE_ROWS * C);
        continue;
      }
      const n = w.shape[0];
      for (let r = 0; r < n; r += PIECE_ROWS) {
        const rows = Math.min(PIECE_ROWS, n - r);
        // Packed rows are cut by their own kernel (tf.slice rounds int32 words above 2^24 through f32).
        const piece = packed ? f16Rows(w, r, rows) : tf.slice(w, [r, 0], [rows, w.shape[1] as number]);
        try {
          yield (await piece.data()) as Float32Array | Int32Array;
        } finally {
          piece.dispose();
        }
      }
    }
  };
  const pieces = async function* (scratch: (n: number) => Float32Array): AsyncGenerator<Float32Array> {
    for await (const d of stored(scratch)) yield packed ? unpackF16(d as Int32Array) : (d as Float32Array);
  };
  /** The packed words of every piece as stored (f16 values, two a word; a packed table only). */
  const halfWords = async function* (): AsyncGenerator<Int32Array> {
    for await (const d of stored()) yield d as Int32Array;
  };
  return {
    name,
    shape: [V, C],
    pieces,
    ...(packed ? { halfWords } : {}),
    data: async () => {
      if (chunks.length === 1) return values(chunks[0]);
      const all = new Float32Array(V * C);
      for (let k = 0; k < chunks.length; k++) all.set(await values(chunks[k]), k * rowsPerChunk * C);
      return all;
    },
  };
}
