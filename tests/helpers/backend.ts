import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';

/** Use the CPU backend (the exact reference backend for parity tests). */
export async function useCpu(): Promise<void> {
  await tf.setBackend('cpu');
  await tf.ready();
}
