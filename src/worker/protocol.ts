/**
 * The worker's typed API, called from the UI through comlink (squoosh style: the UI imports these TYPES only,
 * never the worker's code). Every method is async on the UI side; a rejected call carries an Error whose
 * `message` is meant for a person. `name === 'UserError'` marks a mistake the person can fix (show the
 * message alone); any other name is a bug (show the message, log the details).
 *
 * Keep this file types only: it is the contract between the two threads. The config and metrics are core's own
 * types (src/common/config.ts, src/common/metrics.ts), imported as types only.
 */
import type { WebGpuKernelTuning } from '../common/kernel-tuning';
import type { ConfigKey, TrainConfig } from '../common/config';
import type { DpoJobSettings, SftJobSettings } from '../common/config/jobs';
import type { StepMetrics } from '../common/metrics';
import type { EvalRecord } from '../common/eval-record';
import type { MemoryParts } from '../core/model/size';
import type { LMConfig } from '../core/model/config';
import type { Phase } from '../core/ppo/trainer';

/** A tfjs backend the worker can run on. */
export type BackendName = 'webgpu' | 'wasm' | 'webgl' | 'cpu';
/** What the person asked for; `auto` = WebGPU on a hardware adapter, else WASM → WebGL → CPU. */
export type BackendPref = 'auto' | BackendName;

export interface AdapterReport {
  vendor: string;
  architecture: string;
  description: string;
  /** SwiftShader or a browser-flagged fallback adapter: correct, but slower than WASM. */
  isSoftware: boolean;
}

export interface BackendReport {
  /** The backend tfjs is running on now (may differ from the preference; `notice` then says why). */
  backend: BackendName;
  /** The WebGPU adapter, when the browser offers one (also when another backend was chosen). */
  adapter: AdapterReport | null;
  /** Plain words about a fallback or a software adapter; null when there is nothing to say. */
  notice: string | null;
  /** On WASM: the threads it runs on (absent on other backends). */
  wasm?: WasmThreadsReport;
  /**
   * On WebGPU: the fused linear's kernels as timed on this device when the backend started
   * (core/backend/webgpu-tune.ts; nothing is timed on a software adapter unless the page asks: `?tuneKernels=1`).
   */
  kernels?: WebGpuKernelTuning;
}

export interface WasmThreadsReport {
  /** Threads tfjs-backend-wasm runs its XNNPACK kernels on (its getThreadsCount()); 1 when not isolated. */
  threads: number;
  /** Whether the page is cross-origin isolated, which tfjs's threaded build needs (docs/tfjs.md). */
  isolated: boolean;
}

/** Options of the worker's first `init`, applied before any backend starts. */
export interface BackendOptions {
  /**
   * Threads for the WASM backend (a positive integer; default navigator.hardwareConcurrency, at most 8). Only
   * before WASM first starts in the worker; the app passes its page's `?wasmThreads=N`.
   */
  wasmThreads?: number;
  /**
   * Time the fused linear's kernels even on a software adapter (at a sixteenth of the shapes: a check that it runs
   * there, not a GPU's figures); the app passes its page's `?tuneKernels=1`.
   */
  tuneKernels?: boolean;
}

export type ModelSource =
  | { kind: 'builtin'; name: 'tiny' }
  /** A folder served over HTTP(S) holding config.json + model.safetensors; relative URLs resolve against the page. */
  | { kind: 'url'; baseUrl: string }
  /** A Hugging Face Hub repo id (`openai-community/gpt2`, `distilbert/distilgpt2`), downloaded over https and cached. */
  | {
      kind: 'hub';
      repo: string;
      revision?: string;
      /**
       * Tests only: a loopback origin (http://127.0.0.1:PORT) serving Hub-shaped paths
       * (`/{repo}/resolve/{revision}/{file}`). Anything else is refused; the app never sets it and always
       * downloads from https://huggingface.co.
       */
      hubBase?: string;
    }
  /**
   * Files the person picked (config.json + model.safetensors, and for a Llama / Qwen2 / Qwen3 folder tokenizer.json,
   * tokenizer_config.json, generation_config.json, chat_template.jinja), as bytes; other files are ignored. Names may carry
   * a folder (`my-model/config.json`, from webkitRelativePath) which becomes the label. Check `File.size`
   * against 2 GB before reading a file: bigger ones are refused here anyway.
   */
  | { kind: 'files'; files: UploadedFile[] };

/**
 * A picked file: its bytes, or (a safetensors file) the File itself, which the worker reads by ranges — a weights
 * file is then never in memory whole, and may be over the 2 GB a browser reads at once.
 */
export interface UploadedFile {
  name: string;
  bytes?: Uint8Array;
  blob?: Blob;
}

export interface ModelSummary {
  /** Where it came from, in words ("built-in tiny", a URL). */
  label: string;
  /** The model family: config.json's model_type. */
  family: LMConfig['model_type'];
  n_layer: number;
  n_embd: number;
  n_head: number;
  vocab_size: number;
  n_positions: number;
  /** Number of trainable parameters (tied LM head counted once). */
  params: number;
  /** `hf`: the folder's own tokenizer.json (Llama, Qwen2, Qwen3). */
  tokenizer: 'gpt2-bpe' | 'bytes' | 'hf';
  /** Whether the tokenizer has a chat template (tokenizer_config.json's chat_template or chat_template.jinja). */
  chatTemplate: boolean;
}

export interface GenerateRequest {
  prompt: string;
  /** Format the prompt with the model's chat template when it has one (default true). */
  chatTemplate?: boolean;
  maxNewTokens: number;
  /** 0 = greedy. */
  temperature: number;
  /** 0 = off. */
  topK: number;
  /** 1 = off. */
  topP: number;
  seed: number;
}

export interface GenerateReply {
  /** The generated continuation only (not the prompt). */
  text: string;
  /** Generated ids. */
  tokens: number[];
  /** One display string per generated id (byte pieces escaped, EOS as <|endoftext|>). */
  tokenTexts: string[];
  /** log softmax(logits / T) at each generated id (T = 1 when greedy). */
  logprobs: number[];
  promptTokens: number;
  tokensPerSecond: number;
  /** Wall time of the generate call in milliseconds. */
  millis: number;
}

/** Options of loadModel. */
export interface LoadOptions {
  /**
   * Refuse a model whose training state (params × (4 models + 2 Adam moments × 2 trainable models) × 4 bytes)
   * is over this many bytes. Default: 60% of the device memory the browser reports (≥ 4 GB assumed).
   */
  memoryBudgetBytes?: number;
}

/**
 * What a run of a config would hold at its peak, from the model's config.json and the config alone (nothing
 * loaded; src/core/model/size.ts estimateRunMemory, src/worker/device-limits.ts).
 */
export interface MemoryEstimateReport {
  /** The model's label ("built-in tiny", a Hub id, …). */
  model: string;
  /** Parameters of the policy model (the tied LM head counted once). */
  params: number;
  /** Parameters the policy trains: its LoRA adapters, or every weight. */
  policyTrainableParams: number;
  /** Parameters every optimiser of the run updates (policy, value adapters or model, heads). */
  trainableParams: number;
  /** LoRA rank (0: full fine-tuning). */
  lora: number;
  /** Bytes in all: the sum of `parts`. */
  bytes: number;
  /** Bytes per part: base, reference, value, rewardModel, adapters, adam, gradients, activations. */
  parts: MemoryParts;
  /** The budget Start holds the run to on this backend, and how it is set, in words. */
  budgetBytes: number;
  budget: string;
  /** Why Start would refuse the run, with numbers and remedies; null when it fits. */
  problem: string | null;
  /**
   * The plan the run would start with, in words: "whole batch (16) on WebGPU, recompute off", "micro-batches of 4
   * with recompute (WASM heap budget)" (src/core/ppo/gpu-plan.ts describePlan).
   */
  plan?: string;
  /**
   * "f16" when `parts.base` is the frozen base held in half precision (config "baseDtype" "f16" with LoRA, a Llama /
   * Qwen model, on WebGPU; docs/models.md, "The frozen base in f16"); absent when it is f32.
   */
  baseDtype?: 'f16';
}

/**
 * The model picker's verdict on a model of a known shape (src/core/model/llama-config.ts LLAMA_SHAPES) on this device:
 * whether a LoRA run's weights and optimiser state fit the budget, and how ("fits with LoRA r=8 (≈ 1.3 GB of 5.2 GB
 * before activations)", "fits only with the base in f16 (…)", "needs WebGPU for the f16 base (…)", "does not fit:
 * …"). Computed in the worker (src/worker/device-limits.ts modelFit).
 */
export interface ModelFit {
  fits: boolean;
  text: string;
}

/** tf.memory() of the worker. */
export interface MemoryReport {
  numTensors: number;
  numBytes: number;
  /** The backend these numbers are for. */
  backend: BackendName;
  /**
   * WebGPU only: bytes of GPU buffers tensors hold now (tfjs-backend-webgpu's numBytesInGPU), and bytes of every
   * GPU buffer the backend has created, including those kept in its pool for reuse (numBytesAllocatedInGPU).
   */
  numBytesInGPU?: number;
  numBytesAllocatedInGPU?: number;
  /**
   * With a step's event: that step's peak, the bytes held when it started plus the most its own tensor buffers
   * added at any moment, each buffer counted once (src/core/base/memory-peak.ts; tfjs's numBytes would count a buffer
   * once per tensor viewing it).
   */
  peakBytes?: number;
  /** WASM only: the heap's size, its high-water mark (tensors, XNNPACK's packed weights, free gaps). */
  heapBytes?: number;
}

// ---- training (the PPO playground) -----------------------------------------------------------------------

/** A validated training config: the camelCase keys of docs/formats.md §5 (src/common/config.ts), as plain data. */
export type TrainConfigWire = TrainConfig;

/**
 * What `configure` and `setHyperparameters` take: any of the config keys; a key left out (or undefined) keeps
 * its value, and `null` removes the optional keys `prompts` / `reward`.
 */
export type ConfigPatch = { [K in ConfigKey]?: TrainConfig[K] | null };

export type RunState = 'idle' | 'running' | 'paused';
/** The trainer's phase: core's own type (src/core/ppo/trainer.ts), one definition for both threads. */
export type { Phase };

export interface RunStatus {
  state: RunState;
  phase: Phase;
  /** Steps completed. */
  step: number;
  /** The run's target number of steps (config `steps`). */
  steps: number;
  /** The validated config in force (after defaults). */
  config: TrainConfigWire;
  /** The policy in use (loaded, being trained or restored), when there is one. */
  model?: ModelSummary | null;
  /** What scores responses, in words: "task sentiment", "your reward code", "reward model from preferences". */
  reward?: string;
  /**
   * The supervised job the run commands drive instead of the RL algorithm (DPO on preference pairs, or SFT), or
   * absent / null for an RL run of `config.algorithm`. `step` and `steps` are then the job's.
   */
  job?: SupervisedJobStatus | null;
  /**
   * How many config changes (`configure`, `setHyperparameters`) the worker has taken. Each such call answers
   * with its own number and sends the status it caused as an event carrying that number: the status travels as
   * an event only, and the page knows which event answers which call. Absent: 0.
   */
  configSeq?: number;
  /**
   * The plan the run's steps use now (micro-batch, generation slice, recompute, and why), once its trainer exists;
   * after the device ran out of memory, the smaller one it fell back to. Absent / null: no RL run built yet.
   */
  plan?: PlanView | null;
  /**
   * How far the phase in progress has come, for a phase done in several parts: samples generated or scored of the
   * batch, minibatch updates made of the step's (epochs × minibatches). Absent / null: none reported yet in this
   * phase (or it runs in one part).
   */
  phaseProgress?: PhaseProgressView | null;
}

/** Work done inside a phase (src/core/ppo/trainer.ts PhaseProgress, without the phase). */
export interface PhaseProgressView {
  done: number;
  total: number;
  unit: 'samples' | 'updates';
}

/** A step's plan as the worker reports it (src/core/ppo/gpu-plan.ts PlanInForce, with its words). */
export interface PlanView {
  microBatchSize: number;
  generateMicroBatchSize: number;
  recompute: boolean;
  /** device: WebGPU's whole minibatch; budget: the heap budget (WASM, CPU); set: microBatchSize; out-of-memory. */
  reason: 'device' | 'budget' | 'set' | 'out-of-memory';
  /** "micro-batches of 8 after the device ran out of memory" (describePlan). */
  text: string;
}

/**
 * A supervised job for the run commands (start, stepOnce, pause, reset) to drive instead of the RL algorithm
 * (docs/dpo.md "In the app", docs/sft.md). `data` is the JSONL text, `dataName` the file's name (for messages).
 * The model, seed, maxGradNorm and LoRA keys come from the run's config; the settings it takes, their ranges and
 * defaults are the tables of src/common/config/jobs.ts (DPO_FIELDS, SFT_FIELDS).
 */
export type SupervisedJobWire =
  | ({ kind: 'dpo'; data: string; dataName: string } & DpoJobSettings)
  | ({ kind: 'sft'; data: string; dataName: string } & SftJobSettings);

export interface SupervisedJobStatus {
  kind: 'dpo' | 'sft';
  /** The data file's name. */
  dataName: string;
  /** Pairs (DPO: training + held out) or examples (SFT) read from it. */
  examples: number;
  /** The job's settings in force (DPO: its validated config without `data`; SFT: steps, batchSize, learningRate). */
  settings: Record<string, unknown>;
}

/** What "Continue with …" after SFT starts from the SFT'd weights: an RL algorithm, or DPO with its pairs. */
export type ContinueAfterSft =
  | { algorithm: 'ppo' | 'grpo' | 'rloo' | 'reinforce++' }
  | { algorithm: 'dpo'; job: Extract<SupervisedJobWire, { kind: 'dpo' }> };

/** One PPO step's metrics: every name of docs/formats.md §3 plus extras (src/common/metrics.ts). */
export type MetricsWire = StepMetrics;
/** Metrics as the UI reads them, by any name (a StepMetrics is one; null = not in this run, e.g. value metrics of GRPO). */
export type MetricsByName = { step: number; [name: string]: number | null };

export interface TokenView {
  /** Display text of the token (escaped bytes, <|endoftext|>). */
  text: string;
  logprob: number;
  /** Per-token KL estimate k_t against the reference. */
  kl: number;
  advantage: number;
}

export interface SampleView {
  /** The prompt text as the task or prompt list gave it. */
  prompt: string;
  /**
   * The prompt as the model saw it when the run's chatTemplate formatted it (the model's own template, special
   * tokens spelled out: `<|im_start|>user\n…<|im_end|>\n<|im_start|>assistant\n`); absent when no template applied.
   */
  chatPrompt?: string;
  response: string;
  score: number;
  /** Σ_t k1 for this sample. */
  kl: number;
  /** Counted tokens only (through the stop token). */
  tokens: TokenView[];
}

export interface AlertView {
  id: string;
  step: number;
  message: string;
  advice: string;
}

export type TrainerEvent =
  | { type: 'status'; status: RunStatus }
  | {
      type: 'step';
      metrics: MetricsWire;
      samples: SampleView[];
      alerts: AlertView[];
      /** tf.memory() right after this step's update (before its autosave): the same point of every step. */
      memory?: MemoryReport;
      /**
       * Held-out evaluation after this step (evalEvery > 0, every evalEvery steps and at the last step;
       * docs/eval.md): the reference's and the policy's answers to each eval prompt with their scores. Its three
       * metrics (eval/reward, eval/kl, eval/winRate) are on `metrics` too.
       */
      eval?: EvalRecord;
    }
  /**
   * Progress of long jobs; fraction in [0, 1] or null when unknown. `task`: 'download' (Hub files, or
   * "from the browser cache"), 'reward-model' (training from preferences), 'build' (loading the models of a run).
   */
  | { type: 'progress'; task: string; fraction: number | null; message: string }
  /**
   * A failure while running or in stepOnce (the run is paused, nothing is lost). A user reward code that does
   * not answer within 2 s: "Your reward code did not return within 2 s (an infinite loop?). The run is paused;
   * fix the code and press Start."
   */
  | { type: 'error'; message: string; userError: boolean };

export interface RewardModelReport {
  pairs: number;
  heldOut: number;
  trainAccuracy: number;
  heldOutAccuracy: number;
  /** Lines of the preference file that were skipped, with their line numbers. */
  skipped: string[];
}

export interface CheckpointSummary {
  step: number;
  historyLength: number;
  config: TrainConfigWire;
}

export interface WorkerApi {
  /**
   * Events of the training run; `cb` is a comlink proxy (`comlink.proxy(fn)`). Returns the current status.
   * A status event follows every change of state or phase (generating → scoring → updating → idle).
   */
  subscribe(cb: (e: TrainerEvent) => void): Promise<RunStatus>;
  /**
   * Validate and set the config (docs/formats.md §5 keys). Keys not given (or undefined) keep their current values
   * (initially the defaults: model "tiny", task "sentiment"); `prompts: null` / `reward: null` remove those keys.
   * Changing a key that is not live (model, task, seed, batchSize, responseLength, …) drops the current run
   * (step 0, history cleared); live keys are applied from the next step (prefer setHyperparameters for those: it
   * answers at once, while configure waits for the step in flight). Models are built lazily on the first step.
   * Answers with the change's number (`RunStatus.configSeq`); the new status comes as a `status` event only,
   * sent before the answer.
   */
  configure(config: ConfigPatch): Promise<number>;
  /** Run steps until `steps` is reached or pause(); returns at once. Failures arrive as `error` events. */
  start(): Promise<RunStatus>;
  /** Stop after the step in flight; returns at once. */
  pause(): Promise<RunStatus>;
  /**
   * One PPO step, then pause; resolves after the step (with the `step` event already sent). A failing step is
   * reported as an `error` event, not a rejection. While running, it acts as pause().
   */
  stepOnce(): Promise<RunStatus>;
  /** Drop the run: fresh policy/value/optimizers from the configured model; history cleared. */
  reset(): Promise<RunStatus>;
  /**
   * Live hyperparameters (config fields marked live), applied from the next step; visible in the metrics.
   * Answers with the change's number (`RunStatus.configSeq`); the new status comes as a `status` event only.
   */
  setHyperparameters(patch: ConfigPatch): Promise<number>;
  /**
   * User reward code, replacing the task's reward from the next step (the run is not reset); null restores the
   * configured reward. `sample` is `{prompt, response, promptTokens, responseTokens}`. Two forms:
   *   - a function body:      `return sample.response.includes('!') ? 1 : 0;`
   *   - an arrow or function: `(sample) => sample.response.length / 10`  (may be async)
   * It runs in its own worker with no network (fetch, XMLHttpRequest, WebSocket, EventSource, importScripts,
   * indexedDB, caches, nested workers, import() and eval are unavailable) and must score a whole batch within
   * 2 s. Rejects with a UserError on a syntax error. A throw or a non-finite score is an `error` event naming
   * the sample.
   */
  setRewardCode(code: string | null): Promise<RunStatus>;
  /**
   * Train a Bradley–Terry reward model (initialised from the configured policy model) from preference JSONL text
   * (`{"prompt","chosen","rejected"}` per line; bad lines are skipped and listed) and use it as the reward:
   * config `reward` becomes `{model: "preference-reward-model"}`, which starts a new run. Progress events with
   * task 'reward-model'.
   */
  trainRewardModel(
    jsonl: string,
    /** Defaults: 100 steps of 8 pairs at learning rate 3e-4. */
    opts?: { steps?: number; batchSize?: number; learningRate?: number },
  ): Promise<RewardModelReport>;
  /**
   * Drive a supervised job instead of the RL algorithm (null: back to RL): the job's models are built at once (so
   * a bad data file is refused here, a UserError naming its lines), the run in the worker is dropped, and the run
   * commands then step the job; its `step` events carry its metrics (DPO: loss, rewards/…, logps/…, and eval/… on
   * evaluated steps; SFT: loss), with no samples. `status().job` describes it.
   */
  setSupervisedJob(job: SupervisedJobWire | null): Promise<RunStatus>;
  /**
   * After SFT steps: its weights become the model (config `model` "sft-model", held in memory), so the policy and
   * the reference of the next run both start from them, and that run starts (PPO / GRPO / RLOO / REINFORCE++ of
   * the run's config, or DPO on the pairs given). UserError when the job in the worker is not an SFT that stepped.
   */
  continueFromSft(next: ContinueAfterSft): Promise<RunStatus>;
  /** The whole run as a zip in the checkpoint layout of docs/formats.md §2. */
  exportCheckpoint(): Promise<{ name: string; bytes: Uint8Array }>;
  /**
   * Resume a run from a checkpoint zip (history restored, continues at the saved step; paused). A zip without
   * trainer_state.json, or not a zip, is a UserError.
   */
  importCheckpoint(bytes: Uint8Array): Promise<CheckpointSummary>;
  /** All metrics so far, as CSV (header = metric names) or JSON (array of step objects) text. */
  exportMetrics(format: 'csv' | 'json'): Promise<string>;
  /** The metric history of the run (e.g. to redraw charts after importCheckpoint). */
  history(): Promise<MetricsWire[]>;
  /** The run's hyperparameters mapped to TRL's PPOConfig names (JSON text). */
  exportTrlConfig(): Promise<string>;
  /** Choose a backend (first call), after applying `options`. Safe to call again; same as setBackend. */
  init(pref: BackendPref, options?: BackendOptions): Promise<BackendReport>;
  /** Switch backend; a loaded model is reloaded on the new backend. */
  setBackend(pref: BackendPref): Promise<BackendReport>;
  /**
   * Load (replace) the policy model; it becomes config `model` and the run restarts from it. Hub downloads send
   * `progress` events. Refuses a model over the memory budget (see LoadOptions) before loading its weights.
   */
  loadModel(source: ModelSource, opts?: LoadOptions): Promise<ModelSummary>;
  /** Generate with the model in use (the trained policy while a run exists). */
  generate(req: GenerateRequest): Promise<GenerateReply>;
  memory(): Promise<MemoryReport>;
  /**
   * The memory a run would hold, broken down, for the current config with `config`'s keys over it (nothing is
   * changed or loaded; reads config.json and the task). Answers while a step runs.
   */
  estimateMemory(config?: ConfigPatch): Promise<MemoryEstimateReport>;
  /**
   * The picker's verdicts (ModelFit) for the known Llama / Qwen shapes, keyed by shape name ("qwen3-0.6b"), on this
   * backend and budget, for the current config with `config`'s keys over it. Reads nothing; answers while a step runs.
   */
  modelFits(config?: ConfigPatch): Promise<Record<string, ModelFit>>;
  /** Test hook: full-forward logits [B, T, V] of the loaded model for ids/mask [B, T]. */
  forwardLogits(ids: number[][], mask: number[][]): Promise<number[][][]>;
}

// ---- reliability: autosave and GPU device loss (src/worker/reliability.ts) ----------------------------------

/** An autosave in this browser (IndexedDB), without its files. */
export interface AutosaveInfoWire {
  /** Steps completed when it was saved. */
  step: number;
  /** Milliseconds since 1970. */
  savedAt: number;
  /** The saved run's config as it was written (possibly by an older version of the app). */
  config: Record<string, unknown>;
  /** The policy's label ("built-in tiny", a Hub id, …). */
  label: string;
  /** Metric history entries it holds (one per step). */
  historyLength: number;
  /** Bytes in the browser's storage. */
  bytes: number;
  /** True when it is a save of the run this worker holds now (so "resume" would not bring anything back). */
  current: boolean;
}

/**
 * Events about autosave and the GPU, for whoever subscribes with subscribeReliability. The failures among them
 * are also sent to `subscribe` listeners as `error` events (userError: true), and a finished recovery as a
 * `progress` event with task 'recover', so a UI that only knows TrainerEvent still tells the person.
 */
export type ReliabilityEvent =
  /** A save was written (every min(saveEvery, 10) steps, on pause and at the end of the run). */
  | { type: 'autosaved'; info: AutosaveInfoWire }
  /**
   * A save was not written; the older one (`kept`) is still in force. `quota`: the browser's storage is full
   * (QuotaExceededError); `nonfinite`: the weights hold NaN/Inf; `failed`: anything else.
   */
  | {
      type: 'autosave-failed';
      reason: 'quota' | 'nonfinite' | 'failed';
      message: string;
      kept: AutosaveInfoWire | null;
    }
  /** The WebGPU device was lost (driver reset, GPU removed, tab in the background too long); recovery follows. */
  | { type: 'device-lost'; message: string; reason: string }
  /**
   * Recovery finished: the backend was rebuilt (or fell back to WASM, `backend.notice` says why) and the run was
   * restored from its last autosave (`fromStep`; null when there was none and the run starts again) in the state
   * it was in: running again if it was running, else paused.
   */
  | {
      type: 'recovered';
      message: string;
      backend: BackendReport;
      status: RunStatus;
      fromStep: number | null;
    }
  /** Recovery failed; the message says what to do (usually: reload the page, then resume the autosave). */
  | { type: 'recovery-failed'; message: string };

/**
 * Autosave and recovery. Kept apart from WorkerApi so a UI (or a stand-in worker) that does not use them yet
 * still type-checks; the model worker implements both (ModelWorkerApi).
 *
 * Autosave: while a run exists, the worker saves its checkpoint files (docs/formats.md §2: weights, optimizer,
 * config, metric history) to IndexedDB every min(saveEvery, 10) steps, when it pauses (pause, stepOnce, an
 * error, the last step) — never a step with NaN/Inf weights. Each tab (worker) keeps one save of its own,
 * owned through a Web Lock (src/services/autosave-tabs.ts), so tabs training at once do not overwrite each other: a
 * new save replaces the tab's older one only once it is completely written, so a full disk keeps the older one.
 * After a reload or a crash, autosaveInfo() tells the page what can be resumed: the newest save of a tab that is
 * gone (a save of a tab still open is never offered). Resuming it takes it over; a new run's first save instead
 * replaces the save that was offered.
 */
export interface ReliabilityApi {
  /** Reliability events (cb is a comlink proxy). Returns the autosave in force, as autosaveInfo. */
  subscribeReliability(cb: (e: ReliabilityEvent) => void): Promise<AutosaveInfoWire | null>;
  /**
   * This tab's autosave (of its run, `current`), else the newest autosave of a tab that is gone (what
   * resumeAutosave would continue), else null.
   */
  autosaveInfo(): Promise<AutosaveInfoWire | null>;
  /**
   * Continue the autosaved run: restored at its step with its metric history (history() returns it), paused.
   * The run in the worker (if any) is replaced only once the restore succeeded. UserError when there is none,
   * and when every autosave belongs to another tab still open.
   */
  resumeAutosave(): Promise<RunStatus>;
  /** Forget the autosave autosaveInfo() names (the run in the worker is not touched). */
  discardAutosave(): Promise<void>;
  /** Turn autosave on or off for this worker (default on). Returns the autosave in force. */
  setAutosave(opts: { enabled: boolean }): Promise<AutosaveInfoWire | null>;
  /**
   * Test hook: destroy the WebGPU device, as a driver reset would (`device.destroy()`); the worker then
   * recovers as from a real loss. Answers at once, also while a step runs. UserError when not on WebGPU.
   */
  debugLoseDevice(): Promise<void>;
}

/** What the model worker exposes. */
export type ModelWorkerApi = WorkerApi & ReliabilityApi;
