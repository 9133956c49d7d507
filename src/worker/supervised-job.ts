/**
 * The supervised job (DPO on preference pairs, or SFT) the worker's Run drives instead of the RL algorithm
 * (./job.ts): the person's request (`spec`) and core's SupervisedSession built from it and the run's config
 * (./supervised.ts). Dropped (reset, a config change) it keeps its request and is built again at the next step.
 * docs/dpo.md "In the app", docs/sft.md.
 */
import { DpoTrainer } from '../core/dpo/trainer';
import type { DpoConfig } from '../common/config/dpo';
import type { RunEnd, RunOptions } from '../core/run/session';
import type { SupervisedHooks } from '../core/run/supervised-session';
import type { CausalLM } from '../core/model/causal-lm';
import type { Tokenizer } from '../core/tokenizer/types';
import { exportLM } from '../core/model/folder';
import { collectBytes, type FileBody } from '../core/model/safetensors';
import { asHeapExhaustion } from '../core/model/oom';
import { autosaveDue } from '../services/autosave';
import { UserError } from '../common/errors';
import { stepsDoneMessage } from '../common/stops';
import {
  buildSupervised,
  JOB_DATA_FILE,
  JOB_FILE,
  restoreDpoJob,
  type AnySupervisedSession,
  type DpoJobWire,
  type SupervisedMetrics,
} from './supervised';
import { newRunId, type Job, type JobContext, type JobStatus } from './job';
import type { MetricsWire, SupervisedJobStatus, SupervisedJobWire } from './protocol';

export class SupervisedJob implements Job {
  readonly kind: 'dpo' | 'sft';
  runId: string | null = null;
  readonly spoiled = null;
  /** The job's session (null until built, or after it was dropped). */
  private session: AnySupervisedSession | null = null;
  /** What the status says of the job (from its last build). */
  private described: SupervisedJobStatus | null = null;

  constructor(
    private readonly ctx: JobContext,
    /** The request, checked (./supervised.ts checkJob). */
    readonly spec: SupervisedJobWire,
  ) {
    this.kind = spec.kind;
  }

  /** Build the job's session from its request over the run's model (its data is read here: errors name lines). */
  async build(): Promise<void> {
    const { ctx, spec } = this;
    const cfg = ctx.cfg();
    ctx.progress('build', null, `Loading ${cfg.model} for ${spec.kind.toUpperCase()}…`);
    // What loading the model needs on this backend (its buffer limits, the WASM heap), checked before loading.
    await ctx.sources.checkMemory(cfg.model, 'load');
    const built = await buildSupervised(
      spec,
      cfg,
      ctx.sources.files(cfg.model),
      this.hooks(),
      ctx.sources.modelOptions(),
    );
    ctx.progress('build', 1, `Loaded ${cfg.model}.`);
    this.session = built.session;
    this.described = built.status;
    this.runId = newRunId();
  }

  /** Resume the DPO job `spec` from its checkpoint's files (a zip the app exported), at its step. */
  async restore(files: Map<string, Uint8Array>, label: string, runId: string): Promise<void> {
    const { session, status } = await restoreDpoJob(
      files,
      label,
      this.spec as DpoJobWire,
      this.hooks(),
      this.ctx.sources.modelOptions(),
    );
    this.session = session;
    this.described = status;
    this.runId = runId;
  }

  /** The job's hooks: its phases and steps become the run's events (no samples, no alerts). */
  private hooks(): SupervisedHooks<SupervisedMetrics> {
    const { ctx } = this;
    return {
      phase: (p) => ctx.phase(p),
      step: async (m) => {
        ctx.emit({
          type: 'step',
          metrics: { ...m } as unknown as MetricsWire,
          samples: [],
          alerts: [],
          memory: ctx.memory(),
        });
        // A DPO job is autosaved as an RL run is (every min(saveEvery, 10) steps; its saveEvery is DPO's).
        const dpo = this.dpoConfig();
        if (dpo && autosaveDue(m.step, dpo.saveEvery)) await ctx.hooks.autosave();
      },
    };
  }

  /** The DPO job's config (contracts §9), or null for SFT (or while not built). */
  dpoConfig(): DpoConfig | null {
    return this.session?.trainer instanceof DpoTrainer ? this.session.trainer.cfg : null;
  }

  // ---- Job ------------------------------------------------------------------------------------------------

  status(): JobStatus {
    const s = this.session;
    const described = JSON.parse(JSON.stringify(this.described)) as SupervisedJobStatus;
    return {
      step: s?.step ?? 0,
      steps: s?.steps ?? Number(described.settings.steps),
      job: described,
      plan: null,
    };
  }

  checkNotDone(): void {
    const s = this.session;
    if (s && s.step >= s.steps) throw new UserError(stepsDoneMessage(s.steps));
  }

  /** The job's session, built again from its request when it was dropped; a failure is reported. */
  async start(): Promise<boolean> {
    if (this.session) return true;
    try {
      this.ctx.disposeLm();
      await this.build();
      return true;
    } catch (e) {
      await this.ctx.failed(asHeapExhaustion(e, { phase: 'load' }) ?? e);
      return false;
    }
  }

  async run(opts: RunOptions): Promise<RunEnd | null> {
    const sup = this.session;
    if (!sup) return null;
    const from = sup.step;
    const end = await sup.run(opts);
    if (this.session !== sup) return null;
    // Saved where it stopped, as TrainingSession.run does for an RL run.
    if (sup.step > from && end.reason !== 'error') await this.ctx.serial(() => this.ctx.hooks.autosave());
    return end;
  }

  async step(): Promise<number | null> {
    if (!this.session) throw new Error('SupervisedJob.step: not built (start first).');
    await this.session.runStep();
    return null;
  }

  async afterFailure(): Promise<void> {
    // The last autosave stays the job's good state.
  }

  pause(): void {
    this.session?.pause();
  }

  /**
   * The job's files: a DPO run's checkpoint (docs/dpo.md: model, adapters under LoRA, reference, optimiser,
   * dpo_state.json) or the SFT'd model folder (config.json, model.safetensors, the tokenizer's files).
   */
  async checkpoint(): Promise<{ step: number; files: Map<string, Uint8Array> }> {
    const { step, files } = await this.sources(new Set());
    const out = new Map<string, Uint8Array>();
    for (const [k, v] of files) out.set(k, await collectBytes(v));
    return { step, files: out };
  }

  /** A DPO job's reference and its pairs (SFT jobs are not saved). */
  readonly frozenFiles: readonly string[] = ['ref_model.safetensors', JOB_DATA_FILE];

  async saveSources(omit: ReadonlySet<string>): Promise<Map<string, FileBody>> {
    if (!(this.session?.trainer instanceof DpoTrainer)) throw new Error('only a DPO job is saved');
    return (await this.sources(omit)).files;
  }

  /** checkpoint()'s files, the weights streamed as they are written, without `omit`. */
  private async sources(omit: ReadonlySet<string>): Promise<{ step: number; files: Map<string, FileBody> }> {
    const sup = (await this.start()) ? this.session : null;
    if (!sup) throw new UserError('The DPO / SFT job could not be built; see the error above.');
    const files = new Map<string, FileBody>();
    if (sup.trainer instanceof DpoTrainer) {
      for (const [k, v] of await sup.trainer.checkpointSources()) if (!omit.has(k)) files.set(k, v);
      // The pairs and the request, so that importing the zip resumes the job (dpoJobOf, restoreDpoJob).
      const { data, ...request } = this.spec;
      if (!omit.has(JOB_DATA_FILE)) files.set(JOB_DATA_FILE, new TextEncoder().encode(data));
      files.set(JOB_FILE, new TextEncoder().encode(JSON.stringify(request) + '\n'));
    } else {
      for (const [k, v] of await exportLM(sup.trainer.policy, sup.trainer.tokenizer)) files.set(k, v);
    }
    return { step: sup.step, files };
  }

  /** A DPO job's checkpoint holds its pairs; an SFT job's weights alone cannot resume it (null). */
  savable(): { step: number; historyLength: number } | null {
    const s = this.session;
    if (!(s?.trainer instanceof DpoTrainer)) return null;
    return { step: s.step, historyLength: s.history.length };
  }

  history(): MetricsWire[] {
    return (this.session?.history ?? []) as unknown as MetricsWire[];
  }

  trained(): { model: CausalLM; tokenizer: Tokenizer } | null {
    const s = this.session;
    return s && { model: s.trainer.policy, tokenizer: s.trainer.tokenizer };
  }

  /** Free the session's tensors; its request stays (start() builds it again). */
  drop(): void {
    const s = this.session;
    if (!s) return;
    this.session = null;
    this.runId = null;
    s.dispose();
  }
}
