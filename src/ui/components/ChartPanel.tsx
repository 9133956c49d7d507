import { useId } from 'react';
import { chartsFor } from '../lib/catalog';
import { useActions, useSmoothing, useSupervisedJob } from '../store/hooks';
import { MetricChart } from './MetricChart';
import { MetricsTable } from './MetricsTable';

function SmoothingControl() {
  const smoothing = useSmoothing();
  const { setSmoothing } = useActions();
  const id = useId();
  return (
    <div className="smoothing">
      <label htmlFor={id}>Smoothing</label>
      <input
        id={id}
        type="range"
        min={0}
        max={0.99}
        step={0.01}
        value={smoothing}
        onChange={(e) => setSmoothing(e.target.valueAsNumber)}
        aria-describedby={`${id}-hint`}
      />
      <output htmlFor={id}>{smoothing.toFixed(2)}</output>
      <small id={`${id}-hint`} className="muted">
        EMA weight of the bold line; the faint line is the raw value
      </small>
    </div>
  );
}

/**
 * The centre column: the four headline charts, then the rest, then every metric's newest value. A DPO or SFT job
 * has its own charts (lib/catalog.ts DPO_CHARTS, SFT_CHARTS).
 */
export function ChartPanel() {
  const job = useSupervisedJob()?.kind;
  const charts = chartsFor(job);
  const headline = charts.filter((c) => c.headline);
  const more = charts.filter((c) => !c.headline);
  return (
    <section className="charts" aria-labelledby="charts-heading">
      <div className="section-head">
        <h2 id="charts-heading">Training{job === 'dpo' ? ' (DPO)' : job === 'sft' ? ' (SFT)' : ''}</h2>
        <SmoothingControl />
      </div>
      <div className="chart-grid headline">
        {headline.map((c) => (
          <MetricChart key={c.key} metric={c.key} title={c.title} height={150} showDoc />
        ))}
      </div>
      <h3 className="subhead">More charts</h3>
      <div className="chart-grid more">
        {more.map((c) => (
          <MetricChart key={c.key} metric={c.key} title={c.title} height={110} />
        ))}
      </div>
      <MetricsTable />
    </section>
  );
}
