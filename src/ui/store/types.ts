/** The playground's state: data and actions typed apart (xyflow style), so selectors can take just one fact. */
import type { ConfigKey, TrainConfig } from '../../common/config';
import type { EvalRecord } from '../../common/eval-record';
import type {
  AlertView,
  BackendPref,
  BackendReport,
  ContinueAfterSft,
  GenerateReply,
  MemoryEstimateReport,
  MemoryReport,
  MetricsByName,
  ModelFit,
  ModelSource,
  ModelSummary,
  RewardModelReport,
  RunStatus,
  SampleView,
  SupervisedJobWire,
} from '../../worker/protocol';
import type { HeatmapMode } from '../lib/heat';
import type { KeptRun } from '../lib/kept-runs';

/**
 * Where starting the backend or loading the model stands (not the training phase, which the worker reports
 * in RunStatus.phase). idle: not started · busy: a worker call is running · ready · error: the last attempt
 * failed.
 */
export type LoadState = 'idle' | 'busy' | 'ready' | 'error';

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

/** The samples of one PPO step. */
export interface StepSamples {
  step: number;
  samples: SampleView[];
}

export interface ProgressView {
  task: string;
  /** In [0, 1]; null when the total is unknown. */
  fraction: number | null;
  message: string;
}

/** A run command waiting for the worker's answer. */
export type RunCommand = 'start' | 'pause' | 'step' | 'reset';
/** A file or reward job waiting for the worker's answer. */
export type IoTask = 'export' | 'import' | 'metrics' | 'reward-model' | 'reward-code' | 'supervised';

/** Why LoRA was turned on for a big model, and what to set back if the person turns it off. */
export interface LoraNote {
  text: string;
  previousLearningRate: number;
  learningRateChanged: boolean;
}

export interface PlaygroundData {
  backendPref: BackendPref;
  backend: BackendReport | null;
  backendLoadState: LoadState;
  model: ModelSummary | null;
  modelLoadState: LoadState;
  /** The worker's tensor memory (tf.memory()), as last reported. */
  memory: MemoryReport | null;
  /** The Generate panel's prompt and sampling settings (not the model's parameter count, `model.params`). */
  generateParams: GenerateParams;
  /** The last generation and the prompt it continued. */
  output: { prompt: string; reply: GenerateReply } | null;
  generating: boolean;
  /** The last error, in words fit to show; null when there is none. */
  error: string | null;

  // ---- training ----
  // Two configs, each with one owner. `editedConfig` is the person's: the controls and the URL hash write
  // it. `runStatus.config` is the worker's: the config its job trains with, as the worker last said. Only
  // the worker's answers and events write `runStatus` (takeWorkerStatus; and workerCrashed, once the worker
  // cannot speak). An edit reaches the job as one message (config-sync.ts) and comes back in the worker's
  // answer. The worker's config flows into `editedConfig` only for keys the worker changed by itself that
  // the person has not edited (a loaded model, a trained reward model: mergeWorkerConfig), and whole when a
  // run is restored (importCheckpoint, autosaveResumed).
  /** The worker's last word on its job (state, phase, step, the config in force); null before it answered. */
  runStatus: RunStatus | null;
  /** The config the person is editing: the controls show it and the URL hash mirrors it. */
  editedConfig: TrainConfig;
  /** Why `editedConfig` cannot be used (e.g. batchSize not divisible by miniBatches); null when it is valid. */
  configProblem: string | null;
  /** Every step's metrics, oldest first (the charts downsample what they draw, never this). */
  metrics: MetricsByName[];
  /** The samples of the last SAMPLE_STEPS_KEPT steps, oldest first. */
  samples: StepSamples[];
  /** The step whose samples are shown; null follows the newest. */
  sampleStep: number | null;
  /** The newest held-out evaluation (reference vs policy answers, docs/eval.md); null before the first. */
  evalLatest: EvalRecord | null;
  /** Health alerts, newest first, one per id. */
  alerts: AlertView[];
  /** Alert ids the person dismissed (until the next reset). */
  dismissedAlerts: string[];
  /** Download / reward-model progress from the worker. */
  progress: ProgressView | null;
  /** EMA weight of the charts' smoothed line, in [0, 0.99]. */
  smoothing: number;
  heatmap: HeatmapMode;
  command: RunCommand | null;
  ioTask: IoTask | null;
  /**
   * True while the page's first backend, model and run are being set up (`start`). A run restored meanwhile
   * (autosave, checkpoint) would be dropped by the model load or the first configure queued before it, so
   * restoring waits for this to go false.
   */
  starting: boolean;
  /** The reward code in the editor. */
  rewardCode: string;
  /** Whether the worker scores with the person's code. */
  rewardCodeInUse: boolean;
  rewardModel: RewardModelReport | null;
  /** The model picker's choice: a config `model` value, or 'files'. */
  modelChoice: string;
  /** The worker's estimate of what a run of the config would hold (null: none yet, or no model). */
  estimate: MemoryEstimateReport | null;
  /** LoRA preselected for a big model, and why; null when not (or dismissed). */
  loraNote: LoraNote | null;
  /** The worker's verdicts on the known Llama / Qwen shapes for this device (keyed by shape name); null: none yet. */
  modelFits: Record<string, ModelFit> | null;

  // ---- kept runs and the comparison ----
  /** Every kept run, oldest first (the current one included once its first step ran). */
  keptRuns: KeptRun[];
  /** The kept run the worker is training now; null before its first step (or after a reset). */
  currentRunId: string | null;
  /**
   * Config keys the person edited whose edit the worker has not answered yet (gathered, or sent and unanswered):
   * a worker status meanwhile must not overwrite them (src/ui/store/config-sync.ts, mergeWorkerConfig).
   */
  editsInFlight: ConfigKey[];
  /**
   * Live setting changes of the current run, for the charts' markers: the first step that used them and what
   * changed ("klCoef 0.05 → 0.4"), oldest first.
   */
  changeMarks: ChangeMark[];
  /** The step of this run's last autosave (the worker's reliability events), or null before one. */
  autosavedStep: number | null;
  /** Runs chosen for the charts (at most MAX_COMPARED), in the order chosen; the current run is drawn anyway. */
  compared: string[];
  /** A word about the kept runs (one dropped to stay within the budget, storage trouble); null when none. */
  keptRunsNote: string | null;
  /** The configs a link compares, offered for a re-run; null when the link compares none or the offer is gone. */
  linkedRuns: TrainConfig[] | null;
  /** Configs still to run, one after the other (a linked comparison being re-run). */
  rerunQueue: TrainConfig[];
  /** How many of the next new runs join the comparison by themselves ("Run again with…", a re-run link). */
  autoCompare: number;
}

export interface PlaygroundActions {
  /** Start the worker's backend, subscribe to the run, load the model and configure it (once). */
  start(): Promise<void>;
  /** Switch backend; the loaded model is reloaded on it. */
  chooseBackend(pref: BackendPref): Promise<void>;
  setGenerateParam<K extends keyof GenerateParams>(key: K, value: GenerateParams[K]): void;
  generate(): Promise<void>;
  dismissError(): void;
  /** Show a problem found on the page itself (e.g. a file too large to read). */
  showError(message: string): void;
  /** The worker died: every pending call is lost. */
  workerCrashed(message: string): void;

  // ---- training ----
  startRun(): Promise<void>;
  pauseRun(): Promise<void>;
  stepRun(): Promise<void>;
  resetRun(): Promise<void>;
  /** Edit one config key: live keys go to the running job, others configure the next run. */
  setConfigValue<K extends ConfigKey>(key: K, value: TrainConfig[K] | undefined): void;
  /** The URL hash changed under the page (a pasted link). */
  hashChanged(hash: string): void;
  setSmoothing(weight: number): void;
  setHeatmap(mode: HeatmapMode): void;
  selectSampleStep(step: number | null): void;
  dismissAlert(id: string): void;
  chooseModel(choice: string): void;
  /** Load (replace) the policy; the worker restarts the run from it. */
  loadModel(source: ModelSource): Promise<void>;
  /** Ask the worker for the memory estimate of the config (the model and the keys it depends on). */
  refreshEstimate(): Promise<void>;
  /** Ask the worker which known Llama / Qwen shapes fit this device for the config (the picker's verdicts). */
  refreshModelFits(): Promise<void>;
  /** After loading `model`: LoRA (and a learning rate for it) when it is big, with a note saying why. */
  preselectLora(model: ModelSummary): Promise<void>;
  /** Turn the preselected LoRA off again (and the learning rate back). */
  trainAllWeights(): void;
  dismissLoraNote(): void;
  editRewardCode(code: string): void;
  applyRewardCode(): Promise<void>;
  clearRewardCode(): Promise<void>;
  trainRewardModel(jsonl: string): Promise<void>;
  /**
   * Train with DPO or SFT instead of the RL algorithm (null: back to RL); the run commands then drive that job and
   * the charts show its metrics. A bad data file is an error naming its lines (the banner shows it).
   */
  setSupervisedJob(job: SupervisedJobWire | null): Promise<void>;
  /** After SFT: the SFT'd weights become the policy and the reference of a new run of `next`, which starts. */
  continueFromSft(next: ContinueAfterSft): Promise<void>;
  exportCheckpoint(): Promise<void>;
  exportMetrics(format: 'csv' | 'json'): Promise<void>;
  exportTrlConfig(): Promise<void>;
  importCheckpoint(bytes: Uint8Array): Promise<void>;
  /**
   * The worker resumed an autosaved run (the autosave banner asked it): its status and metric history replace
   * the run shown, and its config becomes the edited one, as an imported checkpoint's does.
   */
  autosaveResumed(status: RunStatus, metrics: MetricsByName[]): void;
  /**
   * Run `job`, which restores a run (the autosave's resume: its worker calls and autosaveResumed), after the
   * page's start and in turn with the config messages, as imports are (SliceContext.afterStart / exclusive).
   */
  restoring<T>(job: () => Promise<T>): Promise<T>;
  /** Send any slider moves still being gathered (tests; before run commands). */
  flushConfig(): Promise<void>;

  // ---- kept runs and the comparison ----
  /** Start a new run with this config (the run in the worker is paused and dropped; it stays kept). */
  launchRun(config: TrainConfig): Promise<void>;
  renameRun(id: string, name: string): void;
  deleteRun(id: string): void;
  /** Add a run to the charts' comparison, or take it out. */
  toggleCompare(id: string): void;
  /**
   * A new run from a kept run's config with `key` set to `text` (typed as the key wants); it joins the
   * comparison with its source. Returns why it could not start (in words), or null.
   */
  runAgainWith(id: string, key: ConfigKey, text: string): Promise<string | null>;
  /** Re-run the runs the link compares, one after the other; each joins the comparison. */
  rerunLinked(): Promise<void>;
  dismissLinkedRuns(): void;
  /** Stop re-running the linked runs after the one in progress. */
  cancelRerun(): void;
  dismissKeptRunsNote(): void;
  /** The compared runs (or the current one) as one CSV with a `run` column. */
  exportComparisonCsv(): void;
  /** Wait for the kept runs' storage writes (tests). */
  flushRuns(): Promise<void>;
}

export type PlaygroundState = PlaygroundData & { actions: PlaygroundActions };

/** A live change of a running job's settings, marked on every chart at the first step that used it. */
export interface ChangeMark {
  step: number;
  text: string;
}
