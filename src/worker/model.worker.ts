/**
 * The model worker: every tfjs call of the app happens here, off the UI thread.
 * Start it with `new Worker(new URL('../worker/model.worker.ts', import.meta.url), { type: 'module' })`
 * and talk to it through comlink with the WorkerApi type of ./protocol.ts.
 */
import { expose } from 'comlink';
import { createWorkerApi } from './api';
import type { WorkerApi } from './protocol';

const api: WorkerApi = createWorkerApi();
expose(api);
