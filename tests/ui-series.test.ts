import { describe, expect, it } from 'vitest';
import {
  chartSeries,
  downsampleMinMax,
  ema,
  latestValue,
  MAX_DRAWN_POINTS,
  niceTicks,
  stepDomain,
  valueDomain,
} from '../src/ui/lib/series';
import { formatNumber, formatTick, tickFormatter } from '../src/ui/lib/format';
import type { MetricsByName } from '../src/worker/protocol';

describe('ema (TensorBoard smoothing)', () => {
  it('is the identity at weight 0', () => {
    expect(ema([1, 5, -2, 3], 0)).toEqual([1, 5, -2, 3]);
  });

  it('is debiased: a constant series stays constant from the first point', () => {
    for (const v of ema([2, 2, 2, 2, 2], 0.9)) expect(v).toBeCloseTo(2, 12);
  });

  it('matches the plain recurrence', () => {
    const xs = [1, 4, 2, 8, 5, 7];
    const w = 0.6;
    let last = 0;
    const want = xs.map((x, i) => {
      last = last * w + (1 - w) * x;
      return last / (1 - w ** (i + 1));
    });
    ema(xs, w).forEach((v, i) => expect(v).toBeCloseTo(want[i], 12));
  });

  it('keeps gaps and does not let them disturb the average', () => {
    const out = ema([1, null, NaN, 1, undefined, 1], 0.5);
    expect(out[1]).toBeNull();
    expect(out[2]).toBeNull();
    expect(out[4]).toBeNull();
    expect(out[5]).toBeCloseTo(1, 12);
  });
});

describe('downsampleMinMax', () => {
  const series = (n: number, f: (i: number) => number) =>
    Array.from({ length: n }, (_, i) => ({ i, v: f(i) }));

  it('returns short series unchanged (a copy)', () => {
    const s = series(10, (i) => i);
    const out = downsampleMinMax(s, 500, (p) => p.v);
    expect(out).toEqual(s);
    expect(out).not.toBe(s);
  });

  it('draws at most N points, in order, first and last kept', () => {
    for (const [n, max] of [
      [5000, 500],
      [501, 500],
      [1234, 100],
      [100_000, 500],
      [7, 4],
    ]) {
      const s = series(n, (i) => Math.sin(i / 7) + (i % 13) / 10);
      const out = downsampleMinMax(s, max, (p) => p.v);
      expect(out.length).toBeLessThanOrEqual(max);
      expect(out[0]).toBe(s[0]);
      expect(out[out.length - 1]).toBe(s[n - 1]);
      for (let k = 1; k < out.length; k++) expect(out[k].i).toBeGreaterThan(out[k - 1].i);
    }
  });

  it('keeps the global min and max, and a one-point spike or dip anywhere', () => {
    const s = series(5000, (i) => Math.sin(i / 50));
    s[1234].v = 100;
    s[3777].v = -100;
    const out = downsampleMinMax(s, 500, (p) => p.v);
    expect(out).toContain(s[1234]);
    expect(out).toContain(s[3777]);
    const vs = out.map((p) => p.v);
    expect(Math.max(...vs)).toBe(100);
    expect(Math.min(...vs)).toBe(-100);
  });

  it('keeps every bucket’s extremes: the drawn envelope equals the real one per bucket', () => {
    const s = series(1000, (i) => ((i * 7919) % 101) - 50);
    const out = downsampleMinMax(s, 102, (p) => p.v); // 50 buckets of 19.96 points
    const kept = new Set(out.map((p) => p.i));
    for (let b = 0; b < 50; b++) {
      const lo = 1 + Math.floor((b * 998) / 50);
      const hi = 1 + Math.floor(((b + 1) * 998) / 50);
      const bucket = s.slice(lo, hi);
      const min = Math.min(...bucket.map((p) => p.v));
      const max = Math.max(...bucket.map((p) => p.v));
      expect(bucket.some((p) => p.v === min && kept.has(p.i))).toBe(true);
      expect(bucket.some((p) => p.v === max && kept.has(p.i))).toBe(true);
    }
  });

  it('keeps gaps visible: a bucket with no finite value keeps one point', () => {
    const s = series(1000, (i) => (i >= 400 && i < 600 ? NaN : i));
    const out = downsampleMinMax(s, 50, (p) => (Number.isFinite(p.v) ? p.v : null));
    expect(out.some((p) => Number.isNaN(p.v))).toBe(true);
  });
});

describe('chartSeries', () => {
  const metrics = Array.from({ length: 5000 }, (_, i) => ({ step: i + 1, reward: Math.sin(i / 100), kl: i }));

  it('smooths the whole history and draws ≤ 500 points at 5,000 steps', () => {
    const pts = chartSeries(metrics, 'reward', 0.9);
    expect(pts.length).toBeLessThanOrEqual(MAX_DRAWN_POINTS);
    expect(pts[0].step).toBe(1);
    expect(pts[pts.length - 1].step).toBe(5000);
    // The smoothed value at a drawn point is the EMA over every kept step up to it, not over the drawn ones.
    const full = ema(
      metrics.map((m) => m.reward),
      0.9,
    );
    for (const p of pts) expect(p.smooth).toBeCloseTo(full[p.step - 1] as number, 12);
  });

  it('10 charts of 5,000 steps finish within 500 ms (a guard against a hang, not a frame budget)', () => {
    const t0 = performance.now();
    for (let k = 0; k < 10; k++) chartSeries(metrics, 'reward', 0.6);
    expect(performance.now() - t0).toBeLessThan(500);
  });

  it('a missing metric is a gap, and latestValue skips it', () => {
    const ms: MetricsByName[] = [{ step: 1, x: 1 }, { step: 2 }, { step: 3, x: NaN }];
    expect(chartSeries(ms, 'x', 0).map((p) => p.value)).toEqual([1, null, null]);
    expect(latestValue(ms, 'x')).toBe(1);
    expect(latestValue([], 'x')).toBeNull();
  });
});

describe('axes and numbers', () => {
  it('gives a flat series a band, so the axis has distinct ticks', () => {
    const [lo, hi] = valueDomain([
      { step: 1, value: 0.05, smooth: 0.05 },
      { step: 2, value: 0.05, smooth: 0.05 },
    ]);
    expect(lo).toBeLessThan(0.05);
    expect(hi).toBeGreaterThan(0.05);
    expect(valueDomain([{ step: 1, value: 0, smooth: 0 }])).toEqual([-1, 1]);
    expect(stepDomain([{ step: 3, value: 1, smooth: 1 }])).toEqual([3, 4]);
    // A non-negative series (KL, clip fraction) keeps its axis at or above 0.
    const [klLo] = valueDomain([
      { step: 1, value: 0, smooth: 0 },
      { step: 2, value: 27, smooth: 12 },
    ]);
    expect(klLo).toBe(0);
    expect(niceTicks(0, 28.35, 4)).toEqual([0, 10, 20, 30]);
  });

  it('finds round ticks covering the range (recharts never has to)', () => {
    expect(niceTicks(0, 1, 4)).toEqual([0, 0.5, 1]);
    expect(niceTicks(-1, 1, 4)).toEqual([-1, 0, 1]);
    expect(niceTicks(0.0068, 0.0102, 4)).toEqual([0.006, 0.008, 0.01, 0.012]);
    expect(niceTicks(1, 26, 4, true)).toEqual([0, 10, 20, 30]);
    expect(niceTicks(1, 2, 4, true)).toEqual([1, 2]);
    expect(niceTicks(0, 0)).toEqual([-1, 0, 1]);
    expect(niceTicks(1e-12, 3e-12, 4)).toEqual([1e-12, 2e-12, 3e-12]);
    for (const [lo, hi] of [
      [-3.7, 12345],
      [0.05, 0.0500001],
      [1e-9, 1],
      [-1e6, -999],
    ]) {
      const t = niceTicks(lo, hi, 4);
      expect(t.length).toBeGreaterThanOrEqual(2);
      expect(t.length).toBeLessThanOrEqual(12);
      expect(t[0]).toBeLessThanOrEqual(lo);
      expect(t[t.length - 1]).toBeGreaterThanOrEqual(hi);
    }
  });

  it('formats readouts and ticks compactly', () => {
    expect(formatNumber(null)).toBe('–');
    expect(formatNumber(12)).toBe('12');
    expect(formatNumber(0.123456)).toBe('0.123');
    expect(formatNumber(0.0001)).toBe('1e-4');
    expect(formatNumber(NaN)).toBe('NaN');
    expect(formatTick(0.00935)).toBe('0.0094');
    expect(formatTick(123456)).toBe('1.2e+5');
  });

  it('an axis never repeats a tick label (issue #33, defect 10: response length 23.5, 24, 24.5)', () => {
    const ticks = [23.5, 24, 24.5, 25];
    expect(ticks.map(tickFormatter(ticks))).toEqual(['23.5', '24', '24.5', '25']);
    expect([0, 0.5, 1].map(tickFormatter([0, 0.5, 1]))).toEqual(['0', '0.5', '1']);
    const tight = [0.0501, 0.0502, 0.0503];
    expect(new Set(tight.map(tickFormatter(tight))).size).toBe(3);
  });
});
