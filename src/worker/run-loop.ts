/**
 * The training run inside the worker: the trainer (four models, rollout, optimisers), the run state, the loop
 * that steps until paused, and the events the UI subscribes to.
 *
 * Every tfjs job runs through the worker's serial queue (api.ts). The loop queues one step at a time and
 * yields a macrotask between steps, so pause / setHyperparameters / generate calls are answered between steps.
 * pause() and setHyperparameters() take effect without waiting: the first stops the loop after the step in
 * flight, the second is applied at the start of the next step (so that step's metrics show it).
 */
import {
  applyLiveChanges,
  CONFIG_FIELDS,
  CONFIG_KEYS,
  validateConfig,
  type TrainConfig,
} from '../core/config';
import { buildTrainer } from '../core/ppo/setup';
import { checkpointFiles } from '../core/checkpoint';
import type { PpoTrainer, RewardSource } from '../core/ppo/trainer';
import type { Rollout } from '../core/ppo/rollout';
import type { Tokenizer } from '../core/tokenizer/types';
import type { GPT2 } from '../core/model/gpt2';
import { loadLM, type LoadedLM } from '../core/model/folder';
import { makeReward } from '../core/reward/functions';
import { checkTaskName } from '../core/tasks';
import { isUserError, UserError } from '../core/errors';
import { PREFERENCE_REWARD_MODEL, type ModelSources } from './sources';
import { RewardSandbox, REWARD_CODE_LABEL } from './reward-sandbox';
import type {
  MemoryReport,
  ModelSummary,
  Phase,
  RunState,
  RunStatus,
  SampleView,
  TrainerEvent,
} from './protocol';

export type Serial = <T>(job: () => Promise<T>) => Promise<T>;
type Listener = (e: TrainerEvent) => unknown;

/** What the run asks of autosave and device-loss handling (./reliability.ts); all run inside the serial queue. */
export interface RunHooks {
  /** A step just completed (autosave when it is an autosave step). */
  afterStep(): Promise<void>;
  /** The run just paused after steps (pause, stepOnce, an error, the last step): autosave it. */
  afterPause(): Promise<void>;
  /** A step failed: is it because the GPU device was lost? (Recovery then takes over; no error event.) */
  failedForDeviceLoss(): Promise<boolean>;
}

const NO_HOOKS: RunHooks = {
  afterStep: async () => {},
  afterPause: async () => {},
  failedForDeviceLoss: async () => false,
};

let runCounter = 0;
/** A fresh run id: a run keeps it through autosaves, resumes and device recovery. */
export function newRunId(): string {
  return `${Date.now().toString(36)}-${(++runCounter).toString(36)}-${Math.floor(Math.random() * 1e9).toString(36)}`;
}

/** At most this many samples per step event (the rest are in the metrics). */
const MAX_SAMPLES_PER_EVENT = 64;

export function summarise(model: GPT2, label: string): ModelSummary {
  const c = model.config;
  let params = 0;
  for (const v of model.params.values()) params += v.size;
  const { n_layer, n_embd, n_head, vocab_size, n_positions, tokenizer } = c;
  return { label, n_layer, n_embd, n_head, vocab_size, n_positions, params, tokenizer };
}

/** The rollout as the UI shows it: counted tokens only, with per-token logprob / KL / advantage. */
export function sampleViews(r: Rollout, tok: Tokenizer, limit = MAX_SAMPLES_PER_EVENT): SampleView[] {
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
    return { prompt, response: r.responseTexts[i], score: r.scores[i], kl, tokens };
  });
}

function describeReward(cfg: TrainConfig): string {
  const r = cfg.reward;
  if (r === undefined) return cfg.task ? `task ${cfg.task}` : 'none';
  if (typeof r === 'string') return `reward ${r}`;
  if ('mix' in r) return `reward mix (${r.mix.map((m) => `${m.weight}×${m.name}`).join(' + ')})`;
  return r.model === PREFERENCE_REWARD_MODEL ? 'reward model from preferences' : `reward model ${r.model}`;
}

export class Run {
  cfg: TrainConfig = validateConfig({});
  trainer: PpoTrainer | null = null;
  /** The model used by generate when no run exists (loaded by loadModel, or lazily). */
  private lm: { name: string; lm: LoadedLM } | null = null;
  /** The policy in use, for status. */
  model: ModelSummary | null = null;
  /** Whether a model was named (loaded, configured or trained): generate may then load `cfg.model` itself. */
  private chosen = false;
  state: RunState = 'idle';
  phase: Phase = 'idle';
  readonly sandbox = new RewardSandbox();
  /** The reward the trainer was built with; reward code swaps in front of it and back. */
  private baseReward: RewardSource | null = null;
  private readonly listeners = new Set<Listener>();
  private looping = false;
  /** The identity of the run (null while there is no trainer). */
  runId: string | null = null;
  hooks: RunHooks = NO_HOOKS;
  /** tf.memory() for the `step` events (api.ts sets it; it knows the backend). */
  memory: () => MemoryReport | undefined = () => undefined;

  constructor(
    private readonly sources: ModelSources,
    private readonly serial: Serial,
  ) {}

  // ---- events ---------------------------------------------------------------------------------------------

  status(): RunStatus {
    const reward = this.sandbox.hasCode ? 'your reward code' : describeReward(this.cfg);
    return {
      state: this.state,
      phase: this.phase,
      step: this.trainer?.step ?? 0,
      steps: this.cfg.steps,
      config: JSON.parse(JSON.stringify(this.cfg)) as RunStatus['config'],
      model: this.model,
      reward,
    };
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
    if (p === this.phase) return;
    this.phase = p;
    if (p === 'scoring') this.sandbox.beginBatch();
    this.emitStatus();
  }

  // ---- config ---------------------------------------------------------------------------------------------

  /** Merge `partial` over the current config (serial). Non-live changes drop the run. */
  async configure(partial: Record<string, unknown>): Promise<RunStatus> {
    const given = Object.fromEntries(Object.entries(partial).filter(([, v]) => v !== undefined));
    const next = validateConfig({ ...this.cfg, ...given }, 'config');
    if (next.task !== null) checkTaskName(next.task);
    if (next.reward !== undefined && !(typeof next.reward === 'object' && 'model' in next.reward)) {
      makeReward(next.reward, 'config: "reward"');
    }
    const changed = CONFIG_KEYS.filter((k) => JSON.stringify(next[k]) !== JSON.stringify(this.cfg[k]));
    if (changed.some((k) => !CONFIG_FIELDS[k].live)) {
      this.dropTrainer();
      this.state = 'idle';
    }
    if (next.model !== this.cfg.model) {
      this.disposeLm();
      this.model = null;
    }
    if ('model' in given) this.chosen = true;
    this.cfg = next;
    return this.emitStatus();
  }

  /** Live keys only; applied when the next step starts (not serial: answers while a step runs). */
  setHyperparameters(patch: Record<string, unknown>): RunStatus {
    this.cfg = applyLiveChanges(this.cfg, patch, 'setHyperparameters');
    return this.emitStatus();
  }

  // ---- run state ------------------------------------------------------------------------------------------

  start(): RunStatus {
    if (this.trainer && this.trainer.step >= this.cfg.steps) {
      throw new UserError(
        `The run has done its ${this.cfg.steps} steps; raise "steps" to continue it, or reset.`,
      );
    }
    if (this.state !== 'running') {
      this.state = 'running';
      this.emitStatus();
    }
    if (!this.looping) void this.loop();
    return this.status();
  }

  pause(): RunStatus {
    if (this.state !== 'running') return this.status();
    this.state = 'paused';
    return this.emitStatus();
  }

  async stepOnce(): Promise<RunStatus> {
    if (this.state === 'running') return this.pause();
    return this.serial(async () => {
      const before = this.trainer?.step;
      await this.runOneStep();
      if (this.trainer) {
        this.state = 'paused';
        if (this.trainer.step !== before) await this.hooks.afterPause();
      }
      return this.emitStatus();
    });
  }

  /** Drop the run (serial): the next step starts fresh from the configured model. */
  reset(): RunStatus {
    this.dropTrainer();
    this.state = 'idle';
    this.phase = 'idle';
    return this.emitStatus();
  }

  private async loop(): Promise<void> {
    this.looping = true;
    try {
      while (this.state === 'running') {
        await this.serial(() => this.runOneStep(true));
        if (this.state !== 'running') break;
        if (this.trainer && this.trainer.step >= this.cfg.steps) {
          this.state = 'paused';
          this.emitStatus();
          break;
        }
        // Let queued messages (pause, setHyperparameters, generate) in before the next step.
        await new Promise((r) => setTimeout(r, 0));
      }
    } finally {
      this.looping = false;
    }
    if (this.trainer && this.state === 'paused') await this.serial(() => this.hooks.afterPause());
  }

  /** One step; any failure pauses the run and becomes an `error` event. */
  private async runOneStep(fromLoop = false): Promise<void> {
    // A pause / reset / import queued ahead of this step has already stopped the loop.
    if (fromLoop && this.state !== 'running') return;
    try {
      const t = await this.ensureTrainer();
      if (t.step >= this.cfg.steps) {
        throw new UserError(
          `The run has done its ${this.cfg.steps} steps; raise "steps" to continue it, or reset.`,
        );
      }
      if (t.cfg !== this.cfg) t.setConfig(this.cfg);
      this.sandbox.beginBatch();
      const r = await t.trainStep();
      this.emit({
        type: 'step',
        metrics: { ...r.metrics },
        samples: sampleViews(r.rollout, t.tokenizer),
        alerts: r.alerts.map(({ id, step, message, advice }) => ({ id, step, message, advice })),
        memory: this.memory(),
      });
      await this.hooks.afterStep();
    } catch (e) {
      // A lost GPU fails the step in flight; recovery (./reliability.ts) restores the run and says so.
      if (await this.hooks.failedForDeviceLoss()) {
        this.phase = 'idle';
        return;
      }
      this.state = this.trainer ? 'paused' : 'idle';
      this.phase = 'idle';
      const message = e instanceof Error ? e.message : String(e);
      this.emit({ type: 'error', message, userError: isUserError(e) });
      this.emitStatus();
    }
  }

  // ---- models ---------------------------------------------------------------------------------------------

  /** The trainer, built from the config when there is none (memory checked first). */
  async ensureTrainer(): Promise<PpoTrainer> {
    if (this.trainer) return this.trainer;
    const cfg = this.cfg;
    this.progress('build', null, `Loading ${cfg.model} for training…`);
    await this.sources.checkMemory(cfg.model);
    this.disposeLm(); // the trainer's policy takes its place
    const t = await buildTrainer(cfg, this.sources.resources());
    this.adopt(t, this.sources.files(cfg.model).label);
    this.progress('build', 1, `Loaded ${cfg.model}.`);
    return t;
  }

  /** The run's checkpoint files, with the configured reward in place even while reward code stands in for it. */
  async checkpoint(): Promise<{ step: number; files: Map<string, Uint8Array> }> {
    const t = await this.ensureTrainer();
    const current = t.models.reward;
    if (this.baseReward) t.models.reward = this.baseReward;
    try {
      return { step: t.step, files: await checkpointFiles(t) };
    } finally {
      t.models.reward = current;
    }
  }

  /** Make `t` the run (after a build or a restore); `runId` keeps the identity of a resumed run. */
  adopt(t: PpoTrainer, label: string, runId: string = newRunId()): void {
    this.trainer = t;
    this.runId = runId;
    this.cfg = t.cfg;
    this.baseReward = t.models.reward;
    if (this.sandbox.hasCode) t.models.reward = this.codeReward();
    t.onPhase = (p) => this.setPhase(p);
    this.model = summarise(t.models.policy, label);
    this.chosen = true;
  }

  /** Free every tensor of the run: optimisers (trainer.dispose) and the four models. */
  dropTrainer(): void {
    const t = this.trainer;
    if (!t) return;
    this.trainer = null;
    this.runId = null;
    t.onPhase = () => {};
    t.dispose();
    t.models.policy.dispose();
    t.models.ref.dispose();
    t.models.value.dispose();
    const reward = this.baseReward ?? t.models.reward;
    if (reward.kind === 'model') reward.model.dispose();
    this.baseReward = null;
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
    const lm = await loadLM(files, { trainable: false, label: 'policy' });
    this.dropTrainer();
    this.disposeLm();
    this.lm = { name, lm };
    this.cfg = validateConfig({ ...this.cfg, model: name });
    this.state = 'idle';
    this.model = summarise(lm.model, files.label);
    this.chosen = true;
    this.emitStatus();
    return this.model;
  }

  /** The model generate uses: the trained policy while a run exists, else the loaded one. */
  async generator(): Promise<{ model: GPT2; tokenizer: Tokenizer }> {
    if (this.trainer) return { model: this.trainer.models.policy, tokenizer: this.trainer.tokenizer };
    if (!this.lm) {
      if (!this.chosen) throw new UserError('No model is loaded yet; load a model first.');
      const files = this.sources.files(this.cfg.model);
      this.lm = { name: this.cfg.model, lm: await loadLM(files, { trainable: false, label: 'policy' }) };
      this.model ??= summarise(this.lm.lm.model, files.label);
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
      if (this.trainer && this.baseReward) this.trainer.models.reward = this.baseReward;
    } else {
      await this.sandbox.setCode(code);
      if (this.trainer) this.trainer.models.reward = this.codeReward();
    }
    return this.emitStatus();
  }
}
