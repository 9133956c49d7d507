import { createStore, type StoreApi } from 'zustand/vanilla';
import type { ModelWorker } from '../bridge';
import { describeError } from '../errors';
import { writeBackendToUrl } from '../backend-prefs';
import type { BackendPref } from '../../worker/protocol';
import type { GenerateParams, PlaygroundData, PlaygroundState } from './types';

export const DEFAULT_PARAMS: GenerateParams = {
  prompt: 'Once upon a time',
  maxNewTokens: 24,
  temperature: 0.8,
  topK: 0,
  topP: 1,
  seed: 1,
};

export function initialData(backendPref: BackendPref): PlaygroundData {
  return {
    backendPref,
    backend: null,
    backendPhase: 'idle',
    model: null,
    modelPhase: 'idle',
    memory: null,
    params: DEFAULT_PARAMS,
    output: null,
    generating: false,
    error: null,
  };
}

export type PlaygroundStore = StoreApi<PlaygroundState>;

/** The store talks to the worker through `api` only (a fake one in tests). */
export function createPlaygroundStore(api: ModelWorker, backendPref: BackendPref): PlaygroundStore {
  return createStore<PlaygroundState>()((set, get) => {
    const refreshMemory = async () => {
      try {
        set({ memory: await api.memory() });
      } catch {
        // Memory figures are informative only; a failure here must not hide the real result.
      }
    };

    const selectBackend = async (pref: BackendPref, first: boolean) => {
      const hadModel = get().model !== null;
      set({
        backendPref: pref,
        backendPhase: 'busy',
        modelPhase: hadModel ? 'busy' : get().modelPhase,
        error: null,
      });
      try {
        const backend = await (first ? api.init(pref) : api.setBackend(pref));
        set({ backend, backendPhase: 'ready', modelPhase: hadModel ? 'ready' : get().modelPhase });
      } catch (e) {
        set({
          backendPhase: 'error',
          modelPhase: hadModel ? 'error' : get().modelPhase,
          error: describeError(e),
        });
      }
    };

    const loadBuiltin = async () => {
      set({ modelPhase: 'busy', error: null });
      try {
        const model = await api.loadModel({ kind: 'builtin', name: 'tiny' });
        set({ model, modelPhase: 'ready' });
      } catch (e) {
        set({ modelPhase: 'error', error: describeError(e) });
      }
    };

    return {
      ...initialData(backendPref),
      actions: {
        async start() {
          if (get().backendPhase !== 'idle') return;
          await selectBackend(get().backendPref, true);
          if (get().backendPhase === 'ready') await loadBuiltin();
          await refreshMemory();
        },

        async chooseBackend(pref) {
          writeBackendToUrl(pref);
          await selectBackend(pref, false);
          // A model that failed to load before gets another try on the new backend.
          if (get().backendPhase === 'ready' && get().model === null) await loadBuiltin();
          await refreshMemory();
        },

        setParam(key, value) {
          set({ params: { ...get().params, [key]: value } });
        },

        async generate() {
          if (get().generating) return;
          set({ generating: true, error: null });
          try {
            const params = get().params;
            const reply = await api.generate(params);
            set({ output: { prompt: params.prompt, reply }, generating: false });
          } catch (e) {
            set({ generating: false, error: describeError(e) });
          }
          await refreshMemory();
        },

        dismissError() {
          set({ error: null });
        },

        workerCrashed(message) {
          set({ error: message, generating: false, backendPhase: 'error', modelPhase: 'error' });
        },
      },
    };
  });
}
