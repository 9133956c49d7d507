/**
 * The model worker's side of the reward sandbox (./reward-sandbox.worker.ts): one sandbox worker per version
 * of the person's code, a time budget per batch, and terminate() when the budget runs out — the only way to
 * stop an infinite loop. The next batch then starts a fresh sandbox with the same code.
 */
import { UserError } from '../common/errors';
import type { RewardFn, Sample } from '../core/reward/functions';

export const REWARD_TIME_LIMIT_MS = 2000;
/** How long a sandbox may take to start (module load) before the code counts as broken. */
const START_LIMIT_MS = 15_000;
export const REWARD_CODE_LABEL = 'Your reward code';

export function rewardTimeoutMessage(limitMs = REWARD_TIME_LIMIT_MS): string {
  const s = limitMs / 1000;
  return `Your reward code did not return within ${s} s (an infinite loop?). The run is paused; fix the code and press Start.`;
}

type Reply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
}

/** One running sandbox worker. */
class Sandbox {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private seq = 0;
  readonly ready: Promise<void>;
  dead = false;

  constructor(make: () => Worker) {
    this.worker = make();
    this.ready = new Promise<void>((resolve, reject) => {
      this.worker.addEventListener('message', (ev: MessageEvent) => {
        const msg = ev.data as Reply | { type: 'ready' };
        if ('type' in msg) return resolve();
        const p = this.pending.get(msg.id);
        if (!p) return;
        this.pending.delete(msg.id);
        if (msg.ok) p.resolve(msg.value);
        else p.reject(new Error(msg.error));
      });
      this.worker.addEventListener('error', (ev: ErrorEvent) => {
        ev.preventDefault();
        const err = new Error(`the reward sandbox stopped: ${ev.message || 'unknown error'}`);
        reject(err);
        this.kill(err);
      });
    });
    this.ready.catch(() => undefined);
  }

  call(msg: { type: 'compile'; code: string } | { type: 'score'; sample: Sample }): Promise<unknown> {
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...msg, id });
    });
  }

  kill(reason: Error): void {
    if (this.dead) return;
    this.dead = true;
    this.worker.terminate();
    for (const p of this.pending.values()) p.reject(reason);
    this.pending.clear();
  }
}

/** Resolves with `p`, or rejects with `onTimeout()` after `ms` (and calls it once). */
function withDeadline<T>(p: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(onTimeout()), Math.max(0, ms));
    p.then(
      (v) => (clearTimeout(timer), resolve(v)),
      (e: unknown) => (clearTimeout(timer), reject(e as Error)),
    );
  });
}

function defaultWorker(): Worker {
  return new Worker(new URL('./reward-sandbox.worker.ts', import.meta.url), {
    type: 'module',
    name: 'reward-sandbox',
  });
}

export class RewardSandbox {
  private box: Sandbox | null = null;
  private code: string | null = null;
  private deadline: number | null = null;

  constructor(
    private readonly limitMs = REWARD_TIME_LIMIT_MS,
    private readonly make: () => Worker = defaultWorker,
  ) {}

  get hasCode(): boolean {
    return this.code !== null;
  }

  /**
   * Compile `code` in a fresh sandbox, which replaces the old one. A syntax error is a UserError and keeps the
   * code that was in force.
   */
  async setCode(code: string): Promise<void> {
    if (code.trim() === '')
      throw new UserError('The reward code is empty; write the body of (sample) => number.');
    const previous = { box: this.box, code: this.code };
    this.box = null;
    this.code = code;
    try {
      await this.sandbox();
    } catch (e) {
      (this.box as Sandbox | null)?.kill(e as Error); // the failed candidate
      this.box = previous.box;
      this.code = previous.code;
      throw e;
    }
    previous.box?.kill(new Error('the reward code was replaced'));
  }

  /** A new batch begins: the next score call starts the time budget. */
  beginBatch(): void {
    this.deadline = null;
  }

  /** The sandbox with the current code compiled, started when needed. */
  private async sandbox(): Promise<Sandbox> {
    if (this.box && !this.box.dead) return this.box;
    if (this.code === null) throw new Error('no reward code is set');
    const box = new Sandbox(this.make);
    this.box = box;
    const fail = (why: string) => () => {
      const err = new UserError(why);
      box.kill(err);
      return err;
    };
    await withDeadline(box.ready, START_LIMIT_MS, fail('The reward sandbox did not start; reload the page.'));
    try {
      await withDeadline(
        box.call({ type: 'compile', code: this.code }),
        this.limitMs,
        fail(rewardTimeoutMessage(this.limitMs)),
      );
    } catch (e) {
      box.kill(e as Error);
      if (e instanceof UserError) throw e;
      throw new UserError(`${REWARD_CODE_LABEL} does not compile: ${(e as Error).message}`);
    }
    return box;
  }

  /** Score one sample within what is left of the batch's budget. */
  async score(sample: Sample): Promise<unknown> {
    const box = await this.sandbox();
    this.deadline ??= performance.now() + this.limitMs;
    return withDeadline(box.call({ type: 'score', sample }), this.deadline - performance.now(), () => {
      const err = new UserError(rewardTimeoutMessage(this.limitMs));
      box.kill(err);
      return err;
    });
  }

  /** The reward function the trainer calls (validateScore in core checks the values). */
  rewardFn(): RewardFn {
    return (sample) => this.score(sample) as Promise<number>;
  }

  dispose(): void {
    this.box?.kill(new Error('the reward code was replaced'));
    this.box = null;
    this.code = null;
  }
}
