/**
 * The samples heatmap's colour scale (TensorFlow Playground's palette: orange for negative, blue for positive).
 * Advantage and KL are signed and use a diverging scale around 0, symmetric over the batch; log-probability is
 * ≤ 0 and uses a sequential one, white for a sure token, orange for a surprising one.
 */
import type { TokenView } from '../../worker/protocol';

export type HeatmapMode = 'advantage' | 'kl' | 'logprob';

export const HEATMAP_MODES: readonly { value: HeatmapMode; label: string; doc: string }[] = [
  { value: 'advantage', label: 'Advantage', doc: 'blue: better than expected, orange: worse' },
  { value: 'kl', label: 'KL', doc: 'per-token KL to the reference; blue: more likely than the reference' },
  { value: 'logprob', label: 'Log-prob', doc: 'white: a sure token, orange: a surprising one' },
];

export interface HeatScale {
  mode: HeatmapMode;
  /** Diverging: values are divided by this (> 0). Sequential: the most negative log-prob (< 0). */
  extent: number;
}

type Rgb = readonly [number, number, number];
const WHITE: Rgb = [255, 255, 255];
const BLUE: Rgb = [8, 119, 189];
const ORANGE: Rgb = [245, 147, 34];
const MISSING = 'rgb(221, 221, 221)';

export function tokenValue(t: TokenView, mode: HeatmapMode): number {
  return mode === 'advantage' ? t.advantage : mode === 'kl' ? t.kl : t.logprob;
}

/** The scale for a batch of token lists: symmetric max |value| (diverging) or the lowest log-prob. */
export function heatScale(tokenLists: readonly (readonly TokenView[])[], mode: HeatmapMode): HeatScale {
  let extent = 0;
  for (const tokens of tokenLists) {
    for (const t of tokens) {
      const v = tokenValue(t, mode);
      if (!Number.isFinite(v)) continue;
      extent = mode === 'logprob' ? Math.min(extent, v) : Math.max(extent, Math.abs(v));
    }
  }
  if (mode === 'logprob') return { mode, extent: Math.min(extent, -1e-6) };
  return { mode, extent: Math.max(extent, 1e-6) };
}

function mixColor(a: Rgb, b: Rgb, t: number): string {
  const c = a.map((x, i) => Math.round(x + (b[i] - x) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

/** The background colour of one value: white at 0, full colour at the scale's extent (clamped beyond). */
export function heatColor(value: number, scale: HeatScale): string {
  if (!Number.isFinite(value)) return MISSING;
  if (scale.mode === 'logprob') {
    const t = Math.min(Math.max(value / scale.extent, 0), 1);
    return mixColor(WHITE, ORANGE, t);
  }
  const t = Math.min(Math.max(value / scale.extent, -1), 1);
  return t >= 0 ? mixColor(WHITE, BLUE, t) : mixColor(WHITE, ORANGE, -t);
}

const DARK: Rgb = [0x1d, 0x24, 0x30];

/** WCAG relative luminance of an sRGB colour. */
function luminance(c: Rgb): number {
  const lin = c.map((x) => {
    const v = x / 255;
    return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
}

/**
 * The text colour with the higher contrast on the cell's background: white on saturated blue, dark on white and
 * on orange (white on TensorFlow Playground's orange is 2.2:1, below WCAG's 4.5:1).
 */
export function heatTextColor(value: number, scale: HeatScale): string {
  if (!Number.isFinite(value)) return '#1d2430';
  const m = /rgb\((\d+), (\d+), (\d+)\)/.exec(heatColor(value, scale));
  const bg: Rgb = m ? [Number(m[1]), Number(m[2]), Number(m[3])] : WHITE;
  const l = luminance(bg);
  const onWhite = 1.05 / (l + 0.05);
  const onDark = (l + 0.05) / (luminance(DARK) + 0.05);
  return onWhite > onDark ? '#ffffff' : '#1d2430';
}
