/** tf.memory() as the worker reports it (api.ts memory(), and every `step` event of run.ts). */
import * as tf from '@tensorflow/tfjs-core';
import type { BackendName, MemoryReport } from './protocol';

export function memoryReport(backend: BackendName): MemoryReport {
  // The WebGPU backend adds its GPU buffer figures to tf.memory() (tfjs-backend-webgpu 4.22 memory()).
  const m = tf.memory() as tf.MemoryInfo & { numBytesInGPU?: unknown; numBytesAllocatedInGPU?: unknown };
  const report: MemoryReport = { numTensors: m.numTensors, numBytes: m.numBytes, backend };
  if (typeof m.numBytesInGPU === 'number') report.numBytesInGPU = m.numBytesInGPU;
  if (typeof m.numBytesAllocatedInGPU === 'number') report.numBytesAllocatedInGPU = m.numBytesAllocatedInGPU;
  if (backend === 'wasm') {
    const heap = (tf.backend() as unknown as { wasm?: { HEAPU8?: Uint8Array } }).wasm?.HEAPU8?.length;
    if (typeof heap === 'number') report.heapBytes = heap;
  }
  return report;
}
