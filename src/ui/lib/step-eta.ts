/**
 * Time left in the step in flight, from the last step's phase times (timeGenerate, timeScore, timeUpdate): the
 * rest of the current phase plus the phases after it. A rough guide for long steps (GPT-2 124M on WASM takes
 * minutes), shown as "~N s left in this step"; null when there is no earlier step to go by.
 */
export type StepPhase = 'generating' | 'scoring' | 'updating';

const ORDER: readonly StepPhase[] = ['generating', 'scoring', 'updating'];

export interface PhaseTimes {
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
}

export function stepTimeLeft(phase: string, secondsInPhase: number, last: PhaseTimes | null): number | null {
  const i = ORDER.indexOf(phase as StepPhase);
  if (i < 0 || !last) return null;
  const times = [last.timeGenerate, last.timeScore, last.timeUpdate];
  if (!times.every((t) => Number.isFinite(t) && t >= 0)) return null;
  // A phase running longer than last time is nearly done, not done: at least a second of it is left.
  const rest = Math.max(times[i] - secondsInPhase, Math.min(1, times[i]));
  return rest + times.slice(i + 1).reduce((a, b) => a + b, 0);
}

/** "~4 s", "~2 min", "~1 h 5 min" (rounded, never "0 s"). */
export function formatTimeLeft(seconds: number): string {
  if (seconds < 60) return `~${Math.max(1, Math.round(seconds))} s`;
  if (seconds < 3600) return `~${Math.round(seconds / 60)} min`;
  const h = Math.floor(seconds / 3600);
  const m = Math.round((seconds - h * 3600) / 60);
  return m > 0 ? `~${h} h ${m} min` : `~${h} h`;
}
