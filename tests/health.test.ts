import { describe, it, expect } from 'vitest';
import {
  EQUAL_REWARD_STEPS,
  HEALTH_HISTORY,
  healthAlerts,
  POLICY_SHIFT_APPROX_KL,
} from '../src/core/ppo/health';
import { REQUIRED_METRICS, EXTRA_METRICS, type StepMetrics } from '../src/common/metrics';

function healthy(): StepMetrics {
  const m = Object.fromEntries([...REQUIRED_METRICS, ...EXTRA_METRICS].map((k) => [k, 0])) as StepMetrics;
  return {
    ...m,
    step: 5,
    kl: 2,
    entropy: 1.5,
    ratioMax: 1.1,
    ratioMean: 1,
    logRatioClampFrac: 0,
    rewardStd: 0.3,
  };
}

describe('health alerts', () => {
  it('a healthy step raises none', () => {
    expect(healthAlerts(healthy(), 6)).toEqual([]);
  });

  it.each([
    ['kl-blowup', { kl: 100 }],
    ['entropy-collapse', { entropy: 0.001 }],
    ['logratio-clamp', { logRatioClampFrac: 0.02 }],
    ['policy-shift', { approxKl: 0.5, clipFrac: 0.4, ratioMean: 0.4 }],
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

  it('thresholds are where the notes put them: entropy 0.01, clamp 1%, approxKl 0.1', () => {
    expect(POLICY_SHIFT_APPROX_KL).toBe(0.1);
    // At each threshold: no alarm.
    expect(healthAlerts({ ...healthy(), entropy: 0.01, logRatioClampFrac: 0.01, approxKl: 0.1 }, 6)).toEqual(
      [],
    );
    // Just past each one: that alarm alone.
    const ids = (patch: Partial<StepMetrics>) => healthAlerts({ ...healthy(), ...patch }, 6).map((a) => a.id);
    expect(ids({ entropy: 0.0099 })).toEqual(['entropy-collapse']);
    expect(ids({ logRatioClampFrac: 0.0101 })).toEqual(['logratio-clamp']);
    expect(ids({ approxKl: 0.1001 })).toEqual(['policy-shift']);
  });

  it('one outlier token (ratioMax 5) with small approxKl is not an alarm: the default run’s early steps', () => {
    // Step 1 of the default run (tiny model, sentiment, lr 1e-4, WASM): ratioMax 2.99, ratioMean 0.99,
    // approxKl 0.014, clipFrac 0.059.
    const m = { ...healthy(), step: 1, ratioMax: 4.99, ratioMean: 0.99, approxKl: 0.014, clipFrac: 0.059 };
    expect(healthAlerts(m, 6)).toEqual([]);
  });

  it('a learning rate 100× too high raises policy-shift, naming approxKl and the clipped share', () => {
    // Step 1 of the default run at lr 1e-2: approxKl 25, clipFrac 0.47, ratioMean 0.32.
    const m = { ...healthy(), step: 1, ratioMax: 12.7, ratioMean: 0.32, approxKl: 25.1, clipFrac: 0.466 };
    const a = healthAlerts(m, 6).find((x) => x.id === 'policy-shift');
    expect(a?.message).toContain('approxKl 25');
    expect(a?.message).toContain('47% of tokens clipped');
    expect(a?.advice).toMatch(/learning rate/);
  });
});

describe('rewards-equal: no learning signal', () => {
  const run = (stds: number[]) =>
    stds.map((rewardStd, i) => ({
      ...healthy(),
      step: i + 1,
      reward: 0,
      rewardStd,
      fracRewardZeroStd: null,
    }));

  it(`fires once every reward has been equal for ${EQUAL_REWARD_STEPS} steps, saying so and what to change`, () => {
    const steps = run(Array(EQUAL_REWARD_STEPS).fill(0));
    const last = steps[steps.length - 1];
    const before = steps.slice(0, -1).slice(-HEALTH_HISTORY);
    const a = healthAlerts(last, 6, before).find((x) => x.id === 'rewards-equal');
    expect(a, 'alert').toBeDefined();
    expect(a!.message).toContain(`${EQUAL_REWARD_STEPS} steps`);
    expect(a!.message).toMatch(/no learning signal/);
    expect(a!.advice).toMatch(/temperature/);
    expect(a!.advice).not.toContain('\n');
  });

  it('does not fire after 9 equal steps, nor when one step of the 10 had spread', () => {
    const nine = run(Array(EQUAL_REWARD_STEPS - 1).fill(0));
    expect(healthAlerts(nine.at(-1)!, 6, nine.slice(0, -1)).map((a) => a.id)).not.toContain('rewards-equal');
    const broken = run([...Array(4).fill(0), 0.2, ...Array(EQUAL_REWARD_STEPS - 5).fill(0)]);
    expect(healthAlerts(broken.at(-1)!, 6, broken.slice(0, -1)).map((a) => a.id)).not.toContain(
      'rewards-equal',
    );
  });

  it('the trainer passes enough history for it (HEALTH_HISTORY)', () => {
    expect(HEALTH_HISTORY).toBeGreaterThanOrEqual(EQUAL_REWARD_STEPS - 1);
  });
});
