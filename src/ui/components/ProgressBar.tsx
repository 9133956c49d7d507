import type { ProgressView } from '../store/types';

/** A worker job's progress: a determinate bar when the fraction is known, else an indeterminate one. */
export function ProgressBar({ progress, label }: { progress: ProgressView | null; label: string }) {
  if (!progress) return null;
  const pct = progress.fraction === null ? undefined : Math.round(progress.fraction * 100);
  return (
    <div className="progress" data-testid="progress">
      <progress aria-label={label} max={100} value={pct} />
      <small className="muted">
        {progress.message}
        {pct !== undefined ? ` (${pct}%)` : ''}
      </small>
    </div>
  );
}
