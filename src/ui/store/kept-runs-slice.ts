/**
 * Kept runs and the comparison: every run that takes a step is kept (config, seed, metric history, a name),
 * written to storage as it goes, and dropped oldest first past the budget; chosen runs are overlaid on the
 * charts, travel in the URL hash (configs and seeds only) and can be run again with one setting changed.
 * The job the worker is training now is training-slice.ts.
 */
import type { TrainConfig } from '../../common/config';
import type { TrainerEvent } from '../../worker/protocol';
import { describeError } from '../errors';
import {
  MAX_COMPARED,
  comparisonCsv,
  configWith,
  enforceBudget,
  newRunId,
  overlayRuns,
  parseSetting,
  modelShortName,
  runName,
  uniqueName,
  type KeptRun,
} from '../lib/kept-runs';
import type { SliceContext } from './context';
import type { PlaygroundActions, PlaygroundData } from './types';

/** The runs the charts draw for a state (see overlayRuns). */
export function overlayOf(s: PlaygroundData) {
  return overlayRuns({
    runs: s.keptRuns,
    compared: s.compared,
    currentRunId: s.currentRunId,
    metrics: s.metrics,
    runConfig: s.runStatus?.config ?? null,
  });
}

/** The configs the URL hash compares: those of the overlaid runs, when there are two or more. */
export function comparedConfigs(s: PlaygroundData): TrainConfig[] {
  const configs = overlayOf(s)
    .map((r) => r.config)
    .filter((c): c is TrainConfig => c !== null);
  return configs.length >= 2 ? configs : [];
}

/** `compared` with `id` added; the earliest chosen run gives way when MAX_COMPARED are chosen already. */
export function addCompared(compared: readonly string[], id: string, max = MAX_COMPARED): string[] {
  if (compared.includes(id)) return [...compared];
  const out = [...compared, id];
  return out.slice(Math.max(0, out.length - max));
}

type KeptRunsActions = Pick<
  PlaygroundActions,
  | 'renameRun'
  | 'deleteRun'
  | 'toggleCompare'
  | 'runAgainWith'
  | 'rerunLinked'
  | 'dismissLinkedRuns'
  | 'cancelRerun'
  | 'dismissKeptRunsNote'
  | 'exportComparisonCsv'
  | 'flushRuns'
>;

export function createKeptRuns(ctx: SliceContext) {
  const { set, get } = ctx;
  const storage = ctx.opts.runStorage;
  const timers = new Map<string, ReturnType<typeof setTimeout>>();
  let writes: Promise<void> = Promise.resolve();

  /** Storage writes in order; a failure is said once, and training goes on. */
  const queue = (job: () => Promise<void>) => {
    writes = writes.then(job).catch((e: unknown) => {
      set({ keptRunsNote: `A run could not be kept in this browser's storage: ${describeError(e)}` });
    });
  };

  const writeRun = (id: string) => {
    timers.delete(id);
    const run = get().keptRuns.find((r) => r.id === id);
    if (run) queue(() => storage.put(run));
  };

  const save = (id: string) => {
    if (ctx.opts.runSaveDelayMs <= 0) return writeRun(id);
    if (!timers.has(id))
      timers.set(
        id,
        setTimeout(() => writeRun(id), ctx.opts.runSaveDelayMs),
      );
  };

  const applyBudget = () => {
    const s = get();
    const { kept, dropped, message } = enforceBudget(s.keptRuns, ctx.opts.runBudget, s.currentRunId);
    if (dropped.length === 0) return;
    const ids = new Set(kept.map((r) => r.id));
    set({ keptRuns: kept, compared: s.compared.filter((id) => ids.has(id)), keptRunsNote: message });
    for (const r of dropped) {
      const t = timers.get(r.id);
      if (t) clearTimeout(t);
      timers.delete(r.id);
      queue(() => storage.remove(r.id));
    }
  };

  /** After a step: the current run's history grows, or a new run begins (kept from its first step). */
  const afterStep = () => {
    const s = get();
    const last = s.metrics[s.metrics.length - 1];
    if (!last) return;
    const current = s.currentRunId ? s.keptRuns.find((r) => r.id === s.currentRunId) : undefined;
    // The current run was deleted by the person: not kept again until a new run starts.
    if (s.currentRunId !== null && !current) return;
    const now = Date.now();
    const lastKept = current?.metrics[current.metrics.length - 1];
    // The same step again (a repeated event) updates the run; a step before its newest begins a new run.
    if (current && (lastKept === undefined || lastKept.step <= last.step)) {
      set({
        keptRuns: s.keptRuns.map((r) =>
          r.id === current.id ? { ...r, metrics: s.metrics, updatedAt: now } : r,
        ),
      });
      save(current.id);
    } else {
      const config = JSON.parse(JSON.stringify(s.runStatus?.config ?? s.editedConfig)) as TrainConfig;
      const run: KeptRun = {
        id: newRunId(now),
        name: uniqueName(
          // A DPO or SFT job (docs/dpo.md, docs/sft.md) is named by its kind and data file.
          s.runStatus?.job
            ? `${s.runStatus.job.kind} on ${s.runStatus.job.dataName} · ${modelShortName(config.model)}`
            : runName(config),
          s.keptRuns.map((r) => r.name),
        ),
        config,
        ...(s.runStatus?.job ? { job: s.runStatus.job.kind } : {}),
        createdAt: now,
        updatedAt: now,
        metrics: s.metrics,
      };
      const join = s.autoCompare > 0;
      set({
        keptRuns: [...s.keptRuns, run],
        currentRunId: run.id,
        compared: join ? addCompared(s.compared, run.id) : s.compared,
        autoCompare: Math.max(0, s.autoCompare - 1),
      });
      save(run.id);
    }
    applyBudget();
  };

  /** After a status: a linked comparison being re-run goes on with its next run when one finished. */
  const afterStatus = () => {
    const s = get();
    const run = s.runStatus;
    if (s.rerunQueue.length === 0 || s.command !== null || !run) return;
    if (run.state === 'running' || run.phase !== 'idle' || run.step === 0 || run.step < run.steps) return;
    const [next, ...rest] = s.rerunQueue;
    set({ rerunQueue: rest });
    setTimeout(() => void get().actions.launchRun(next), 0);
  };

  const launchWith = async (config: TrainConfig) => {
    await get().actions.launchRun(config);
  };

  const actions: KeptRunsActions = {
    renameRun(id, name) {
      const s = get();
      const trimmed = name.trim().replace(/\s+/g, ' ');
      if (!trimmed || s.keptRuns.find((r) => r.id === id)?.name === trimmed) return;
      const others = s.keptRuns.filter((r) => r.id !== id).map((r) => r.name);
      const unique = uniqueName(trimmed, others);
      set({ keptRuns: s.keptRuns.map((r) => (r.id === id ? { ...r, name: unique } : r)) });
      save(id);
    },

    deleteRun(id) {
      const s = get();
      const t = timers.get(id);
      if (t) clearTimeout(t);
      timers.delete(id);
      set({ keptRuns: s.keptRuns.filter((r) => r.id !== id), compared: s.compared.filter((x) => x !== id) });
      queue(() => storage.remove(id));
      ctx.writeHash();
    },

    toggleCompare(id) {
      const s = get();
      if (s.compared.includes(id)) set({ compared: s.compared.filter((x) => x !== id) });
      else if (s.compared.length >= MAX_COMPARED)
        set({ keptRunsNote: `At most ${MAX_COMPARED} runs are compared at once; untick one first.` });
      else set({ compared: [...s.compared, id] });
      ctx.writeHash();
    },

    async runAgainWith(id, key, text) {
      const source = get().keptRuns.find((r) => r.id === id);
      if (!source) return 'That run is no longer kept.';
      let config: TrainConfig;
      try {
        config = configWith(source.config, key, parseSetting(key, text));
      } catch (e) {
        return e instanceof Error ? e.message : String(e);
      }
      set({ compared: addCompared(get().compared, id, MAX_COMPARED - 1), autoCompare: 1 });
      await launchWith(config);
      return null;
    },

    async rerunLinked() {
      const configs = get().linkedRuns;
      if (!configs || configs.length === 0) return;
      set({ linkedRuns: null, compared: [], autoCompare: configs.length, rerunQueue: configs.slice(1) });
      await launchWith(configs[0]);
    },

    dismissLinkedRuns() {
      set({ linkedRuns: null });
      ctx.writeHash();
    },

    cancelRerun() {
      set({ rerunQueue: [], autoCompare: 0 });
    },

    dismissKeptRunsNote() {
      set({ keptRunsNote: null });
    },

    exportComparisonCsv() {
      const runs = overlayOf(get());
      if (runs.length === 0) return;
      ctx.opts.download('ppo-comparison.csv', comparisonCsv(runs), 'text/csv');
    },

    async flushRuns() {
      for (const id of [...timers.keys()]) {
        clearTimeout(timers.get(id));
        writeRun(id);
      }
      await writes;
    },
  };

  return {
    actions,
    /** Read the runs kept by earlier visits (merged under any kept since the page opened). */
    async load(): Promise<void> {
      try {
        const stored = await storage.list();
        const s = get();
        const have = new Set(s.keptRuns.map((r) => r.id));
        const runs = [...stored.filter((r) => !have.has(r.id)), ...s.keptRuns].sort(
          (a, b) => a.createdAt - b.createdAt,
        );
        set({ keptRuns: runs });
        applyBudget();
      } catch (e) {
        set({ keptRunsNote: `Runs from earlier visits could not be read: ${describeError(e)}` });
      }
    },
    /** Called with every worker event, after the store took it in. */
    afterEvent(e: TrainerEvent): void {
      if (e.type === 'step') afterStep();
      else if (e.type === 'status') afterStatus();
    },
  };
}

export type KeptRuns = ReturnType<typeof createKeptRuns>;
