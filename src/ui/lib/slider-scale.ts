/**
 * How a config field's slider maps positions to values, from its CONFIG_FIELDS entry (TensorFlow Playground
 * style: the table decides). `log` fields are logarithmic; linear fields whose range dwarfs their default
 * (klCoef 0…10 around 0.05, maxGradNorm 0…1000 around 1) get a log1p scale so the useful small values are not
 * squeezed into the first pixel; the rest are linear.
 */
import type { NumberField } from '../../common/config';
import { roundSignificant } from './format';

export type ScaleKind = 'linear' | 'log' | 'log1p';

export interface SliderScale {
  kind: ScaleKind;
  /** Slider positions run from 0 to `positions` in steps of 1. */
  positions: number;
  toPosition(value: number): number;
  fromPosition(position: number): number;
  /**
   * The value the slider moves to from `value` when its thumb is put at `position` (an arrow key: one position
   * on). Where whole numbers or 3 significant digits map neighbouring positions to the same value, or a value
   * back to the position it came from, it goes on in the same direction to the first value that moves the thumb,
   * so no press snaps back.
   */
  moveTo(value: number, position: number): number;
}

const CONTINUOUS_POSITIONS = 1000;

export function scaleKind(field: NumberField): ScaleKind {
  if (field.scale === 'log' && field.min > 0) return 'log';
  const span = field.max - field.min;
  if (field.integer ? span <= 64 : span <= 20 * Math.max(Math.abs(field.default), 0.01)) return 'linear';
  return 'log1p';
}

/** A valid value near `v`: clamped, whole for integer fields, else 3 significant digits. */
export function snapValue(field: NumberField, v: number): number {
  const clamped = Math.min(field.max, Math.max(field.min, v));
  const snapped = field.integer ? Math.round(clamped) : roundSignificant(clamped, 3);
  return Math.min(field.max, Math.max(field.min, snapped));
}

export function sliderScale(field: NumberField): SliderScale {
  const { min, max } = field;
  const kind = scaleKind(field);
  const positions = kind === 'linear' && field.integer ? Math.max(1, max - min) : CONTINUOUS_POSITIONS;
  const clampT = (t: number) => Math.min(1, Math.max(0, t));
  let toT: (v: number) => number;
  let fromT: (t: number) => number;
  if (kind === 'log') {
    const ratio = Math.log(max / min);
    toT = (v) => Math.log(Math.max(v, min) / min) / ratio;
    fromT = (t) => min * Math.exp(t * ratio);
  } else if (kind === 'log1p') {
    // v = min + c·((1 + span/c)^t − 1): linear near min over about c, logarithmic beyond.
    const c = field.integer ? 1 : 0.01;
    const top = Math.log1p((max - min) / c);
    toT = (v) => Math.log1p(Math.max(v - min, 0) / c) / top;
    fromT = (t) => min + c * Math.expm1(t * top);
  } else {
    toT = (v) => (v - min) / (max - min);
    fromT = (t) => min + t * (max - min);
  }
  const toPosition = (v: number) => Math.round(clampT(toT(v)) * positions);
  const fromPosition = (p: number) => {
    const t = clampT(p / positions);
    if (t === 0) return min;
    if (t === 1) return max;
    return snapValue(field, fromT(t));
  };
  const moveTo = (value: number, position: number) => {
    const at = toPosition(value);
    const dir = Math.sign(position - at);
    if (dir === 0) return fromPosition(position);
    for (let p = Math.round(position); p >= 0 && p <= positions; p += dir) {
      const v = fromPosition(p);
      if (v !== value && Math.sign(toPosition(v) - at) === dir) return v;
    }
    return dir > 0 ? max : min;
  };
  return { kind, positions, toPosition, fromPosition, moveTo };
}
