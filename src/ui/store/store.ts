import { proxy } from 'comlink';
import { createStore, type StoreApi } from 'zustand/vanilla';
import type { ModelWorker } from '../bridge';
import { describeError } from '../errors';
import { writeBackendToUrl } from '../backend-prefs';
import { DEFAULT_REWARD_CODE, MODEL_CHOICES, modelSourceFor } from '../lib/catalog';
import { downloadFile } from '../lib/download';
import { indexedDbRunStorage, memoryRunStorage, RUN_BUDGET } from '../lib/kept-runs';
import { hashFor, readComparisonHash, readConfigHash, writeHashToUrl } from '../lib/url-config';
import type { BackendPref, RunStatus, TrainerEvent } from '../../worker/protocol';
import { configProblem, createConfigSync, toWire } from './config-sync';
import type { SliceContext, StoreOptions } from './context';
import { createIoActions } from './io-slice';
import { createEstimateActions } from './estimate-slice';
import { createTrainingActions, reduceEvent } from './training-slice';
import { comparedConfigs, createKeptRuns } from './kept-runs-slice';
import type { GenerateParams, PlaygroundData, PlaygroundState } from './types';

export type { StoreOptions } from './context';

export const DEFAULT_GENERATE_PARAMS: GenerateParams = {
  prompt: 'Once upon a time',
  maxNewTokens: 24,
  temperature: 0.8,
  topK: 0,
  topP: 1,
  seed: 1,
};

/** The initial data; `hash` is the URL hash the config comes from (a broken one falls back to defaults). */
export function initialData(backendPref: BackendPref, hash = ''): PlaygroundData {
  const { config, error } = readConfigHash(hash);
  const comparison = readComparisonHash(hash);
  return {
    backendPref,
    backend: null,
    backendLoadState: 'idle',
    model: null,
    modelLoadState: 'idle',
    memory: null,
    generateParams: DEFAULT_GENERATE_PARAMS,
    output: null,
    generating: false,
    error: error ?? comparison.error,
    runStatus: null,
    editedConfig: config,
    configProblem: configProblem(config),
    editsInFlight: [],
    autosavedStep: null,
    changeMarks: [],
    metrics: [],
    samples: [],
    sampleStep: null,
    evalLatest: null,
    alerts: [],
    dismissedAlerts: [],
    progress: null,
    smoothing: 0.6,
    heatmap: 'advantage',
    command: null,
    ioTask: null,
    starting: false,
    rewardCode: DEFAULT_REWARD_CODE,
    rewardCodeInUse: false,
    rewardModel: null,
    modelChoice: MODEL_CHOICES.some((m) => m.id === config.model) ? config.model : 'tiny',
    estimate: null,
    loraNote: null,
    modelFits: null,
    keptRuns: [],
    currentRunId: null,
    compared: [],
    keptRunsNote: null,
    linkedRuns: comparison.configs.length > 0 ? comparison.configs : null,
    rerunQueue: [],
    autoCompare: 0,
  };
}

export type PlaygroundStore = StoreApi<PlaygroundState>;

/**
 * Which status event answers which config change: `configure` and `setHyperparameters` answer with a number
 * (RunStatus.configSeq) and their status arrives as an event only; `answer(seq)` waits for the first status the
 * store took that carries `seq` or a later number.
 */
function configAnswers() {
  /** The highest configSeq taken, and the first status taken with each recent number. */
  let seen = 0;
  const first = new Map<number, RunStatus>();
  const waiting: { seq: number; resolve: (s: RunStatus | null) => void }[] = [];
  let listening = false;
  return {
    /** The store subscribed to the worker's events: from now on every change's status arrives. */
    subscribed() {
      listening = true;
    },
    took(status: RunStatus) {
      const seq = status.configSeq ?? 0;
      if (seq <= seen) return;
      seen = seq;
      first.set(seq, status);
      for (const k of first.keys()) if (k < seq - 32) first.delete(k);
      for (let i = waiting.length - 1; i >= 0; i--) {
        if (waiting[i].seq > seq) continue;
        waiting[i].resolve(status);
        waiting.splice(i, 1);
      }
    },
    answer(seq: number): Promise<RunStatus | null> {
      if (!listening) return Promise.resolve(null);
      if (seq <= seen) {
        // Taken already (the event comes before the answer): the first status at or after `seq`.
        for (let k = Math.max(seq, seen - 32); k <= seen; k++) {
          const s = first.get(k);
          if (s) return Promise.resolve(s);
        }
        return Promise.resolve(null);
      }
      return new Promise((resolve) => waiting.push({ seq, resolve }));
    },
    /** The worker died: nothing more will come. */
    giveUp() {
      listening = false;
      for (const w of waiting.splice(0)) w.resolve(null);
    },
  };
}

const inBrowser = typeof window !== 'undefined';

type Listener = (state: PlaygroundState, previous: PlaygroundState) => void;

/**
 * The store's subscribers (React's components) told of changes that worker events make at most once per
 * `frameMs`. A running job sends several events per step (its phases, the step); on a tiny model on WASM that is
 * hundreds a second, and a render per event left React's deferred chart values forever behind (the charts stayed
 * at step 1 until pause). Events still change the state at once, in order (the store's own logic, the kept runs
 * and the config sync read it exact); only the telling is coalesced: the first event after a quiet frame is told
 * at once, later ones in the frame together at its end. Every other change (the person's, a call's answer) is
 * told at once, with whatever events held before it.
 */
function eventFrames(frameMs: number) {
  const listeners = new Set<Listener>();
  /** While true, changes are held: `since` is the state the subscribers last saw, `latest` the state now. */
  let holding = false;
  let since: PlaygroundState | null = null;
  let latest: PlaygroundState | null = null;
  let frame: ReturnType<typeof setTimeout> | null = null;
  const tell = (state: PlaygroundState, previous: PlaygroundState) => {
    since = null;
    latest = null;
    for (const l of listeners) l(state, previous);
  };
  /** The frame ends: what it held is told, and a new frame holds what comes next; else the store is quiet. */
  const endFrame = () => {
    frame = null;
    if (since === null || latest === null) return;
    tell(latest, since);
    frame = setTimeout(endFrame, frameMs);
  };
  return {
    /** Apply a worker event's changes (`apply`): told at once, or at the end of the frame. */
    event(apply: () => void): void {
      if (frameMs <= 0) return apply();
      if (frame === null) {
        apply();
        frame = setTimeout(endFrame, frameMs);
        return;
      }
      holding = true;
      try {
        apply();
      } finally {
        holding = false;
      }
    },
    /** The store as its subscribers see it: `inner`, told of changes as above. */
    around(inner: StoreApi<PlaygroundState>): StoreApi<PlaygroundState> {
      inner.subscribe((state, previous) => {
        if (holding) {
          since ??= previous;
          latest = state;
          return;
        }
        tell(state, since ?? previous);
      });
      return {
        ...inner,
        subscribe(listener: Listener) {
          listeners.add(listener);
          return () => void listeners.delete(listener);
        },
      };
    },
  };
}

/** The store talks to the worker through `api` only (a fake one in tests). */
export function createPlaygroundStore(
  api: ModelWorker,
  backendPref: BackendPref,
  options: StoreOptions = {},
): PlaygroundStore {
  const opts: Required<StoreOptions> = {
    hash: options.hash ?? (inBrowser ? window.location.hash : ''),
    writeHash: options.writeHash ?? (inBrowser ? writeHashToUrl : () => {}),
    download: options.download ?? downloadFile,
    sendDelayMs: options.sendDelayMs ?? 150,
    runStorage:
      options.runStorage ?? (typeof indexedDB !== 'undefined' ? indexedDbRunStorage() : memoryRunStorage()),
    runSaveDelayMs: options.runSaveDelayMs ?? 1000,
    runBudget: options.runBudget ?? RUN_BUDGET,
    eventFrameMs: options.eventFrameMs ?? 50,
  };
  const frames = eventFrames(opts.eventFrameMs);

  const inner = createStore<PlaygroundState>()((set, get) => {
    let memoryInFlight = false;
    const refreshMemory = async () => {
      if (memoryInFlight) return;
      memoryInFlight = true;
      try {
        const m = await api.memory();
        // A step's peak comes with its step event only: keep the last one while the run it belongs to goes on.
        const peak = get().runStatus?.step ? get().memory?.peakBytes : undefined;
        set({ memory: m.peakBytes === undefined && peak !== undefined ? { ...m, peakBytes: peak } : m });
      } catch {
        // Memory figures are informative only; a failure here must not hide the real result.
      } finally {
        memoryInFlight = false;
      }
    };

    let lastHash: string | null = null;
    /** The URL hash of the edited config and the comparison; written when changed (or always: `force`). */
    const writeHash = (force = true) => {
      const hash = hashFor(get().editedConfig, comparedConfigs(get()));
      if (!force && hash === lastHash) return;
      lastHash = hash;
      opts.writeHash(hash);
    };

    /**
     * Apply a worker event; the kept runs follow it, and the URL hash follows a config the worker changed
     * (import, loaded model) or a comparison that changed (a new run in it).
     */
    const applyEvent = (e: TrainerEvent) => {
      const before = get().editedConfig;
      set(reduceEvent(get(), e));
      keptRuns.afterEvent(e);
      writeHash(get().editedConfig !== before);
      if (e.type === 'status') configStatuses.took(e.status);
    };
    const configStatuses = configAnswers();

    const ctx: SliceContext = {
      api,
      set,
      get,
      opts,
      refreshMemory,
      takeWorkerStatus: (status) => applyEvent({ type: 'status', status }),
      configAnswered: (seq) => configStatuses.answer(seq),
      writeHash: () => writeHash(true),
      afterStart: () => startDone,
      exclusive: (job) => sync.exclusive(job),
    };
    const sync = createConfigSync(ctx);
    /** The page's start: resolved when it is over (or the worker died), at once before it began. */
    let startDone: Promise<void> = Promise.resolve();
    let endStart = () => {};
    const keptRuns = createKeptRuns(ctx);

    let lastMemoryAt = 0;
    const onEvent = (e: TrainerEvent) => frames.event(() => takeEvent(e));
    const takeEvent = (e: TrainerEvent) => {
      applyEvent(e);
      if (e.type !== 'step') return;
      // Tensor memory after each step (a leak shows as a growing count): the worker sends it with the step;
      // a worker that does not is asked, at most every two seconds.
      if (e.memory) {
        set({ memory: e.memory });
        return;
      }
      const now = Date.now();
      if (now - lastMemoryAt > 2000) {
        lastMemoryAt = now;
        void refreshMemory();
      }
    };

    const selectBackend = async (pref: BackendPref, first: boolean) => {
      const hadModel = get().model !== null;
      set({
        backendPref: pref,
        backendLoadState: 'busy',
        modelLoadState: hadModel ? 'busy' : get().modelLoadState,
      });
      try {
        // `?wasmThreads=N` in the page's address: WASM's thread count (the worker checks it; docs/tfjs.md).
        const wasmThreads =
          Number(new URLSearchParams(globalThis.location?.search).get('wasmThreads')) || undefined;
        // `?tuneKernels=1`: time WebGPU's kernel forms even on a software adapter (core/backend/webgpu-tune.ts).
        const tuneKernels = new URLSearchParams(globalThis.location?.search).get('tuneKernels') === '1';
        const backend = await (first
          ? api.init(pref, { wasmThreads, ...(tuneKernels ? { tuneKernels } : {}) })
          : api.setBackend(pref));
        set({
          backend,
          backendLoadState: 'ready',
          modelLoadState: hadModel ? 'ready' : get().modelLoadState,
        });
      } catch (e) {
        set({
          backendLoadState: 'error',
          modelLoadState: hadModel ? 'error' : get().modelLoadState,
          error: describeError(e),
        });
      }
    };

    /** The model the config names (the built-in tiny one unless the link says otherwise). */
    const loadConfiguredModel = async () => {
      set({ modelLoadState: 'busy', progress: null });
      try {
        const model = await api.loadModel(modelSourceFor(get().editedConfig.model));
        set({ model, modelLoadState: 'ready', progress: null });
      } catch (e) {
        set({ modelLoadState: 'error', progress: null, error: describeError(e) });
      }
    };

    const subscribe = async () => {
      configStatuses.subscribed();
      try {
        ctx.takeWorkerStatus(await api.subscribe(proxy(onEvent)));
      } catch (e) {
        // Not subscribed: no change's status will come, so nothing may wait for one (start's first configure).
        configStatuses.giveUp();
        set({ error: describeError(e) });
      }
    };

    const configureFirstRun = async () => {
      const { editedConfig: config } = get();
      if (configProblem(config) !== null) return;
      try {
        await ctx.configAnswered(await api.configure(toWire(config)));
      } catch (e) {
        set({ error: describeError(e) });
      }
    };

    return {
      ...initialData(backendPref, opts.hash),
      actions: {
        async start() {
          if (get().backendLoadState !== 'idle') return;
          // selectBackend marks the backend busy before its first await: a second start() returns above.
          set({ starting: true });
          startDone = new Promise((resolve) => (endStart = resolve));
          try {
            const loaded = keptRuns.load();
            await selectBackend(get().backendPref, true);
            await loaded;
            if (get().backendLoadState !== 'ready') return;
            await subscribe();
            await loadConfiguredModel();
            if (get().model !== null) await configureFirstRun();
          } finally {
            set({ starting: false });
            endStart();
          }
          await refreshMemory();
        },

        async chooseBackend(pref) {
          writeBackendToUrl(pref);
          await selectBackend(pref, false);
          // A model that failed to load before gets another try on the new backend.
          if (get().backendLoadState === 'ready' && get().model === null) await loadConfiguredModel();
          await refreshMemory();
        },

        setGenerateParam(key, value) {
          set({ generateParams: { ...get().generateParams, [key]: value } });
        },

        async generate() {
          if (get().generating) return;
          set({ generating: true, error: null });
          try {
            const params = get().generateParams;
            // The prompt goes in the model's chat template when the run's chatTemplate setting says so, as in training.
            const reply = await api.generate({ ...params, chatTemplate: get().editedConfig.chatTemplate });
            set({ output: { prompt: params.prompt, reply }, generating: false });
          } catch (e) {
            set({ generating: false, error: describeError(e) });
          }
          await refreshMemory();
        },

        dismissError() {
          set({ error: null });
        },

        showError(message) {
          set({ error: message });
        },

        workerCrashed(message) {
          configStatuses.giveUp();
          endStart();
          set({
            starting: false,
            error: message,
            generating: false,
            backendLoadState: 'error',
            modelLoadState: 'error',
            command: null,
            ioTask: null,
            // The dead worker will never send its job's state again: its last word stays, shown stopped.
            runStatus: get().runStatus && { ...get().runStatus!, state: 'paused', phase: 'idle' },
          });
        },

        ...createTrainingActions(ctx, sync),
        ...createIoActions(ctx),
        ...createEstimateActions(ctx),
        ...keptRuns.actions,
      },
    };
  });
  return frames.around(inner);
}
