/**
 * The Content-Security-Policy response headers (vite.config.ts): which policy each path of the build gets, and
 * that public/_headers (for static hosts) says the same; and the cross-origin isolation headers (COOP + COEP, for
 * tfjs's threaded WASM build) on every response of the dev server, `vite preview` and static hosts. The browser
 * side is e2e/build.spec.ts and e2e/isolation.spec.ts.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import viteConfig, {
  CROSS_ORIGIN_ISOLATION_HEADERS,
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
    // tfjs's threaded WASM build: pthread workers from blob: URLs, each importScripts-ing a blob: script.
    expect(CONTENT_SECURITY_POLICY).toContain("script-src 'self' 'wasm-unsafe-eval' blob:");
    expect(CONTENT_SECURITY_POLICY).toContain("worker-src 'self' blob:");
    expect(SANDBOX_CONTENT_SECURITY_POLICY).toBe("default-src 'none'; script-src 'self' 'unsafe-eval'");
  });

  it('public/_headers is current, and no header is set twice for one path (hosts would join the values)', () => {
    const text = readFileSync('public/_headers', 'utf8');
    expect(text, 'regenerate it: npx tsx scripts/make-headers.ts').toBe(staticHostHeaders());
    const rules = parseHeaders(text);
    expect(rules.map(([p]) => p)).toEqual(['/*', '/', '/index.html', '/assets/*', `/${SANDBOX_DIR}/*`]);
    const documentsAndWorkers = [
      '/',
      '/index.html',
      '/assets/model.worker-x.js',
      `/${SANDBOX_DIR}/reward-sandbox.worker-x.js`,
    ];
    const otherFiles = ['/assets/tfjs-backend-wasm-threaded-simd-x.wasm', '/models/tiny/model.safetensors'];
    for (const path of [...documentsAndWorkers, ...otherFiles]) {
      const hits = rules.filter(([p]) => matches(p, path));
      const names = hits.flatMap(([, h]) => Object.keys(h));
      expect(new Set(names).size, `${path}: ${names.join(', ')}`).toBe(names.length);
      const headers = Object.assign({}, ...hits.map(([, h]) => h)) as Record<string, string>;
      expect(headers['Cross-Origin-Opener-Policy'], path).toBe('same-origin');
      expect(headers['Cross-Origin-Embedder-Policy'], path).toBe('require-corp');
      // Everything under /assets/ gets the app policy (it is what governs the workers); models need none.
      expect(headers['Content-Security-Policy'], path).toBe(
        path.startsWith('/models/') ? undefined : contentSecurityPolicyFor(path),
      );
    }
  });

  it('the dev server and `vite preview` send the cross-origin isolation headers on every response', () => {
    expect(CROSS_ORIGIN_ISOLATION_HEADERS).toEqual({
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
    });
    const config = viteConfig as { server?: { headers?: unknown }; preview?: { headers?: unknown } };
    expect(config.server?.headers).toEqual(CROSS_ORIGIN_ISOLATION_HEADERS);
    expect(config.preview?.headers).toEqual(CROSS_ORIGIN_ISOLATION_HEADERS);
  });
});
