import type { ModelWorker } from '../bridge';
import type { RunStatus } from '../../worker/protocol';
import type { RunBudget, RunStorage } from '../lib/kept-runs';
import type { PlaygroundData, PlaygroundState } from './types';

/** What the store's parts share: the worker, state access and the environment's side effects. */
export interface StoreOptions {
  /** The URL hash to read the config from (default: the page's). */
  hash?: string;
  /** Where the config's hash goes on every change (default: the page's URL, without a history entry). */
  writeHash?: (hash: string) => void;
  /** How a file reaches the person (default: a Blob URL download). */
  download?: (name: string, data: Uint8Array | string, type: string) => void;
  /** Milliseconds to gather slider moves before telling the worker (0: at once). */
  sendDelayMs?: number;
  /** Where kept runs live (default: IndexedDB in a browser, memory elsewhere). */
  runStorage?: RunStorage;
  /** Milliseconds to gather a run's steps before writing it to storage (0: at once). */
  runSaveDelayMs?: number;
  /** How many runs / bytes of history are kept (default RUN_BUDGET). */
  runBudget?: RunBudget;
  /**
   * Milliseconds over which the changes of the worker's events are told to subscribers (React) together: at most
   * one render per frame however fast steps come (default 50; 0: each event at once).
   */
  eventFrameMs?: number;
}

export interface SliceContext {
  api: ModelWorker;
  set: (partial: Partial<PlaygroundData>) => void;
  get: () => PlaygroundState;
  opts: Required<StoreOptions>;
  refreshMemory(): Promise<void>;
  /**
   * Take a status the worker answered with, as if it were a status event: with the worker's events, the only
   * way the store's `runStatus` (the job's state and the config in force) changes.
   */
  takeWorkerStatus(status: RunStatus): void;
  /**
   * The status event that answers config change number `seq` (what `configure` / `setHyperparameters` answer,
   * RunStatus.configSeq), once the store has taken it; null when none will come (not subscribed yet: the
   * subscription's status brings the config then; or the worker died).
   */
  configAnswered(seq: number): Promise<RunStatus | null>;
  /** Write the URL hash for the edited config and the comparison now in the store. */
  writeHash(): void;
  /**
   * Resolves when the page's start (`start`: backend, model, first configure) is over, at once when none is under
   * way. What replaces the run waits for it: the worker would run the page's model load or first configure after
   * it and drop what it brought in.
   */
  afterStart(): Promise<void>;
  /**
   * Run `job` in turn with the config messages (config-sync.ts): an edit made while it runs goes out after it,
   * against the run it leaves. For what replaces the run (an import, a resume, a reward model, a DPO/SFT job, a
   * model); `job` must not wait for config messages itself.
   */
  exclusive<T>(job: () => Promise<T>): Promise<T>;
}
