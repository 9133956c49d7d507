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

/** Every module specifier the file names: static imports and re-exports (type-only included), and import(). */
function specifiers(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const kind = file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, kind);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      out.push(node.moduleSpecifier.text);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      out.push(node.moduleReference.expression.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments.length === 1 &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      out.push(node.arguments[0].text);
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

function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const deps = new Set<string>();
    for (const spec of specifiers(file)) {
      const target = resolve(file, spec);
      if (target) deps.add(target);
    }
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
  const graph = importGraph();

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
});
