/**
 * The run loop of the playground's supervised jobs, DPO (src/core/dpo/trainer.ts) and SFT (src/core/sft/sft.ts
 * SftTrainer), as the worker drives them (src/worker/run.ts): the same shape as TrainingSession's loop
 * (src/core/run/session.ts) — `run()` steps until the target step, `pause()` or a failing step, each step queued
 * through the adapter's `schedule` with `between` awaited after it, and a `step` hook per step — over a trainer
 * that steps on a fixed data set instead of sampling. DPO's held-out evaluation runs every `evalEvery` steps and at
 * the last step, as `train --config` with "algorithm": "dpo" does (src/cli/train-dpo.ts).
 *
 * Platform-neutral (no node:*, no DOM).
 */
import type { RunEnd, RunOptions } from './session';
import type { Phase } from '../ppo/trainer';
import type { CausalLM } from '../model/causal-lm';
import type { Tokenizer } from '../tokenizer/types';
import { UserError } from '../../common/errors';
import { stepsDoneMessage } from '../../common/stops';
import { asHeapExhaustion } from '../model/oom';

/** What a supervised trainer offers the loop (DpoTrainer and SftTrainer are both one). */
export interface SupervisedTrainer<M extends { step: number }> {
  readonly step: number;
  readonly history: M[];
  /** The model being trained (generate and "Continue with …" read it). */
  readonly policy: CausalLM;
  readonly tokenizer: Tokenizer;
  /** One step; `evaluate` asks for the held-out metrics too (DPO; SFT ignores it). */
  trainStep(evaluate: boolean): Promise<M>;
  dispose(): void;
}

export interface SupervisedHooks<M> {
  /** A step finished (its metrics). */
  step?(metrics: M): void | Promise<void>;
  /** 'updating' while a step runs, 'idle' after it. */
  phase?(phase: Phase): void;
}

/** Whether step `step` of a run ending at `last` evaluates the held-out pairs (every evalEvery steps, and the last). */
export function isSupervisedEvalStep(step: number, evalEvery: number, last: number): boolean {
  return step === last || (evalEvery > 0 && step % evalEvery === 0);
}

export class SupervisedSession<M extends { step: number }> {
  private pauseRequested = false;
  private runningNow = false;
  private disposed = false;

  constructor(
    /** Which job this is. */
    readonly kind: 'dpo' | 'sft',
    readonly trainer: SupervisedTrainer<M>,
    /** The run's last step. */
    readonly steps: number,
    /** Held-out evaluation every this many steps (0: only at the last step). */
    readonly evalEvery: number,
    private readonly hooks: SupervisedHooks<M> = {},
  ) {}

  get step(): number {
    return this.trainer.step;
  }

  get history(): M[] {
    return this.trainer.history;
  }

  get running(): boolean {
    return this.runningNow;
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  pause(): void {
    this.pauseRequested = true;
  }

  /** One step (a UserError when the run is at its last step). */
  async runStep(until: number = this.steps): Promise<M> {
    if (this.disposed) throw new Error('this supervised session was disposed; build a new one.');
    if (this.trainer.step >= until) throw new UserError(stepsDoneMessage(until));
    const next = this.trainer.step + 1;
    this.hooks.phase?.('updating');
    let m: M;
    try {
      m = await this.trainer.trainStep(isSupervisedEvalStep(next, this.evalEvery, until));
    } catch (e) {
      throw asHeapExhaustion(e, { phase: 'update', step: next }) ?? e;
    } finally {
      this.hooks.phase?.('idle');
    }
    await this.hooks.step?.(m);
    return m;
  }

  /** Step until `until` (default the run's steps), `pause()` or a failing step, as TrainingSession.run. */
  async run(opts: RunOptions = {}): Promise<RunEnd> {
    if (this.runningNow) throw new Error('SupervisedSession.run: already running.');
    const schedule = opts.schedule ?? (<T>(job: () => Promise<T>) => job());
    const until = opts.until ?? this.steps;
    this.pauseRequested = false;
    this.runningNow = true;
    try {
      for (;;) {
        if (this.pauseRequested || this.disposed) return { reason: 'paused', step: this.trainer.step };
        if (this.trainer.step >= until) return { reason: 'done', step: this.trainer.step };
        try {
          await schedule(async () => (this.pauseRequested || this.disposed ? null : this.runStep(until)));
        } catch (error) {
          return { reason: 'error', step: this.trainer.step, error };
        }
        await opts.between?.();
      }
    } finally {
      this.runningNow = false;
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.pauseRequested = true;
    this.trainer.dispose();
  }
}
