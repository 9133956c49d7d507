/**
 * The training config in the URL hash (TensorFlow Playground style: a link reproduces the run). The format is
 * core's configToHash/configFromHash; this file adds the fallback to defaults and the browser plumbing.
 */
import { configFromHash, configToHash, DEFAULT_CONFIG, type TrainConfig } from '../../core/config';

export interface HashReading {
  config: TrainConfig;
  /** Why the hash was not used (the defaults were), in words; null when it was fine. */
  error: string | null;
}

export function defaultConfig(): TrainConfig {
  return JSON.parse(JSON.stringify(DEFAULT_CONFIG)) as TrainConfig;
}

/** The config a hash stands for, or the defaults with the reason when it is broken or tampered with. */
export function readConfigHash(hash: string): HashReading {
  try {
    return { config: configFromHash(hash), error: null };
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    return {
      config: defaultConfig(),
      error: `The settings in this link could not be used, so the defaults are loaded instead. ${why}`,
    };
  }
}

/**
 * The hash of a config. Models that exist only in this tab (picked files, a reward model trained from
 * preferences) cannot travel in a link, so they are left out (the link then names the defaults).
 */
export function hashFor(config: TrainConfig): string {
  const shareable = { ...config };
  if (shareable.model.startsWith('uploaded:')) shareable.model = DEFAULT_CONFIG.model;
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
