/** React access to the store: one context, and narrow selectors so a component re-renders for its own facts. */
import { createContext, useContext, useMemo } from 'react';
import { useStore } from 'zustand';
import { CONFIG_FIELDS, type ConfigKey, type TrainConfig } from '../../common/config';
import { runStarted, sameValue } from './config-sync';
import { overlayRuns, type OverlayRun } from '../lib/kept-runs';
import type { PlaygroundStore } from './store';
import type { GenerateParams, PlaygroundState } from './types';

export const StoreContext = createContext<PlaygroundStore | null>(null);

export function usePlayground<T>(selector: (s: PlaygroundState) => T): T {
  const store = useContext(StoreContext);
  if (!store) throw new Error('usePlayground: wrap the app in <StoreContext.Provider>.');
  return useStore(store, selector);
}

export const useActions = () => usePlayground((s) => s.actions);
export const useBackend = () => usePlayground((s) => s.backend);
export const useBackendPref = () => usePlayground((s) => s.backendPref);
export const useBackendLoadState = () => usePlayground((s) => s.backendLoadState);
export const useModel = () => usePlayground((s) => s.model);
export const useModelLoadState = () => usePlayground((s) => s.modelLoadState);
/** The page's first backend, model and run are still being set up (a restore waits for them). */
export const useStarting = () => usePlayground((s) => s.starting);
export const useMemory = () => usePlayground((s) => s.memory);
export const useGenerateParam = <K extends keyof GenerateParams>(key: K) =>
  usePlayground((s) => s.generateParams[key]);
export const useOutput = () => usePlayground((s) => s.output);
export const useGenerating = () => usePlayground((s) => s.generating);
export const useError = () => usePlayground((s) => s.error);
/** Generation needs a ready model and no backend switch under way. */
export const useCanGenerate = () =>
  usePlayground((s) => s.modelLoadState === 'ready' && s.backendLoadState === 'ready' && !s.generating);

// ---- training: the job's state, step and config in force are the worker's word (runStatus); the config
// the controls show is the person's (editedConfig) ----
export const useRunState = () => usePlayground((s) => s.runStatus?.state ?? 'idle');
export const useRunPhase = () => usePlayground((s) => s.runStatus?.phase ?? 'idle');
/** Work done inside the phase in progress ("8 / 16 samples"), or null. */
export const usePhaseProgress = () => usePlayground((s) => s.runStatus?.phaseProgress ?? null);
export const useStep = () => usePlayground((s) => s.runStatus?.step ?? 0);
export const useTargetSteps = () => usePlayground((s) => s.runStatus?.steps ?? s.editedConfig.steps);
export const useRunStarted = () => usePlayground((s) => runStarted(s.runStatus));
export const useCommand = () => usePlayground((s) => s.command);
export const useIoTask = () => usePlayground((s) => s.ioTask);
/** The DPO / SFT job the run commands drive (null: an RL run); the worker's word. */
export const useSupervisedJob = () => usePlayground((s) => s.runStatus?.job ?? null);
/** One key of the config the person is editing (what the controls show). */
export const useEditedConfigValue = <K extends ConfigKey>(key: K): TrainConfig[K] =>
  usePlayground((s) => s.editedConfig[key]);
export const useConfigProblem = () => usePlayground((s) => s.configProblem);
/** Whether an edit of `key` waits for Reset (a non-live key changed during a run). */
export const useAppliesOnReset = (key: ConfigKey) =>
  usePlayground(
    (s) =>
      !CONFIG_FIELDS[key].live &&
      runStarted(s.runStatus) &&
      !sameValue(s.editedConfig[key] ?? null, s.runStatus?.config[key] ?? null),
  );
/** Whether any edit waits for Reset. */
export const useAnyAppliesOnReset = () =>
  usePlayground(
    (s) =>
      runStarted(s.runStatus) &&
      (Object.keys(CONFIG_FIELDS) as ConfigKey[]).some(
        (k) =>
          !CONFIG_FIELDS[k].live && !sameValue(s.editedConfig[k] ?? null, s.runStatus?.config[k] ?? null),
      ),
  );
export const useMetrics = () => usePlayground((s) => s.metrics);
/** The newest value of one metric (re-renders only when that number changes). */
export const useLatestMetric = (key: string) =>
  usePlayground((s) => {
    const last = s.metrics[s.metrics.length - 1];
    return last === undefined ? null : (last[key] ?? null);
  });
export const useSmoothing = () => usePlayground((s) => s.smoothing);
export const useSamples = () => usePlayground((s) => s.samples);
export const useEvalLatest = () => usePlayground((s) => s.evalLatest);
export const useSampleStep = () => usePlayground((s) => s.sampleStep);
export const useHeatmap = () => usePlayground((s) => s.heatmap);
export const useAlerts = () => usePlayground((s) => s.alerts);
export const useChangeMarks = () => usePlayground((s) => s.changeMarks);
export const useProgress = () => usePlayground((s) => s.progress);
export const useRewardCode = () => usePlayground((s) => s.rewardCode);
export const useRewardCodeInUse = () => usePlayground((s) => s.rewardCodeInUse);
export const useRewardModel = () => usePlayground((s) => s.rewardModel);
/** What scores responses, in the worker's words ("task sentiment", "your reward code", ...). */
export const useRewardInWords = () => usePlayground((s) => s.runStatus?.reward ?? null);
export const useModelChoice = () => usePlayground((s) => s.modelChoice);
/** Training and stepping need a ready model, a ready backend and a usable config. */
export const useCanTrain = () =>
  usePlayground(
    (s) => s.modelLoadState === 'ready' && s.backendLoadState === 'ready' && s.configProblem === null,
  );

// ---- kept runs and the comparison ----
export const useKeptRuns = () => usePlayground((s) => s.keptRuns);
export const useCompared = () => usePlayground((s) => s.compared);
export const useCurrentRunId = () => usePlayground((s) => s.currentRunId);
export const useKeptRunsNote = () => usePlayground((s) => s.keptRunsNote);
export const useLinkedRuns = () => usePlayground((s) => s.linkedRuns);
export const useRerunQueue = () => usePlayground((s) => s.rerunQueue);
/**
 * The config the worker's job trains with, from its last status (before the worker's first answer, the edited
 * one: the job it is about to configure).
 */
export const useRunConfig = () => usePlayground((s) => s.runStatus?.config ?? s.editedConfig);
/** The runs the charts draw: the compared ones and the current run (bold). */
export function useOverlayRuns(): OverlayRun[] {
  const runs = useKeptRuns();
  const compared = useCompared();
  const currentRunId = useCurrentRunId();
  const metrics = useMetrics();
  const runConfig = usePlayground((s) => s.runStatus?.config ?? null);
  return useMemo(
    () => overlayRuns({ runs, compared, currentRunId, metrics, runConfig }),
    [runs, compared, currentRunId, metrics, runConfig],
  );
}
