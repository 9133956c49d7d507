/**
 * The RL job (PPO, GRPO, RLOO, REINFORCE++) the worker's Run drives (./job.ts): core's TrainingSession
 * (src/core/run/session.ts, the same run loop the CLI drives) and the config of a run not built yet
 * (`pendingConfig`). The session owns the trainer, its four models and the run's config while it exists.
 */
import * as tf from '@tensorflow/tfjs-core';
import { validateConfig, type ConfigKey, type TrainConfig } from '../common/config';
import { applyLive } from '../common/config/live';
import { TrainingSession, type RunEnd, type RunOptions, type SessionOptions } from '../core/run/session';
import { restoreSession, type CheckpointSource } from '../core/run/restore';
import { FROZEN_CHECKPOINT_FILES, type CheckpointPurpose } from '../core/run/checkpoint';
import type { FileBody } from '../core/model/safetensors';
import type { PpoTrainer, RewardSource } from '../core/ppo/trainer';
import { describePlan } from '../core/ppo/gpu-plan';
import type { Rollout } from '../core/ppo/rollout';
import type { Tokenizer } from '../core/tokenizer/types';
import type { CausalLM } from '../core/model/causal-lm';
import { asHeapExhaustion } from '../core/model/oom';
import { UserError } from '../common/errors';
import { stepsDoneMessage } from '../common/stops';
import { autosaveDue } from '../services/autosave';
import { PeakMemoryMeter } from '../core/base/memory-peak';
import { REWARD_CODE_LABEL } from './reward-sandbox';
import { newRunId, type Job, type JobContext, type JobStatus } from './job';
import type { MetricsWire, PlanView, SampleView } from './protocol';

/** At most this many samples per step event (the rest are in the metrics). */
const MAX_SAMPLES_PER_EVENT = 64;

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

/** The step-peak meter of this worker's engine (installed at the first step; core/base/memory-peak.ts). */
const STEP_PEAK_METER = new PeakMemoryMeter();

export class RlJob implements Job {
  readonly kind = 'rl';
  /**
   * The config of the run to be built, while there is no session (the session owns the config of a run that
   * exists); null while a session exists. Kept from the dropped session when the run is dropped.
   */
  private pendingConfig: TrainConfig | null = validateConfig({});
  /** The training run (null until the first step builds it, or a checkpoint is restored). */
  private session: TrainingSession | null = null;
  runId: string | null = null;
  /** Measures each step's peak tensor memory (one per engine, shared by the runs of this worker). */
  private readonly peakMeter = STEP_PEAK_METER;
  private heldAtStepStart = 0;

  constructor(private readonly ctx: JobContext) {}

  /** The run's config: the session's when a run exists, else the one the next run is built from. */
  get cfg(): TrainConfig {
    return this.session?.cfg ?? this.pendingConfig!;
  }

  /** The session's trainer, when there is a run. */
  get trainer(): PpoTrainer | null {
    return this.session?.trainer ?? null;
  }

  get spoiled(): string | null {
    return this.session?.spoiled ?? null;
  }

  // ---- config: live changes go to the session, the one place a running config changes ----------------------

  /** The merged config `next` (Run.configure): its `live` keys go to the session when one exists, else all of it. */
  configure(next: TrainConfig, live: readonly ConfigKey[]): void {
    if (this.session) {
      this.session.setHyperparameters(Object.fromEntries(live.map((k) => [k, next[k]])), 'config');
    } else this.pendingConfig = next;
  }

  /** Live keys only (Run.setHyperparameters): the session's setHyperparameters, the same call the CLI makes. */
  setHyperparameters(patch: Record<string, unknown>): void {
    if (this.session) this.session.setHyperparameters(patch, 'setHyperparameters');
    else this.pendingConfig = applyLive(this.cfg, patch, 'setHyperparameters');
  }

  /** The reward code was set or cleared: the session's reward from its next step. */
  rewardChanged(): void {
    this.session?.overrideReward(this.ctx.sandbox.hasCode ? this.codeReward() : null);
  }

  private codeReward(): RewardSource {
    return { kind: 'fn', fn: this.ctx.sandbox.rewardFn(), label: REWARD_CODE_LABEL };
  }

  // ---- Job ------------------------------------------------------------------------------------------------

  status(): JobStatus {
    return { step: this.session?.step ?? 0, steps: this.cfg.steps, job: null, plan: this.planView() };
  }

  /** The plan the run's steps use now (null without a trainer). */
  private planView(): PlanView | null {
    const t = this.trainer;
    if (!t) return null;
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

  checkNotDone(): void {
    if (this.session && this.session.step >= this.cfg.steps) {
      throw new UserError(stepsDoneMessage(this.cfg.steps));
    }
  }

  async start(): Promise<boolean> {
    try {
      await this.ensureSession();
      return true;
    } catch (e) {
      await this.ctx.failed(asHeapExhaustion(e, { phase: 'load' }) ?? e);
      return false;
    }
  }

  async run(opts: RunOptions): Promise<RunEnd | null> {
    const session = this.session;
    if (!session) return null;
    const end = await session.run(opts);
    return this.session === session ? end : null; // reset, replaced or dropped meanwhile
  }

  async step(): Promise<number | null> {
    const session = await this.ensureSession();
    const out = await session.runStep(this.cfg.steps);
    return out.stop ? session.step : null;
  }

  /** After a failed step was reported: the run is saved where it stopped, unless it is spoiled. */
  async afterFailure(): Promise<void> {
    if (this.session && !this.session.spoiled) await this.ctx.serial(() => this.ctx.hooks.autosave());
  }

  pause(): void {
    this.session?.pause();
  }

  /** The run's checkpoint files, with the configured reward in place even while reward code stands in for it. */
  async checkpoint(
    purpose: CheckpointPurpose = 'export',
  ): Promise<{ step: number; files: Map<string, Uint8Array> }> {
    const s = await this.ensureSession();
    return { step: s.step, files: await s.checkpointFiles(purpose) };
  }

  readonly frozenFiles = FROZEN_CHECKPOINT_FILES;

  async saveSources(omit: ReadonlySet<string>): Promise<Map<string, FileBody>> {
    const s = await this.ensureSession();
    return s.checkpointSources('resume', omit);
  }

  savable(): { step: number; historyLength: number } | null {
    const t = this.trainer;
    return t && { step: t.step, historyLength: t.history.length };
  }

  history(): MetricsWire[] {
    return (this.trainer?.history ?? []) as unknown as MetricsWire[];
  }

  trained(): { model: CausalLM; tokenizer: Tokenizer } | null {
    const t = this.trainer;
    return t && { model: t.models.policy, tokenizer: t.tokenizer };
  }

  /** Free every tensor of the run (TrainingSession.dispose: optimisers and the four models); the config stays. */
  drop(): void {
    const s = this.session;
    if (!s) return;
    this.pendingConfig = s.cfg; // a new run is built from it
    this.session = null;
    this.runId = null;
    s.dispose();
  }

  // ---- building and restoring -----------------------------------------------------------------------------

  /** The run's session, built from the config when there is none (memory checked first). */
  async ensureSession(): Promise<TrainingSession> {
    if (this.session) return this.session;
    const { sources } = this.ctx;
    const cfg = this.cfg;
    this.ctx.progress('build', null, `Loading ${cfg.model} for training…`);
    await sources.checkMemory(cfg.model, 'train', cfg);
    this.ctx.disposeLm(); // the trainer's policy takes its place
    const session = await TrainingSession.build(cfg, sources.resources(), this.sessionOptions());
    this.adopt(session, sources.files(cfg.model).label);
    this.ctx.progress('build', 1, `Loaded ${cfg.model}.`);
    return session;
  }

  /** The run saved in `source`, loaded through core's one restore (src/core/run/restore.ts); not adopted yet. */
  load(source: CheckpointSource): Promise<TrainingSession> {
    return restoreSession(source, this.ctx.sources.resources(), this.sessionOptions());
  }

  /** Make `session` the run (after a build or a restore); `runId` keeps the identity of a resumed run. */
  adopt(session: TrainingSession, label: string, runId: string = newRunId()): void {
    this.session = session;
    this.pendingConfig = null;
    this.runId = runId;
    if (this.ctx.sandbox.hasCode) session.overrideReward(this.codeReward());
    this.ctx.adopted(session.trainer.models.policy, session.trainer.tokenizer, label);
  }

  /** The session's callbacks: its phases, steps and autosaves become the run's events. */
  private sessionOptions(): SessionOptions {
    const { ctx } = this;
    return {
      hooks: {
        phase: (p) => ctx.phase(p),
        // A phase in one part says nothing more than the phase itself.
        progress: ({ done, total, unit }) => {
          if (total > 1) ctx.phaseProgress({ done, total, unit });
        },
        beforeStep: () => {
          // The step's peak memory (core/base/memory-peak.ts), shown beside what it holds after.
          this.peakMeter.install();
          this.peakMeter.reset();
          this.heldAtStepStart = tf.memory().numBytes;
          return ctx.sandbox.beginBatch();
        },
        // Held-out evaluation scores 2 × its prompts: the reward code gets a time budget of its own for them.
        beforeEval: () => ctx.sandbox.beginBatch(),
        step: (r, s) => {
          const memory = ctx.memory();
          if (memory) memory.peakBytes = this.heldAtStepStart + this.peakMeter.read().liveBytesGrowth;
          ctx.emit({
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
        autosave: () => ctx.hooks.autosave(),
      },
      heapBudget: () => ctx.heapBudget(),
    };
  }
}
