/**
 * The UI's end of the model worker. The UI imports the worker's API *type* only; the worker's code (and
 * tfjs with it) is loaded in the worker's own bundle.
 */
import { wrap, releaseProxy, type Remote } from 'comlink';
import type { WorkerApi } from '../worker/protocol';

export type ModelWorker = Remote<WorkerApi>;

export interface WorkerHandle {
  api: ModelWorker;
  /** `listener` is called when the worker dies or fails to start (its pending calls will never answer). */
  addCrashListener(listener: (message: string) => void): void;
  terminate(): void;
}

export function startModelWorker(): WorkerHandle {
  const worker = new Worker(new URL('../worker/model.worker.ts', import.meta.url), {
    type: 'module',
    name: 'model',
  });
  const api = wrap<WorkerApi>(worker);
  const listeners: ((message: string) => void)[] = [];
  worker.addEventListener('error', (ev: ErrorEvent) => {
    const message = `The model worker stopped${ev.message ? `: ${ev.message}` : ''}. Reload the page to start it again.`;
    for (const l of listeners) l(message);
  });
  return {
    api,
    addCrashListener: (listener) => void listeners.push(listener),
    terminate: () => {
      api[releaseProxy]();
      worker.terminate();
    },
  };
}
