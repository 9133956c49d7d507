import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UserError } from '../common/errors';

type Options = NonNullable<ParseArgsConfig['options']>;

/** node:util parseArgs with errors a person can act on. */
export function parse(
  sub: string,
  argv: string[],
  options: Options,
): Record<string, string | boolean | undefined> {
  // Let string options take negative numbers (`--temperature -1`), which parseArgs calls ambiguous.
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].startsWith('--') ? argv[i].slice(2) : null;
    if (name && options[name]?.type === 'string' && /^-[\d.]/.test(argv[i + 1] ?? ''))
      args.push(`${argv[i]}=${argv[++i]}`);
    else args.push(argv[i]);
  }
  try {
    const { values } = parseArgs({ args, options, strict: true, allowPositionals: false });
    return values as Record<string, string | boolean | undefined>;
  } catch (e) {
    const known = Object.keys(options)
      .map((k) => `--${k}`)
      .join(' ');
    throw new UserError(
      `${sub}: ${(e as Error).message.split('\n')[0].replace(/\.+$/, '')}. Options: ${known}`,
    );
  }
}

export function num(
  sub: string,
  values: Record<string, string | boolean | undefined>,
  key: string,
  dflt: number,
  range: { min: number; max: number; integer?: boolean },
): number {
  const raw = values[key];
  if (raw === undefined) return dflt;
  const v = Number(raw);
  if (
    typeof raw !== 'string' ||
    raw.trim() === '' ||
    !Number.isFinite(v) ||
    v < range.min ||
    v > range.max ||
    (range.integer && !Number.isInteger(v))
  ) {
    throw new UserError(
      `${sub}: --${key} must be ${range.integer ? 'an integer' : 'a number'} from ${range.min} to ${range.max}, got ${JSON.stringify(raw)}.`,
    );
  }
  return v;
}

export function str(
  sub: string,
  values: Record<string, string | boolean | undefined>,
  key: string,
  required: true,
): string;
export function str(
  sub: string,
  values: Record<string, string | boolean | undefined>,
  key: string,
  required?: false,
): string | undefined;
export function str(
  sub: string,
  values: Record<string, string | boolean | undefined>,
  key: string,
  required = false,
): string | undefined {
  const v = values[key];
  if (v === undefined || v === '') {
    if (required) throw new UserError(`${sub}: --${key} is required.`);
    return undefined;
  }
  return String(v);
}
