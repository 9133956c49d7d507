/** Health alerts from a step's metrics, each with one line of advice (docs/engine.md, "health signals"). */
import type { StepMetrics } from '../../common/metrics';

export interface HealthAlert {
  id:
    | 'kl-blowup'
    | 'entropy-collapse'
    | 'logratio-clamp'
    | 'ratio-max'
    | 'non-finite'
    | 'negative-kl'
    /** A reward model without reward_stats.json: its scores are not centred (the trainer raises it, once). */
    | 'reward-uncentred'
    /** fracRewardZeroStd above 0.5 for ZERO_STD_STEPS steps in a row: most groups carry no signal. */
    | 'groups-zero-std';
  step: number;
  message: string;
  advice: string;
}

/** Steps in a row with fracRewardZeroStd > ZERO_STD_FRACTION before 'groups-zero-std' fires. */
export const ZERO_STD_STEPS = 5;
export const ZERO_STD_FRACTION = 0.5;

/**
 * The alerts of one step. `previous` are the steps before it, oldest first (the trainer passes its history): the
 * 'groups-zero-std' alert looks at the last ZERO_STD_STEPS steps including this one.
 */
export function healthAlerts(
  m: StepMetrics,
  targetKl: number,
  previous: readonly StepMetrics[] = [],
): HealthAlert[] {
  const out: HealthAlert[] = [];
  const step = m.step;
  // explainedVariance is NaN by definition when the returns do not vary; that is not an alarm. null = the metric
  // does not exist in this run (value metrics of a critic-free run).
  const bad = Object.entries(m).filter(
    ([k, v]) => v !== null && !Number.isFinite(v) && !(k === 'explainedVariance' && Number.isNaN(v)),
  );
  if (bad.length) {
    out.push({
      id: 'non-finite',
      step,
      message: `Non-finite values in ${bad
        .map(([k]) => k)
        .slice(0, 5)
        .join(', ')}.`,
      advice: 'Lower the learning rate or maxGradNorm; check the reward for NaN/Infinity.',
    });
  }
  if (m.kl > Math.max(4 * targetKl, 20)) {
    out.push({
      id: 'kl-blowup',
      step,
      message: `KL from the reference is ${m.kl.toFixed(2)} nats per sample, far above the target ${targetKl}.`,
      advice: 'Raise klCoef (or turn on adaptiveKl), or lower the learning rate.',
    });
  }
  if (m.kl < -1) {
    out.push({
      id: 'negative-kl',
      step,
      message: `KL is negative (${m.kl.toFixed(2)}): samples are not drawn from the policy's own distribution.`,
      advice: 'Turn off top-k/top-p (set topK 0 and topP 1) so rollouts are pure samples.',
    });
  }
  if (m.entropy < 0.01) {
    out.push({
      id: 'entropy-collapse',
      step,
      message: `Policy entropy collapsed to ${m.entropy.toExponential(2)}: it always writes the same thing.`,
      advice: 'Raise entropyCoef or klCoef, or lower the learning rate; reset if it does not recover.',
    });
  }
  if (m.logRatioClampFrac > 0.01) {
    out.push({
      id: 'logratio-clamp',
      step,
      message: `${(m.logRatioClampFrac * 100).toFixed(1)}% of log ratios hit the clamp.`,
      advice: 'Updates are too drastic: lower the learning rate or ppoEpochs.',
    });
  }
  const streak = [...previous.slice(-(ZERO_STD_STEPS - 1)), m];
  if (
    streak.length === ZERO_STD_STEPS &&
    streak.every((s) => s.fracRewardZeroStd !== null && s.fracRewardZeroStd > ZERO_STD_FRACTION)
  ) {
    out.push({
      id: 'groups-zero-std',
      step,
      message:
        'most groups score the same: the task is too easy or too hard for this model; raise temperature, groupSize, or change the reward',
      advice:
        `More than ${ZERO_STD_FRACTION * 100}% of the groups scored all-equal in each of the last ${ZERO_STD_STEPS} steps ` +
        `(now ${((m.fracRewardZeroStd ?? 0) * 100).toFixed(0)}%); such a group gives every sample advantage 0, so it teaches nothing.`,
    });
  }
  if (m.ratioMax > 2) {
    out.push({
      id: 'ratio-max',
      step,
      message: `Largest policy ratio is ${m.ratioMax.toFixed(2)} (healthy is near 1).`,
      advice: 'Lower the learning rate, clipRange or ppoEpochs.',
    });
  }
  return out;
}
