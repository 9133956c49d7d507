import { useActions, useAlerts } from '../store/hooks';

const SHOWN = 4;

/** Health alerts from the engine (entropy collapse, KL blow-up...), in plain words with advice. */
export function AlertsPanel() {
  const alerts = useAlerts();
  const { dismissAlert } = useActions();
  if (alerts.length === 0) return null;
  return (
    <section className="alerts" aria-label="Health alerts" aria-live="polite">
      {alerts.slice(0, SHOWN).map((a) => (
        <div key={a.id} className="health-alert" data-alert-id={a.id}>
          <div>
            <strong>{a.message}</strong> <span className="muted small">step {a.step}</span>
            <div className="advice">{a.advice}</div>
          </div>
          <button
            type="button"
            className="link"
            aria-label={`Dismiss: ${a.message}`}
            onClick={() => dismissAlert(a.id)}
          >
            ×
          </button>
        </div>
      ))}
      {alerts.length > SHOWN && <p className="muted small">and {alerts.length - SHOWN} more</p>}
    </section>
  );
}
