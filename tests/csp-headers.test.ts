/**
 * The Content-Security-Policy response headers (vite.config.ts): which policy each path of the build gets, and
 * that public/_headers (for static hosts) says the same. The browser side is e2e/build.spec.ts.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  CONTENT_SECURITY_POLICY,
  SANDBOX_CONTENT_SECURITY_POLICY,
  SANDBOX_DIR,
  contentSecurityPolicyFor,
  staticHostHeaders,
} from '../vite.config';

/** _headers rules as [path, {header: value}] (Netlify / Cloudflare Pages format). */
function parseHeaders(text: string): [string, Record<string, string>][] {
  const rules: [string, Record<string, string>][] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    if (!/^\s/.test(line)) {
      rules.push([line.trim(), {}]);
      continue;
    }
    const m = /^\s+([\w-]+):\s*(.*)$/.exec(line);
    if (!m || rules.length === 0) throw new Error(`not a header line: ${line}`);
    rules[rules.length - 1][1][m[1]] = m[2];
  }
  return rules;
}

/** Whether a _headers path pattern (a trailing `*` matches the rest) matches `path`. */
const matches = (pattern: string, path: string) =>
  pattern.endsWith('*') ? path.startsWith(pattern.slice(0, -1)) : path === pattern;

describe('Content-Security-Policy headers', () => {
  it('the app and its model worker get the app policy; the reward sandbox its own, with eval and no network', () => {
    for (const path of [
      '/',
      '/index.html',
      '/assets/model.worker-qQ_rNV3f.js',
      '/assets/index-DfIhw-ob.js',
    ]) {
      expect(contentSecurityPolicyFor(path)).toBe(CONTENT_SECURITY_POLICY);
    }
    expect(contentSecurityPolicyFor(`/${SANDBOX_DIR}/reward-sandbox.worker-6uHlLh9L.js`)).toBe(
      SANDBOX_CONTENT_SECURITY_POLICY,
    );
    expect(CONTENT_SECURITY_POLICY).not.toContain("'unsafe-eval'");
    expect(CONTENT_SECURITY_POLICY).toContain("script-src 'self' 'wasm-unsafe-eval'");
    expect(SANDBOX_CONTENT_SECURITY_POLICY).toBe("default-src 'none'; script-src 'self' 'unsafe-eval'");
  });

  it('public/_headers is current, and its rules never overlap (hosts would join two policies into both)', () => {
    const text = readFileSync('public/_headers', 'utf8');
    expect(text, 'regenerate it: npx tsx scripts/make-headers.ts').toBe(staticHostHeaders());
    const rules = parseHeaders(text);
    expect(rules.map(([p]) => p)).toEqual(['/', '/index.html', '/assets/*', `/${SANDBOX_DIR}/*`]);
    for (const path of [
      '/',
      '/index.html',
      '/assets/model.worker-x.js',
      `/${SANDBOX_DIR}/reward-sandbox.worker-x.js`,
    ]) {
      const hits = rules.filter(([p]) => matches(p, path));
      expect(hits, path).toHaveLength(1);
      expect(hits[0][1]['Content-Security-Policy'], path).toBe(contentSecurityPolicyFor(path));
    }
  });
});
