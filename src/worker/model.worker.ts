/**
 * The model worker: every tfjs call of the app happens here, off the UI thread.
 * Start it with `new Worker(new URL('../worker/model.worker.ts', import.meta.url), { type: 'module' })`
 * and talk to it through comlink with the ModelWorkerApi type of ./protocol.ts (WorkerApi & ReliabilityApi).
 */
// Core registers no gradients (its tests and the CLI do it themselves); training needs them all.
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { expose } from 'comlink';
import { registerWasmExtraKernels } from '../core/kernels/wasm-extra';
import { createWorkerApi } from './api';
import type { ModelWorkerApi } from './protocol';

// The WASM backend (imported by ./backend-web via ./api) lacks UnsortedSegmentSum (gather's gradient) and has a
// slow transposed matmul; core's kernels fill both in.
registerWasmExtraKernels();

const api: ModelWorkerApi = createWorkerApi();
expose(api);
