/**
 * The import graph of src/ has no circles, and the fused kernels (src/core/kernels/) are leaves: they import
 * tfjs and each other, never the model, the losses or anything else of the app. A circle makes the evaluation
 * order of its modules depend on which one is imported first (a value read at load time can be undefined), and
 * it means two files own one thing between them.
 *
 * Every .ts/.tsx file under src/ is parsed with the TypeScript compiler API. Edges: `import`, `import type`,
 * `export … from` and `import()` with a relative specifier, resolved to a file under src/. Type-only imports
 * count as edges too (as madge counts them): a type that two files need belongs in a third, and an edge that
 * is type-only today becomes a value import with the next edit. Package imports are not edges (they cannot
 * lead back into src/). Circles are the strongly connected components with more than one file, and files that
 * import themselves.
 */
import { describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';

const ROOT = path.resolve(__dirname, '..');
const SRC = path.join(ROOT, 'src');
const KERNELS = path.join(SRC, 'core', 'kernels');

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(p));
    else if (/\.tsx?$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** An import of a file: its specifier, and whether it is erased at run time (`import type`, `export type`). */
interface Spec {
  spec: string;
  typeOnly: boolean;
}

/** Every module specifier the file names: static imports and re-exports (type-only included), and import(). */
function specifiers(file: string): Spec[] {
  const text = fs.readFileSync(file, 'utf8');
  const kind = file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, kind);
  const out: Spec[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const c = node.importClause;
      const named = c?.namedBindings && ts.isNamedImports(c.namedBindings) ? c.namedBindings.elements : null;
      const typeOnly =
        !!c && (c.isTypeOnly || (!c.name && !!named && named.length > 0 && named.every((e) => e.isTypeOnly)));
      out.push({ spec: node.moduleSpecifier.text, typeOnly });
    } else if (
      ts.isExportDeclaration(node) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      out.push({ spec: node.moduleSpecifier.text, typeOnly: node.isTypeOnly });
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      out.push({ spec: node.moduleReference.expression.text, typeOnly: node.isTypeOnly });
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments.length === 1 &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      out.push({ spec: node.arguments[0].text, typeOnly: false });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** A relative specifier as the file it names (Vite's `?raw`-style suffixes dropped), or null (a package, or absent). */
function resolve(from: string, spec: string): string | null {
  if (!spec.startsWith('.')) return null;
  const base = path.resolve(path.dirname(from), spec.replace(/\?.*$/, ''));
  const noJs = base.replace(/\.(js|jsx|mjs)$/, '');
  for (const c of [
    base,
    `${noJs}.ts`,
    `${noJs}.tsx`,
    path.join(base, 'index.ts'),
    path.join(base, 'index.tsx'),
  ]) {
    if (/\.tsx?$/.test(c) && fs.existsSync(c) && fs.statSync(c).isFile()) return c;
  }
  return null;
}

/** One edge of the graph: a file of src/ (absolute path) or a package (its name), erased at run time or not. */
interface Edge {
  to: string;
  typeOnly: boolean;
  pkg: boolean;
}

/** Every file's imports: files of src/ and packages. */
function importEdges(): Map<string, Edge[]> {
  const edges = new Map<string, Edge[]>();
  for (const file of sourceFiles(SRC)) {
    const out: Edge[] = [];
    for (const { spec, typeOnly } of specifiers(file)) {
      if (!spec.startsWith('.')) {
        const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
        out.push({ to: pkg, typeOnly, pkg: true });
        continue;
      }
      const target = resolve(file, spec);
      if (target) out.push({ to: target, typeOnly, pkg: false });
      else out.push({ to: path.resolve(path.dirname(file), spec), typeOnly, pkg: false });
    }
    edges.set(file, out);
  }
  return edges;
}

/** The file graph (type-only edges count: see the file's comment). */
function importGraph(edges = importEdges()): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const [file, out] of edges) {
    const deps = new Set(out.filter((e) => !e.pkg && edges.has(e.to)).map((e) => e.to));
    graph.set(file, [...deps].sort());
  }
  return graph;
}

/** Tarjan's strongly connected components; returns those that are circles (size > 1, or a self-import). */
function circles(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const strong = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(scc.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) strong(v);
  return out;
}

const rel = (f: string): string => path.relative(ROOT, f);

describe('import graph of src/', () => {
  const edges = importEdges();
  const graph = importGraph(edges);

  it('parses the source tree (sanity: the walk found files and edges)', () => {
    expect(graph.size).toBeGreaterThan(50);
    const gpt2 = path.join(SRC, 'core', 'model', 'gpt2.ts');
    expect(graph.get(gpt2)).toContain(path.join(SRC, 'core', 'model', 'ops.ts'));
  });

  it('finds a circle when there is one (the detector itself)', () => {
    const g = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['d']],
      ['e', ['a']],
    ]);
    expect(circles(g)).toEqual([['a', 'b', 'c'], ['d']]);
  });

  it('has no import circles', () => {
    const found = circles(graph).map((scc) => scc.map(rel).join(' ↔ '));
    expect(found, `import circles:\n${found.join('\n')}`).toEqual([]);
  });

  it('keeps the fused kernels leaves: src/core/kernels/ imports nothing of the app outside it', () => {
    const outside: string[] = [];
    for (const [file, deps] of graph) {
      if (!file.startsWith(KERNELS + path.sep)) continue;
      for (const d of deps) if (!d.startsWith(KERNELS + path.sep)) outside.push(`${rel(file)} → ${rel(d)}`);
    }
    expect(outside, outside.join('\n')).toEqual([]);
  });

  it('has no folder-level circles inside src/core (each folder, and each loose file, one node)', () => {
    const CORE = path.join(SRC, 'core') + path.sep;
    const node = (f: string) => path.relative(CORE, f).split(path.sep)[0];
    const folders = new Map<string, Set<string>>();
    for (const [file, deps] of graph) {
      if (!file.startsWith(CORE)) continue;
      const from = node(file);
      const set = folders.get(from) ?? new Set<string>();
      for (const d of deps) if (d.startsWith(CORE) && node(d) !== from) set.add(node(d));
      folders.set(from, set);
    }
    const g = new Map([...folders].map(([k, v]) => [k, [...v].sort()]));
    const found = circles(g).map((scc) => scc.join(' ↔ '));
    expect(found, `folder circles in src/core:\n${found.join('\n')}`).toEqual([]);
    // Only the ambient platform types stay loose at core's root; everything else lives in a folder by role.
    expect([...folders.keys()].filter((k) => /\.tsx?$/.test(k))).toEqual([]);
  });

  it('layers by permission: each folder of src/ imports only the layers it is allowed', () => {
    expect(permissionViolations(edges)).toEqual([]);
  });

  it("the UI's import closure reaches no tensor code: no @tensorflow, nothing of src/core", () => {
    expect(uiClosureViolations(edges)).toEqual([]);
  });

  it('the two checks catch a UI file that imports tensor code (one made here)', () => {
    const app = path.join(SRC, 'ui', 'App.tsx');
    const losses = path.join(SRC, 'core', 'ppo', 'losses.ts');
    expect(edges.has(losses)).toBe(true);
    const bad = new Map(edges);
    bad.set(app, [...edges.get(app)!, { to: losses, typeOnly: false, pkg: false }]);
    expect(permissionViolations(bad)).toContain(
      'src/ui/App.tsx → src/core/ppo/losses.ts (ui may import ui, common)',
    );
    const closure = uiClosureViolations(bad);
    expect(closure.some((v) => v.startsWith('src/ui/App.tsx → src/core/ppo/losses.ts'))).toBe(true);
    expect(closure.some((v) => v.endsWith('→ @tensorflow/tfjs-core'))).toBe(true);
    // A type-only import of the worker's protocol is allowed; a value import of the worker is not.
    const run = path.join(SRC, 'worker', 'run.ts');
    bad.set(app, [...edges.get(app)!, { to: run, typeOnly: false, pkg: false }]);
    expect(permissionViolations(bad).some((v) => v.startsWith('src/ui/App.tsx → src/worker/run.ts'))).toBe(
      true,
    );
  });
});

/**
 * The layers of docs/architecture.md, as permissions: the folders of src/ each may import (values or types). The UI
 * also may import the worker's protocol (src/worker/protocol.ts) for its types, erased at run time.
 */
const ALLOWED: Record<string, string[]> = {
  common: ['common'],
  core: ['core', 'common'],
  services: ['services', 'core', 'common'],
  bench: ['bench', 'core', 'common'],
  worker: ['worker', 'services', 'core', 'common'],
  ui: ['ui', 'common'],
  cli: ['cli', 'bench', 'services', 'core', 'common'],
};
const PROTOCOL = path.join(SRC, 'worker', 'protocol.ts');

const layerOf = (f: string): string => path.relative(SRC, f).split(path.sep)[0];

function permissionViolations(edges: Map<string, Edge[]>): string[] {
  const out: string[] = [];
  for (const [file, list] of edges) {
    const layer = layerOf(file);
    const allowed = ALLOWED[layer];
    if (!allowed) {
      out.push(`${rel(file)}: a folder of src/ with no permissions (add it to ALLOWED)`);
      continue;
    }
    for (const e of list) {
      if (e.pkg) continue;
      if (!e.to.startsWith(SRC + path.sep)) {
        out.push(`${rel(file)} → ${rel(e.to)} (outside src/)`);
        continue;
      }
      const to = layerOf(e.to);
      if (allowed.includes(to)) continue;
      if (layer === 'ui' && e.to === PROTOCOL && e.typeOnly) continue;
      out.push(`${rel(file)} → ${rel(e.to)} (${layer} may import ${allowed.join(', ')})`);
    }
  }
  return out.sort();
}

/** Everything a UI file loads at run time (type-only edges erased), followed to the end: no tfjs, no core. */
function uiClosureViolations(edges: Map<string, Edge[]>): string[] {
  const out: string[] = [];
  const UI = path.join(SRC, 'ui') + path.sep;
  const CORE = path.join(SRC, 'core') + path.sep;
  for (const start of [...edges.keys()].filter((f) => f.startsWith(UI)).sort()) {
    const seen = new Set<string>([start]);
    const queue: string[][] = [[start]];
    while (queue.length) {
      const trail = queue.shift()!;
      for (const e of edges.get(trail[trail.length - 1]) ?? []) {
        if (e.typeOnly || seen.has(e.to)) continue;
        seen.add(e.to);
        const next = [...trail, e.to];
        const show = () => next.map((f) => (f.startsWith(SRC) ? rel(f) : f)).join(' → ');
        if (e.pkg) {
          if (e.to.startsWith('@tensorflow/')) out.push(show());
          continue;
        }
        if (e.to.startsWith(CORE)) out.push(show());
        queue.push(next);
      }
    }
  }
  return out;
}
