/** The backend choices the UI offers and the `?backend=` URL parameter that can preset one. */
import type { BackendName, BackendPref } from '../worker/protocol';

export const BACKEND_OPTIONS: readonly { value: BackendPref; label: string }[] = [
  { value: 'auto', label: 'Auto' },
  { value: 'webgpu', label: 'WebGPU' },
  { value: 'wasm', label: 'WASM' },
  { value: 'webgl', label: 'WebGL' },
  { value: 'cpu', label: 'CPU' },
];

export const BACKEND_LABEL: Record<BackendName, string> = {
  webgpu: 'WebGPU',
  wasm: 'WASM',
  webgl: 'WebGL',
  cpu: 'CPU',
};

export function isBackendPref(x: unknown): x is BackendPref {
  return BACKEND_OPTIONS.some((o) => o.value === x);
}

const PARAM = 'backend';

/** `?backend=webgpu` → 'webgpu'; absent or unknown → 'auto'. */
export function backendFromUrl(search: string = window.location.search): BackendPref {
  const value = new URLSearchParams(search).get(PARAM)?.toLowerCase();
  return isBackendPref(value) ? value : 'auto';
}

/** Keep the URL in step with the choice, so a link reproduces it (without adding history entries). */
export function writeBackendToUrl(pref: BackendPref): void {
  const url = new URL(window.location.href);
  if (pref === 'auto') url.searchParams.delete(PARAM);
  else url.searchParams.set(PARAM, pref);
  window.history.replaceState(window.history.state, '', url);
}
