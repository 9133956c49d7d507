/** Issue #33: the time left in a long step, from the last step's phase times (src/ui/lib/step-eta.ts). */
import { describe, expect, it } from 'vitest';
import { formatTimeLeft, stepTimeLeft } from '../src/ui/lib/step-eta';

const last = { timeGenerate: 60, timeScore: 5, timeUpdate: 120 };

describe('time left in the step', () => {
  it('is the rest of the current phase plus the phases after it', () => {
    expect(stepTimeLeft('generating', 0, last)).toBe(185);
    expect(stepTimeLeft('generating', 20, last)).toBe(165);
    expect(stepTimeLeft('scoring', 1, last)).toBe(124);
    expect(stepTimeLeft('updating', 100, last)).toBe(20);
  });

  it('a phase slower than last time has at least a second left, not a negative time', () => {
    expect(stepTimeLeft('updating', 500, last)).toBe(1);
    expect(stepTimeLeft('generating', 500, last)).toBe(126);
  });

  it('is unknown between steps, before a first step, or from broken times', () => {
    expect(stepTimeLeft('idle', 0, last)).toBeNull();
    expect(stepTimeLeft('generating', 0, null)).toBeNull();
    expect(stepTimeLeft('generating', 0, { ...last, timeScore: NaN })).toBeNull();
  });

  it('reads as people say it', () => {
    expect(formatTimeLeft(0.2)).toBe('~1 s');
    expect(formatTimeLeft(42)).toBe('~42 s');
    expect(formatTimeLeft(185)).toBe('~3 min');
    expect(formatTimeLeft(3900)).toBe('~1 h 5 min');
    expect(formatTimeLeft(7200)).toBe('~2 h');
  });
});
