/**
 * What the worker's `Run` (./run.ts) drives: a job, behind one interface. The RL job (./rl-job.ts: core's
 * TrainingSession, PPO / GRPO / RLOO / REINFORCE++) and the supervised job (./supervised-job.ts: DPO or SFT over
 * core's SupervisedSession) both start, step, pause, report their part of the status and write their checkpoint;
 * the Run chooses which one the run commands drive and holds nothing else of theirs.
 */
import type { TrainConfig } from '../common/config';
import type { RunEnd, RunOptions } from '../core/run/session';
import type { CheckpointPurpose } from '../core/run/checkpoint';
import type { FileBody } from '../core/model/safetensors';
import type { CausalLM } from '../core/model/causal-lm';
import type { Tokenizer } from '../core/tokenizer/types';
import type { ModelSources } from './sources';
import type { RewardSandbox } from './reward-sandbox';
import type {
  MemoryReport,
  MetricsWire,
  Phase,
  PhaseProgressView,
  RunStatus,
  TrainerEvent,
} from './protocol';

export type Serial = <T>(job: () => Promise<T>) => Promise<T>;

/** What the run asks of autosave and device-loss handling (./reliability.ts). */
export interface RunHooks {
  /**
   * Save the run now (inside the serial queue). Called when the session's cadence says an autosave is due and
   * whenever the run stops after steps (pause, stepOnce, an error, the last step).
   */
  autosave(): Promise<void>;
  /** A step failed: is it because the GPU device was lost? (Recovery then takes over; no error event.) */
  failedForDeviceLoss(): Promise<boolean>;
}

/** What a job is given when it is made (by the Run): where models come from, and the Run's events. */
export interface JobContext {
  readonly sources: ModelSources;
  readonly serial: Serial;
  readonly hooks: RunHooks;
  /** The person's reward code, standing in for the configured reward (RL only). */
  readonly sandbox: RewardSandbox;
  /** tf.memory() for the `step` events. */
  memory(): MemoryReport | undefined;
  /** The live-tensor budget checked at every phase boundary (src/core/model/oom.ts). */
  heapBudget(): number | null;
  /** The run's config: the RL job's; a supervised job takes its model, seed, LoRA keys and limits from it. */
  cfg(): TrainConfig;
  emit(e: TrainerEvent): void;
  phase(p: Phase): void;
  /** Work done inside the phase in progress (generation slices, scoring micro-batches, minibatch updates). */
  phaseProgress(p: PhaseProgressView): void;
  progress(task: string, fraction: number | null, message: string): void;
  /**
   * Building or stepping failed: the Run reports it (pause, an `error` event). True when a lost GPU device
   * explains it (recovery takes over).
   */
  failed(e: unknown): Promise<boolean>;
  /** The job loaded the model it trains: it becomes the run's model (status, generate). */
  adopted(model: CausalLM, tokenizer: Tokenizer, label: string): void;
  /** Free generate's own model (the job's takes its place). */
  disposeLm(): void;
}

/** A job's part of the run's status. */
export type JobStatus = Pick<RunStatus, 'step' | 'steps' | 'job' | 'plan'>;

export interface Job {
  readonly kind: 'rl' | 'dpo' | 'sft';
  /** The identity of the run while the job is built (kept through autosaves, resumes, device recovery). */
  readonly runId: string | null;
  /** Why the job may neither step nor save any more (out of memory, a failed update), or null. */
  readonly spoiled: string | null;
  /** Build the job when it is not (serial); a failure is reported (JobContext.failed) and false returned. */
  start(): Promise<boolean>;
  /** Steps until the target, pause() or a failing step; null when the job was dropped or rebuilt meanwhile. */
  run(opts: RunOptions): Promise<RunEnd | null>;
  /** One step of the built job (serial); the step of a non-finite stop, else null. Throws when it failed. */
  step(): Promise<number | null>;
  /** After a failed step was reported (JobContext.failed): the RL job saves its last good state. */
  afterFailure(): Promise<void>;
  /** Stop after the step in flight. */
  pause(): void;
  /** Its part of the status: steps done and the target, the supervised job's description, the RL plan. */
  status(): JobStatus;
  /** UserError when it has done its steps. */
  checkNotDone(): void;
  /**
   * Its checkpoint files (built first when it is not): "export" writes what other tools load, "resume" may leave
   * out what only they need (core/run/checkpoint.ts CheckpointPurpose).
   */
  checkpoint(purpose?: CheckpointPurpose): Promise<{ step: number; files: Map<string, Uint8Array> }>;
  /**
   * What an autosave writes: the "resume" checkpoint with its weights as ByteSources read as they are written
   * (write them before the next step), without the files in `omit`. Only while savable() is not null.
   */
  saveSources(omit: ReadonlySet<string>): Promise<Map<string, FileBody>>;
  /** Files of its saves that never change while the job runs (an autosave writes them once per run). */
  readonly frozenFiles: readonly string[];
  /** What autosave and device recovery save: steps and history length, or null (nothing to save). */
  savable(): { step: number; historyLength: number } | null;
  history(): MetricsWire[];
  /** The model it trains, while built. */
  trained(): { model: CausalLM; tokenizer: Tokenizer } | null;
  /** Free every tensor it holds; start() builds it again. */
  drop(): void;
}

let runCounter = 0;
/** A fresh run id: a run keeps it through autosaves, resumes and device recovery. */
export function newRunId(): string {
  return `${Date.now().toString(36)}-${(++runCounter).toString(36)}-${Math.floor(Math.random() * 1e9).toString(36)}`;
}

/** A macrotask between steps, so that messages (pause, setHyperparameters, generate) are answered. */
export const macrotask = () => new Promise<void>((r) => setTimeout(r, 0));
