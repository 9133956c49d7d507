/**
 * Getting the config the person edits (the store's `editedConfig`) to the worker, whose job's config in force
 * comes back in its status (the store's `runStatus.config`). Live keys of a started run go as one
 * `setHyperparameters(patch)` (gathered for a moment while a slider moves), everything else `configure`s the
 * next run, and a non-live key changed during a run waits for Reset ("applies on reset"). The UI never writes
 * `runStatus.config` itself: the worker answers a change with its number and sends the status it caused as an
 * event (RunStatus.configSeq), the one way that status reaches the store.
 */
import { CONFIG_FIELDS, validateConfig, type ConfigKey, type TrainConfig } from '../../common/config';
import type { ConfigPatch, RunStatus, TrainConfigWire } from '../../worker/protocol';
import { describeError } from '../errors';
import type { SliceContext } from './context';

function formatValue(v: unknown): string {
  return typeof v === 'number' ? String(Number(v.toPrecision(4))) : JSON.stringify(v);
}

export function sameValue(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * The config as `configure` wants it: every key, null for the optional ones left out (the worker merges over
 * its current config, so an absent key would keep an old reward or prompt list).
 */
export function toWire(config: TrainConfig): ConfigPatch {
  const wire: Record<string, unknown> = {};
  for (const k of Object.keys(CONFIG_FIELDS) as ConfigKey[]) wire[k] = config[k] ?? null;
  return wire as ConfigPatch;
}

/**
 * The edited config after the worker's config moved from `before` to `after`: keys the worker changed by
 * itself (a loaded model, a trained reward model, an import) are taken, unless the person has an edit of
 * that key still on its way (`inFlight`: gathered or sent and not yet answered — an edit back to the old
 * value looks like no edit at all, so the value alone cannot tell) or waiting for Reset.
 */
export function mergeWorkerConfig(
  edited: TrainConfig,
  before: TrainConfigWire | undefined,
  after: TrainConfigWire,
  inFlight: readonly ConfigKey[] = [],
): TrainConfig {
  if (!before) return edited;
  let out: Record<string, unknown> | null = null;
  for (const k of Object.keys(CONFIG_FIELDS) as ConfigKey[]) {
    const was = before[k] ?? null;
    const now = after[k] ?? null;
    if (sameValue(was, now) || !sameValue(edited[k] ?? null, was) || inFlight.includes(k)) continue;
    out ??= { ...edited };
    if (now === null && CONFIG_FIELDS[k].type !== 'string' && CONFIG_FIELDS[k].type !== 'stopToken')
      delete out[k];
    else out[k] = now;
  }
  return (out as unknown as TrainConfig | null) ?? edited;
}

/** A run has begun once a step ran or it is running: from then on only live keys reach it. */
export function runStarted(run: RunStatus | null): boolean {
  return run !== null && (run.step > 0 || run.state !== 'idle');
}

/** Why the config cannot be used, or null. */
export function configProblem(config: TrainConfig): string | null {
  try {
    validateConfig(config, 'settings');
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

/** The keys whose value differs between the edited config and the one in force. */
export function pendingKeys(edited: TrainConfig, inForce: TrainConfigWire | undefined): ConfigKey[] {
  if (!inForce) return [];
  return (Object.keys(CONFIG_FIELDS) as ConfigKey[]).filter(
    (k) => !sameValue(edited[k] ?? null, inForce[k] ?? null),
  );
}

export function createConfigSync(ctx: SliceContext) {
  let livePatch: Record<string, unknown> = {};
  let liveTimer: ReturnType<typeof setTimeout> | null = null;
  let configureTimer: ReturnType<typeof setTimeout> | null = null;
  let inFlight: Promise<void> = Promise.resolve();
  /** Keys edited and not sent yet; keys sent, with how many unanswered messages carry each. */
  const gathered = new Set<ConfigKey>();
  const sent = new Map<ConfigKey, number>();
  const publish = () => {
    const keys = [...new Set([...gathered, ...sent.keys()])];
    if (!sameValue(keys, ctx.get().editsInFlight)) ctx.set({ editsInFlight: keys });
  };
  /** The gathered keys (or `keys`) go out in one message; returns them for `answered`. */
  const sending = (keys: readonly ConfigKey[] = [...gathered]): ConfigKey[] => {
    for (const k of keys) {
      gathered.delete(k);
      sent.set(k, (sent.get(k) ?? 0) + 1);
    }
    publish();
    return [...keys];
  };
  const answered = (keys: readonly ConfigKey[]) => {
    for (const k of keys) {
      const n = (sent.get(k) ?? 1) - 1;
      if (n > 0) sent.set(k, n);
      else sent.delete(k);
    }
    publish();
  };
  /**
   * Send one message carrying `keys`. The worker answers with the change's number; the status it caused comes
   * as an event, taken (mergeWorkerConfig) while the keys still count as in flight, so an edit made meanwhile
   * stays. Then they are answered, and `taken` sees that status.
   */
  const ask = async (
    keys: ConfigKey[],
    request: () => Promise<number>,
    taken?: (status: RunStatus) => void,
  ): Promise<void> => {
    let status: RunStatus | null;
    try {
      status = await ctx.configAnswered(await request());
    } finally {
      answered(keys);
    }
    if (status) taken?.(status);
  };
  /** A live change the worker took: marked on the charts at the next step, the first that uses it. */
  const markChange = (before: TrainConfigWire | undefined, status: RunStatus) => {
    const was = before as unknown as Record<string, unknown> | undefined;
    const now = status.config as unknown as Record<string, unknown>;
    if (!was) return;
    const parts = (Object.keys(CONFIG_FIELDS) as ConfigKey[])
      .filter((k) => CONFIG_FIELDS[k].live && !sameValue(was[k] ?? null, now[k] ?? null))
      .map((k) => `${k} ${formatValue(was[k])} → ${formatValue(now[k])}`);
    if (parts.length === 0) return;
    const step = status.step + 1;
    const marks = ctx.get().changeMarks.filter((m) => m.step !== step);
    const same = ctx.get().changeMarks.find((m) => m.step === step);
    ctx.set({
      changeMarks: [...marks, { step, text: same ? `${same.text}; ${parts.join('; ')}` : parts.join('; ') }],
    });
  };

  const chain = (job: () => Promise<void>) => {
    inFlight = inFlight.then(job, job);
    return inFlight;
  };

  const sendLive = () =>
    chain(async () => {
      liveTimer = null;
      const patch = livePatch;
      livePatch = {};
      if (Object.keys(patch).length === 0) return;
      const keys = sending(Object.keys(patch) as ConfigKey[]);
      try {
        // The config in force before the patch: the worker's status event may bring the new one before its answer.
        const was = ctx.get().runStatus?.config;
        await ask(
          keys,
          () => ctx.api.setHyperparameters(patch),
          (status) => markChange(was, status),
        );
      } catch (e) {
        // Show the problem and put the controls back to what the job really uses.
        const inForce = (ctx.get().runStatus?.config ?? {}) as unknown as Record<string, unknown>;
        const restored = { ...ctx.get().editedConfig } as Record<string, unknown>;
        for (const k of Object.keys(patch)) restored[k] = inForce[k];
        ctx.set({ error: describeError(e), editedConfig: restored as unknown as TrainConfig });
      }
    });

  const sendConfigure = () =>
    chain(async () => {
      configureTimer = null;
      const { editedConfig: config } = ctx.get();
      if (configProblem(config) !== null) return;
      const keys = sending();
      try {
        await ask(keys, () => ctx.api.configure(toWire(config)));
      } catch (e) {
        ctx.set({ error: describeError(e) });
      }
    });

  const later = (fn: () => Promise<void>) =>
    setTimeout(() => {
      void fn();
    }, ctx.opts.sendDelayMs);

  return {
    /**
     * These keys of the edited config changed (one slider, or all a pasted link changed): tell the worker
     * what it may hear now, in one message.
     */
    changed(keys: readonly ConfigKey[]): void {
      if (keys.length === 0) return;
      const { runStatus: run, configProblem: problem, editedConfig } = ctx.get();
      if (runStarted(run)) {
        // The worker checks a live patch against the config in force; other keys wait for Reset.
        const live = keys.filter((k) => CONFIG_FIELDS[k].live);
        if (live.length === 0) return;
        for (const k of live) {
          livePatch[k] = editedConfig[k] ?? null;
          gathered.add(k);
        }
        publish();
        if (ctx.opts.sendDelayMs <= 0) void sendLive();
        else liveTimer ??= later(sendLive);
        return;
      }
      for (const k of keys) gathered.add(k);
      publish();
      if (problem !== null) return;
      if (ctx.opts.sendDelayMs <= 0) void sendConfigure();
      else {
        if (configureTimer) clearTimeout(configureTimer);
        configureTimer = later(sendConfigure);
      }
    },
    /** SliceContext.exclusive: `job` after the messages before it, and before those after it. */
    exclusive<T>(job: () => Promise<T>): Promise<T> {
      const run = inFlight.then(job, job);
      inFlight = run.then(
        () => undefined,
        () => undefined,
      );
      return run;
    },
    /** Send what is gathered and wait for the worker's answers. */
    async flush(): Promise<void> {
      if (liveTimer) {
        clearTimeout(liveTimer);
        void sendLive();
      }
      if (configureTimer) {
        clearTimeout(configureTimer);
        void sendConfigure();
      }
      await inFlight;
    },
    /** Configure the worker with the edited config now, when it differs from the one in force. */
    async configureNow(force = false): Promise<boolean> {
      await this.flush();
      const { editedConfig: config, runStatus: run } = ctx.get();
      const problem = configProblem(config);
      if (problem !== null) {
        ctx.set({ error: problem });
        return false;
      }
      if (!force && run && pendingKeys(config, run.config).length === 0) return true;
      const keys = sending();
      try {
        await ask(keys, () => ctx.api.configure(toWire(config)));
        return true;
      } catch (e) {
        ctx.set({ error: describeError(e) });
        return false;
      }
    },
  };
}

export type ConfigSync = ReturnType<typeof createConfigSync>;
