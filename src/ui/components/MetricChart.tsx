import { memo, useDeferredValue, useId, useMemo, useRef } from 'react';
import {
  CartesianGrid,
  Line,
  LineChart,
  ResponsiveContainer,
  Tooltip,
  XAxis,
  YAxis,
  type TooltipContentProps,
  type TooltipValueType,
} from 'recharts';
import { METRIC_DOCS, type MetricName } from '../../core/ppo/metrics';
import { formatNumber, formatTick } from '../lib/format';
import { chartSeries, latestValue, niceTicks, stepDomain, valueDomain, type ChartPoint } from '../lib/series';
import { useMetrics, useSmoothing } from '../store/hooks';
import { useInView } from './useInView';

function HoverValues({ active, payload }: TooltipContentProps<TooltipValueType, string | number>) {
  if (!active || !payload || payload.length === 0) return null;
  const p = payload[0].payload as ChartPoint;
  return (
    <div className="chart-tooltip">
      <div>step {p.step}</div>
      <div>
        <strong>{formatNumber(p.smooth)}</strong> <span className="muted">smoothed</span>
      </div>
      <div>
        {formatNumber(p.value)} <span className="muted">raw</span>
      </div>
    </div>
  );
}

/**
 * One metric over the steps: the raw values faint, the EMA-smoothed line bold, ≤ 500 points drawn whatever
 * the history length. A <figure> named by its title; the newest value is readable beside the title.
 */
export const MetricChart = memo(function MetricChart(props: {
  metric: string;
  title: string;
  height?: number;
  /** Show the metric's one-line meaning under the chart. */
  showDoc?: boolean;
}) {
  // Deferred: a burst of steps redraws once, at low priority, without blocking input or the step counter.
  const metrics = useDeferredValue(useMetrics());
  const smoothing = useDeferredValue(useSmoothing());
  const captionId = useId();
  const body = useRef<HTMLDivElement>(null);
  const visible = useInView(body);
  const data = useMemo(
    () => (visible ? chartSeries(metrics, props.metric, smoothing) : []),
    [visible, metrics, props.metric, smoothing],
  );
  const yTicks = useMemo(() => niceTicks(...valueDomain(data), 4), [data]);
  const xDomain = useMemo(() => stepDomain(data), [data]);
  const xTicks = useMemo(
    () => niceTicks(...xDomain, 4, true).filter((t) => t >= xDomain[0] && t <= xDomain[1]),
    [xDomain],
  );
  const latest = useMemo(() => latestValue(metrics, props.metric), [metrics, props.metric]);
  const doc = METRIC_DOCS[props.metric as MetricName] as string | undefined;

  return (
    <figure className="chart" aria-labelledby={captionId} data-metric={props.metric}>
      <div className="chart-head">
        <figcaption id={captionId} title={doc}>
          {props.title}
        </figcaption>
        <span
          className="chart-latest"
          data-testid="chart-latest"
          data-value={latest ?? ''}
          title={`newest ${props.metric}`}
        >
          {formatNumber(latest)}
        </span>
      </div>
      <div className="chart-body" ref={body} style={{ height: props.height ?? 130 }}>
        {metrics.length === 0 ? (
          <p className="chart-empty muted">No steps yet</p>
        ) : !visible ? null : (
          <ResponsiveContainer width="100%" height="100%" minWidth={0}>
            <LineChart data={data} margin={{ top: 6, right: 8, bottom: 0, left: 0 }}>
              <CartesianGrid stroke="#eef0f3" vertical={false} />
              <XAxis
                dataKey="step"
                type="number"
                domain={xDomain}
                ticks={xTicks}
                allowDecimals={false}
                tick={{ fontSize: 11 }}
                tickLine={false}
                height={18}
              />
              <YAxis
                width={46}
                tick={{ fontSize: 11 }}
                tickLine={false}
                axisLine={false}
                tickFormatter={formatTick}
                domain={[yTicks[0], yTicks[yTicks.length - 1]]}
                ticks={yTicks}
              />
              <Tooltip content={HoverValues} isAnimationActive={false} />
              <Line
                dataKey="value"
                stroke="#9db7e0"
                strokeWidth={1}
                dot={false}
                isAnimationActive={false}
                connectNulls={false}
              />
              <Line
                dataKey="smooth"
                stroke="#0877bd"
                strokeWidth={2}
                dot={data.length === 1}
                isAnimationActive={false}
                connectNulls={false}
              />
            </LineChart>
          </ResponsiveContainer>
        )}
      </div>
      {doc && props.showDoc && <p className="chart-doc muted">{doc}</p>}
    </figure>
  );
});
