import * as tf from '@tensorflow/tfjs-core';

/**
 * out[i] = x[i, idx[i]] for x [N, K] and int32 idx [N], as one 1-D gather of the flattened x at i·K + idx[i].
 * Used instead of `tf.gather(x, idx, 1, 1)`: batchDims gathers corrupt memory on tfjs-backend-wasm 4.22
 * ("memory access out of bounds" in later kernels, seen with left-padded batches), and this form is
 * also one cheap kernel on every backend.
 */
export function gatherRows(x: tf.Tensor2D, idx: tf.Tensor1D): tf.Tensor1D {
  return tf.tidy(() => {
    const [N, K] = x.shape;
    const flat = tf.add(tf.mul(tf.range(0, N, 1, 'int32'), tf.scalar(K, 'int32')), tf.cast(idx, 'int32'));
    return tf.gather(tf.reshape(x, [N * K]), flat) as tf.Tensor1D;
  });
}
