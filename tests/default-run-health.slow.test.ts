/**
 * Issue #33, defect 8: the app's default run (the config a fresh page starts with, src/ui/lib/url-config.ts) on the
 * built-in tiny model, WASM, trains 100 steps with reward rising and no 'policy-shift' alert; the same run at a
 * learning rate 100× too high raises it, and, once its policy has collapsed to one answer, 'rewards-equal' too.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeResources } from '../src/cli/train';
import { validateConfig } from '../src/common/config';
import { EQUAL_REWARD_STEPS } from '../src/core/ppo/health';
import { buildTrainer } from '../src/core/ppo/setup';
import { defaultConfig } from '../src/ui/lib/url-config';

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function run(patch: Record<string, unknown>, steps: number) {
  const t = await buildTrainer(validateConfig({ ...defaultConfig(), ...patch }), nodeResources);
  const out: { reward: number; alerts: string[] }[] = [];
  try {
    for (let i = 0; i < steps; i++) {
      const r = await t.trainStep();
      out.push({ reward: r.metrics.reward, alerts: r.alerts.map((a) => a.id) });
    }
  } finally {
    t.disposeOptimizers();
  }
  return out;
}

describe('the default run is healthy, and the alerts say when it is not', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
  });

  it('default config, 100 steps: reward rises, no policy-shift alert', async () => {
    expect(defaultConfig().steps).toBe(100);
    const steps = await run({}, 100);
    const rewards = steps.map((s) => s.reward);
    const first = mean(rewards.slice(0, 10));
    const last = mean(rewards.slice(-10));
    console.log(`default run: reward first 10 ${first.toFixed(3)}, last 10 ${last.toFixed(3)}`);
    expect(last - first).toBeGreaterThan(0.2);
    const shifted = steps.flatMap((s, i) => (s.alerts.includes('policy-shift') ? [i + 1] : []));
    expect(shifted, 'steps with policy-shift').toEqual([]);
  }, 3_600_000);

  it('learning rate 100× too high: policy-shift at once; equal rewards for 10 steps: rewards-equal', async () => {
    const lr = defaultConfig().learningRate * 100;
    const steps = await run({ learningRate: lr }, EQUAL_REWARD_STEPS + 3);
    expect(steps[0].alerts).toContain('policy-shift');
    expect(steps.slice(-1)[0].alerts).toContain('rewards-equal');
    // It fires only after EQUAL_REWARD_STEPS steps of equal rewards, never on the first ones.
    for (const s of steps.slice(0, EQUAL_REWARD_STEPS - 1)) expect(s.alerts).not.toContain('rewards-equal');
  }, 1_200_000);
});
