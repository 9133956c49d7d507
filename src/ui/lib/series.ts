/**
 * Chart series: EMA smoothing over everything that is kept, then min/max-preserving downsampling of what is
 * drawn. Pure functions (tests/ui-series.test.ts); the store keeps every step, the charts draw ≤ maxPoints.
 */
import type { MetricsByName } from '../../worker/protocol';

export interface ChartPoint {
  step: number;
  /** The raw value; null where the metric is missing or not finite (drawn as a gap). */
  value: number | null;
  /** The smoothed value (equals `value` when smoothing is 0). */
  smooth: number | null;
}

/** The number of points a chart draws at most, whatever the history length. */
export const MAX_DRAWN_POINTS = 500;

const finite = (v: number | null | undefined): v is number => typeof v === 'number' && Number.isFinite(v);

/**
 * TensorBoard's smoothing: an exponential moving average with weight `weight` in [0, 1), debiased so that the
 * first points are not pulled towards 0. Missing values stay missing and do not disturb the average.
 */
export function ema(values: readonly (number | null | undefined)[], weight: number): (number | null)[] {
  const w = Math.min(Math.max(weight, 0), 0.999);
  const out: (number | null)[] = new Array<number | null>(values.length);
  let last = 0;
  let seen = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!finite(v)) {
      out[i] = null;
      continue;
    }
    seen++;
    last = last * w + (1 - w) * v;
    out[i] = w === 0 ? v : last / (1 - Math.pow(w, seen));
  }
  return out;
}

/**
 * At most `maxPoints` of `points`, in order: the first and the last, and for each of ⌊(maxPoints − 2) / 2⌋
 * equal buckets in between the point with the smallest and the one with the largest value, so spikes and dips
 * survive (the global minimum and maximum always do). A bucket with no finite value keeps its first point, so
 * gaps stay visible.
 */
export function downsampleMinMax<T>(
  points: readonly T[],
  maxPoints: number,
  valueOf: (p: T) => number | null | undefined,
): T[] {
  const n = points.length;
  if (n <= maxPoints) return points.slice();
  if (maxPoints < 4) {
    // Too few to bucket: an even stride.
    const out: T[] = [];
    for (let i = 0; i < maxPoints; i++)
      out.push(points[Math.round((i * (n - 1)) / Math.max(maxPoints - 1, 1))]);
    return out;
  }
  const buckets = Math.floor((maxPoints - 2) / 2);
  const inner = n - 2;
  const out: T[] = [points[0]];
  for (let b = 0; b < buckets; b++) {
    const lo = 1 + Math.floor((b * inner) / buckets);
    const hi = 1 + Math.floor(((b + 1) * inner) / buckets);
    let minI = -1;
    let maxI = -1;
    for (let i = lo; i < hi; i++) {
      const v = valueOf(points[i]);
      if (!finite(v)) continue;
      if (minI < 0 || v < (valueOf(points[minI]) as number)) minI = i;
      if (maxI < 0 || v > (valueOf(points[maxI]) as number)) maxI = i;
    }
    if (minI < 0) {
      if (lo < hi) out.push(points[lo]);
    } else if (minI === maxI) out.push(points[minI]);
    else if (minI < maxI) out.push(points[minI], points[maxI]);
    else out.push(points[maxI], points[minI]);
  }
  out.push(points[n - 1]);
  return out;
}

/** One metric's drawable series: smoothed over the whole history, then downsampled. */
export function chartSeries(
  metrics: readonly MetricsByName[],
  key: string,
  smoothing: number,
  maxPoints = MAX_DRAWN_POINTS,
): ChartPoint[] {
  const raw = metrics.map((m) => (finite(m[key]) ? m[key] : null));
  const smooth = ema(raw, smoothing);
  const all: ChartPoint[] = metrics.map((m, i) => ({
    step: finite(m.step) ? m.step : i + 1,
    value: raw[i],
    smooth: smooth[i],
  }));
  return downsampleMinMax(all, maxPoints, (p) => p.value);
}

/**
 * The y-range to draw: the data's range with 5% margins (not across 0); a flat series (klCoef at a fixed β) gets a band
 * around its value so the axis still has distinct ticks.
 */
export function valueDomain(points: readonly ChartPoint[]): [number, number] {
  let lo = Infinity;
  let hi = -Infinity;
  for (const p of points) {
    for (const v of [p.value, p.smooth]) {
      if (v === null) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (lo > hi) return [0, 1];
  const span = hi - lo;
  if (span <= 1e-9 * Math.max(1, Math.abs(hi))) {
    const pad = Math.abs(hi) > 0 ? Math.abs(hi) * 0.1 : 1;
    return [lo - pad, hi + pad];
  }
  // 5% margins, but a series that never crosses 0 keeps its axis on one side of it.
  const below = lo - span * 0.05;
  const above = hi + span * 0.05;
  return [lo >= 0 ? Math.max(0, below) : below, hi <= 0 ? Math.min(0, above) : above];
}

/** The x-range: first to last step, at least one step wide. */
export function stepDomain(points: readonly ChartPoint[]): [number, number] {
  if (points.length === 0) return [0, 1];
  const first = points[0].step;
  const last = points[points.length - 1].step;
  return [first, Math.max(last, first + 1)];
}

/**
 * Round axis ticks covering [lo, hi]: about `count` of them, spaced 1, 2, 2.5 or 5 × 10^k (`integer`: at least
 * 1 apart). The charts pass these to recharts so it never has to find ticks itself.
 */
export function niceTicks(lo: number, hi: number, count = 4, integer = false): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [0, 1];
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi === lo) {
    const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / Math.max(count - 1, 1);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw * 0.999) ?? 10 * mag;
  if (integer) step = Math.max(1, Math.round(step));
  const first = Math.floor(lo / step + 1e-9) * step;
  const ticks: number[] = [];
  for (let i = 0; i < 12; i++) {
    const t = Number((first + i * step).toPrecision(12));
    ticks.push(t);
    if (t >= hi - step * 1e-9) break;
  }
  return ticks;
}

/** The newest finite value of a metric, or null. */
export function latestValue(metrics: readonly MetricsByName[], key: string): number | null {
  for (let i = metrics.length - 1; i >= 0; i--) if (finite(metrics[i][key])) return metrics[i][key];
  return null;
}

/** One row of an overlay chart: a step and each run's smoothed value there (null: no point of that run). */
export type OverlayRow = { step: number } & Record<string, number | null>;

/**
 * Several runs' series of one metric on one x axis: each run smoothed over its own whole history and
 * downsampled to its share of `maxPoints`, then merged by step (a step that only some runs have leaves the
 * others null; the lines connect across those).
 */
export function overlaySeries(
  runs: readonly { key: string; metrics: readonly MetricsByName[] }[],
  metric: string,
  smoothing: number,
  maxPoints = MAX_DRAWN_POINTS,
): OverlayRow[] {
  const share = Math.max(4, Math.floor(maxPoints / Math.max(runs.length, 1)));
  const bySteps = new Map<number, OverlayRow>();
  for (const run of runs) {
    for (const p of chartSeries(run.metrics, metric, smoothing, share)) {
      let row = bySteps.get(p.step);
      if (!row) {
        row = { step: p.step } as OverlayRow;
        for (const r of runs) row[r.key] = null;
        bySteps.set(p.step, row);
      }
      row[run.key] = p.smooth;
    }
  }
  return [...bySteps.values()].sort((a, b) => a.step - b.step);
}

/** The overlay rows as chart points (for valueDomain / stepDomain): one per value drawn. */
export function overlayPoints(rows: readonly OverlayRow[], keys: readonly string[]): ChartPoint[] {
  const out: ChartPoint[] = [];
  for (const row of rows)
    for (const k of keys) {
      const v = row[k];
      if (v !== null && v !== undefined) out.push({ step: row.step, value: v, smooth: v });
    }
  return out.sort((a, b) => a.step - b.step);
}
