/**
 * The training job in the worker: its events into the store, the run commands (start, pause, step, reset, a
 * new run), the person's config edits (controls and URL hash), and how the charts and samples are viewed.
 * The runs kept for comparison are kept-runs-slice.ts.
 */
import { CONFIG_FIELDS, type ConfigKey, type TrainConfig } from '../../common/config';
import type { AlertView, MetricsByName, RunStatus, TrainerEvent } from '../../worker/protocol';
import { describeError } from '../errors';
import { hashFor, readComparisonHash, readConfigHash, splitComparison } from '../lib/url-config';
import { configProblem, mergeWorkerConfig, runStarted, sameValue, type ConfigSync } from './config-sync';
import type { SliceContext } from './context';
import { comparedConfigs } from './kept-runs-slice';
import type { PlaygroundActions, PlaygroundData, RunCommand, StepSamples } from './types';

/** Steps whose samples are kept for browsing. */
export const SAMPLE_STEPS_KEPT = 50;
/** Alerts kept (one per id). */
const ALERTS_KEPT = 20;

/** The state after a run was dropped (reset, or replaced by an import); the next step begins a new kept run. */
export const EMPTY_HISTORY: Pick<
  PlaygroundData,
  | 'metrics'
  | 'samples'
  | 'sampleStep'
  | 'alerts'
  | 'dismissedAlerts'
  | 'currentRunId'
  | 'evalLatest'
  | 'changeMarks'
> = {
  changeMarks: [],
  metrics: [],
  samples: [],
  sampleStep: null,
  alerts: [],
  dismissedAlerts: [],
  currentRunId: null,
  evalLatest: null,
};

function mergeAlerts(kept: AlertView[], fresh: AlertView[]): AlertView[] {
  if (fresh.length === 0) return kept;
  const ids = new Set(fresh.map((a) => a.id));
  return [...[...fresh].reverse(), ...kept.filter((a) => !ids.has(a.id))].slice(0, ALERTS_KEPT);
}

/**
 * `next`, holding `prev`'s config object when the two are equal. A job reports its status about ten times a step
 * (each phase, and progress within it), each time with a fresh copy of its config; every chart reads that config
 * (useRunConfig), so a fresh copy re-rendered them all on every report.
 */
function keepConfig(prev: RunStatus | null, next: RunStatus): RunStatus {
  return prev && prev.config !== next.config && sameValue(prev.config, next.config)
    ? { ...next, config: prev.config }
    : next;
}

/** The store's reaction to one worker event (pure: state in, changes out). */
export function reduceEvent(s: PlaygroundData, e: TrainerEvent): Partial<PlaygroundData> {
  switch (e.type) {
    case 'status': {
      const dropped = e.status.step === 0 && s.metrics.length > 0 && e.status.state === 'idle';
      const config = mergeWorkerConfig(s.editedConfig, s.runStatus?.config, e.status.config, s.editsInFlight);
      return {
        runStatus: keepConfig(s.runStatus, e.status),
        ...(config !== s.editedConfig ? { editedConfig: config, configProblem: configProblem(config) } : {}),
        ...(e.status.model && JSON.stringify(e.status.model) !== JSON.stringify(s.model)
          ? { model: e.status.model }
          : {}),
        ...(dropped ? EMPTY_HISTORY : {}),
      };
    }
    case 'step': {
      const step = e.metrics.step;
      const before = (m: MetricsByName) => m.step < step;
      const last = s.metrics[s.metrics.length - 1];
      // A step at or before the newest kept one means the run went back (import, reset): drop what follows.
      const metrics =
        last !== undefined && !before(last)
          ? [...s.metrics.filter(before), e.metrics]
          : [...s.metrics, e.metrics];
      const entry: StepSamples = { step, samples: e.samples };
      const samples = [...s.samples.filter((x) => x.step < step), entry].slice(-SAMPLE_STEPS_KEPT);
      const run: RunStatus | null = s.runStatus && { ...s.runStatus, step: Math.max(s.runStatus.step, step) };
      const fresh = e.alerts.filter((a) => !s.dismissedAlerts.includes(a.id));
      // The newest held-out evaluation; one after this step belongs to a history that was dropped.
      const evalLatest = e.eval ?? (s.evalLatest && s.evalLatest.step < step ? s.evalLatest : null);
      return { metrics, samples, alerts: mergeAlerts(s.alerts, fresh), runStatus: run, evalLatest };
    }
    case 'progress':
      return { progress: { task: e.task, fraction: e.fraction, message: e.message } };
    case 'error':
      return {
        error: e.userError ? e.message : `Something went wrong: ${e.message}`,
        // A failed build leaves no progress to wait for.
        ...(s.progress?.task === 'build' ? { progress: null } : {}),
      };
  }
}

type TrainingActions = Pick<
  PlaygroundActions,
  | 'startRun'
  | 'pauseRun'
  | 'stepRun'
  | 'resetRun'
  | 'setConfigValue'
  | 'hashChanged'
  | 'setSmoothing'
  | 'setHeatmap'
  | 'selectSampleStep'
  | 'dismissAlert'
  | 'flushConfig'
  | 'launchRun'
>;

export function createTrainingActions(ctx: SliceContext, sync: ConfigSync): TrainingActions {
  const { api, set, get } = ctx;

  /** One run command at a time; the status it answers with is the truth. */
  const command = async (name: RunCommand, job: () => Promise<RunStatus | null>) => {
    if (get().command !== null && name !== 'pause') return;
    set({ command: name, error: null });
    try {
      const run = await job();
      if (run) ctx.takeWorkerStatus(run);
    } catch (e) {
      set({ error: describeError(e) });
    } finally {
      if (get().command === name) set({ command: null });
    }
    void ctx.refreshMemory();
  };

  const setEditedConfig = (config: TrainConfig) => {
    set({ editedConfig: config, configProblem: configProblem(config) });
    ctx.writeHash();
  };

  return {
    startRun: () =>
      command('start', async () => {
        if (!runStarted(get().runStatus) && !(await sync.configureNow())) return null;
        await sync.flush();
        return api.start();
      }),

    pauseRun: () => command('pause', () => api.pause()),

    stepRun: () =>
      command('step', async () => {
        if (!runStarted(get().runStatus) && !(await sync.configureNow())) return null;
        await sync.flush();
        return api.stepOnce();
      }),

    resetRun: () =>
      command('reset', async () => {
        // Settings that waited for the reset ("applies on reset") take effect now.
        if (!(await sync.configureNow())) return null;
        const run = await api.reset();
        set({ ...EMPTY_HISTORY, progress: null });
        return run;
      }),

    setConfigValue(key: ConfigKey, value) {
      const next = { ...get().editedConfig } as Record<string, unknown>;
      if (value === undefined) delete next[key];
      else next[key] = value;
      setEditedConfig(next as unknown as TrainConfig);
      sync.changed([key]);
    },

    launchRun: async (config) => {
      // After the page's start: its model load would drop the run launched here.
      await ctx.afterStart();
      return command('start', async () => {
        // The run in the worker stays kept; its step in flight finishes before `configure` answers.
        if (get().runStatus?.state === 'running') await api.pause();
        setEditedConfig(config);
        if (!(await sync.configureNow(true))) return null;
        // A change of live keys only (learningRate) would go on with the same run: drop it.
        ctx.takeWorkerStatus(await api.reset());
        set({ ...EMPTY_HISTORY, progress: null });
        return api.start();
      });
    },

    hashChanged(hash) {
      const comparison = readComparisonHash(hash);
      if (comparison.error) set({ error: comparison.error });
      else if (comparison.configs.length > 0) {
        const own = splitComparison(hashFor(get().editedConfig, comparedConfigs(get()))).compare;
        const theirs = splitComparison(hash).compare;
        if (JSON.stringify(own) !== JSON.stringify(theirs)) set({ linkedRuns: comparison.configs });
      }
      if (splitComparison(hash).config === hashFor(get().editedConfig)) return;
      const reading = readConfigHash(hash);
      if (reading.error) {
        set({ error: reading.error });
        return;
      }
      const before = get().editedConfig;
      set({ editedConfig: reading.config, configProblem: configProblem(reading.config) });
      sync.changed(
        (Object.keys(CONFIG_FIELDS) as ConfigKey[]).filter(
          (key) => JSON.stringify(before[key]) !== JSON.stringify(reading.config[key]),
        ),
      );
    },

    setSmoothing(weight) {
      set({ smoothing: Math.min(Math.max(weight, 0), 0.99) });
    },
    setHeatmap(mode) {
      set({ heatmap: mode });
    },
    selectSampleStep(step) {
      set({ sampleStep: step });
    },
    dismissAlert(id) {
      const s = get();
      set({
        alerts: s.alerts.filter((a) => a.id !== id),
        dismissedAlerts: [...s.dismissedAlerts.filter((x) => x !== id), id],
      });
    },
    flushConfig: () => sync.flush(),
  };
}
