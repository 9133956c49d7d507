/** React access to the store: one context, and narrow selectors so a component re-renders for its own facts. */
import { createContext, useContext } from 'react';
import { useStore } from 'zustand';
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
export const useBackendPhase = () => usePlayground((s) => s.backendPhase);
export const useModel = () => usePlayground((s) => s.model);
export const useModelPhase = () => usePlayground((s) => s.modelPhase);
export const useMemory = () => usePlayground((s) => s.memory);
export const useParam = <K extends keyof GenerateParams>(key: K) => usePlayground((s) => s.params[key]);
export const useOutput = () => usePlayground((s) => s.output);
export const useGenerating = () => usePlayground((s) => s.generating);
export const useError = () => usePlayground((s) => s.error);
/** Generation needs a ready model and no backend switch under way. */
export const useCanGenerate = () =>
  usePlayground((s) => s.modelPhase === 'ready' && s.backendPhase === 'ready' && !s.generating);
