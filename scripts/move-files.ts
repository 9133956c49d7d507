/**
 * Move source files and keep every import and path reference pointing at them:
 * `npx tsx scripts/move-files.ts MAP.json` where MAP.json is `{"src/core/old.ts": "src/core/new/old.ts", …}`
 * (repository-relative; a folder moves with every file under it).
 *
 * 1. `git mv` each file to its new place (skipped where it is already there, so the script can be run again).
 * 2. In every .ts / .tsx / .mjs file of the repository (node_modules and build output left out), each relative
 *    module specifier — `import … from`, `export … from`, `import()`, `vi.mock()`, `vi.importActual()` — that named
 *    a moved file, or that lives in a moved file, is recomputed from the two files' new places.
 * 3. In Markdown and source text, each repository path of a moved file (`src/core/run/session.ts`, also written
 *    without `src/`) is replaced by its new path.
 * Check with `npx tsc -b`, `npx eslint .` and tests/import-cycles.test.ts afterwards.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const SKIP = new Set([
  'node_modules',
  '.git',
  'dist',
  '.tsbuild',
  'test-results',
  'playwright-report',
  '.scratch',
]);

function walk(dir: string, out: string[] = []): string[] {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(e.name) || e.name.startsWith('.gpu')) continue;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else out.push(p);
  }
  return out;
}

/** old → new, file by file (folders expanded). Paths are repository-relative with forward slashes. */
function expand(map: Record<string, string>): Map<string, string> {
  const files = new Map<string, string>();
  for (const [from, to] of Object.entries(map)) {
    const abs = path.join(ROOT, from);
    const absTo = path.join(ROOT, to);
    const isDir = fs.existsSync(abs)
      ? fs.statSync(abs).isDirectory()
      : fs.existsSync(absTo) && fs.statSync(absTo).isDirectory();
    if (isDir) {
      const base = fs.existsSync(abs) ? abs : absTo;
      for (const f of walk(base)) {
        const r = path.relative(base, f);
        files.set(
          path.posix.join(from, r.split(path.sep).join('/')),
          path.posix.join(to, r.split(path.sep).join('/')),
        );
      }
    } else files.set(from, to);
  }
  return files;
}

const CODE = /\.(ts|tsx|mjs|js)$/;
const SPEC =
  /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\bvi\.(?:mock|importActual|doMock)\s*\(\s*)(['"])(\.{1,2}\/[^'"]*)\2/g;

/** The file a relative specifier names in the OLD layout (extension optional), as repository-relative. */
function resolveOld(fromOld: string, spec: string, exists: (rel: string) => boolean): string | null {
  const clean = spec.replace(/\?.*$/, '');
  const base = path.posix.normalize(path.posix.join(path.posix.dirname(fromOld), clean));
  const noJs = base.replace(/\.(js|jsx|mjs)$/, '');
  for (const c of [
    base,
    `${noJs}.ts`,
    `${noJs}.tsx`,
    `${base}/index.ts`,
    `${base}/index.tsx`,
    `${noJs}.wat`,
  ]) {
    if (exists(c)) return c;
  }
  return null;
}

function specFor(fromNew: string, targetNew: string, original: string): string {
  const suffix = /\?.*$/.exec(original)?.[0] ?? '';
  const hadExt = /\.(ts|tsx|js|mjs|json|wat|css)$/.test(original.replace(/\?.*$/, ''));
  const wasIndex = !/\/index(\.tsx?)?$/.test(original) && /\/index\.tsx?$/.test(targetNew);
  // Relative to the file with its extension, then the extension dropped (a file `config.ts` beside a folder
  // `config/` is `../config` from inside the folder, not `./`).
  let rel = path.posix.relative(path.posix.dirname(fromNew), targetNew);
  if (wasIndex) rel = rel.replace(/\/?index\.tsx?$/, '') || '.';
  else if (!hadExt) rel = rel.replace(/\.tsx?$/, '');
  if (!rel.startsWith('.')) rel = `./${rel}`;
  return rel + suffix;
}

function main(): void {
  const arg = process.argv[2];
  if (!arg) throw new Error('usage: npx tsx scripts/move-files.ts MAP.json');
  const moves = expand(JSON.parse(fs.readFileSync(arg, 'utf8')) as Record<string, string>);
  const back = new Map([...moves].map(([a, b]) => [b, a]));
  // 1. git mv
  for (const [from, to] of moves) {
    if (!fs.existsSync(path.join(ROOT, from))) continue;
    fs.mkdirSync(path.dirname(path.join(ROOT, to)), { recursive: true });
    execFileSync('git', ['mv', from, to], { cwd: ROOT });
  }
  const all = walk(ROOT).map((f) => path.relative(ROOT, f).split(path.sep).join('/'));
  const present = new Set(all);
  // A path as it was before the moves: present now and not moved, or moved away from it.
  const existedOld = (rel: string): boolean => (present.has(rel) && !back.has(rel)) || moves.has(rel);
  const newOf = (old: string): string => moves.get(old) ?? old;
  // 2. specifiers
  let edited = 0;
  for (const file of all.filter((f) => CODE.test(f))) {
    const oldPath = back.get(file) ?? file;
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    const next = text.replace(SPEC, (whole, lead: string, q: string, spec: string) => {
      const target = resolveOld(oldPath, spec, existedOld);
      if (!target) return whole;
      if (!moves.has(target) && !moves.has(oldPath)) return whole;
      return `${lead}${q}${specFor(file, newOf(target), spec)}${q}`;
    });
    if (next !== text) {
      fs.writeFileSync(path.join(ROOT, file), next);
      edited++;
    }
  }
  // 3. path references in text (longest first, so a file's path wins over its folder's)
  const pairs = [...moves].sort((a, b) => b[0].length - a[0].length);
  let refs = 0;
  for (const file of all.filter((f) => /\.(md|ts|tsx|mjs|js|json|sh|py|yml|yaml)$/.test(f))) {
    if (file === arg || file.endsWith('package-lock.json')) continue;
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    let next = text;
    for (const [from, to] of pairs) {
      const short = (p: string) => p.replace(/^src\//, '');
      next = next.split(from).join(to);
      // `core/run/session.ts` written without src/ (not inside a longer path: no letter, / or . before it)
      const re = new RegExp(
        `(^|[^\\w./-])${short(from).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![\\w])`,
        'g',
      );
      next = next.replace(re, (_m, pre: string) => `${pre}${short(to)}`);
    }
    if (next !== text) {
      fs.writeFileSync(path.join(ROOT, file), next);
      refs++;
    }
  }
  console.log(
    `moved ${moves.size} files; rewrote specifiers in ${edited} files and path references in ${refs} files`,
  );
}

main();
