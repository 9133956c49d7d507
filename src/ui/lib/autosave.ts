/**
 * The UI's side of autosave and GPU recovery (the worker's ReliabilityApi, src/worker/protocol.ts): words for
 * an autosave, and folding a resumed run into the store the way an imported checkpoint is.
 */
import { createContext } from 'react';
import type { Remote } from 'comlink';
import type { TrainConfig } from '../../common/config';
import type { AutosaveInfoWire, ModelWorkerApi } from '../../worker/protocol';
import type { PlaygroundStore } from '../store/store';
import { formatBytes } from './format';

/** The worker as the reliability components see it (main.tsx provides it next to the store). */
export type ReliabilityWorker = Remote<ModelWorkerApi>;
export const ReliabilityWorkerContext = createContext<ReliabilityWorker | null>(null);

/** "37 minutes ago", "2 hours ago", or the date. */
export function ago(savedAt: number, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - savedAt) / 1000));
  if (s < 60) return 'just now';
  const m = Math.round(s / 60);
  if (m < 60) return `${m} minute${m === 1 ? '' : 's'} ago`;
  const h = Math.round(m / 60);
  if (h < 48) return `${h} hour${h === 1 ? '' : 's'} ago`;
  return `on ${new Date(savedAt).toLocaleDateString()}`;
}

/** One line about an autosave: "step 12 of 100 · built-in tiny · task sentiment · saved 5 minutes ago · 36.4 MB". */
export function describeAutosave(info: AutosaveInfoWire, now = Date.now()): string {
  const c = info.config as Partial<TrainConfig>;
  const parts = [
    typeof c.steps === 'number' ? `step ${info.step} of ${c.steps}` : `step ${info.step}`,
    info.label,
    c.task ? `task ${c.task}` : c.prompts ? 'your prompts' : null,
    `saved ${ago(info.savedAt, now)}`,
    formatBytes(info.bytes),
  ];
  return parts.filter(Boolean).join(' · ');
}

/** Resume the autosaved run and show it: status, config and the metric history (as an imported checkpoint). */
export async function resumeAutosaveIntoStore(api: ReliabilityWorker, store: PlaygroundStore): Promise<void> {
  // After the page's start, in turn with config messages; the resumed config is the edited one before any goes out.
  await store.getState().actions.restoring(async () => {
    const status = await api.resumeAutosave();
    const metrics = await api.history();
    store.getState().actions.autosaveResumed(status, metrics);
  });
}
