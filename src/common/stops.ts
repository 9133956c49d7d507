/**
 * Why a training run stopped on its own, in words, for the CLI, the worker and the UI's stand-in worker alike
 * (tfjs-free, so the UI may import it). The session (src/core/run/session.ts) stops a run when three steps in a row
 * had NaN/Inf losses or gradients (docs/engine.md, "Health signals"); each adapter adds what to do next.
 */

/** What happened, starting with "stopped at step N". */
export function nonFiniteMessage(step: number): string {
  return (
    `stopped at step ${step}: three steps in a row had NaN/Inf losses or gradients (updates skipped, so the ` +
    `weights are unchanged by them).`
  );
}

/** The CLI's advice after it: checkpoint folders hold the last good state. */
export const NONFINITE_CLI_ADVICE =
  'The checkpoints already written are intact; resume from the last one with a lower learning rate.';

/** The app's advice after it: the run is paused where it stopped. */
export const NONFINITE_RUN_ADVICE =
  'The run is paused; lower the learning rate (or maxGradNorm), check that the reward returns finite numbers, ' +
  'and press Start, or reset.';

/** The `error` event text the worker (and the stand-in worker) send when a run stops this way. */
export function nonFiniteRunError(step: number): string {
  const m = nonFiniteMessage(step);
  return `${m.charAt(0).toUpperCase()}${m.slice(1)} ${NONFINITE_RUN_ADVICE}`;
}

/**
 * A run asked for another step after its last one (the session refuses; the worker and the UI's stand-in
 * worker refuse `start` the same way).
 */
export function stepsDoneMessage(steps: number): string {
  return `The run has done its ${steps} steps; raise "steps" to continue it, or reset.`;
}
