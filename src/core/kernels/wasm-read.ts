/**
 * A float32 tensor's values in consecutive pieces, for a writer that is done with each piece before it asks for the
 * next (a checkpoint's safetensorsStream into a file, an autosave or a zip). On tfjs's WASM backend each piece is
 * copied out of the heap into one array the caller reuses (`scratch`): tfjs-backend-wasm 4.22's `data()` copies the
 * whole tensor into a fresh ArrayBuffer (HEAPU8.slice), so writing a checkpoint of a 0.35 B-parameter model made
 * 4.2 GB of fresh host memory, which the process touches page by page (on the 2-core test VM that alone took 14 s;
 * tests/wasm-read.test.ts). Elsewhere a piece is a row slice read with `data()` (what the whole tensor would cost
 * anyway, one piece at a time).
 */
import * as tf from '@tensorflow/tfjs-core';

interface WasmBackendLike {
  wasm: { HEAPU8: Uint8Array };
  dataIdMap: { get(dataId: unknown): { memoryOffset: number }; has(dataId: unknown): boolean };
}

/** Values in a piece: 4 Mi (16 MB), the most a scratch array holds. */
export const PIECE_VALUES = 1 << 22;

/**
 * `t`'s values (float32) in order, in pieces of at most `pieceValues` values (rounded down to whole rows of its last
 * dimension where the tensor is sliced by rows). `scratch(n)` gives an array of n values that the caller reuses;
 * a piece it yields is valid until the generator is resumed. The tensor must not change or be freed while it is read
 * (saves and training steps never overlap); if it is, reading stops with an error.
 */
export async function* tensorPieces(
  t: tf.Tensor,
  scratch: (n: number) => Float32Array,
  pieceValues = PIECE_VALUES,
): AsyncGenerator<Float32Array> {
  if (t.dtype !== 'float32') throw new Error(`tensorPieces: ${t.dtype} tensor, expected float32`);
  const n = t.size;
  const bk = tf.backend() as unknown as Partial<WasmBackendLike>;
  const dataId = t.dataId;
  if (tf.getBackend() === 'wasm' && bk.wasm && bk.dataIdMap?.has(dataId)) {
    for (let at = 0; at < n; at += pieceValues) {
      const len = Math.min(pieceValues, n - at);
      // Looked up again for every piece: while the consumer awaits, other work may grow the heap (a new buffer).
      if (!bk.dataIdMap.has(dataId))
        throw new Error('tensorPieces: the tensor was freed while it was being read');
      const entry = bk.dataIdMap.get(dataId)!;
      const out = scratch(len);
      out.set(new Float32Array(bk.wasm.HEAPU8.buffer, entry.memoryOffset + 4 * at, len));
      yield out;
    }
    return;
  }
  // Other backends: row slices of the tensor as a matrix [rows, last dimension], each read and freed in turn.
  const cols = t.rank === 0 ? 1 : (t.shape[t.rank - 1] as number);
  const rows = n / Math.max(cols, 1);
  const step = Math.max(1, Math.floor(pieceValues / Math.max(cols, 1)));
  if (rows <= step) {
    yield (await t.data()) as Float32Array;
    return;
  }
  const m = tf.reshape(t, [rows, cols]);
  try {
    for (let r = 0; r < rows; r += step) {
      const piece = tf.slice(m, [r, 0], [Math.min(step, rows - r), cols]);
      try {
        yield (await piece.data()) as Float32Array;
      } finally {
        piece.dispose();
      }
    }
  } finally {
    m.dispose();
  }
}
