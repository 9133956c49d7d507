/**
 * The repository's docs against the code they describe: the config table of docs/formats.md §5 is
 * CONFIG_FIELDS row for row, §3 names every metric, §1 every package.json script and CLI subcommand, and every
 * relative link and every test file the docs or the README name exists.
 */
import { describe, it, expect } from 'vitest';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { configTableRows, CONFIG_TABLE_HEADER } from '../scripts/config-table';
import { REQUIRED_METRICS, EXTRA_METRICS } from '../src/common/metrics';

const ROOT = path.resolve(__dirname, '..');
const read = (p: string) => readFileSync(path.join(ROOT, p), 'utf8');
const DOCS = readdirSync(path.join(ROOT, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .map((f) => `docs/${f}`);

/** The text of section `§n` of docs/formats.md (up to the next `## `). */
function section(n: number): string {
  const text = read('docs/formats.md');
  const start = text.search(new RegExp(`^## §${n} `, 'm'));
  if (start < 0) throw new Error(`docs/formats.md has no "## §${n} " heading`);
  const next = text.slice(start + 1).search(/^## /m);
  return next < 0 ? text.slice(start) : text.slice(start, start + 1 + next);
}

/** Cells of a markdown table row, `\|` unescaped. */
function cells(row: string): string[] {
  return row
    .trim()
    .replace(/^\||\|$/g, '')
    .split(/(?<!\\)\|/)
    .map((c) => c.trim().replace(/\\\|/g, '|'));
}

describe('docs/formats.md', () => {
  it('keeps the section numbers §1–§8', () => {
    for (let n = 1; n <= 8; n++) expect(() => section(n)).not.toThrow();
  });

  it('§5: the config table is CONFIG_FIELDS, row for row (regenerate: npx tsx scripts/config-table.ts)', () => {
    const lines = section(5).split('\n');
    const head = lines.findIndex((l) => /^\|\s*key\s*\|/.test(l));
    expect(head, 'the §5 table header').toBeGreaterThan(-1);
    expect(cells(lines[head])).toEqual(CONFIG_TABLE_HEADER);
    const rows: string[][] = [];
    for (let i = head + 2; i < lines.length && lines[i].startsWith('|'); i++) rows.push(cells(lines[i]));
    expect(rows).toEqual(configTableRows());
  });

  it('§3: names every metric of src/common/metrics.ts', () => {
    const s = section(3);
    const missing = [...REQUIRED_METRICS, ...EXTRA_METRICS].filter((m) => !new RegExp(`\\b${m}\\b`).test(s));
    expect(missing, 'metrics missing from docs/formats.md §3').toEqual([]);
  });

  it('§1: names every package.json script and every CLI subcommand', () => {
    const s = section(1);
    const scripts = Object.keys(JSON.parse(read('package.json')).scripts as Record<string, string>);
    const missing = scripts.filter((k) => !new RegExp(`npm (run (-s )?)?${k}\\b`).test(s));
    expect(missing, 'scripts missing from docs/formats.md §1').toEqual([]);
    const table = /const COMMANDS[^{]*\{([\s\S]*?)\n\};/.exec(read('src/cli/main.ts'));
    expect(table, 'the COMMANDS table of src/cli/main.ts').not.toBeNull();
    const subs = [...table![1].matchAll(/^\s*'?([a-z-]+)'?:\s*\{/gm)].map((m) => m[1]);
    expect(subs.length).toBeGreaterThanOrEqual(5);
    for (const sub of subs) expect(s, `subcommand ${sub}`).toMatch(new RegExp(`^- \`${sub} `, 'm'));
  });
});

describe('links and names in the docs and the README', () => {
  const pages = ['README.md', ...DOCS];

  it('the README links every page of docs/', () => {
    const readme = read('README.md');
    for (const d of DOCS) expect(readme, d).toContain(`](${d})`);
  });

  it.each(pages)('%s: every relative link points at a file that exists', (page) => {
    const text = read(page);
    const broken = [...text.matchAll(/\]\(([^)\s]+)\)/g)]
      .map((m) => m[1].split('#')[0])
      .filter((l) => l !== '' && !/^[a-z]+:/.test(l))
      .filter((l) => !existsSync(path.join(ROOT, path.dirname(page), l)));
    expect(broken).toEqual([]);
  });

  it.each(pages)('%s: every test file it names exists', (page) => {
    const named = [...read(page).matchAll(/\b((?:tests|e2e)\/[\w.-]+\.(?:test|spec)\.tsx?)\b/g)].map(
      (m) => m[1],
    );
    const bare = [...read(page).matchAll(/`([\w-]+(?:\.slow)?\.test\.tsx?)`/g)].map((m) => `tests/${m[1]}`);
    const missing = [...new Set([...named, ...bare])].filter((f) => !existsSync(path.join(ROOT, f)));
    expect(missing).toEqual([]);
  });

  it.each(pages)(
    '%s: every src/ path it names exists (a file moved or renamed leaves no stale path)',
    (page) => {
      const missing = srcPaths(read(page)).filter((p) => !pathExists(p));
      expect(missing).toEqual([]);
    },
  );

  it('docs/architecture.md names the file of every box of the PPO step picture', () => {
    // The picture's boxes, by the file that owns each: a box whose file is gone is caught above; this keeps
    // the boxes themselves from being dropped from the page.
    const named = new Set(srcPaths(read('docs/architecture.md')));
    const boxes = [
      'src/ui/store/training-slice.ts',
      'src/ui/bridge.ts',
      'src/worker/api.ts',
      'src/worker/run.ts',
      'src/cli/train.ts',
      'src/core/run/session.ts',
      'src/core/run/restore.ts',
      'src/core/ppo/trainer.ts',
      'src/core/model/sampling.ts',
      'src/core/reward/',
      'src/core/ppo/update.ts',
      'src/core/ppo/losses.ts',
      'src/common/metrics.ts',
    ];
    expect(boxes.filter((b) => !named.has(b))).toEqual([]);
  });
});

/**
 * The `src/...` paths a page names: a file (`src/core/run/session.ts`), a folder (`src/ui/store/`) or a glob
 * (`src/core/kernels/webgpu-*.ts`). Sentence punctuation after a path is not part of it.
 */
function srcPaths(text: string): string[] {
  const found = [...text.matchAll(/(?<![\w/.-])src\/[\w./*-]+/g)].map((m) => m[0].replace(/[.,;:]+$/, ''));
  return [...new Set(found)];
}

/** Whether a path (or, for a glob with `*` in its last part, any file matching it) exists. */
function pathExists(p: string): boolean {
  if (!p.includes('*')) return existsSync(path.join(ROOT, p));
  const dir = path.dirname(p);
  if (dir.includes('*') || !existsSync(path.join(ROOT, dir))) return false;
  const re = new RegExp(
    `^${path
      .basename(p)
      .replace(/[.+?^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')}$`,
  );
  return readdirSync(path.join(ROOT, dir)).some((f) => re.test(f));
}

describe('the repository explains itself', () => {
  /** Every file under these folders, recursively (node_modules and build output are not under them). */
  function files(dir: string): string[] {
    const abs = path.join(ROOT, dir);
    if (!existsSync(abs)) return [];
    return readdirSync(abs, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? files(`${dir}/${e.name}`) : [`${dir}/${e.name}`],
    );
  }

  it('no source, test, e2e spec or script points at notes outside the repository', () => {
    const outside = /\bshared\/|contracts\.md|ppo-notes|tfjs-notes/;
    const offenders = ['src', 'tests', 'e2e', 'scripts']
      .flatMap(files)
      .filter((f) => /\.(ts|tsx|js|mjs|py|wat|css|html)$/.test(f))
      .filter((f) => f !== 'tests/docs.test.ts')
      .flatMap((f) =>
        read(f)
          .split('\n')
          .map((line, i) => ({ f, line, i }))
          .filter(({ line }) => outside.test(line))
          .map(({ f, line, i }) => `${f}:${i + 1}: ${line.trim()}`),
      );
    expect(offenders).toEqual([]);
  });
});
