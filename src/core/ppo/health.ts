/** Health alerts from a step's metrics, each with one line of advice (docs/engine.md, "Health signals"). */
import type { StepMetrics } from '../../common/metrics';

export interface HealthAlert {
  id:
    | 'kl-blowup'
    | 'entropy-collapse'
    | 'logratio-clamp'
    /** approxKl above POLICY_SHIFT_APPROX_KL: one step's updates moved the policy far from the one that sampled. */
    | 'policy-shift'
    | 'non-finite'
    | 'negative-kl'
    /** A reward model without reward_stats.json: its scores are not centred (the trainer raises it, once). */
    | 'reward-uncentred'
    /** fracRewardZeroStd above 0.5 for ZERO_STD_STEPS steps in a row: most groups carry no signal. */
    | 'groups-zero-std'
    /** Every sample of the batch scored the same for EQUAL_REWARD_STEPS steps in a row: no learning signal. */
    | 'rewards-equal';
  step: number;
  message: string;
  advice: string;
}

/** Steps in a row with fracRewardZeroStd > ZERO_STD_FRACTION before 'groups-zero-std' fires. */
export const ZERO_STD_STEPS = 5;
export const ZERO_STD_FRACTION = 0.5;

/**
 * The 'policy-shift' threshold on approxKl (the mean over the step's counted tokens of ½·(log ratio)²). The
 * largest ratio over every token (ratioMax) is an outlier statistic: on the default run (tiny model, sentiment,
 * lr 1e-4) it is 2–5 in most early steps because one rare token among ~400 doubles its probability, while the
 * first minibatch's ratios are exactly 1 (old and new log-probs agree) and approxKl stays below 0.03. At a
 * learning rate 100× too high approxKl is 25 from step 1. 0.1 is a typical |log ratio| of 0.45 (a ratio of
 * 0.64 or 1.57), well outside the usual clip range of 0.2.
 */
export const POLICY_SHIFT_APPROX_KL = 0.1;

/** Steps in a row with every reward equal (rewardStd 0) before 'rewards-equal' fires. */
export const EQUAL_REWARD_STEPS = 10;
/** A reward std at or below this counts as zero (float noise of equal scores). */
const EQUAL_REWARD_STD = 1e-9;

/** How many earlier steps healthAlerts looks at: the trainer passes at least this many (when it has them). */
export const HEALTH_HISTORY = Math.max(ZERO_STD_STEPS, EQUAL_REWARD_STEPS) - 1;

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
  const equalStreak = [...previous.slice(-(EQUAL_REWARD_STEPS - 1)), m];
  const rewardsEqual =
    equalStreak.length === EQUAL_REWARD_STEPS &&
    equalStreak.every((s) => Number.isFinite(s.rewardStd) && Math.abs(s.rewardStd) <= EQUAL_REWARD_STD);
  if (rewardsEqual) {
    out.push({
      id: 'rewards-equal',
      step,
      message:
        `Every sample has scored the same (${formatScore(m.reward)}) for ${EQUAL_REWARD_STEPS} steps in a row: ` +
        'there is no learning signal, so the task reward teaches nothing.',
      advice:
        'Check that the reward gives different answers different scores; raise temperature (or groupSize) for more varied samples; if the policy collapsed to one answer, lower the learning rate and Reset.',
    });
  }
  const streak = [...previous.slice(-(ZERO_STD_STEPS - 1)), m];
  if (
    !rewardsEqual &&
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
  if (m.approxKl > POLICY_SHIFT_APPROX_KL) {
    out.push({
      id: 'policy-shift',
      step,
      message:
        `The updates moved the policy far from the one that sampled: approxKl ${m.approxKl.toPrecision(2)} ` +
        `(healthy is below ${POLICY_SHIFT_APPROX_KL}), ${(m.clipFrac * 100).toFixed(0)}% of tokens clipped, ` +
        `mean ratio ${m.ratioMean.toFixed(2)}.`,
      advice:
        'Lower the learning rate (or ppoEpochs); clipRange bounds each step only while ratios stay near 1.',
    });
  }
  return out;
}

function formatScore(x: number): string {
  return Number.isFinite(x) ? String(Number(x.toPrecision(3))) : String(x);
}
