/**
 * The training-config table of docs/formats.md §5, printed from `CONFIG_FIELDS` (src/common/config.ts), the one
 * source of truth: `npx tsx scripts/config-table.ts`, then paste it over the table (and `npx prettier --write docs/formats.md`). tests/docs.test.ts compares
 * the page with `configTableRows()`.
 */
import { pathToFileURL } from 'node:url';
import {
  CONFIG_FIELDS,
  CONFIG_KEYS,
  describeAllowed,
  type ConfigField,
  type ConfigKey,
} from '../src/common/config';

export const CONFIG_TABLE_HEADER = ['key', 'type', 'default', 'allowed', 'live', 'meaning'];

function typeOf(f: ConfigField): string {
  switch (f.type) {
    case 'number':
      return f.integer ? 'integer' : 'number';
    case 'choice':
      return f.choices.map((c) => `"${c}"`).join(' | ');
    case 'choices':
      return `(${f.choices.map((c) => `"${c}"`).join(' | ')})[]`;
    case 'stopToken':
      return '"eos" | id | null';
    case 'string':
      return f.nullable ? 'string | null' : 'string';
    case 'prompts':
      return 'string[]';
    case 'reward':
      return 'reward spec';
    case 'boolean':
      return 'boolean';
  }
}

/** One row of cells per key, in the table's order (markdown not escaped). */
export function configTableRows(): string[][] {
  return CONFIG_KEYS.map((k: ConfigKey) => {
    const f: ConfigField = CONFIG_FIELDS[k];
    const allowed = f.type === 'number' ? `${f.min} – ${f.max}` : describeAllowed(k);
    const dflt = f.default === undefined ? '—' : `\`${JSON.stringify(f.default)}\``;
    return [`\`${k}\``, typeOf(f), dflt, allowed, f.live ? 'yes' : 'no', f.doc];
  });
}

export function configTableMarkdown(): string {
  const line = (cells: string[]) => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
  return [
    line(CONFIG_TABLE_HEADER),
    line(CONFIG_TABLE_HEADER.map(() => '---')),
    ...configTableRows().map(line),
  ].join('\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(configTableMarkdown() + '\n');
}
