import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
// tfjs-core alone registers no gradients (Vitest loads the ESM build, where this import works).
import '@tensorflow/tfjs-core/dist/register_all_gradients';

/** Use the CPU backend (the exact reference backend for parity tests). */
export async function useCpu(): Promise<void> {
  tf.env().set('IS_TEST', true); // no "install tfjs-node" banner in test output
  await tf.setBackend('cpu');
  await tf.ready();
}
