import { useState } from 'react';
import { EXTRA_METRICS, METRIC_DOCS, REQUIRED_METRICS, type MetricName } from '../../common/metrics';
import { formatNumber } from '../lib/format';
import { usePlayground } from '../store/hooks';

const NAMES: readonly MetricName[] = [...REQUIRED_METRICS, ...EXTRA_METRICS];

/** Every metric of the newest step, with its meaning (collapsed by default). */
export function MetricsTable() {
  const [open, setOpen] = useState(false);
  const last = usePlayground((s) => (open ? s.metrics[s.metrics.length - 1] : undefined));
  return (
    <details className="metrics-table" onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>All metrics of the newest step</summary>
      {!open ? null : !last ? (
        <p className="muted">No steps yet.</p>
      ) : (
        <table>
          <tbody>
            {NAMES.filter((n) => n in last).map((n) => (
              <tr key={n} data-metric={n}>
                <th scope="row">{n}</th>
                <td>{formatNumber(last[n])}</td>
                <td className="muted">{METRIC_DOCS[n]}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </details>
  );
}
