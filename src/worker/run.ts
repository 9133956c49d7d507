/**
 * The training run inside the worker (`Run`): the worker's adapter around core's TrainingSession
 * (src/core/run/session.ts, the same run loop the CLI drives). The session owns the trainer, its four models and the
 * run's config; this file owns the run state the UI sees, the events it subscribes to, the reward-code stand-in,
 * the model generate uses outside a run, and the config of a run not built yet (`pendingConfig`).
 *
 * Every tfjs job runs through the worker's serial queue (api.ts). The session's loop queues one step at a time
 * and yields a macrotask between steps, so pause / setHyperparameters / generate calls are answered between
 * steps. pause() and setHyperparameters() take effect without waiting: the first stops the loop after the step
 * in flight, the second is applied at the start of the next step (so that step's metrics show it).
 *
 * `state` changes only through the methods here (start, pause, stepOnce, reset, restore, halt, …).
 */
import { validateConfig, type TrainConfig } from '../common/config';
import { applyLive, mergeConfig } from '../common/config/live';
import { TrainingSession, type RunEnd, type SessionHooks, type SessionOptions } from '../core/run/session';
import { restoreSession, type CheckpointSource } from '../core/run/restore';
import { nonFiniteRunError, stepsDoneMessage } from '../common/stops';
import type { PpoTrainer, RewardSource } from '../core/ppo/trainer';
import { describePlan } from '../core/ppo/gpu-plan';
import type { Rollout } from '../core/ppo/rollout';
import type { Tokenizer } from '../core/tokenizer/types';
import type { CausalLM } from '../core/model/causal-lm';
import { exportLM, loadLM, type LoadedLM } from '../core/model/folder';
import { collectBytes } from '../core/model/safetensors';
import { DPO_STATE_FILE, DpoTrainer } from '../core/dpo/trainer';
import type { DpoConfig } from '../common/config/dpo';
import { makeReward } from '../core/reward/functions';
import { checkTaskName } from '../core/tasks';
import { isUserError, UserError } from '../common/errors';
import { asHeapExhaustion, defaultHeapBudget } from '../core/model/oom';
import { autosaveDue } from '../services/autosave';
import { PeakMemoryMeter } from '../core/base/memory-peak';
import * as tf from '@tensorflow/tfjs-core';
import { DPO_MODEL, PREFERENCE_REWARD_MODEL, SFT_MODEL, type ModelSources } from './sources';
import {
  buildSupervised,
  checkJob,
  dpoConfigOf,
  type DpoJobWire,
  JOB_DATA_FILE,
  JOB_FILE,
  restoreDpoJob,
  type AnySupervisedSession,
  type SupervisedMetrics,
} from './supervised';
import { RewardSandbox, REWARD_CODE_LABEL } from './reward-sandbox';
import type {
  ContinueAfterSft,
  MemoryReport,
  MetricsWire,
  ModelSummary,
  PlanView,
  SupervisedJobStatus,
  SupervisedJobWire,
  Phase,
  RunState,
  RunStatus,
  SampleView,
  TrainerEvent,
} from './protocol';

export type Serial = <T>(job: () => Promise<T>) => Promise<T>;
type Listener = (e: TrainerEvent) => unknown;

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

/** What a Run is given when it is made (api.ts): its autosave / device-loss hooks and its memory readout. */
export interface RunCollaborators {
  hooks: RunHooks;
  /** tf.memory() for the `step` events (api.ts knows the backend). */
  memory: () => MemoryReport | undefined;
}

const macrotask = () => new Promise<void>((r) => setTimeout(r, 0));

let runCounter = 0;
/** A fresh run id: a run keeps it through autosaves, resumes and device recovery. */
export function newRunId(): string {
  return `${Date.now().toString(36)}-${(++runCounter).toString(36)}-${Math.floor(Math.random() * 1e9).toString(36)}`;
}

/** At most this many samples per step event (the rest are in the metrics). */
const MAX_SAMPLES_PER_EVENT = 64;

/** The model card's facts: the family (config.json's model_type), shape, parameters and tokenizer. */
export function summarise(model: CausalLM, label: string, tok?: Tokenizer): ModelSummary {
  const c = model.config;
  let params = 0;
  for (const v of model.params.values()) params += v.size;
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

/**
 * The rollout as the UI shows it: counted tokens only, with per-token logprob / KL / advantage. With `chat` (the
 * run's chatTemplate) and a tokenizer that has a template, each sample also carries its prompt as the model saw it
 * (`chatPrompt`: the template applied, special tokens spelled out; the same text encodePrompt encodes).
 */
export function sampleViews(
  r: Rollout,
  tok: Tokenizer,
  chat = false,
  limit = MAX_SAMPLES_PER_EVENT,
): SampleView[] {
  const template = chat && tok.chatPrompt ? tok.chatPrompt.bind(tok) : null;
  return r.promptTexts.slice(0, limit).map((prompt, i) => {
    let kl = 0;
    const tokens: SampleView['tokens'] = [];
    r.mask[i].forEach((m, t) => {
      if (!m) return;
      kl += r.logprobs[i][t] - r.refLogprobs[i][t];
      tokens.push({
        text: tok.decodeToken(r.responses[i][t]),
        logprob: r.logprobs[i][t],
        kl: r.kl[i][t],
        advantage: r.advantages[i][t],
      });
    });
    const view: SampleView = { prompt, response: r.responseTexts[i], score: r.scores[i], kl, tokens };
    if (template) view.chatPrompt = template(prompt);
    return view;
  });
}

function describeReward(cfg: TrainConfig): string {
  const r = cfg.reward;
  if (r === undefined) return cfg.task ? `task ${cfg.task}` : 'none';
  if (typeof r === 'string') return `reward ${r}`;
  if ('mix' in r) return `reward mix (${r.mix.map((m) => `${m.weight}×${m.name}`).join(' + ')})`;
  return r.model === PREFERENCE_REWARD_MODEL ? 'reward model from preferences' : `reward model ${r.model}`;
}

/** The step-peak meter of this worker's engine (installed at the first step; core/base/memory-peak.ts). */
const STEP_PEAK_METER = new PeakMemoryMeter();

export class Run {
  /**
   * The config of the run to be built, while there is no session (the session owns the config of a run that
   * exists); null while a session exists. Kept from the dropped session when a run is dropped.
   */
  private pendingConfig: TrainConfig | null = validateConfig({});
  /** The training run (null until the first step builds it, or a checkpoint is restored). */
  session: TrainingSession | null = null;
  /**
   * The supervised job (DPO or SFT) the run commands drive instead of the RL algorithm, and its status; null for
   * an RL run. Kept through a reset or a config change (its session is rebuilt from it at the next step).
   */
  private job: { spec: SupervisedJobWire; status: SupervisedJobStatus } | null = null;
  /** The supervised job's session (null until built, or after it was dropped). */
  sup: AnySupervisedSession | null = null;
  /** The model used by generate when no run exists (loaded by loadModel, or lazily). */
  private lm: { name: string; lm: LoadedLM } | null = null;
  /** The policy in use, for status. */
  model: ModelSummary | null = null;
  /** Whether a model was named (loaded, configured or trained): generate may then load `cfg.model` itself. */
  private chosen = false;
  private runState: RunState = 'idle';
  private runPhase: Phase = 'idle';
  readonly sandbox = new RewardSandbox();
  private readonly listeners = new Set<Listener>();
  private looping = false;
  /** Measures each step's peak tensor memory (one per engine, shared by the runs of this worker). */
  private readonly peakMeter = STEP_PEAK_METER;
  private heldAtStepStart = 0;
  /** The identity of the run (null while there is no trainer). */
  runId: string | null = null;
  /**
   * The live-tensor budget the session checks at every phase boundary (src/core/model/oom.ts): on WASM the heap this
   * backend really has, PPO_HEAP_BUDGET_BYTES where a process sets it (Node tests), else none.
   */
  heapBudget = (): number | null =>
    defaultHeapBudget(undefined, this.sources.deviceLimits?.heapBytes ?? undefined);

  constructor(
    private readonly sources: ModelSources,
    private readonly serial: Serial,
    private readonly given: RunCollaborators,
  ) {}

  /** The run's config: the session's when a run exists, else the one the next run is built from. */
  get cfg(): TrainConfig {
    return this.session?.cfg ?? this.pendingConfig!;
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

  /** The session's trainer, when there is a run. */
  get trainer(): PpoTrainer | null {
    return this.session?.trainer ?? null;
  }

  // ---- events ---------------------------------------------------------------------------------------------

  status(): RunStatus {
    const reward = this.sandbox.hasCode ? 'your reward code' : describeReward(this.cfg);
    return {
      state: this.runState,
      phase: this.runPhase,
      step: this.job ? (this.sup?.step ?? 0) : (this.session?.step ?? 0),
      steps: this.job ? (this.sup?.steps ?? Number(this.job.status.settings.steps)) : this.cfg.steps,
      config: JSON.parse(JSON.stringify(this.cfg)) as RunStatus['config'],
      model: this.model,
      reward,
      job: this.job ? (JSON.parse(JSON.stringify(this.job.status)) as SupervisedJobStatus) : null,
      plan: this.planView(),
    };
  }

  /** The plan the RL run's steps use now (null without a trainer, or while a supervised job is driven). */
  private planView(): PlanView | null {
    const t = this.trainer;
    if (this.job || !t) return null;
    try {
      const p = t.planInForce();
      return {
        microBatchSize: p.microBatchSize,
        generateMicroBatchSize: p.generateMicroBatchSize,
        recompute: p.recompute,
        reason: p.reason,
        text: describePlan(p),
      };
    } catch {
      return null; // a status never fails for want of a plan (a disposed run, a backend being rebuilt)
    }
  }

  subscribe(cb: Listener): RunStatus {
    this.listeners.add(cb);
    return this.status();
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

  emitStatus(): RunStatus {
    const s = this.status();
    this.emit({ type: 'status', status: s });
    return s;
  }

  progress(task: string, fraction: number | null, message: string): void {
    this.emit({ type: 'progress', task, fraction, message });
  }

  private setPhase(p: Phase): void {
    if (p === this.runPhase) return;
    this.runPhase = p;
    if (p === 'scoring') this.sandbox.beginBatch();
    this.emitStatus();
  }

  // ---- config ---------------------------------------------------------------------------------------------

  /** Merge `partial` over the current config (serial). Non-live changes (src/common/config/live.ts) drop the run. */
  async configure(partial: Record<string, unknown>): Promise<RunStatus> {
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
    if (this.session) {
      const live = Object.fromEntries(changes.live.map((k) => [k, next[k]]));
      this.session.setHyperparameters(live, 'config');
    } else this.pendingConfig = next;
    if (partial.model !== undefined) this.chosen = true;
    return this.emitStatus();
  }

  /**
   * Live keys only, validated against the config table; applied when the next step starts (not serial: answers
   * while a step runs). With a run, it is the session's setHyperparameters, the same call the CLI's path makes.
   */
  setHyperparameters(patch: Record<string, unknown>): RunStatus {
    if (this.session) this.session.setHyperparameters(patch, 'setHyperparameters');
    else this.pendingConfig = applyLive(this.cfg, patch, 'setHyperparameters');
    return this.emitStatus();
  }

  // ---- run state ------------------------------------------------------------------------------------------

  private checkNotDone(): void {
    if (this.sup && this.sup.step >= this.sup.steps) throw new UserError(stepsDoneMessage(this.sup.steps));
    if (this.session && this.session.step >= this.cfg.steps) {
      throw new UserError(stepsDoneMessage(this.cfg.steps));
    }
  }

  start(): RunStatus {
    this.checkNotDone();
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
    this.session?.pause();
    this.sup?.pause();
    return this.emitStatus();
  }

  /** Not running any more: paused when a run exists, else idle (after a failure, a recovery, …). */
  halt(): void {
    this.session?.pause();
    this.sup?.pause();
    this.runState = this.session || this.sup ? 'paused' : 'idle';
    this.runPhase = 'idle';
  }

  async stepOnce(): Promise<RunStatus> {
    if (this.runState === 'running') return this.pause();
    if (this.job) return this.supStepOnce();
    return this.serial(async () => {
      const session = await this.sessionOrFail();
      if (!session) return this.status();
      let stepped = false;
      try {
        const out = await session.runStep(this.cfg.steps);
        stepped = true;
        if (out.stop) this.stoppedNonFinite(session.step);
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

  /** The session's callbacks: its phases, steps and autosaves become this run's events. */
  private sessionHooks(): SessionHooks {
    return {
      phase: (p) => this.setPhase(p),
      beforeStep: () => {
        // The step's peak memory (core/base/memory-peak.ts), shown beside what it holds after.
        this.peakMeter.install();
        this.peakMeter.reset();
        this.heldAtStepStart = tf.memory().numBytes;
        return this.sandbox.beginBatch();
      },
      // Held-out evaluation scores 2 × its prompts: the reward code gets a time budget of its own for them.
      beforeEval: () => this.sandbox.beginBatch(),
      step: (r, s) => {
        const memory = this.given.memory();
        if (memory) memory.peakBytes = this.heldAtStepStart + this.peakMeter.read().liveBytesGrowth;
        this.emit({
          type: 'step',
          metrics: { ...r.metrics },
          samples: sampleViews(r.rollout, s.trainer.tokenizer, s.cfg.chatTemplate),
          alerts: r.alerts.map(({ id, step, message, advice }) => ({ id, step, message, advice })),
          memory,
          ...(r.eval ? { eval: r.eval } : {}),
        });
      },
      // Every min(saveEvery, 10) steps, and when the run stops (src/services/autosave.ts).
      autosaveDue,
      autosave: () => this.given.hooks.autosave(),
    };
  }

  /** What every session of this run is built with: its hooks, and the heap budget (read at each boundary). */
  private sessionOptions(): SessionOptions {
    return { hooks: this.sessionHooks(), heapBudget: () => this.heapBudget() };
  }

  private async loop(): Promise<void> {
    this.looping = true;
    try {
      if (this.job) return await this.supLoop();
      for (;;) {
        const session = await this.serial(async () =>
          this.runState === 'running' ? this.sessionOrFail() : null,
        );
        if (!session || this.runState !== 'running') return;
        const end = await session.run({ schedule: this.serial, between: macrotask });
        if (this.session !== session) return; // reset, replaced or dropped meanwhile
        if (end.reason === 'paused' && this.runState === 'running') continue; // started again meanwhile
        await this.ended(end);
        return;
      }
    } finally {
      this.looping = false;
    }
  }

  /** The session's run ended: say why. */
  private async ended(end: RunEnd): Promise<void> {
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
        if (this.session && !this.session.spoiled) await this.serial(() => this.given.hooks.autosave());
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

  /** The session, built when there is none; a failure is reported (and null returned). Serial. */
  private async sessionOrFail(): Promise<TrainingSession | null> {
    try {
      return await this.ensureSession();
    } catch (e) {
      await this.failed(asHeapExhaustion(e, { phase: 'load' }) ?? e);
      return null;
    }
  }

  // ---- models ---------------------------------------------------------------------------------------------

  /** The run's session, built from the config when there is none (memory checked first). */
  async ensureSession(): Promise<TrainingSession> {
    if (this.session) return this.session;
    const cfg = this.cfg;
    this.progress('build', null, `Loading ${cfg.model} for training…`);
    await this.sources.checkMemory(cfg.model, 'train', cfg);
    this.disposeLm(); // the trainer's policy takes its place
    const session = await TrainingSession.build(cfg, this.sources.resources(), this.sessionOptions());
    this.adopt(session, this.sources.files(cfg.model).label);
    this.progress('build', 1, `Loaded ${cfg.model}.`);
    return session;
  }

  /** The run's checkpoint files, with the configured reward in place even while reward code stands in for it. */
  async checkpoint(): Promise<{ step: number; files: Map<string, Uint8Array> }> {
    if (this.job) return this.supCheckpoint();
    const s = await this.ensureSession();
    return { step: s.step, files: await s.checkpointFiles() };
  }

  /** Make `session` the run (after a build or a restore); `runId` keeps the identity of a resumed run. */
  private adopt(session: TrainingSession, label: string, runId: string = newRunId()): void {
    this.session = session;
    this.pendingConfig = null;
    this.runId = runId;
    if (this.sandbox.hasCode) session.overrideReward(this.codeReward());
    this.model = summarise(session.trainer.models.policy, label, session.trainer.tokenizer);
    this.chosen = true;
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
    const session = await restoreSession(source, this.sources.resources(), this.sessionOptions());
    this.resumeFrom(session, typeof label === 'string' ? label : label(session), runId);
    return session;
  }

  private resumeFrom(session: TrainingSession, label: string, runId?: string): void {
    this.pause();
    this.dropTrainer();
    this.job = null; // a restored run is an RL run, whatever job was in the worker
    this.disposeLm();
    this.adopt(session, label, runId);
    this.runState = 'paused';
    this.runPhase = 'idle';
  }

  /** A new reward (e.g. the model trained from preferences) is a new run, even under the same name. Serial. */
  async startOverWithReward(reward: TrainConfig['reward']): Promise<RunStatus> {
    this.dropTrainer();
    await this.configure({ reward });
    this.runState = 'idle';
    return this.emitStatus();
  }

  /** Free every tensor of the run (TrainingSession.dispose: optimisers and the four models; a supervised job's). */
  dropTrainer(): void {
    if (this.sup) {
      const sup = this.sup;
      this.sup = null;
      this.runId = null;
      sup.dispose();
    }
    const s = this.session;
    if (!s) return;
    this.pendingConfig = s.cfg; // the config stays (a new run is built from it)
    this.session = null;
    this.runId = null;
    s.dispose();
  }

  /** Whether a model is loaded for generate (outside a run). */
  get hasLm(): boolean {
    return this.lm !== null;
  }

  disposeLm(): void {
    this.lm?.lm.model.dispose();
    this.lm = null;
  }

  /** Load `name` as the policy (serial): the run restarts from it. */
  async loadModel(name: string): Promise<ModelSummary> {
    // Training memory is checked when a run is built; here, what loading and generating need.
    await this.sources.checkMemory(name, 'load');
    const files = this.sources.files(name);
    const lm = await loadLM(files, { trainable: false, label: 'policy', ...this.sources.modelOptions() });
    this.dropTrainer();
    this.disposeLm();
    this.lm = { name, lm };
    this.pendingConfig = validateConfig({ ...this.cfg, model: name });
    this.runState = 'idle';
    this.model = summarise(lm.model, files.label, lm.tokenizer);
    this.chosen = true;
    this.emitStatus();
    return this.model;
  }

  /** The model generate uses: the trained policy while a run exists, else the loaded one. */
  async generator(): Promise<{ model: CausalLM; tokenizer: Tokenizer }> {
    if (this.sup) return { model: this.sup.trainer.policy, tokenizer: this.sup.trainer.tokenizer };
    const t = this.trainer;
    if (t) return { model: t.models.policy, tokenizer: t.tokenizer };
    if (!this.lm) {
      if (!this.chosen) throw new UserError('No model is loaded yet; load a model first.');
      const files = this.sources.files(this.cfg.model);
      this.lm = {
        name: this.cfg.model,
        lm: await loadLM(files, { trainable: false, label: 'policy', ...this.sources.modelOptions() }),
      };
      this.model ??= summarise(this.lm.lm.model, files.label, this.lm.lm.tokenizer);
    }
    return { model: this.lm.lm.model, tokenizer: this.lm.lm.tokenizer };
  }

  // ---- reward code ----------------------------------------------------------------------------------------

  private codeReward(): RewardSource {
    return { kind: 'fn', fn: this.sandbox.rewardFn(), label: REWARD_CODE_LABEL };
  }

  /** Set or clear the reward code (serial, so never in the middle of a step). */
  async setRewardCode(code: string | null): Promise<RunStatus> {
    if (code === null) {
      this.sandbox.dispose();
      this.session?.overrideReward(null);
    } else {
      await this.sandbox.setCode(code);
      this.session?.overrideReward(this.codeReward());
    }
    return this.emitStatus();
  }

  // ---- supervised jobs (DPO, SFT: ./supervised.ts) -----------------------------------------------------------

  /** The DPO job's config (contracts §9), or null when the job in the worker is not DPO. */
  dpoConfig(): DpoConfig | null {
    return this.sup?.trainer instanceof DpoTrainer ? this.sup.trainer.cfg : null;
  }

  /** The metric history of the run or job in the worker. */
  historyNow(): MetricsWire[] {
    const h = this.job ? (this.sup?.history ?? []) : (this.trainer?.history ?? []);
    return h as unknown as MetricsWire[];
  }

  /** The supervised job's hooks: its phases and steps become this run's events (no samples, no alerts). */
  private supHooks() {
    return {
      phase: (p: Phase) => this.setPhase(p),
      step: async (m: SupervisedMetrics) => {
        this.emit({
          type: 'step',
          metrics: { ...m } as unknown as MetricsWire,
          samples: [],
          alerts: [],
          memory: this.given.memory(),
        });
        // A DPO job is autosaved as an RL run is (every min(saveEvery, 10) steps; its saveEvery is DPO's).
        const dpo = this.dpoConfig();
        if (dpo && autosaveDue(m.step, dpo.saveEvery)) await this.given.hooks.autosave();
      },
    };
  }

  /**
   * What autosave and device recovery save and restore (./reliability.ts): the RL run's trainer, or a DPO job
   * (its checkpoint holds its pairs); null for an SFT job (its weights alone cannot resume it) or no run.
   */
  savable(): { step: number; historyLength: number } | null {
    if (this.job) {
      if (!(this.sup?.trainer instanceof DpoTrainer)) return null;
      return { step: this.sup.step, historyLength: this.sup.history.length };
    }
    const t = this.trainer;
    return t && { step: t.step, historyLength: t.history.length };
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

  /** Build the job's session from `spec` over the config's model (its data is read here: errors name lines). */
  private async buildJob(spec: SupervisedJobWire) {
    const cfg = this.cfg;
    this.progress('build', null, `Loading ${cfg.model} for ${spec.kind.toUpperCase()}…`);
    // What loading the model needs on this backend (its buffer limits, the WASM heap), checked before loading.
    await this.sources.checkMemory(cfg.model, 'load');
    const built = await buildSupervised(
      spec,
      cfg,
      this.sources.files(cfg.model),
      this.supHooks(),
      this.sources.modelOptions(),
    );
    this.progress('build', 1, `Loaded ${cfg.model}.`);
    return built;
  }

  /**
   * Drive `spec` (DPO or SFT) instead of the RL algorithm, or go back to RL (null). Serial. The job is built
   * before the run in the worker is dropped, so a bad file leaves things as they were.
   */
  async setSupervisedJob(spec: SupervisedJobWire | null): Promise<RunStatus> {
    this.pause();
    if (spec === null) {
      this.dropTrainer();
      this.job = null;
      this.runState = 'idle';
      this.runPhase = 'idle';
      return this.emitStatus();
    }
    const checked = checkJob(spec);
    const { session, status } = await this.buildJob(checked);
    this.dropTrainer();
    this.disposeLm();
    this.job = { spec: checked, status };
    this.sup = session;
    this.runId = newRunId();
    this.model = summarise(
      session.trainer.policy,
      this.sources.files(this.cfg.model).label,
      session.trainer.tokenizer,
    );
    this.chosen = true;
    this.runState = 'idle';
    this.runPhase = 'idle';
    return this.emitStatus();
  }

  /** The job's session, rebuilt from its spec when it was dropped (reset, a config change); failures reported. */
  private async supOrFail(): Promise<AnySupervisedSession | null> {
    if (this.sup) return this.sup;
    if (!this.job) return null;
    try {
      this.disposeLm();
      const { session, status } = await this.buildJob(this.job.spec);
      this.sup = session;
      this.job.status = status;
      this.runId = newRunId();
      return session;
    } catch (e) {
      await this.failed(asHeapExhaustion(e, { phase: 'load' }) ?? e);
      return null;
    }
  }

  private async supLoop(): Promise<void> {
    for (;;) {
      const sup = await this.serial(async () => (this.runState === 'running' ? this.supOrFail() : null));
      if (!sup || this.runState !== 'running') return;
      const from = sup.step;
      const end = await sup.run({ schedule: this.serial, between: macrotask });
      if (this.sup !== sup) return;
      // Saved where it stopped, as TrainingSession.run does for an RL run.
      if (sup.step > from && end.reason !== 'error') await this.serial(() => this.given.hooks.autosave());
      if (end.reason === 'paused' && this.runState === 'running') continue;
      await this.ended(end);
      return;
    }
  }

  private supStepOnce(): Promise<RunStatus> {
    return this.serial(async () => {
      const sup = await this.supOrFail();
      if (!sup) return this.status();
      let stepped = false;
      try {
        await sup.runStep();
        stepped = true;
      } catch (e) {
        if (await this.failed(e)) return this.status();
      }
      this.runState = 'paused';
      if (stepped) await this.given.hooks.autosave();
      return this.emitStatus();
    });
  }

  /**
   * The job's files: a DPO run's checkpoint (docs/dpo.md: model, adapters under LoRA, reference, optimiser,
   * dpo_state.json) or the SFT'd model folder (config.json, model.safetensors, the tokenizer's files).
   */
  private async supCheckpoint(): Promise<{ step: number; files: Map<string, Uint8Array> }> {
    const sup = this.sup ?? (await this.supOrFail());
    if (!sup) throw new UserError('The DPO / SFT job could not be built; see the error above.');
    const files = new Map<string, Uint8Array>();
    if (sup.trainer instanceof DpoTrainer && this.job) {
      for (const [k, v] of await sup.trainer.checkpointSources()) files.set(k, await collectBytes(v));
      // The pairs and the request, so that importing the zip resumes the job (restoreDpoJob).
      const { data, ...request } = this.job.spec;
      files.set(JOB_DATA_FILE, new TextEncoder().encode(data));
      files.set(JOB_FILE, new TextEncoder().encode(JSON.stringify(request) + '\n'));
    } else {
      for (const [k, v] of await exportLM(sup.trainer.policy, sup.trainer.tokenizer)) files.set(k, v);
    }
    return { step: sup.step, files };
  }

  /**
   * Resume a DPO job from its checkpoint's files (a zip the app exported), paused at its step; serial. Restored
   * before the current run is dropped, so a bad file leaves things as they were.
   */
  async restoreDpo(
    files: Map<string, Uint8Array>,
    label: string,
    runId: string = newRunId(),
  ): Promise<AnySupervisedSession> {
    const { session, spec, status } = await restoreDpoJob(
      files,
      label,
      this.supHooks(),
      this.sources.modelOptions(),
    );
    this.pause();
    this.dropTrainer();
    this.disposeLm();
    this.job = { spec, status };
    this.sup = session;
    this.runId = runId;
    this.model = summarise(
      session.trainer.policy,
      `${label} at step ${session.step}`,
      session.trainer.tokenizer,
    );
    this.chosen = true;
    this.runState = 'paused';
    this.runPhase = 'idle';
    return session;
  }

  /**
   * After SFT steps: its weights, held as SFT_MODEL, become the model of the next run (its policy and its
   * reference), which starts: an RL algorithm of the run's config, or DPO on the pairs given. Serial.
   */
  async continueFromSft(next: ContinueAfterSft): Promise<RunStatus> {
    const sup = this.sup;
    // After DPO too (issue #33): its weights, held as DPO_MODEL, go on with an RL algorithm.
    const fromDpo = this.job?.spec.kind === 'dpo';
    if (!this.job || (this.job.spec.kind !== 'sft' && !fromDpo) || !sup || sup.step === 0)
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
    const files = await exportLM(sup.trainer.policy, sup.trainer.tokenizer);
    this.sources.hold(held, files);
    this.dropTrainer();
    this.job = null;
    this.runState = 'idle';
    await this.configure(patch);
    if (next.algorithm === 'dpo') await this.setSupervisedJob(next.job);
    else this.dropTrainer(); // a new run, even when nothing but the weights changed
    return this.start();
  }
}
