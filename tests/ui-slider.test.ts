import { describe, expect, it } from 'vitest';
import { CONFIG_FIELDS, CONFIG_KEYS, type NumberField } from '../src/common/config';
import { scaleKind, sliderScale, snapValue } from '../src/ui/lib/slider-scale';

const numberFields = CONFIG_KEYS.map((k) => [k, CONFIG_FIELDS[k]] as const).filter(
  (e): e is readonly [(typeof CONFIG_KEYS)[number], NumberField] => e[1].type === 'number',
);

describe('slider scales from CONFIG_FIELDS', () => {
  it('uses the table’s log scale, log1p where the range dwarfs the default, linear otherwise', () => {
    const kind = (k: string) => scaleKind(CONFIG_FIELDS[k as 'klCoef'] as NumberField);
    expect(kind('learningRate')).toBe('log');
    expect(kind('valueLearningRate')).toBe('log');
    expect(kind('batchSize')).toBe('log');
    expect(kind('klCoef')).toBe('log1p');
    expect(kind('maxGradNorm')).toBe('log1p');
    expect(kind('clipRange')).toBe('linear');
    expect(kind('gamma')).toBe('linear');
    expect(kind('ppoEpochs')).toBe('linear');
  });

  it.each(numberFields)(
    '%s: the ends are min and max, values follow the scale’s curve (within snapping) and stay in order',
    (_, field) => {
      const s = sliderScale(field);
      expect(s.fromPosition(0)).toBe(field.min);
      expect(s.fromPosition(s.positions)).toBe(field.max);
      expect(s.toPosition(field.min)).toBe(0);
      expect(s.toPosition(field.max)).toBe(s.positions);
      const { min, max } = field;
      // The value at t ∈ [0, 1] of the track: geometric from min to max (log); min + c·((1 + (max − min)/c)^t − 1),
      // c = 1 for whole numbers else 0.01 (log1p); a straight line (linear).
      const c = field.integer ? 1 : 0.01;
      const curve = (t: number) =>
        s.kind === 'log'
          ? min * (max / min) ** t
          : s.kind === 'log1p'
            ? min + c * ((1 + (max - min) / c) ** t - 1)
            : min + t * (max - min);
      let prev = -Infinity;
      for (let p = 0; p <= s.positions; p += Math.max(1, Math.floor(s.positions / 97))) {
        const v = s.fromPosition(p);
        const ideal = curve(p / s.positions);
        // Snapping moves a value by at most half a whole number, or half a unit in its third significant digit.
        const snap = field.integer ? 0.5 : 0.005 * Math.abs(ideal) + 1e-12;
        expect(Math.abs(v - ideal), `position ${p}: ${v} against ${ideal}`).toBeLessThanOrEqual(snap);
        expect(v).toBeGreaterThanOrEqual(prev);
        prev = v;
      }
    },
  );

  it.each(numberFields)('%s: the default sits on the slider and comes back close', (_, field) => {
    const s = sliderScale(field);
    const back = s.fromPosition(s.toPosition(field.default));
    const tolerance = field.integer
      ? Math.max(1, field.default * 0.02)
      : Math.abs(field.default) * 0.03 + 1e-9;
    expect(Math.abs(back - field.default)).toBeLessThanOrEqual(tolerance);
  });

  it('gives klCoef’s useful small values most of the track', () => {
    const s = sliderScale(CONFIG_FIELDS.klCoef);
    expect(s.fromPosition(s.positions / 2)).toBeLessThan(0.5);
    expect(s.toPosition(0.05)).toBeGreaterThan(s.positions * 0.2);
  });

  it('snaps to 3 significant digits, whole numbers, and the range', () => {
    expect(snapValue(CONFIG_FIELDS.learningRate, 0.00031622776)).toBe(0.000316);
    expect(snapValue(CONFIG_FIELDS.batchSize, 7.6)).toBe(8);
    expect(snapValue(CONFIG_FIELDS.clipRange, 5)).toBe(1);
    expect(snapValue(CONFIG_FIELDS.clipRange, -1)).toBe(0.01);
  });
});

describe('every slider moves one press at a time (issue #33, defect 4)', () => {
  it.each(numberFields)(
    '%s: ArrowRight / ArrowLeft from the default and across the range move the thumb',
    (_, field) => {
      const s = sliderScale(field);
      const values = new Set([field.default, field.min, field.max]);
      for (let p = 0; p <= s.positions; p += Math.max(1, Math.floor(s.positions / 53)))
        values.add(s.fromPosition(p));
      for (const v of values) {
        const at = s.toPosition(v);
        if (at < s.positions) {
          const up = s.moveTo(v, at + 1);
          expect(up, `${v} → right`).toBeGreaterThan(v);
          expect(s.toPosition(up), `${v} → right`).toBeGreaterThan(at);
        }
        if (at > 0) {
          const down = s.moveTo(v, at - 1);
          expect(down, `${v} → left`).toBeLessThan(v);
          expect(s.toPosition(down), `${v} → left`).toBeLessThan(at);
        }
      }
    },
  );
});
