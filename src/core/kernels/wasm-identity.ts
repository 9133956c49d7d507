/**
 * Identity on the WASM backend without a copy. tfjs's autodiff snapshots every tensor a gradient will need with
 * `clone` (the Identity kernel); tfjs-backend-wasm 4.22 implements Identity as a full copy, where the CPU, WebGL and
 * WebGPU backends share the buffer and count a reference. A PPO step of the tiny model runs ~3,900 of these clones
 * (≈4% of the update's kernel time). Sharing is safe for the same reason it is on the other backends: no tfjs
 * kernel writes into its inputs, and the backend frees a buffer when its last reference goes.
 * Tested against the copying kernel in tests/perf-wasm-kernels.test.ts.
 */
import * as tf from '@tensorflow/tfjs-core';

interface WasmBackendLike {
  incRef(dataId: unknown): void;
}

let original: tf.KernelConfig | undefined;

/** Swap in the sharing Identity for 'wasm' (idempotent; needs the WASM backend package loaded). */
export function registerWasmSharedIdentity(): void {
  if (original) return;
  const orig = tf.getKernel('Identity', 'wasm');
  if (!orig) return;
  original = orig;
  tf.unregisterKernel('Identity', 'wasm');
  tf.registerKernel({
    kernelName: 'Identity',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend }) => {
      const { x } = inputs as { x: tf.TensorInfo };
      if (x.dtype === 'string') return (orig.kernelFunc as tf.KernelFunc)({ inputs, backend, attrs: {} });
      (backend as unknown as WasmBackendLike).incRef(x.dataId);
      return { dataId: x.dataId, shape: x.shape, dtype: x.dtype };
    },
  });
}

/** Put tfjs-backend-wasm's copying Identity back. */
export function unregisterWasmSharedIdentity(): void {
  if (!original) return;
  tf.unregisterKernel('Identity', 'wasm');
  tf.registerKernel(original);
  original = undefined;
}
