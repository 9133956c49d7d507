/** Number formatting shared by the charts, the controls and the readouts. */

/** Three significant digits; exponent notation for very small or large magnitudes; integers stay whole. */
export function formatNumber(v: number | null | undefined): string {
  if (v === null || v === undefined) return '–';
  if (Number.isNaN(v)) return 'NaN';
  if (!Number.isFinite(v)) return v > 0 ? '∞' : '−∞';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e6) return String(v);
  if (a < 1e-3 || a >= 1e6) return v.toExponential(2).replace(/\.?0+e/, 'e');
  return String(Number(v.toPrecision(3)));
}

/** Axis ticks: two significant digits are enough to read a chart. */
export function formatTick(v: number, digits = 2): string {
  if (v === 0 || !Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e5) return v.toExponential(digits - 1).replace(/\.0+e/, 'e');
  return String(Number(v.toPrecision(digits)));
}

/**
 * A formatter for one axis's ticks with the fewest significant digits (2 or more) that keeps every label
 * distinct: ticks 23.5, 24, 24.5 read "23.5", "24", "24.5", not "24", "24", "25".
 */
export function tickFormatter(ticks: readonly number[]): (v: number) => string {
  for (let digits = 2; digits <= 8; digits++) {
    const labels = ticks.map((t) => formatTick(t, digits));
    if (new Set(labels).size === labels.length) return (v) => formatTick(v, digits);
  }
  return (v) => String(v);
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MB`;
  return `${(n / 1024 ** 3).toFixed(2)} GB`;
}

/** Rounds to `digits` significant digits (slider values: 0.000316, not 0.00031622776601683794). */
export function roundSignificant(v: number, digits = 3): number {
  if (v === 0 || !Number.isFinite(v)) return v;
  return Number(v.toPrecision(digits));
}
