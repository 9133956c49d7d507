/**
 * Rng.fillNormal (the generator scripts/make-random-model.ts draws random model weights with): seeded, and
 * normal(0, std) by its moments and its mass within 1σ and 2σ, against the normal distribution's own values.
 */
import { describe, it, expect } from 'vitest';
import { Rng } from '../src/core/base/rng';

describe('Rng.fillNormal', () => {
  it('the same seed draws the same values; another seed others; it fills every element of an odd length', () => {
    const a = new Rng(7).fillNormal(new Float32Array(1001), 1);
    const b = new Rng(7).fillNormal(new Float32Array(1001), 1);
    const c = new Rng(8).fillNormal(new Float32Array(1001), 1);
    expect(Array.from(a)).toEqual(Array.from(b));
    expect(Array.from(a)).not.toEqual(Array.from(c));
    expect(a[1000]).not.toBe(0);
    expect(a.every(Number.isFinite)).toBe(true);
  });

  it('continues the stream: two fills in a row are not the same values', () => {
    const rng = new Rng(3);
    const first = Array.from(rng.fillNormal(new Float32Array(64), 1));
    const second = Array.from(rng.fillNormal(new Float32Array(64), 1));
    expect(second).not.toEqual(first);
  });

  it('is normal(0, std): mean, standard deviation, kurtosis and the mass within 1σ and 2σ (n = 10⁶)', () => {
    const n = 1_000_000;
    const std = 0.02;
    const x = new Rng(1234).fillNormal(new Float32Array(n), std);
    let s1 = 0;
    let s2 = 0;
    let s4 = 0;
    let in1 = 0;
    let in2 = 0;
    for (const v of x) {
      s1 += v;
      s2 += v * v;
      s4 += v ** 4;
      if (Math.abs(v) < std) in1++;
      if (Math.abs(v) < 2 * std) in2++;
    }
    const mean = s1 / n;
    const variance = s2 / n - mean * mean;
    // Standard errors at n = 10⁶: the mean's std/1000; the sample std's std/1414; a proportion's ≤ 0.0005.
    expect(Math.abs(mean)).toBeLessThan((5 * std) / 1000);
    expect(Math.abs(Math.sqrt(variance) / std - 1)).toBeLessThan(0.005);
    expect(Math.abs(s4 / n / variance ** 2 - 3)).toBeLessThan(0.03); // a normal's kurtosis is 3
    expect(Math.abs(in1 / n - 0.682689)).toBeLessThan(0.0025);
    expect(Math.abs(in2 / n - 0.9545)).toBeLessThan(0.0025);
  });
});
