/**
 * The training config in the URL hash (TensorFlow Playground style: a link reproduces the run). The format is
 * core's configToHash/configFromHash; this file adds the fallback to defaults and the browser plumbing.
 */
import { configFromHash, configToHash, DEFAULT_CONFIG, type TrainConfig } from '../../common/config';

export interface HashReading {
  config: TrainConfig;
  /** Why the hash was not used (the defaults were), in words; null when it was fine. */
  error: string | null;
}

export function defaultConfig(): TrainConfig {
  return JSON.parse(JSON.stringify(DEFAULT_CONFIG)) as TrainConfig;
}

/** The hash key that holds the compared runs' configs: `compare=<hash 1>,<hash 2>` (each %-encoded). */
export const COMPARE_KEY = 'compare';

/** A hash split into the config's part and the compared runs' config hashes (null when it compares none). */
export function splitComparison(hash: string): { config: string; compare: string[] | null } {
  const parts = hash.replace(/^#/, '').split('&');
  const at = parts.findIndex((p) => p.startsWith(`${COMPARE_KEY}=`));
  if (at < 0) return { config: parts.join('&'), compare: null };
  const value = parts[at].slice(COMPARE_KEY.length + 1);
  parts.splice(at, 1);
  return { config: parts.join('&'), compare: value.split(',') };
}

/** The config a hash stands for, or the defaults with the reason when it is broken or tampered with. */
export function readConfigHash(hash: string): HashReading {
  try {
    return { config: configFromHash(splitComparison(hash).config), error: null };
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    return {
      config: defaultConfig(),
      error: `The settings in this link could not be used, so the defaults are loaded instead. ${why}`,
    };
  }
}

/**
 * The hash of a config and, when two or more runs are compared, `compare=` with each compared run's config
 * (seed included; never metrics). Models that exist only in this tab (picked files, a reward model trained
 * from preferences, the SFT warm start's weights) cannot travel in a link, so they are left out (the link then names the defaults).
 */
export function hashFor(config: TrainConfig, compared: readonly TrainConfig[] = []): string {
  const own = configHash(config);
  if (compared.length < 2) return own;
  const list = compared.map((c) => encodeURIComponent(configHash(c))).join(',');
  return own ? `${own}&${COMPARE_KEY}=${list}` : `${COMPARE_KEY}=${list}`;
}

export interface ComparisonReading {
  /** The compared runs' configs (seeds included), in order; empty when the hash compares none. */
  configs: TrainConfig[];
  /** Why the comparison could not be read, in words; null when it was fine. */
  error: string | null;
}

/** The compared runs' configs a hash holds (written by hashFor with two or more runs). */
export function readComparisonHash(hash: string): ComparisonReading {
  const { compare } = splitComparison(hash);
  if (compare === null) return { configs: [], error: null };
  const configs: TrainConfig[] = [];
  for (let i = 0; i < compare.length; i++) {
    try {
      configs.push(configFromHash(decodeURIComponent(compare[i])));
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      return {
        configs: [],
        error: `The runs this link compares could not be read (run ${i + 1} of ${compare.length}): ${why}`,
      };
    }
  }
  return { configs, error: null };
}

function configHash(config: TrainConfig): string {
  const shareable = { ...config };
  // Picked files and the SFT warm start's weights (worker/sources.ts SFT_MODEL) live in this tab only.
  if (
    shareable.model.startsWith('uploaded:') ||
    shareable.model === 'sft-model' ||
    shareable.model === 'dpo-model'
  )
    shareable.model = DEFAULT_CONFIG.model;
  const r = shareable.reward;
  if (r && typeof r === 'object' && 'model' in r && !/^(https?:|\/|\.)/.test(r.model))
    delete shareable.reward;
  return configToHash(shareable);
}

/** Replace the page's hash (no history entry), keeping the path and the query (?backend=...). */
export function writeHashToUrl(hash: string): void {
  const url = new URL(window.location.href);
  url.hash = hash;
  const href = hash ? url.href : url.href.replace(/#$/, '');
  if (href !== window.location.href) window.history.replaceState(window.history.state, '', href);
}
