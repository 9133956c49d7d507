/**
 * One PPO training run, as the CLI (src/cli/train.ts) and the model worker (src/worker/run.ts) both drive
 * it. The session owns the trainer and its four models and frees all of them in `dispose()`; it owns the run's
 * config (the one copy: the trainer reads it through the source it was built with, at the start of each step),
 * takes live changes to it (`setHyperparameters`, validated against the config table of
 * src/common/config/live.ts), so they reach the next step; it runs steps until the target step, `pause()`, or the
 * trainer's non-finite guard asks to stop; and it calls back for every step, for checkpoints and for autosaves
 * on one cadence rule. Its collaborators (the hooks, the heap budget) are given when it is built. The adapters
 * only turn those callbacks into files (CLI) or events (worker).
 *
 * Platform-neutral (no node:*, no DOM): see docs/architecture.md for the layers, docs/engine.md for the step.
 */
import type { TrainConfig } from '../../common/config';
import { applyLive } from '../../common/config/live';
import { checkpointFiles, checkpointSources, restoreTrainer, type CheckpointPurpose } from './checkpoint';
import type { FileBody } from '../model/safetensors';
import { buildTrainer, type BuildOptions, type Resources, type TrainerOwner } from '../ppo/setup';
import type { Phase, PhaseProgress, PpoTrainer, RewardSource, StepResult } from '../ppo/trainer';
import type { ModelFiles } from '../model/folder';
import { UserError } from '../../common/errors';
import { nonFiniteMessage, stepsDoneMessage } from '../../common/stops';
import { asHeapExhaustion, checkHeapBudget, HeapExhaustedError, stepPhase } from '../model/oom';
import { Evaluator, evalMetricsOf, isEvalStep, resolveEvalPrompts } from '../ppo/eval';

/**
 * The checkpoint cadence: the starting weights (step 0), every `saveEvery` steps (0 = none in between), and the
 * last step of the run.
 */
export function isCheckpointStep(step: number, saveEvery: number, last: number): boolean {
  return step === 0 || step === last || (saveEvery > 0 && step % saveEvery === 0);
}

/** Why `run()` returned. */
export type StopReason =
  /** The target step was reached. */
  | 'done'
  /** `pause()` (or `dispose()`) was called. */
  | 'paused'
  /** Three steps in a row had NaN/Inf losses or gradients (the trainer's `shouldPause`). */
  | 'nonfinite'
  /**
   * A step threw (`error` holds it). After an ordinary failure while generating or scoring, the run is as it was
   * after the last good step. After running out of memory, or any failure while updating, the session is spoiled
   * (`spoiled`): it runs and saves nothing more, and the last checkpoint or autosave is what to resume.
   */
  | 'error';

export interface RunEnd {
  reason: StopReason;
  /** Steps completed. */
  step: number;
  /** For 'nonfinite': what happened, in words (the adapters add what to do next). */
  message?: string;
  /** For 'error'. */
  error?: unknown;
}

export interface SessionHooks {
  /** Just before a step starts (after live changes were applied). */
  beforeStep?(session: TrainingSession): void | Promise<void>;
  /**
   * Just before a held-out evaluation (after the step's update): the worker starts a new time budget for the
   * person's reward code here, as it does before a step (beforeStep).
   */
  beforeEval?(session: TrainingSession): void | Promise<void>;
  /** A step finished; `result.metrics.klCoef` is the KL coefficient the step used. */
  step?(result: StepResult, session: TrainingSession): void | Promise<void>;
  /** The trainer's phase changed (generating → scoring → updating → idle). */
  phase?(phase: Phase): void;
  /** Work done inside a phase (generation slices, scoring micro-batches, minibatch updates). */
  progress?(p: PhaseProgress): void;
  /** A checkpoint is due (`isCheckpointStep`): step 0 before the first step of a fresh run, then after steps. */
  checkpoint?(session: TrainingSession): Promise<void>;
  /**
   * Whether an autosave is due after `step` (the worker passes src/services/autosave.ts's `autosaveDue`: every
   * min(saveEvery, 10) steps). Without it, autosaves happen only when `run()` stops.
   */
  autosaveDue?(step: number, saveEvery: number): boolean;
  /** Save now: when `autosaveDue` says so after a step, and when `run()` stops after steps. */
  autosave?(session: TrainingSession): Promise<void>;
}

export interface RunOptions {
  /** Run until this many steps are done (default: the config's `steps`, read before each step). */
  until?: number;
  /** Runs each step's work (the worker passes its serial queue, so other calls go in between steps). */
  schedule?: <T>(job: () => Promise<T>) => Promise<T>;
  /** Awaited between steps (the worker yields a macrotask so queued messages are answered). */
  between?: () => Promise<void>;
}

/** What one step gave, and whether the run must stop because of it. */
export interface StepOutcome {
  result: StepResult;
  /** Set when the trainer's non-finite guard asks to stop (three bad steps in a row). */
  stop: { reason: 'nonfinite'; message: string } | null;
}

/** The collaborators of a session, given when it is built or restored. */
export interface SessionOptions {
  /** The adapter's callbacks (steps, phases, checkpoints, autosaves). */
  hooks?: SessionHooks;
  /**
   * Live tensor bytes allowed at the step's phase boundaries (src/core/model/oom.ts checkHeapBudget), read at every
   * boundary (so it follows a new backend): the CLI passes defaultHeapBudget() (PPO_HEAP_BUDGET_BYTES, else the
   * WASM heap on wasm), the worker its backend's heap. null, or no function (the default): no check.
   */
  heapBudget?: () => number | null;
  /**
   * The text of an `evalPrompts` prompts file (held-out evaluation, src/core/ppo/eval.ts), by the path the config
   * holds: the CLI reads it from disk. Absent (the app): only "heldout" is possible.
   */
  readText?: (path: string) => Promise<string>;
}

/** What TrainingSession.build and restore take: how to build the trainer, and the session's collaborators. */
export type SessionBuildOptions = Omit<BuildOptions, 'owner'> & SessionOptions;

export class TrainingSession {
  /**
   * The run's config, its one copy: the config in force from the next step on. The trainer reads it (through the
   * source it was built with) at the start of each step; live changes replace it here.
   */
  private config: TrainConfig;
  /** The reward the trainer was built with (a stand-in such as the UI's reward code goes in front of it). */
  private readonly baseReward: RewardSource;
  private pauseRequested = false;
  private runningNow = false;
  private disposed = false;
  private startCheckpointDone = false;
  /** The trainer's phase now ('idle' between steps). */
  private phaseNow: Phase = 'idle';
  /** Why this session may neither step nor save any more (null while it can). */
  private spoiledBy: string | null = null;

  /** Use build / restore: they build the trainer with this session as its owner. */
  private constructor(
    readonly trainer: PpoTrainer,
    private readonly hooks: SessionHooks,
    private readonly heapBudget: () => number | null,
    /** Held-out evaluation (evalEvery > 0), or null. */
    readonly evaluator: Evaluator | null,
  ) {
    this.config = trainer.cfg;
    this.baseReward = trainer.models.reward;
  }

  /**
   * A session around the trainer `make` builds, with the session as the trainer's owner: the trainer reads the
   * session's config and reports its phases to it. Until the session exists (while the trainer is being built)
   * the trainer's config is the validated one it is built from, which becomes the session's.
   */
  private static async around(
    opts: SessionBuildOptions,
    res: Resources,
    make: (opts: BuildOptions) => Promise<PpoTrainer>,
  ): Promise<TrainingSession> {
    let session: TrainingSession | null = null;
    const owner = (first: TrainConfig): TrainerOwner => ({
      config: () => session?.config ?? first,
      events: {
        phase: (p) => session?.phaseChanged(p),
        progress: (p) => session?.hooks.progress?.(p),
      },
    });
    const { hooks, heapBudget, readText, ...build } = opts;
    const trainer = await make({ ...build, owner });
    let evaluator: Evaluator | null = null;
    try {
      const prompts = await resolveEvalPrompts(trainer.cfg, { loadTask: (n) => res.loadTask(n), readText });
      if (prompts) evaluator = new Evaluator(trainer, prompts);
    } catch (e) {
      trainer.disposeAll(); // nothing of a session that failed to build stays loaded
      throw e;
    }
    session = new TrainingSession(trainer, hooks ?? {}, heapBudget ?? (() => null), evaluator);
    return session;
  }

  /** A fresh run from a validated config. */
  static build(cfg: TrainConfig, res: Resources, opts: SessionBuildOptions = {}): Promise<TrainingSession> {
    return TrainingSession.around(opts, res, (o) => buildTrainer(cfg, res, o));
  }

  /**
   * The run saved in a checkpoint's files, continuing at its step. Validated first; on any error nothing of it
   * stays loaded (restoreTrainer frees what it built). To restore from a folder, a zip or an autosave alike, use
   * src/core/run/restore.ts restoreSession, which comes here.
   */
  static restore(
    files: ModelFiles,
    res: Resources,
    opts: SessionBuildOptions = {},
  ): Promise<TrainingSession> {
    return TrainingSession.around(opts, res, (o) => restoreTrainer(files, res, o));
  }

  /** The trainer's phase changed: the heap guard at the boundary, then the hook. */
  private phaseChanged(p: Phase): void {
    if (this.disposed) return;
    // The budget guard at the boundary: what the phase that just ended left live. It throws out of trainStep.
    if (p === 'scoring' || p === 'updating') this.checkHeap(this.phaseNow, this.trainer.step + 1);
    this.phaseNow = p;
    this.hooks.phase?.(p);
  }

  /** Steps completed. */
  get step(): number {
    return this.trainer.step;
  }

  /** The config in force from the next step on (the run's one copy of it). */
  get cfg(): TrainConfig {
    return this.config;
  }

  get history() {
    return this.trainer.history;
  }

  /** True while `run()` is stepping. */
  get running(): boolean {
    return this.runningNow;
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  /**
   * Why the session may neither step nor save any more, or null. Set when a step ran out of memory (any phase:
   * a failed WASM allocation can have written through a null pointer) or failed while updating (the weights and
   * Adam's moments may be half-updated). Its last checkpoint or autosave, written before that step, is intact.
   */
  get spoiled(): string | null {
    return this.spoiledBy;
  }

  // ---- config -----------------------------------------------------------------------------------------------

  /**
   * A live change, the one way a running job's config changes (the worker's setHyperparameters and configure,
   * the CLI alike): live keys only, validated against the config table (src/common/config/live.ts applyLive); the trainer
   * reads the new config when its next step starts. Returns the new config.
   */
  setHyperparameters(patch: unknown, source = 'setHyperparameters'): TrainConfig {
    this.config = applyLive(this.config, patch, source);
    return this.config;
  }

  // ---- reward -----------------------------------------------------------------------------------------------

  /** Put `reward` in front of the configured reward from the next step on; null restores the configured one. */
  overrideReward(reward: RewardSource | null): void {
    this.trainer.models.reward = reward ?? this.baseReward;
  }

  /**
   * The run's checkpoint files, with the configured reward in place even while a stand-in scores. A spoiled
   * session (`spoiled`) refuses: its state is not one to save.
   */
  async checkpointFiles(purpose: CheckpointPurpose = 'export'): Promise<Map<string, Uint8Array>> {
    this.checkNotSpoiled();
    const t = this.trainer;
    const current = t.models.reward;
    t.models.reward = this.baseReward;
    try {
      return await checkpointFiles(t, purpose);
    } finally {
      t.models.reward = current;
    }
  }

  /**
   * checkpointFiles with the LM weights as ByteSources made one weight at a time as they are written
   * (core/run/checkpoint.ts checkpointSources): write them all before the next step. `omit`: files not to make.
   */
  async checkpointSources(
    purpose: CheckpointPurpose = 'export',
    omit: ReadonlySet<string> = new Set(),
  ): Promise<Map<string, FileBody>> {
    this.checkNotSpoiled();
    const t = this.trainer;
    const current = t.models.reward;
    t.models.reward = this.baseReward;
    try {
      return await checkpointSources(t, purpose, omit);
    } finally {
      t.models.reward = current;
    }
  }

  // ---- stepping ---------------------------------------------------------------------------------------------

  /** Stop `run()` after the step in flight. */
  pause(): void {
    this.pauseRequested = true;
  }

  private checkUsable(): void {
    if (this.disposed) throw new Error('this training session was disposed; build or restore a new one.');
    this.checkNotSpoiled();
  }

  private checkNotSpoiled(): void {
    if (this.spoiledBy) throw this.spoiledError();
  }

  private spoiledError(): UserError {
    return new UserError(
      `${this.spoiledBy}, so this run can neither go on nor be saved; resume its last checkpoint or ` +
        'autosave (written before that step, and intact), or start it again.',
    );
  }

  /** The budget guard (src/core/model/oom.ts) for the phase that just ended; a no-op without a budget. */
  private checkHeap(phase: Phase, step: number): void {
    const budget = this.heapBudget();
    if (budget === null) return;
    checkHeapBudget(budget, stepPhase(phase) ?? phase, step);
  }

  /**
   * What a failed step becomes. Running out of memory becomes the clear error of src/core/model/oom.ts, followed by
   * what happened to the run; it and any failure while updating spoil the session. Other failures (a reward that
   * throws while scoring, …) leave the run as it was after the last good step and are returned as they are.
   */
  private stepFailed(e: unknown, step: number): unknown {
    const afterUpdate = this.phaseNow === 'idle'; // the guard after the step: the update itself completed
    const running = stepPhase(this.phaseNow);
    const heap = e instanceof HeapExhaustedError ? e : asHeapExhaustion(e, { phase: running, step });
    const phase = stepPhase(heap?.phase) ?? running;
    if (!heap && phase !== 'update') return e;
    const halfUpdated = phase === 'update';
    this.spoiledBy = `Step ${step} ${heap ? 'ran out of memory' : 'failed'} while ${
      halfUpdated ? 'updating the weights' : phase === 'generate' ? 'generating' : 'scoring'
    }`;
    if (!heap) return e; // a bug while updating: reported as it is, but nothing is saved after it
    const state = afterUpdate
      ? `step ${step} is not recorded`
      : halfUpdated
        ? 'its weights and optimiser state may be half-updated'
        : 'the step was left half-done';
    const stopped = `The run stopped at step ${step} and saves nothing from here on (${state})`;
    return new HeapExhaustedError(
      `${heap.message} ${stopped}; its last checkpoint or autosave, written before step ${step}, is intact.`,
      heap.phase,
      heap.step,
      { exhausted: heap.message, stopped },
    );
  }

  /**
   * One step: live changes first, then the trainer's step, the `step` hook, and (unless the non-finite guard
   * asks to stop) the checkpoint and autosave hooks that are due. `until` is the run's last step (default the
   * config's `steps`); a session already there refuses with a UserError.
   */
  async runStep(until: number = this.config.steps): Promise<StepOutcome> {
    this.checkUsable();
    const t = this.trainer;
    if (t.step >= until) throw new UserError(stepsDoneMessage(until));
    await this.hooks.beforeStep?.(this);
    const stepNo = t.step + 1;
    let result: StepResult;
    try {
      result = await t.trainStep();
      // After the update: Adam's moments (made by the first update) and anything the step left live.
      this.checkHeap('updating', stepNo);
      // Held-out evaluation (src/core/ppo/eval.ts): every evalEvery steps and at the last step; its metrics go on
      // this step's line (and into the history a checkpoint keeps). It draws nothing from the training stream.
      if (this.evaluator && isEvalStep(t.step, this.config.evalEvery, until)) {
        await this.hooks.beforeEval?.(this);
        result.eval = await this.evaluator.run(t.step);
        Object.assign(result.metrics, evalMetricsOf(result.eval));
        // The evaluation's work redone smaller when the device ran out (said once, on this step).
        result.alerts.push(...t.takeOutOfStepNotices());
      }
    } catch (e) {
      throw this.stepFailed(e, stepNo);
    } finally {
      this.phaseNow = 'idle';
    }
    await this.hooks.step?.(result, this);
    if (result.shouldPause) {
      return { result, stop: { reason: 'nonfinite', message: nonFiniteMessage(t.step) } };
    }
    try {
      const { saveEvery } = this.config;
      if (isCheckpointStep(t.step, saveEvery, until)) await this.hooks.checkpoint?.(this);
      if (this.hooks.autosaveDue?.(t.step, saveEvery)) await this.hooks.autosave?.(this);
    } catch (e) {
      // Reading the weights out to save them can run out too; the state itself is whole (no spoiling).
      throw asHeapExhaustion(e, { phase: 'save', step: t.step }) ?? e;
    }
    return { result, stop: null };
  }

  /**
   * Step until `until` steps are done, `pause()`, a non-finite stop or a failing step (at once for a `spoiled`
   * session, with the error that says so). A fresh session (step 0)
   * first writes its step-0 checkpoint. When any step ran, the `autosave` hook is called once more at the end
   * (unless the session was disposed), so a paused or finished run is saved where it stopped.
   */
  async run(opts: RunOptions = {}): Promise<RunEnd> {
    if (this.disposed) this.checkUsable();
    if (this.runningNow) throw new Error('TrainingSession.run: already running.');
    // A spoiled session ends at once, as a failed step would (the adapters report it the same way).
    if (this.spoiledBy) return { reason: 'error', step: this.trainer.step, error: this.spoiledError() };
    const schedule = opts.schedule ?? (<T>(job: () => Promise<T>) => job());
    const until = () => opts.until ?? this.config.steps;
    this.pauseRequested = false;
    this.runningNow = true;
    let stepped = false;
    let end: RunEnd;
    try {
      if (this.trainer.step === 0 && !this.startCheckpointDone && this.hooks.checkpoint) {
        this.startCheckpointDone = true;
        await schedule(() => this.hooks.checkpoint!(this));
      }
      for (;;) {
        if (this.pauseRequested || this.disposed) {
          end = { reason: 'paused', step: this.trainer.step };
          break;
        }
        if (this.trainer.step >= until()) {
          end = { reason: 'done', step: this.trainer.step };
          break;
        }
        let out: StepOutcome | null;
        try {
          // A pause (or dispose) queued ahead of this step has already stopped the run.
          out = await schedule(async () =>
            this.pauseRequested || this.disposed ? null : this.runStep(until()),
          );
        } catch (error) {
          end = { reason: 'error', step: this.trainer.step, error };
          break;
        }
        if (!out) continue;
        stepped = true;
        if (out.stop) {
          end = { reason: 'nonfinite', step: this.trainer.step, message: out.stop.message };
          break;
        }
        await opts.between?.();
      }
    } finally {
      this.runningNow = false;
    }
    if (stepped && !this.disposed && end.reason !== 'error' && this.hooks.autosave) {
      await schedule(() => this.hooks.autosave!(this));
    }
    return end;
  }

  // ---- lifetime ---------------------------------------------------------------------------------------------

  /** Free every tensor of the run: the optimisers and the policy, reference, value (if any) and reward models. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.pauseRequested = true;
    const t = this.trainer;
    t.disposeOptimizers();
    t.models.policy.dispose();
    t.models.ref.dispose();
    t.models.value?.dispose(); // null in critic-free runs
    if (this.baseReward.kind === 'model') this.baseReward.model.dispose();
    const current = t.models.reward;
    if (current !== this.baseReward && current.kind === 'model') current.model.dispose();
  }
}
