/** The config in the URL hash (the playground's share links): only the keys that differ from the defaults. */
import { UserError } from '../errors';
import {
  CONFIG_FIELDS,
  CONFIG_KEYS,
  DEFAULT_CONFIG,
  type ConfigField,
  type ConfigKey,
  type TrainConfig,
} from './fields';
import { describeAllowed, show, unknownKeyMessage, validateConfig } from './validate';

function encodeValue(key: ConfigKey, v: unknown): string {
  const f: ConfigField = CONFIG_FIELDS[key];
  switch (f.type) {
    case 'number':
    case 'boolean':
    case 'choice':
      return String(v);
    case 'choices':
      return (v as string[]).join(',');
    case 'string':
      return v === null ? '' : String(v);
    case 'stopToken':
      return v === null ? 'none' : String(v);
    case 'prompts':
      return JSON.stringify(v);
    case 'reward':
      return typeof v === 'string' && !v.startsWith('{') ? v : JSON.stringify(v);
  }
}

function decodeValue(key: ConfigKey, s: string): unknown {
  const f: ConfigField = CONFIG_FIELDS[key];
  const bad = (): never => {
    throw new UserError(`URL hash: "${key}" must be ${describeAllowed(key)}, got ${show(s)}.`);
  };
  switch (f.type) {
    case 'number': {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(s.trim())) bad();
      return Number(s);
    }
    case 'boolean':
      return s === 'true' ? true : s === 'false' ? false : bad();
    case 'choice':
      return s;
    case 'choices':
      return s === '' ? [] : s.split(',');
    case 'string':
      return s === '' && f.nullable ? null : s;
    case 'stopToken':
      if (s === 'eos') return 'eos';
      if (s === 'none') return null;
      return /^\d+$/.test(s) ? Number(s) : bad();
    case 'prompts':
    case 'reward':
      if (f.type === 'reward' && !s.startsWith('{')) return s;
      try {
        return JSON.parse(s) as unknown;
      } catch {
        return bad();
      }
  }
}

function sameValue(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The config as a URL hash (without '#'): only non-default keys, e.g. `steps=200&klCoef=0.1`. */
export function configToHash(cfg: TrainConfig): string {
  const parts: string[] = [];
  for (const key of CONFIG_KEYS) {
    const v = cfg[key];
    if (v === undefined || sameValue(v, DEFAULT_CONFIG[key])) continue;
    parts.push(`${key}=${encodeURIComponent(encodeValue(key, v))}`);
  }
  return parts.join('&');
}

/**
 * Parse a URL hash (with or without '#') back into a full, validated config. Reads `application/x-www-form-
 * urlencoded` like URLSearchParams ('+' is a space), which core cannot use: its libs have no DOM.
 */
export function configFromHash(hash: string): TrainConfig {
  const partial: Record<string, unknown> = {};
  const body = hash.replace(/^#/, '').replace(/^\?/, '');
  for (const part of body.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const rawKey = eq < 0 ? part : part.slice(0, eq);
    const rawValue = eq < 0 ? '' : part.slice(eq + 1);
    let key: string;
    let s: string;
    try {
      key = decodeURIComponent(rawKey.replace(/\+/g, ' '));
      s = decodeURIComponent(rawValue.replace(/\+/g, ' '));
    } catch {
      throw new UserError(`URL hash: "${rawKey}" has a broken %-escape in ${show(part)}.`);
    }
    if (!Object.hasOwn(CONFIG_FIELDS, key)) throw new UserError(unknownKeyMessage('URL hash', key));
    if (key in partial) throw new UserError(`URL hash: "${key}" appears more than once.`);
    partial[key] = decodeValue(key as ConfigKey, s);
  }
  return validateConfig(partial, 'URL hash');
}
