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
  ReferenceLine,
} from 'recharts';
import { METRIC_DOCS, type MetricName } from '../../common/metrics';
import { EVAL_METRIC_DOCS, type EvalMetricName } from '../../common/eval-record';
import { formatNumber, tickFormatter } from '../lib/format';
import { algorithmLabel, hasValueModel, type OverlayRun } from '../lib/kept-runs';
import {
  chartSeries,
  latestValue,
  niceTicks,
  overlayPoints,
  overlaySeries,
  stepDomain,
  valueDomain,
  type ChartPoint,
  type OverlayRow,
} from '../lib/series';
import { useChangeMarks, useMetrics, useOverlayRuns, useRunConfig, useSmoothing } from '../store/hooks';
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

/** Metrics of the value model: null in critic-free runs (docs/formats.md §7). */
export const VALUE_METRICS: ReadonlySet<string> = new Set([
  'valueLoss',
  'valueClipFrac',
  'explainedVariance',
  'valueGradNorm',
  'valueLearningRate',
  'returnMean',
]);

/** The hover box of an overlay chart: each run's smoothed value at the step. */
function OverlayHoverValues({ active, payload }: TooltipContentProps<TooltipValueType, string | number>) {
  if (!active || !payload || payload.length === 0) return null;
  const row = payload[0].payload as OverlayRow;
  return (
    <div className="chart-tooltip">
      <div>step {row.step}</div>
      {payload.map((p) => (
        <div key={String(p.dataKey)}>
          <span className="swatch" style={{ background: p.color }} aria-hidden="true" />{' '}
          <strong>{formatNumber(typeof p.value === 'number' ? p.value : null)}</strong>{' '}
          <span className="muted">{p.name}</span>
        </div>
      ))}
    </div>
  );
}

/** The overlaid runs' names and colours; the current run is bold, as its line. */
function RunLegend(props: { runs: readonly OverlayRun[]; title: string }) {
  return (
    <ul className="chart-legend" aria-label={`Runs in ${props.title}`}>
      {props.runs.map((r) => (
        <li key={r.id} className={r.current ? 'current' : undefined} data-run-id={r.id}>
          <span className="swatch" style={{ background: r.colour }} aria-hidden="true" />
          {r.name}
          {r.current && <span className="muted"> (current)</span>}
        </li>
      ))}
    </ul>
  );
}

/** The steps that have `metric` as a finite number. */
const withMetric = <T extends Record<string, unknown>>(rows: readonly T[], metric: string): T[] =>
  rows.filter((m) => typeof m[metric] === 'number' && Number.isFinite(m[metric]));

const finiteIn = (rows: readonly OverlayRow[], key: string) =>
  rows.some((r) => typeof r[key] === 'number' && Number.isFinite(r[key]));

/**
 * One metric over the steps: the raw values faint, the EMA-smoothed line bold, ≤ 500 points drawn whatever
 * the history length. With two or more runs compared, one smoothed line per run (one colour each, the current
 * run bold) and a legend. A <figure> named by its title; the newest value is readable beside the title. A
 * value-model chart of a critic-free run says so ("no value model (GRPO)") instead of an empty axis.
 */
/** Metrics that are settings, not measurements: drawn as steps, never smoothed. */
const SETTING_METRICS: ReadonlySet<string> = new Set(['klCoef']);

export const MetricChart = memo(function MetricChart(props: {
  metric: string;
  title: string;
  height?: number;
  /** Show the metric's one-line meaning under the chart. */
  showDoc?: boolean;
  /**
   * A metric of some steps only (held-out evaluation's, every evalEvery steps): drawn over the steps that have
   * it, one line through its points, instead of gaps at the steps between.
   */
  sparse?: boolean;
}) {
  // Deferred: a burst of steps redraws once, at low priority, without blocking input or the step counter.
  const allMetrics = useDeferredValue(useMetrics());
  const allOverlay = useDeferredValue(useOverlayRuns());
  const { sparse, metric } = props;
  const metrics = useMemo(
    () => (sparse ? withMetric(allMetrics, metric) : allMetrics),
    [sparse, allMetrics, metric],
  );
  const overlay = useMemo(
    () => (sparse ? allOverlay.map((r) => ({ ...r, metrics: withMetric(r.metrics, metric) })) : allOverlay),
    [sparse, allOverlay, metric],
  );
  // A setting's chart (klCoef) steps where the setting changed: no smoothing into a ramp.
  const setting = SETTING_METRICS.has(metric);
  const chosenSmoothing = useDeferredValue(useSmoothing());
  const smoothing = setting ? 0 : chosenSmoothing;
  const runConfig = useRunConfig();
  const changeMarks = useChangeMarks();
  const captionId = useId();
  const body = useRef<HTMLDivElement>(null);
  const visible = useInView(body);
  const comparing = overlay.length >= 2;
  const keys = useMemo(() => overlay.map((_, i) => `r${i}`), [overlay]);
  const single = useMemo(
    () => (visible && !comparing ? chartSeries(metrics, props.metric, smoothing) : []),
    [visible, comparing, metrics, props.metric, smoothing],
  );
  const rows = useMemo(
    () =>
      visible && comparing
        ? overlaySeries(
            overlay.map((r, i) => ({ key: keys[i], metrics: r.metrics })),
            props.metric,
            smoothing,
          )
        : [],
    [visible, comparing, overlay, keys, props.metric, smoothing],
  );
  const points = useMemo(
    () => (comparing ? overlayPoints(rows, keys) : single),
    [comparing, rows, keys, single],
  );
  const yTicks = useMemo(() => niceTicks(...valueDomain(points), 4), [points]);
  const yFormat = useMemo(() => tickFormatter(yTicks), [yTicks]);
  const xDomain = useMemo(() => stepDomain(points), [points]);
  const xTicks = useMemo(
    () => niceTicks(...xDomain, 4, true).filter((t) => t >= xDomain[0] && t <= xDomain[1]),
    [xDomain],
  );
  const latest = useMemo(() => latestValue(metrics, props.metric), [metrics, props.metric]);
  const doc =
    (METRIC_DOCS[props.metric as MetricName] as string | undefined) ??
    (EVAL_METRIC_DOCS[props.metric as EvalMetricName] as string | undefined);

  // The current run has no value model: its value metrics are null (or it is configured critic-free).
  const noValueModel =
    VALUE_METRICS.has(props.metric) &&
    (!hasValueModel(runConfig) ||
      (metrics.length > 0 &&
        metrics.every((m) => m[props.metric] === null || m[props.metric] === undefined)));
  const noValueText = `no value model (${algorithmLabel(runConfig)})`;
  const othersDrawn = comparing && keys.some((k, i) => !overlay[i].current && finiteIn(rows, k));
  const empty = comparing ? overlay.every((r) => r.metrics.length === 0) : metrics.length === 0;

  const marks = changeMarks.filter((m) => m.step >= xDomain[0] && m.step <= xDomain[1]);
  const axes = (
    <>
      <CartesianGrid stroke="#eef0f3" vertical={false} />
      {marks.map((m) => (
        <ReferenceLine
          key={m.step}
          x={m.step}
          stroke="#f59322"
          strokeDasharray="3 3"
          ifOverflow="discard"
          shape={(p: { x1?: number; y1?: number; x2?: number; y2?: number }) => (
            <g className="change-mark" data-step={m.step}>
              <title>{`step ${m.step}: ${m.text}`}</title>
              <line x1={p.x1} y1={p.y1} x2={p.x2} y2={p.y2} stroke="#f59322" strokeDasharray="3 3" />
              {/* A wider invisible line, so the hover finds it. */}
              <line x1={p.x1} y1={p.y1} x2={p.x2} y2={p.y2} stroke="transparent" strokeWidth={8} />
            </g>
          )}
        />
      ))}
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
        tickFormatter={yFormat}
        domain={[yTicks[0], yTicks[yTicks.length - 1]]}
        ticks={yTicks}
      />
    </>
  );

  let plot;
  if (noValueModel && !othersDrawn) {
    plot = (
      <p className="chart-empty muted" data-testid="no-value-model">
        {noValueText}
      </p>
    );
  } else if (empty) {
    plot = <p className="chart-empty muted">{sparse ? 'No evaluation yet' : 'No steps yet'}</p>;
  } else if (!visible) {
    plot = null;
  } else if (comparing) {
    plot = (
      <ResponsiveContainer width="100%" height="100%" minWidth={0}>
        <LineChart data={rows} margin={{ top: 6, right: 8, bottom: 0, left: 0 }}>
          {axes}
          <Tooltip content={OverlayHoverValues} isAnimationActive={false} />
          {overlay.map((r, i) => (
            <Line
              key={r.id}
              dataKey={keys[i]}
              name={r.name}
              className={r.current ? 'run-line run-line-current' : 'run-line'}
              type={setting ? 'stepAfter' : 'linear'}
              stroke={r.colour}
              strokeWidth={r.current ? 2.75 : 1.5}
              dot={rows.length === 1}
              isAnimationActive={false}
              connectNulls
            />
          ))}
        </LineChart>
      </ResponsiveContainer>
    );
  } else {
    plot = (
      <ResponsiveContainer width="100%" height="100%" minWidth={0}>
        <LineChart data={single} margin={{ top: 6, right: 8, bottom: 0, left: 0 }}>
          {axes}
          <Tooltip content={HoverValues} isAnimationActive={false} />
          {!setting && (
            <Line
              dataKey="value"
              stroke="#9db7e0"
              strokeWidth={1}
              dot={false}
              isAnimationActive={false}
              connectNulls={false}
            />
          )}
          <Line
            dataKey="smooth"
            type={setting ? 'stepAfter' : 'linear'}
            stroke="#0877bd"
            strokeWidth={2}
            dot={sparse || single.length === 1}
            isAnimationActive={false}
            connectNulls={false}
          />
        </LineChart>
      </ResponsiveContainer>
    );
  }

  return (
    <figure className="chart" aria-labelledby={captionId} data-metric={props.metric}>
      <div className="chart-head">
        <figcaption id={captionId} title={doc}>
          {props.title}
        </figcaption>
        {noValueModel && othersDrawn && <span className="chart-note muted">current run: {noValueText}</span>}
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
        {plot}
      </div>
      {comparing && <RunLegend runs={overlay} title={props.title} />}
      {doc && props.showDoc && <p className="chart-doc muted">{doc}</p>}
    </figure>
  );
});
