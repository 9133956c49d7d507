/**
 * kernels/wasm-read.ts: a float32 tensor read in pieces. On WASM every piece is copied out of the heap into the
 * caller's one scratch array (no fresh buffer per piece, which tfjs-backend-wasm's data() makes); elsewhere the
 * pieces are row slices. Either way the pieces, joined, are the tensor's values.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { tensorPieces } from '../src/core/kernels/wasm-read';

async function readAll(t: tf.Tensor, pieceValues: number) {
  let held = new Float32Array(0);
  let asked = 0;
  const scratch = (n: number) => {
    asked++;
    if (held.length < n) held = new Float32Array(n);
    return held.subarray(0, n);
  };
  const values: number[] = [];
  const sizes: number[] = [];
  const buffers = new Set<ArrayBufferLike>();
  for await (const p of tensorPieces(t, scratch, pieceValues)) {
    values.push(...p);
    sizes.push(p.length);
    buffers.add(p.buffer);
  }
  return { values, sizes, buffers, asked };
}

describe('tensorPieces on WASM', () => {
  beforeAll(() => setNodeBackend('wasm'));

  it('pieces of at most pieceValues, in order, all in the one scratch array', async () => {
    const x = tf.range(0, 10, 1, 'float32').reshape([2, 5]);
    const { values, sizes, buffers, asked } = await readAll(x, 3);
    expect(values).toEqual([...(await x.data())]);
    expect(sizes).toEqual([3, 3, 3, 1]);
    expect(asked).toBe(4);
    expect(buffers.size).toBe(1);
    x.dispose();
  });

  it('reads the heap again for every piece: a heap grown between pieces is read right', async () => {
    const x = tf.randomUniform([1000], -1, 1, 'float32', 3);
    const want = [...(await x.data())];
    const got: number[] = [];
    const held: tf.Tensor[] = [];
    const scratch = (n: number) => new Float32Array(n);
    const heapBytes = () => (tf.backend() as unknown as { wasm: { HEAPU8: Uint8Array } }).wasm.HEAPU8.length;
    const before = heapBytes();
    for await (const p of tensorPieces(x, scratch, 400)) {
      got.push(...p);
      held.push(tf.zeros([(64 * 1024 * 1024) / 4])); // 64 MB: the heap grows and HEAPU8 is a new view
    }
    expect(got).toEqual(want);
    expect(heapBytes()).toBeGreaterThan(before);
    for (const t of held) t.dispose();
    x.dispose();
  });

  it('a tensor freed while it is read stops the read with an error', async () => {
    const x = tf.ones([10]);
    const it = tensorPieces(x, (n) => new Float32Array(n), 4);
    await it.next();
    x.dispose();
    await expect(it.next()).rejects.toThrow(/freed while it was being read/);
  });

  it('refuses an int32 tensor', async () => {
    const x = tf.ones([4], 'int32');
    await expect(tensorPieces(x, (n) => new Float32Array(n)).next()).rejects.toThrow(
      /int32 tensor, expected float32/,
    );
    x.dispose();
  });
});

describe('tensorPieces on the CPU backend', () => {
  beforeAll(() => setNodeBackend('cpu'));

  it('row slices of whole rows (pieceValues rounded down to rows), joined the tensor', async () => {
    const x = tf.range(0, 12, 1, 'float32').reshape([4, 3]);
    const before = tf.memory().numTensors;
    const { values, sizes } = await readAll(x, 7);
    expect(values).toEqual([...(await x.data())]);
    expect(sizes).toEqual([6, 6]);
    expect(tf.memory().numTensors).toBe(before);
    x.dispose();
  });
});
