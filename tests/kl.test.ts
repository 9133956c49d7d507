import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, validateConfig } from '../src/common/config';
import { isUserError } from '../src/common/errors';
import {
  AdaptiveKlController,
  FixedKlController,
  klControllerFromState,
  liveKlController,
  makeKlController,
} from '../src/core/ppo/kl';

describe('KL controllers', () => {
  it('fixed keeps its value', () => {
    const c = new FixedKlController(0.05);
    c.update(100, 256);
    expect(c.value).toBe(0.05);
    expect(c.state()).toEqual({ kind: 'fixed', value: 0.05 });
  });

  it('adaptive, hand-worked (β 0.2, target 6, horizon 10000, n 256), err clipped at ±0.2', () => {
    const c = new AdaptiveKlController(0.2, 6, 10000);
    // KL 9: 9/6 − 1 = 0.5 → clipped to 0.2; β = 0.2·(1 + 0.2·256/10000) = 0.2·1.00512
    c.update(9, 256);
    expect(c.value).toBeCloseTo(0.201024, 12);
    // KL 6.6: err 0.1; β ·= 1.00256
    c.update(6.6, 256);
    expect(c.value).toBeCloseTo(0.20153862144, 12);
    // KL 0: −1 → clipped to −0.2; β ·= 0.99488
    c.update(0, 256);
    expect(c.value).toBeCloseTo(0.2005067436982272, 12);
    // KL 3: −0.5 → clipped to −0.2
    c.update(3, 256);
    expect(c.value).toBeCloseTo(0.19948014917049225, 12);
    // at target: unchanged
    const before = c.value;
    c.update(6, 256);
    expect(c.value).toBeCloseTo(before, 15);
  });

  it('adaptive ignores a non-finite KL', () => {
    const c = new AdaptiveKlController(0.1, 6, 100);
    c.update(NaN, 16);
    c.update(Infinity, 16);
    expect(c.value).toBe(0.1);
  });

  it('state survives JSON and continues identically', () => {
    const a = new AdaptiveKlController(0.2, 6, 10000);
    a.update(9, 64);
    const b = klControllerFromState(JSON.parse(JSON.stringify(a.state())));
    expect(b).toBeInstanceOf(AdaptiveKlController);
    a.update(1, 64);
    b.update(1, 64);
    expect(b.value).toBe(a.value);
    expect(AdaptiveKlController.fromState(a.state()).value).toBe(a.value);
    expect(FixedKlController.fromState({ kind: 'fixed', value: 0.3 }).value).toBe(0.3);
  });

  it('a broken state is a UserError naming the field', () => {
    for (const [state, word] of [
      [{ kind: 'adaptive', value: 0.1, target: 0, horizon: 10 }, 'target'],
      [{ kind: 'fixed', value: 'x' }, 'value'],
      [{ kind: 'other', value: 1 }, 'kind'],
    ] as const) {
      try {
        klControllerFromState(state);
        expect.unreachable();
      } catch (e) {
        expect(isUserError(e)).toBe(true);
        expect((e as Error).message).toContain(word);
      }
    }
    expect(() => FixedKlController.fromState({ kind: 'adaptive', value: 1, target: 1, horizon: 1 })).toThrow(
      /fixed/,
    );
  });

  it('makeKlController follows the config', () => {
    const fixed = makeKlController(DEFAULT_CONFIG);
    expect(fixed).toBeInstanceOf(FixedKlController);
    expect(fixed.value).toBe(DEFAULT_CONFIG.klCoef);
    const adaptive = makeKlController(
      validateConfig({ adaptiveKl: true, klCoef: 0.2, targetKl: 4, klHorizon: 500 }),
    );
    expect(adaptive.state()).toEqual({ kind: 'adaptive', value: 0.2, target: 4, horizon: 500 });
  });

  it('a live change: fixed takes the new klCoef; adaptive takes target and horizon, keeps β unless klCoef changed', () => {
    const prev = { klCoef: 0.2, adaptiveKl: true, targetKl: 6, klHorizon: 10000 };
    const a = new AdaptiveKlController(0.25, 6, 10000);
    expect(liveKlController(a, prev, { ...prev, targetKl: 1, klHorizon: 20 }).state()).toEqual({
      kind: 'adaptive',
      value: 0.25,
      target: 1,
      horizon: 20,
    });
    expect(liveKlController(a, prev, { ...prev, klCoef: 0.4 }).state()).toEqual({
      kind: 'adaptive',
      value: 0.4,
      target: 6,
      horizon: 10000,
    });
    const fixed = { ...prev, adaptiveKl: false };
    expect(liveKlController(new FixedKlController(0.2), fixed, { ...fixed, klCoef: 0.3 }).state()).toEqual({
      kind: 'fixed',
      value: 0.3,
    });
  });
});
