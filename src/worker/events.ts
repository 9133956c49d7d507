/**
 * The run's event stream (protocol.ts TrainerEvent): who listens, and sending to them. Made first in the worker
 * (api.ts), so that whatever reports progress (the model sources, the run, its jobs) is built with it.
 */
import type { TrainerEvent } from './protocol';

type Listener = (e: TrainerEvent) => unknown;

export class RunEvents {
  private readonly listeners = new Set<Listener>();

  subscribe(cb: Listener): void {
    this.listeners.add(cb);
  }

  emit(e: TrainerEvent): void {
    for (const cb of this.listeners) {
      // Called synchronously, so an event is posted before the reply of the call that caused it. A failing
      // listener (a bug in the page's handler) must not stop the run.
      try {
        void Promise.resolve(cb(e)).catch(() => undefined);
      } catch {
        /* as above */
      }
    }
  }

  /** Progress of a long job (protocol.ts: task 'download', 'reward-model', 'build', 'recover'). */
  readonly progress = (task: string, fraction: number | null, message: string): void => {
    this.emit({ type: 'progress', task, fraction, message });
  };
}
