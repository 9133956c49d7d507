import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
// tfjs-core alone registers no gradients (Vitest loads the ESM build, where this import works).
import '@tensorflow/tfjs-core/dist/register_all_gradients';

/** Use the CPU backend (the exact reference backend for parity tests). */
export async function useCpu(): Promise<void> {
  // PROD: no "install tfjs-node" banner in test output. Not IS_TEST: its per-kernel leak check counts the
  // intermediates a custom gradient saves for the backward pass (layer norm's x̂, gelu's σ) as leaks; the tests
  // check tf.memory().numTensors themselves.
  tf.env().set('PROD', true);
  await tf.setBackend('cpu');
  await tf.ready();
}
