/**
 * The training run inside the worker (`Run`): the run state the UI sees, the events it subscribes to, the
 * reward-code stand-in and the model generate uses outside a run, over one job at a time (./job.ts): the RL job
 * (./rl-job.ts: core's TrainingSession, the same run loop the CLI drives, and the config of a run not built
 * yet) or a supervised DPO / SFT job (./supervised-job.ts). The Run chooses which job the run commands drive and
 * holds nothing else of theirs.
 *
 * Every tfjs job runs through the worker's serial queue (api.ts). A job's loop queues one step at a time and
 * yields a macrotask between steps, so pause / setHyperparameters / generate calls are answered between steps.
 * pause() and setHyperparameters() take effect without waiting: the first stops the loop after the step in
 * flight, the second is applied at the start of the next step (so that step's metrics show it).
 *
 * `state` changes only through the methods here (start, pause, stepOnce, reset, restore, halt, …).
 */
import { validateConfig, type TrainConfig } from '../common/config';
import { mergeConfig } from '../common/config/live';
import type { RunEnd } from '../core/run/session';
import type { CheckpointSource } from '../core/run/restore';
import type { TrainingSession } from '../core/run/session';
import type { CheckpointPurpose } from '../core/run/checkpoint';
import type { FileBody } from '../core/model/safetensors';
import { nonFiniteRunError } from '../common/stops';
import type { PpoTrainer } from '../core/ppo/trainer';
import type { Tokenizer } from '../core/tokenizer/types';
import type { CausalLM } from '../core/model/causal-lm';
import { exportLM, loadLM, type LoadedLM } from '../core/model/folder';
import { isPackedF16 } from '../core/kernels/webgpu-f16';
import type { BaseDtype } from '../common/config/fields';
import { DPO_STATE_FILE } from '../core/dpo/trainer';
import type { DpoConfig } from '../common/config/dpo';
import { makeReward } from '../core/reward/functions';
import { checkTaskName } from '../core/tasks';
import { isUserError, UserError } from '../common/errors';
import { defaultHeapBudget } from '../core/model/oom';
import { releasePooledBuffers } from '../core/ppo/gpu-plan';
import { DPO_MODEL, PREFERENCE_REWARD_MODEL, SFT_MODEL, type ModelSources } from './sources';
import { checkJob, dpoConfigOf, dpoJobOf, type DpoJobWire } from './supervised';
import { RewardSandbox } from './reward-sandbox';
import { macrotask, newRunId, type Job, type JobContext, type RunHooks, type Serial } from './job';
import { RlJob } from './rl-job';
import type { RunEvents } from './events';
import { SupervisedJob } from './supervised-job';
import type {
  ContinueAfterSft,
  MemoryReport,
  MetricsWire,
  ModelSummary,
  SupervisedJobWire,
  Phase,
  PhaseProgressView,
  RunState,
  RunStatus,
  TrainerEvent,
} from './protocol';

export type { RunHooks, Serial } from './job';
export { newRunId } from './job';
export { sampleViews } from './rl-job';
type Listener = (e: TrainerEvent) => unknown;

/**
 * What a Run is given when it is made (api.ts): its event stream, its autosave / device-loss hooks (the
 * reliability helper that builds it) and its memory readout.
 */
export interface RunCollaborators {
  events: RunEvents;
  hooks: RunHooks;
  /** tf.memory() for the `step` events (api.ts knows the backend). */
  memory: () => MemoryReport | undefined;
}

/** The model card's facts: the family (config.json's model_type), shape, parameters and tokenizer. */
export function summarise(model: CausalLM, label: string, tok?: Tokenizer): ModelSummary {
  const c = model.config;
  let params = 0;
  // A packed-f16 weight (baseDtype "f16") holds two values a word: its logical size is twice its tensor's.
  for (const v of model.params.values()) params += isPackedF16(v) ? 2 * v.size : v.size;
  const { n_layer, n_embd, n_head, vocab_size, n_positions, tokenizer } = c;
  return {
    label,
    family: c.model_type,
    n_layer,
    n_embd,
    n_head,
    vocab_size,
    n_positions,
    params,
    tokenizer,
    chatTemplate: tok?.chatPrompt !== undefined,
  };
}

function describeReward(cfg: TrainConfig): string {
  const r = cfg.reward;
  if (r === undefined) return cfg.task ? `task ${cfg.task}` : 'none';
  if (typeof r === 'string') return `reward ${r}`;
  if ('mix' in r) return `reward mix (${r.mix.map((m) => `${m.weight}×${m.name}`).join(' + ')})`;
  return r.model === PREFERENCE_REWARD_MODEL ? 'reward model from preferences' : `reward model ${r.model}`;
}

/**
 * After models are freed: on WebGPU, what tfjs-backend-webgpu pooled of their buffers goes back to the device
 * (gpu-plan.ts releasePooledBuffers). tfjs keeps every freed buffer for reuse at the same size and usage only, so
 * without this a model that was unloaded, or a run that was dropped, kept its memory on the GPU for the page's life:
 * loading another model (other sizes) then held both, and a third all three. Nothing here may stop a drop: an
 * error (a device already lost) is ignored.
 */
function giveBackDeviceMemory(): void {
  try {
    releasePooledBuffers();
  } catch {
    // The device is gone or going: its memory goes with it.
  }
}

export class Run {
  /** The RL job: always there, as the holder of the run's config (its session's, or the next run's). */
  private readonly rl: RlJob;
  /**
   * The supervised job (DPO or SFT) the run commands drive instead of the RL job; null for an RL run. Kept through
   * a reset or a config change (its session is built again from its request at the next step).
   */
  private sup: SupervisedJob | null = null;
  /**
   * The model used by generate when no run exists (loaded by loadModel, or lazily), and how its base is stored:
   * as the run's config says (sources.generateBaseDtype). When "baseDtype" changes it is loaded again, in the new
   * storage, at the next generate (generator); a run that starts disposes it (rl-job.ts ensureSession).
   */
  private lm: { name: string; lm: LoadedLM; baseDtype: BaseDtype } | null = null;
  /** The policy in use, for status. */
  model: ModelSummary | null = null;
  /** Whether a model was named (loaded, configured or trained): generate may then load `cfg.model` itself. */
  private chosen = false;
  private runState: RunState = 'idle';
  private runPhase: Phase = 'idle';
  /** Work done inside the phase in progress (reset with each phase change). */
  private inPhase: PhaseProgressView | null = null;
  /** Config changes taken (configure, setHyperparameters): RunStatus.configSeq. */
  private configSeq = 0;
  readonly sandbox = new RewardSandbox();
  private looping = false;
  /** What the jobs are given: the sources, the queue, and this run's events and model. */
  private readonly jobs: JobContext;

  constructor(
    private readonly sources: ModelSources,
    private readonly serial: Serial,
    private readonly given: RunCollaborators,
  ) {
    this.jobs = {
      sources,
      serial,
      hooks: given.hooks,
      sandbox: this.sandbox,
      memory: () => given.memory(),
      heapBudget: () => this.heapBudget(),
      cfg: () => this.cfg,
      emit: (e) => this.emit(e),
      phase: (p) => this.setPhase(p),
      phaseProgress: (p) => {
        this.inPhase = p;
        this.emitStatus();
      },
      progress: (task, fraction, message) => this.progress(task, fraction, message),
      failed: (e) => this.failed(e),
      adopted: (model, tokenizer, label) => {
        this.model = summarise(model, label, tokenizer);
        this.chosen = true;
      },
      disposeLm: () => this.disposeLm(),
    };
    this.rl = new RlJob(this.jobs);
  }

  /**
   * The live-tensor budget the session checks at every phase boundary (src/core/model/oom.ts): on WASM the heap this
   * backend really has, PPO_HEAP_BUDGET_BYTES where a process sets it (Node tests), else none.
   */
  heapBudget(): number | null {
    return defaultHeapBudget(undefined, this.sources.deviceLimits?.heapBytes ?? undefined);
  }

  /** The job the run commands drive: the supervised one when there is one, else the RL job. */
  private get job(): Job {
    return this.sup ?? this.rl;
  }

  /** The run's config: the RL session's when a run exists, else the one the next run is built from. */
  get cfg(): TrainConfig {
    return this.rl.cfg;
  }

  /** idle (no run, or a new one pending), running, or paused. Changed only by this class's methods. */
  get state(): RunState {
    return this.runState;
  }

  /** Whether the run is in `state` now (a call, so a test before an await does not narrow the next one). */
  is(state: RunState): boolean {
    return this.runState === state;
  }

  get phase(): Phase {
    return this.runPhase;
  }

  /** The RL session's trainer, when there is an RL run. */
  get trainer(): PpoTrainer | null {
    return this.rl.trainer;
  }

  /** The identity of the run (null while no job is built). */
  get runId(): string | null {
    return this.job.runId;
  }

  /** Why the run may neither step nor save any more (out of memory, a failed update), or null. */
  get spoiled(): string | null {
    return this.job.spoiled;
  }

  // ---- events ---------------------------------------------------------------------------------------------

  status(): RunStatus {
    const reward = this.sandbox.hasCode ? 'your reward code' : describeReward(this.cfg);
    const { step, steps, job, plan } = this.job.status();
    return {
      state: this.runState,
      phase: this.runPhase,
      step,
      steps,
      config: JSON.parse(JSON.stringify(this.cfg)) as RunStatus['config'],
      model: this.model,
      reward,
      job,
      plan,
      configSeq: this.configSeq,
      phaseProgress: this.runPhase === 'idle' ? null : this.inPhase,
    };
  }

  subscribe(cb: Listener): RunStatus {
    this.given.events.subscribe(cb);
    return this.status();
  }

  emit(e: TrainerEvent): void {
    this.given.events.emit(e);
  }

  emitStatus(): RunStatus {
    const s = this.status();
    this.emit({ type: 'status', status: s });
    return s;
  }

  progress(task: string, fraction: number | null, message: string): void {
    this.given.events.progress(task, fraction, message);
  }

  private setPhase(p: Phase): void {
    if (p === this.runPhase) return;
    this.runPhase = p;
    this.inPhase = null;
    if (p === 'scoring') this.sandbox.beginBatch();
    this.emitStatus();
  }

  // ---- config ---------------------------------------------------------------------------------------------

  /**
   * Merge `partial` over the current config (serial). Non-live changes (src/common/config/live.ts) drop the run.
   * Returns the change's number; the new status goes out as an event (configChanged).
   */
  async configure(partial: Record<string, unknown>): Promise<number> {
    const { config: next, changes } = mergeConfig(this.cfg, partial, 'config');
    if (next.task !== null) checkTaskName(next.task);
    if (next.reward !== undefined && !(typeof next.reward === 'object' && 'model' in next.reward)) {
      makeReward(next.reward, 'config: "reward"');
    }
    if (next.model !== this.cfg.model) {
      this.disposeLm();
      this.model = null;
    }
    if (changes.restart.length > 0) {
      this.dropTrainer();
      this.runState = 'idle';
    }
    // A live change goes to the session, the one place a running config changes; else the next run is built
    // from it.
    this.rl.configure(next, changes.live);
    if (partial.model !== undefined) this.chosen = true;
    return this.configChanged();
  }

  /**
   * Live keys only, validated against the config table; applied when the next step starts (not serial: answers
   * while a step runs). With a run, it is the session's setHyperparameters, the same call the CLI's path makes.
   */
  setHyperparameters(patch: Record<string, unknown>): number {
    this.rl.setHyperparameters(patch);
    return this.configChanged();
  }

  /** A config change was taken: its number, and the status it caused as an event (the only way it travels). */
  private configChanged(): number {
    this.configSeq += 1;
    this.emitStatus();
    return this.configSeq;
  }

  // ---- run state ------------------------------------------------------------------------------------------

  start(): RunStatus {
    this.job.checkNotDone();
    if (this.runState !== 'running') {
      this.runState = 'running';
      this.emitStatus();
    }
    if (!this.looping) void this.loop();
    return this.status();
  }

  pause(): RunStatus {
    if (this.runState !== 'running') return this.status();
    this.runState = 'paused';
    this.job.pause();
    return this.emitStatus();
  }

  /** Not running any more: paused when a run exists, else idle (after a failure, a recovery, …). */
  halt(): void {
    this.job.pause();
    this.runState = this.job.trained() !== null ? 'paused' : 'idle';
    this.runPhase = 'idle';
  }

  async stepOnce(): Promise<RunStatus> {
    if (this.runState === 'running') return this.pause();
    return this.serial(async () => {
      const job = this.job;
      if (!(await job.start())) return this.status();
      let stepped = false;
      try {
        const stop = await job.step();
        stepped = true;
        if (stop !== null) this.stoppedNonFinite(stop);
      } catch (e) {
        if (await this.failed(e)) return this.status();
      }
      this.runState = 'paused';
      if (stepped) await this.given.hooks.autosave();
      return this.emitStatus();
    });
  }

  /** Drop the run (serial): the next step starts fresh from the configured model. */
  reset(): RunStatus {
    this.dropTrainer();
    this.runState = 'idle';
    this.runPhase = 'idle';
    return this.emitStatus();
  }

  private async loop(): Promise<void> {
    this.looping = true;
    try {
      for (;;) {
        const job = this.job;
        const ready = await this.serial(async () =>
          this.runState === 'running' && job === this.job ? job.start() : false,
        );
        if (!ready || this.runState !== 'running') return;
        const end = await job.run({ schedule: this.serial, between: macrotask });
        if (!end || job !== this.job) return; // reset, replaced or dropped meanwhile
        if (end.reason === 'paused' && this.runState === 'running') continue; // started again meanwhile
        await this.ended(end, job);
        return;
      }
    } finally {
      this.looping = false;
    }
  }

  /** The job's run ended: say why. */
  private async ended(end: RunEnd, job: Job): Promise<void> {
    switch (end.reason) {
      case 'paused':
        return;
      case 'done':
        this.runState = 'paused';
        this.emitStatus();
        return;
      case 'nonfinite':
        this.runState = 'paused';
        this.stoppedNonFinite(end.step);
        this.emitStatus();
        return;
      case 'error':
        if (await this.failed(end.error)) return;
        // Not after running out of memory or a failed update: the last autosave is the run's good state.
        await job.afterFailure();
        return;
    }
  }

  /** Three non-finite steps in a row: the error event the person sees (the run pauses). */
  private stoppedNonFinite(step: number): void {
    this.emit({ type: 'error', message: nonFiniteRunError(step), userError: true });
  }

  /**
   * A step (or building the run) failed: pause and say so as an `error` event. Returns true when the failure was
   * a lost GPU device (recovery in ./reliability.ts takes over and tells the story instead).
   */
  private async failed(e: unknown): Promise<boolean> {
    if (await this.given.hooks.failedForDeviceLoss()) {
      this.runPhase = 'idle';
      return true;
    }
    this.halt();
    const message = e instanceof Error ? e.message : String(e);
    this.emit({ type: 'error', message, userError: isUserError(e) });
    this.emitStatus();
    return false;
  }

  // ---- checkpoints and restoring --------------------------------------------------------------------------

  /** The job's checkpoint files (an RL run built first when it has not stepped: a step-0 checkpoint). */
  checkpoint(
    purpose: CheckpointPurpose = 'export',
  ): Promise<{ step: number; files: Map<string, Uint8Array> }> {
    return this.job.checkpoint(purpose);
  }

  /** What an autosave writes (Job.saveSources), and which of its files never change (Job.frozenFiles). */
  saveSources(omit: ReadonlySet<string>): Promise<Map<string, FileBody>> {
    return this.job.saveSources(omit);
  }

  get frozenFiles(): readonly string[] {
    return this.job.frozenFiles;
  }

  /** What autosave and device recovery save (Job.savable): an RL run or a DPO job; null for SFT or no run. */
  savable(): { step: number; historyLength: number } | null {
    return this.job.savable();
  }

  /** The metric history of the run or job in the worker. */
  historyNow(): MetricsWire[] {
    return this.job.history();
  }

  /** The DPO job's config (contracts §9), or null when the job in the worker is not DPO. */
  dpoConfig(): DpoConfig | null {
    return this.sup?.dpoConfig() ?? null;
  }

  /**
   * Replace the run by the one saved in `source` (import, autosave resume, backend switch, device recovery),
   * paused at its step; serial. Restored through core's one restore (src/core/run/restore.ts) before the current run
   * is dropped, so a bad checkpoint leaves the current run as it was. `label` names the policy in the status;
   * `runId` keeps the identity of a resumed run. The caller sends the status.
   */
  async restore(
    source: CheckpointSource,
    label: string | ((session: TrainingSession) => string),
    runId?: string,
  ): Promise<TrainingSession> {
    const session = await this.rl.load(source);
    this.pause();
    this.dropTrainer();
    this.sup = null; // a restored run is an RL run, whatever job was in the worker
    this.disposeLm();
    this.rl.adopt(session, typeof label === 'string' ? label : label(session), runId);
    this.runState = 'paused';
    this.runPhase = 'idle';
    return session;
  }

  /**
   * Resume a DPO job from its checkpoint's files (a zip the app exported), paused at its step; serial. Restored
   * before the current run is dropped, so a bad file leaves things as they were. Returns its step and history.
   */
  async restoreDpo(
    files: Map<string, Uint8Array>,
    label: string,
    runId: string = newRunId(),
  ): Promise<{ step: number; historyLength: number }> {
    const job = new SupervisedJob(this.jobs, dpoJobOf(files, label));
    await job.restore(files, label, runId);
    this.pause();
    this.dropTrainer();
    this.disposeLm();
    this.sup = job;
    const { step } = job.status();
    const { model, tokenizer } = job.trained()!;
    this.jobs.adopted(model, tokenizer, `${label} at step ${step}`);
    this.runState = 'paused';
    this.runPhase = 'idle';
    return { step, historyLength: job.history().length };
  }

  /**
   * Restore saved checkpoint files (an autosave) as what they are: a DPO job's (dpo_state.json) or an RL run's
   * (through restore). Returns the restored step.
   */
  async restoreSaved(
    files: Map<string, Uint8Array>,
    /** Names the files in messages ("autosave (step 5)"). */
    source: string,
    /** Names the policy in the status. */
    label: string,
    /** Keeps the identity of the run (a new one when absent). */
    runId?: string,
  ): Promise<number> {
    if (files.has(DPO_STATE_FILE)) {
      const s = await this.restoreDpo(files, source, runId);
      if (this.model) this.model = { ...this.model, label };
      return s.step;
    }
    const s = await this.restore({ kind: 'files', files, label: source }, label, runId);
    return s.step;
  }

  /** A new reward (e.g. the model trained from preferences) is a new run, even under the same name. Serial. */
  async startOverWithReward(reward: TrainConfig['reward']): Promise<RunStatus> {
    this.dropTrainer();
    await this.configure({ reward });
    this.runState = 'idle';
    return this.emitStatus();
  }

  /** Free every tensor of the run: the supervised job's, the RL session's (its config stays). */
  dropTrainer(): void {
    this.sup?.drop();
    this.rl.drop();
    giveBackDeviceMemory();
  }

  // ---- models ---------------------------------------------------------------------------------------------

  /** Whether a model is loaded for generate (outside a run). */
  get hasLm(): boolean {
    return this.lm !== null;
  }

  disposeLm(): void {
    this.lm?.lm.model.dispose();
    this.lm = null;
    giveBackDeviceMemory();
  }

  /**
   * Load `name` as the policy (serial): the run restarts from it. Its base is stored as the run's config says
   * ("baseDtype" "f16" on WebGPU for a Llama / Qwen model), and what loading it needs is checked first, counted that
   * way (sources.checkMemory 'load').
   */
  async loadModel(name: string): Promise<ModelSummary> {
    const cfg = validateConfig({ ...this.cfg, model: name });
    // Training memory is checked when a run is built; here, what loading and generating need.
    const opts = await this.sources.generateLoadOptions(name, cfg);
    const files = this.sources.files(name);
    const lm = await loadLM(files, { trainable: false, label: 'policy', ...opts });
    this.dropTrainer();
    this.disposeLm();
    this.lm = { name, lm, baseDtype: opts.baseDtype ?? 'f32' };
    this.rl.configure(cfg, []);
    this.runState = 'idle';
    this.model = summarise(lm.model, files.label, lm.tokenizer);
    this.chosen = true;
    this.emitStatus();
    return this.model;
  }

  /**
   * The model generate uses: the one being trained while a job is built, else the loaded one, loaded here (checked
   * first) when there is none or when the config's "baseDtype" now asks for another storage than it was loaded in.
   */
  async generator(): Promise<{ model: CausalLM; tokenizer: Tokenizer }> {
    const trained = this.sup?.trained() ?? this.rl.trained();
    if (trained) return trained;
    const held = this.lm;
    if (held && held.baseDtype !== this.sources.generateBaseDtype(this.cfg, held.lm.config.model_type)) {
      this.disposeLm(); // "baseDtype" changed since it was loaded: loaded again below, as the config says
    }
    if (!this.lm) {
      if (!this.chosen) throw new UserError('No model is loaded yet; load a model first.');
      const opts = await this.sources.generateLoadOptions(this.cfg.model, this.cfg);
      const files = this.sources.files(this.cfg.model);
      this.lm = {
        name: this.cfg.model,
        lm: await loadLM(files, { trainable: false, label: 'policy', ...opts }),
        baseDtype: opts.baseDtype ?? 'f32',
      };
      this.model ??= summarise(this.lm.lm.model, files.label, this.lm.lm.tokenizer);
    }
    return { model: this.lm.lm.model, tokenizer: this.lm.lm.tokenizer };
  }

  /** The config of the model in the worker (the job's, or generate's), without loading one; null when none. */
  modelConfig(): CausalLM['config'] | null {
    return (this.sup?.trained() ?? this.rl.trained())?.model.config ?? this.lm?.lm.model.config ?? null;
  }

  // ---- reward code ----------------------------------------------------------------------------------------

  /** Set or clear the reward code (serial, so never in the middle of a step). */
  async setRewardCode(code: string | null): Promise<RunStatus> {
    if (code === null) this.sandbox.dispose();
    else await this.sandbox.setCode(code);
    this.rl.rewardChanged();
    return this.emitStatus();
  }

  // ---- supervised jobs (DPO, SFT: ./supervised-job.ts) -------------------------------------------------------

  /**
   * Drive `spec` (DPO or SFT) instead of the RL algorithm, or go back to RL (null). Serial. The job is built
   * before the run in the worker is dropped, so a bad file leaves things as they were.
   */
  async setSupervisedJob(spec: SupervisedJobWire | null): Promise<RunStatus> {
    this.pause();
    if (spec === null) {
      this.dropTrainer();
      this.sup = null;
      this.runState = 'idle';
      this.runPhase = 'idle';
      return this.emitStatus();
    }
    const job = new SupervisedJob(this.jobs, checkJob(spec));
    await job.build();
    this.dropTrainer();
    this.disposeLm();
    this.sup = job;
    const { model, tokenizer } = job.trained()!;
    this.jobs.adopted(model, tokenizer, this.sources.files(this.cfg.model).label);
    this.runState = 'idle';
    this.runPhase = 'idle';
    return this.emitStatus();
  }

  /**
   * After SFT steps: its weights, held as SFT_MODEL, become the model of the next run (its policy and its
   * reference), which starts: an RL algorithm of the run's config, or DPO on the pairs given. Serial.
   */
  async continueFromSft(next: ContinueAfterSft): Promise<RunStatus> {
    const sup = this.sup;
    const trained = sup?.trained();
    // After DPO too (issue #33): its weights, held as DPO_MODEL, go on with an RL algorithm.
    const fromDpo = sup?.kind === 'dpo';
    if (!sup || (sup.kind !== 'sft' && !fromDpo) || !trained || sup.status().step === 0)
      throw new UserError(
        'Continue needs an SFT or DPO run that has taken at least one step; run SFT or DPO first.',
      );
    if (fromDpo && next?.algorithm === 'dpo')
      throw new UserError(
        'Continue after DPO goes on with an RL algorithm (ppo, grpo, rloo, reinforce++), not DPO.',
      );
    const held = fromDpo ? DPO_MODEL : SFT_MODEL;
    const algorithms = ['ppo', 'grpo', 'rloo', 'reinforce++', 'dpo'];
    if (typeof next !== 'object' || next === null || !algorithms.includes(next.algorithm))
      throw new UserError(
        `continueFromSft: "algorithm" must be one of ${algorithms.map((a) => `"${a}"`).join(', ')}, got ${JSON.stringify((next as { algorithm?: unknown } | null)?.algorithm)}.`,
      );
    // Every check before anything changes: a refused continuation leaves the SFT job as it was.
    const patch = next.algorithm === 'dpo' ? { model: held } : { model: held, algorithm: next.algorithm };
    const { config: nextCfg } = mergeConfig(this.cfg, patch, 'config');
    if (next.algorithm === 'dpo') dpoConfigOf(checkJob(next.job) as DpoJobWire, nextCfg);
    this.pause();
    const files = await exportLM(trained.model, trained.tokenizer);
    this.sources.hold(held, files);
    this.dropTrainer();
    this.sup = null;
    this.runState = 'idle';
    await this.configure(patch);
    if (next.algorithm === 'dpo') await this.setSupervisedJob(next.job);
    else this.dropTrainer(); // a new run, even when nothing but the weights changed
    return this.start();
  }
}
