/**
 * Browser benchmark page (dev server: /e2e/pages/bench.html?backend=webgpu&batch=8&tokens=64). Runs on the
 * page's main thread — fine for timing — and leaves the result on window.benchResult.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-webgpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-backend-cpu';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';
import wasmSimd from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm?url';
import wasmPlain from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm?url';
import wasmThreaded from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-threaded-simd.wasm?url';
import { GPT2 } from '../../src/core/model/gpt2';
import { parseGPT2Config } from '../../src/core/model/config';
import { benchGeneration, TINY_SHAPE } from '../../src/core/bench';

declare global {
  interface Window {
    benchResult?: unknown;
    benchError?: string;
  }
}

async function main(): Promise<void> {
  const q = new URLSearchParams(location.search);
  const backend = q.get('backend') ?? 'webgpu';
  setWasmPaths({ 'tfjs-backend-wasm.wasm': wasmPlain, 'tfjs-backend-wasm-simd.wasm': wasmSimd, 'tfjs-backend-wasm-threaded-simd.wasm': wasmThreaded });
  if (!(await tf.setBackend(backend))) throw new Error(`backend ${backend} unavailable`);
  await tf.ready();
  const model = GPT2.random(parseGPT2Config(TINY_SHAPE), 1, false);
  const r = await benchGeneration(model, Number(q.get('batch') ?? 8), Number(q.get('tokens') ?? 64));
  model.dispose();
  window.benchResult = { backend: tf.getBackend(), ...r };
  document.getElementById('out')!.textContent = JSON.stringify(window.benchResult, null, 2);
}

main().catch((e) => {
  window.benchError = String(e);
  document.getElementById('out')!.textContent = String(e);
});
