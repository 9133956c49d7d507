/**
 * Which config changes a running job takes, in one place. `CONFIG_FIELDS[k].live` (src/common/config.ts) says it
 * per key; the functions here are the only ones that turn a change into a decision, so the worker's
 * `configure` / `setHyperparameters`, the UI's stand-in worker and the training session (src/core/run/session.ts)
 * cannot disagree:
 *   - a change of live keys only is applied to the run at the start of its next step;
 *   - a change of any other key starts a new run (step 0, history cleared): `setHyperparameters` refuses it,
 *     `configure` drops the run.
 * Platform-neutral: no tfjs, no DOM, no node:* (the UI imports it too).
 */
import { CONFIG_FIELDS, CONFIG_KEYS, validateConfig, type ConfigKey, type TrainConfig } from '../config';
import { UserError } from '../errors';

export interface ConfigChanges {
  /** Every key whose value differs, in table order. */
  changed: ConfigKey[];
  /** The changed keys a running job takes at its next step. */
  live: ConfigKey[];
  /** The changed keys that need a new run. */
  restart: ConfigKey[];
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** The keys that may change on a running job (from the config table). */
export const LIVE_KEYS: readonly ConfigKey[] = CONFIG_KEYS.filter((k) => CONFIG_FIELDS[k].live);

/** Compare two validated configs: what changed, and whether the run survives it. */
export function classifyChanges(prev: TrainConfig, next: TrainConfig): ConfigChanges {
  const changed = CONFIG_KEYS.filter((k) => !same(prev[k], next[k]));
  return {
    changed,
    live: changed.filter((k) => CONFIG_FIELDS[k].live),
    restart: changed.filter((k) => !CONFIG_FIELDS[k].live),
  };
}

/** Whether going from `prev` to `next` needs a new run. */
export function needsNewRun(prev: TrainConfig, next: TrainConfig): boolean {
  return classifyChanges(prev, next).restart.length > 0;
}

function checkObject(patch: unknown, source: string): Record<string, unknown> {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) {
    throw new UserError(
      `${source}: expected an object of config keys, got ${JSON.stringify(patch) ?? 'nothing'}.`,
    );
  }
  return patch as Record<string, unknown>;
}

/**
 * `configure`: merge `partial` over `current` (keys given as undefined keep their values; null removes the
 * optional keys `prompts` / `reward`), validate the whole, and say what changed.
 */
export function mergeConfig(
  current: TrainConfig,
  partial: unknown,
  source = 'config',
): { config: TrainConfig; changes: ConfigChanges } {
  const given = Object.fromEntries(
    Object.entries(checkObject(partial, source)).filter(([, v]) => v !== undefined),
  );
  const config = validateConfig({ ...current, ...given }, source);
  return { config, changes: classifyChanges(current, config) };
}

/**
 * `setHyperparameters`: apply `patch` to a running job's config. Only live keys may change (a non-live key given
 * with its current value is fine); anything else is a UserError naming the key and the keys that can change.
 */
export function applyLive(current: TrainConfig, patch: unknown, source = 'live change'): TrainConfig {
  const { config, changes } = mergeConfig(current, patch, source);
  if (changes.restart.length > 0) {
    const key = changes.restart[0];
    throw new UserError(
      `${source}: "${key}" cannot change on a running job; start a new run. Keys that can: ${LIVE_KEYS.join(', ')}.`,
    );
  }
  return config;
}
