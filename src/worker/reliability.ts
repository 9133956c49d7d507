/**
 * Keeping a run through reloads, crashes and GPU resets.
 *
 * Autosave: after every min(saveEvery, 10)-th step and whenever the run pauses, the run's checkpoint files go to
 * IndexedDB through core's TabAutosave (a slot per tab, owned through a Web Lock, so two tabs training at once
 * keep both saves; a new save replaces the tab's older one only once complete). A full disk or NaN/Inf weights
 * keep the older save and say so. After a reload, autosaveInfo / resumeAutosave bring the run back at its step
 * with its history.
 *
 * Device loss: the WebGPU device can go away (driver reset, GPU removed, `device.destroy()`); every tensor on it
 * is gone. The worker watches `device.lost`; on a loss it pauses the run, tells the person, makes tfjs build a
 * new WebGPU backend (or falls back to WASM when WebGPU cannot start again), restores the run from its last
 * autosave on the new backend and carries on as it was: running again if it was running, else paused.
 */
import type { AutosaveInfo } from '../services/autosave';
import type { TabAutosave } from '../services/autosave-tabs';
import { UserError } from '../common/errors';
import { forgetWebGpuBackend, webgpuDevice, type GpuDeviceLike } from './backend-web';
import type { Run, RunHooks, Serial } from './run';
import type { AutosaveInfoWire, BackendReport, ReliabilityEvent, RunStatus } from './protocol';

/**
 * How long a failed step waits for `device.lost` to settle before it counts as an ordinary failure (only failed
 * steps on WebGPU wait; on a busy machine the loss can be reported seconds after the reads fail).
 */
const LOSS_SETTLE_MS = 5000;
/** A step that failed this recently while running counts as "was running" when the loss is reported late. */
const LATE_LOSS_MS = 60_000;

type Listener = (e: ReliabilityEvent) => unknown;

export interface BackendControl {
  /**
   * Choose the backend again with the person's preference (after tfjs forgot the lost one); the new device is
   * watched from then on.
   */
  reselect(): Promise<BackendReport>;
}

export class Reliability implements RunHooks {
  private readonly listeners = new Set<Listener>();
  /** The run it keeps: built by `makeRun` with this object as its autosave / device-loss hooks. */
  readonly run: Run;
  private on = true;
  /** The last save this worker wrote or resumed (to skip saving the same step twice). */
  private lastSaved: { runId: string; step: number } | null = null;
  /** The WebGPU device being watched. */
  private device: GpuDeviceLike | null = null;
  /** Set from a loss until its recovery is done. */
  private lost: { reason: string; message: string } | null = null;
  private lostSignal: Promise<true> | null = null;
  private lostAgain = false;
  /** The last failed step on WebGPU: whether the run was running then. */
  private failure: { running: boolean; at: number } | null = null;

  constructor(
    makeRun: (hooks: RunHooks) => Run,
    private readonly serial: Serial,
    private readonly backend: BackendControl,
    readonly slot: TabAutosave,
  ) {
    this.run = makeRun(this);
  }

  /** Whether autosave is on for this worker (default on; setAutosave). */
  get enabled(): boolean {
    return this.on;
  }

  setEnabled(on: boolean): void {
    this.on = on;
  }

  // ---- events ---------------------------------------------------------------------------------------------

  subscribe(cb: Listener): void {
    this.listeners.add(cb);
  }

  private emit(e: ReliabilityEvent): void {
    for (const cb of this.listeners) {
      try {
        void Promise.resolve(cb(e)).catch(() => undefined);
      } catch {
        /* a failing listener must not stop the run */
      }
    }
  }

  private wire(info: AutosaveInfo | null): AutosaveInfoWire | null {
    if (!info) return null;
    const { step, savedAt, config, label, historyLength, bytes, runId } = info;
    return { step, savedAt, config, label, historyLength, bytes, current: runId === this.run.runId };
  }

  // ---- autosave -------------------------------------------------------------------------------------------

  async info(): Promise<AutosaveInfoWire | null> {
    return this.wire(await this.slot.info());
  }

  /** RunHooks: the session says when (every min(saveEvery, 10) steps, and when the run stops). */
  async autosave(): Promise<void> {
    await this.saveNow();
  }

  async failedForDeviceLoss(): Promise<boolean> {
    if (this.lost) return true;
    const signal = this.lostSignal;
    if (!signal) return false;
    if (this.run.state === 'running') this.failure = { running: true, at: Date.now() };
    return Promise.race([signal, new Promise<false>((r) => setTimeout(() => r(false), LOSS_SETTLE_MS))]);
  }

  /** Save the run now (serial). Never throws: failures become events. */
  async saveNow(): Promise<void> {
    const run = this.run;
    // The RL run's trainer, or a DPO job (Run.savable); an SFT job is not saved.
    const t = run.savable();
    const runId = run.runId;
    if (!this.enabled || this.lost || !t || !runId || t.step === 0) return;
    // A run that ran out of memory or failed mid-update is not saved over its last good autosave.
    if (run.spoiled) return;
    if (this.lastSaved?.runId === runId && this.lastSaved.step === t.step) return;
    const result = await this.slot.save(
      {
        step: t.step,
        config: JSON.parse(JSON.stringify(run.cfg)) as Record<string, unknown>,
        label: run.model?.label ?? run.cfg.model,
        runId,
        historyLength: t.historyLength,
      },
      (shared) => run.saveSources(shared),
      run.frozenFiles,
    );
    if (result.ok) {
      this.lastSaved = { runId, step: result.info.step };
      this.emit({ type: 'autosaved', info: this.wire(result.info)! });
      return;
    }
    // Reading the weights off a GPU that just went away fails too: recovery tells that story.
    if (result.reason === 'failed' && (await this.failedForDeviceLoss())) return;
    this.emit({
      type: 'autosave-failed',
      reason: result.reason,
      message: result.message,
      kept: this.wire(result.kept),
    });
    // NaN/Inf weights already raise the trainer's own alerts; storage failures are news to the person.
    if (result.reason !== 'nonfinite') run.emit({ type: 'error', message: result.message, userError: true });
  }

  /** Continue the autosaved run (serial): restored first, so a failure leaves the current run as it was. */
  async resume(): Promise<RunStatus> {
    const saved = await this.slot.resume();
    if (!saved) {
      throw new UserError(
        'There is no autosaved run in this browser to resume; start a run, or import a checkpoint.',
      );
    }
    const run = this.run;
    run.pause();
    // A spoiled run (out of memory) cannot go on: free its tensors first, so the restore has the room it needs.
    if (run.spoiled) run.dropTrainer();
    const { info, files } = saved;
    const step = await run.restoreSaved(files, `autosave (step ${info.step})`, info.label, info.runId);
    this.lastSaved = { runId: info.runId, step };
    return run.emitStatus();
  }

  async discard(): Promise<void> {
    await this.slot.discard();
    this.lastSaved = null;
  }

  // ---- device loss ----------------------------------------------------------------------------------------

  /** Watch the current WebGPU device (call after every backend choice). */
  watchDevice(): void {
    const device = webgpuDevice();
    if (!device || device === this.device) return;
    this.device = device;
    this.lostSignal = device.lost.then((info) => {
      this.onLost(device, info ?? {});
      return true as const;
    });
  }

  /** True between a loss and the end of its recovery. */
  get deviceTrouble(): boolean {
    return this.lost !== null;
  }

  /** Test hook: lose the device now. */
  loseDevice(): void {
    const device = webgpuDevice();
    if (!device) {
      throw new UserError('debugLoseDevice: the worker is not on WebGPU, so there is no GPU device to lose.');
    }
    this.watchDevice();
    device.destroy();
  }

  private onLost(device: GpuDeviceLike, info: { reason?: string; message?: string }): void {
    if (device !== this.device) {
      // An older device (the backend was switched away from WebGPU earlier): make tfjs build a new one when
      // WebGPU is chosen again; nothing of the run lives there.
      forgetWebGpuBackend();
      return;
    }
    this.device = null;
    this.lostSignal = null;
    if (this.lost) {
      // Lost again while recovering: the recovery in progress starts over when it ends.
      this.lostAgain = true;
      return;
    }
    const reason = info.reason ?? 'unknown';
    const detail = info.message ? ` (${info.message.replace(/\.$/, '')})` : '';
    this.lost = { reason, message: info.message ?? '' };
    const run = this.run;
    // A loss reported after the failed step already paused the run still resumes it running.
    const lateFailure =
      this.failure !== null && this.failure.running && Date.now() - this.failure.at < LATE_LOSS_MS;
    const wasRunning = run.state === 'running' || lateFailure;
    this.failure = null;
    const hadRun = run.savable() !== null;
    if (wasRunning) run.pause();
    const message =
      `The GPU stopped working for this page${detail}: WebGPU lost its device (a driver reset, a GPU switch, or ` +
      `too long in the background). Nothing you made is lost: ` +
      (hadRun
        ? 'the app rebuilds the GPU backend and continues the run from its last autosave.'
        : 'the app rebuilds the GPU backend and reloads the model.');
    this.emit({ type: 'device-lost', message, reason });
    run.emit({ type: 'error', message, userError: true });
    run.progress('recover', null, 'Rebuilding the GPU backend…');
    void this.serial(() => this.recover(wasRunning)).catch(() => undefined);
  }

  /** Rebuild the backend and restore the run (serial). */
  private async recover(wasRunning: boolean): Promise<void> {
    const run = this.run;
    const runId = run.runId;
    const lostAt = run.savable()?.step ?? null;
    const hadLm = run.hasLm;
    const label = run.model?.label ?? run.cfg.model;
    try {
      try {
        run.dropTrainer();
      } catch {
        /* tensors of a lost device: nothing to free on the GPU */
      }
      try {
        run.disposeLm();
      } catch {
        /* as above */
      }
      forgetWebGpuBackend();
      const report = await this.backend.reselect();
      this.watchDevice();
      const on = report.backend === 'webgpu' ? 'WebGPU' : report.backend.toUpperCase();

      let fromStep: number | null = null;
      let what: string;
      if (lostAt !== null && runId) {
        const saved = await this.slot.load().catch(() => null);
        if (saved && saved.info.runId === runId) {
          const step = await run.restoreSaved(
            saved.files,
            `autosave (step ${saved.info.step})`,
            saved.info.label,
            runId,
          );
          this.lastSaved = { runId, step };
          fromStep = step;
          const redo =
            lostAt > step ? ` (step${lostAt - step > 1 ? 's' : ''} ${step + 1}–${lostAt} are redone)` : '';
          what = `the run continues from its autosave at step ${step}${redo}`;
        } else {
          // No autosave of this run: with its trainer dropped, the run is idle (halt below).
          what = 'this run had no autosave yet, so it starts again from step 0';
        }
      } else {
        if (hadLm) await run.generator();
        what = hadLm ? `${label} is loaded again` : 'nothing needed restoring';
      }
      run.halt();
      if (this.lostAgain) {
        this.lostAgain = false;
        void this.serial(() => this.recover(wasRunning)).catch(() => undefined);
        return;
      }
      this.lost = null;
      const status = run.emitStatus();
      const fell = report.backend !== 'webgpu' && report.notice ? ` ${report.notice}` : '';
      const message = `Recovered from the GPU loss on ${on}: ${what}.${fell}`;
      run.progress('recover', 1, message);
      let after = status;
      const now = run.status();
      if (wasRunning && lostAt !== null && now.step < now.steps) {
        after = run.start();
      }
      this.emit({ type: 'recovered', message, backend: report, status: after, fromStep });
    } catch (e) {
      this.lost = null;
      this.lostAgain = false;
      run.halt();
      const why = e instanceof Error ? e.message : String(e);
      const message =
        `The app could not recover from the GPU loss (${why}). Reload the page; your last autosave will be ` +
        'offered there.';
      this.emit({ type: 'recovery-failed', message });
      run.emit({ type: 'error', message, userError: true });
      run.emitStatus();
    }
  }
}
