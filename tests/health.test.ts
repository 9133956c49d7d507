import { describe, it, expect } from 'vitest';
import { healthAlerts } from '../src/core/ppo/health';
import { REQUIRED_METRICS, EXTRA_METRICS, type StepMetrics } from '../src/common/metrics';

function healthy(): StepMetrics {
  const m = Object.fromEntries([...REQUIRED_METRICS, ...EXTRA_METRICS].map((k) => [k, 0])) as StepMetrics;
  return { ...m, step: 5, kl: 2, entropy: 1.5, ratioMax: 1.1, ratioMean: 1, logRatioClampFrac: 0 };
}

describe('health alerts', () => {
  it('a healthy step raises none', () => {
    expect(healthAlerts(healthy(), 6)).toEqual([]);
  });

  it.each([
    ['kl-blowup', { kl: 100 }],
    ['entropy-collapse', { entropy: 0.001 }],
    ['logratio-clamp', { logRatioClampFrac: 0.02 }],
    ['ratio-max', { ratioMax: 2.5 }],
    ['non-finite', { valueLoss: NaN }],
    ['negative-kl', { kl: -3 }],
  ] as const)('%s is raised with one line of advice', (id, patch) => {
    const alerts = healthAlerts({ ...healthy(), ...patch }, 6);
    const a = alerts.find((x) => x.id === id);
    expect(a, JSON.stringify(alerts)).toBeDefined();
    expect(a!.step).toBe(5);
    expect(a!.advice.length).toBeGreaterThan(10);
    expect(a!.advice).not.toContain('\n');
  });

  it('explained variance NaN (constant returns) is not an alarm', () => {
    expect(healthAlerts({ ...healthy(), explainedVariance: NaN }, 6)).toEqual([]);
  });

  it('thresholds are where the notes put them: entropy 0.01, clamp 1%, ratio 2', () => {
    expect(healthAlerts({ ...healthy(), entropy: 0.011, logRatioClampFrac: 0.01, ratioMax: 2 }, 6)).toEqual(
      [],
    );
  });
});
