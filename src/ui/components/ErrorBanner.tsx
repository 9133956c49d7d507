import { useActions, useError } from '../store/hooks';

export function ErrorBanner() {
  const error = useError();
  const { dismissError } = useActions();
  if (!error) return null;
  return (
    <div className="error" role="alert">
      <span>{error}</span>
      <button type="button" className="link" onClick={dismissError} aria-label="Dismiss error">
        ×
      </button>
    </div>
  );
}
