/** The playground's state: data and actions typed apart (xyflow style), so selectors can take just one fact. */
import type {
  BackendPref,
  BackendReport,
  GenerateReply,
  MemoryReport,
  ModelSummary,
} from '../../worker/protocol';

/** idle: not started · busy: a worker call is running · ready · error: the last attempt failed. */
export type Phase = 'idle' | 'busy' | 'ready' | 'error';

export interface GenerateParams {
  prompt: string;
  maxNewTokens: number;
  /** 0 = greedy. */
  temperature: number;
  /** 0 = off. */
  topK: number;
  /** 1 = off. */
  topP: number;
  seed: number;
}

export interface PlaygroundData {
  backendPref: BackendPref;
  backend: BackendReport | null;
  backendPhase: Phase;
  model: ModelSummary | null;
  modelPhase: Phase;
  memory: MemoryReport | null;
  params: GenerateParams;
  /** The last generation and the prompt it continued. */
  output: { prompt: string; reply: GenerateReply } | null;
  generating: boolean;
  /** The last error, in words fit to show; null when there is none. */
  error: string | null;
}

export interface PlaygroundActions {
  /** Start the worker's backend and load the built-in model (once; later calls do nothing). */
  start(): Promise<void>;
  /** Switch backend; the loaded model is reloaded on it. */
  chooseBackend(pref: BackendPref): Promise<void>;
  setParam<K extends keyof GenerateParams>(key: K, value: GenerateParams[K]): void;
  generate(): Promise<void>;
  dismissError(): void;
  /** The worker died: every pending call is lost. */
  workerCrashed(message: string): void;
}

export type PlaygroundState = PlaygroundData & { actions: PlaygroundActions };
