import { describe, expect, it } from 'vitest';
import { heatColor, heatScale, heatTextColor, tokenValue } from '../src/ui/lib/heat';
import type { TokenView } from '../src/worker/protocol';

const tok = (advantage: number, kl = 0, logprob = -1): TokenView => ({ text: 'x', advantage, kl, logprob });

describe('heatmap colour scale', () => {
  const diverging = { mode: 'advantage' as const, extent: 2 };

  it('is white at 0, blue at +extent, orange at −extent (TensorFlow Playground colours)', () => {
    expect(heatColor(0, diverging)).toBe('rgb(255, 255, 255)');
    expect(heatColor(2, diverging)).toBe('rgb(8, 119, 189)');
    expect(heatColor(-2, diverging)).toBe('rgb(245, 147, 34)');
  });

  it('is linear in between and clamped beyond the extent', () => {
    expect(heatColor(1, diverging)).toBe('rgb(132, 187, 222)');
    expect(heatColor(50, diverging)).toBe(heatColor(2, diverging));
    expect(heatColor(-50, diverging)).toBe(heatColor(-2, diverging));
  });

  it('shows a missing value as neutral grey', () => {
    expect(heatColor(NaN, diverging)).toBe('rgb(221, 221, 221)');
  });

  it('log-prob is sequential: white for a sure token, orange for the least likely one', () => {
    const scale = { mode: 'logprob' as const, extent: -8 };
    expect(heatColor(0, scale)).toBe('rgb(255, 255, 255)');
    expect(heatColor(-8, scale)).toBe('rgb(245, 147, 34)');
    expect(heatColor(-100, scale)).toBe('rgb(245, 147, 34)');
    expect(heatColor(0.5, scale)).toBe('rgb(255, 255, 255)');
  });

  it('the scale is symmetric over the batch (diverging) or its lowest log-prob (sequential)', () => {
    const batch = [[tok(0.5, 0.1, -3)], [tok(-1.5, -0.4, -7), tok(1, 0.2, -0.1)]];
    expect(heatScale(batch, 'advantage')).toEqual({ mode: 'advantage', extent: 1.5 });
    expect(heatScale(batch, 'kl')).toEqual({ mode: 'kl', extent: 0.4 });
    expect(heatScale(batch, 'logprob')).toEqual({ mode: 'logprob', extent: -7 });
    // An all-zero batch still has a usable scale (no division by zero).
    expect(heatScale([[tok(0, 0, 0)]], 'advantage').extent).toBeGreaterThan(0);
    expect(heatScale([[tok(0, 0, 0)]], 'logprob').extent).toBeLessThan(0);
  });

  it('picks the value by mode, and white text on saturated cells', () => {
    const t = tok(0.3, 0.2, -4);
    expect(tokenValue(t, 'advantage')).toBe(0.3);
    expect(tokenValue(t, 'kl')).toBe(0.2);
    expect(tokenValue(t, 'logprob')).toBe(-4);
    expect(heatTextColor(2, diverging)).toBe('#ffffff');
    expect(heatTextColor(0.1, diverging)).toBe('#1d2430');
  });

  it('dark text on full orange: white there is 2.2:1, below WCAG AA (issue #33, axe color-contrast)', () => {
    expect(heatTextColor(-2, diverging)).toBe('#1d2430');
  });
});
