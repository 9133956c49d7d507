import { defineConfig, type Plugin } from 'vite';
import react from '@vitejs/plugin-react';

/**
 * The production Content-Security-Policy of the app: its page and its model worker.
 * - 'wasm-unsafe-eval': compiling the tfjs WASM backend.
 * - worker-src blob: and script-src blob: the WASM backend's threaded build (the page is cross-origin isolated,
 *   CROSS_ORIGIN_ISOLATION_HEADERS) starts its pthreads from blob: URLs, and each loads the backend's script
 *   from another blob: URL with importScripts. Only script already running in the app can make a blob: URL.
 * - connect-src: the app's own files (models, wasm) and, later, model downloads from the Hugging Face Hub.
 * - style-src 'unsafe-inline': libraries (charts) may inject style elements or attributes.
 *
 * It reaches the browser twice: as a <meta> in the built index.html (for hosts that send no headers), and as the
 * Content-Security-Policy response header (`vite preview`, and public/_headers for static hosts). The header is
 * what counts for the workers: a dedicated worker loaded from a URL takes its policy from its own script's
 * response, never from the page's <meta>. The dev server sends none: Vite's dev page needs inline scripts (React
 * Refresh preamble) and the e2e specs point the worker at a loopback stand-in for the Hub.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self' 'wasm-unsafe-eval' blob:",
  "worker-src 'self' blob:",
  "connect-src 'self' https://huggingface.co https://*.huggingface.co https://*.hf.co",
  "img-src 'self' data: blob:",
  "style-src 'self' 'unsafe-inline'",
  "object-src 'none'",
  "base-uri 'self'",
  "form-action 'self'",
].join('; ');

/**
 * The reward sandbox worker's policy (src/worker/reward-sandbox.worker.ts): it compiles the person's reward
 * code with `new Function` ('unsafe-eval'), and loads nothing else and reaches no network (default-src 'none'
 * covers connect-src), on top of the globals it removes itself.
 */
export const SANDBOX_CONTENT_SECURITY_POLICY = ["default-src 'none'", "script-src 'self' 'unsafe-eval'"].join(
  '; ',
);

/** The build puts the sandbox worker in a folder of its own, so that a static host can give it its policy. */
export const SANDBOX_DIR = 'sandbox';

/** The policy of the response for `pathname` of the built app. */
export function contentSecurityPolicyFor(pathname: string): string {
  return pathname.startsWith(`/${SANDBOX_DIR}/`) ? SANDBOX_CONTENT_SECURITY_POLICY : CONTENT_SECURITY_POLICY;
}

/**
 * Cross-origin isolation, so that tfjs-backend-wasm can use its threaded SIMD build: it needs SharedArrayBuffer,
 * which browsers give only to a cross-origin isolated page (docs/tfjs.md, "Cross-origin isolation and WASM
 * threads"). Sent on every response, by the dev server, `vite preview` and public/_headers: the documents need
 * them, and the worker scripts too (a dedicated worker takes its embedder policy from its own script response).
 *
 * `require-corp` rather than `credentialless`: every cross-origin request the app makes is a CORS fetch to the
 * Hugging Face Hub (model downloads, whose responses carry Access-Control-Allow-Origin), which `require-corp`
 * allows as it is, and `require-corp` works in every browser with SharedArrayBuffer, where `credentialless` is
 * missing in Safari. Everything else is same-origin: the app, its workers, the WASM binaries (hashed assets),
 * the built-in models; tfjs's pthread workers are blob: URLs, which inherit the page's policies.
 */
export const CROSS_ORIGIN_ISOLATION_HEADERS: Readonly<Record<string, string>> = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

/**
 * public/_headers for static hosts that read it (Netlify, Cloudflare Pages); tests/csp-headers.test.ts keeps the
 * file equal to this. Both hosts apply every rule that matches a path and would join two values of one header
 * (two Content-Security-Policy values are two policies, both enforced), so no header is set by two rules that
 * match one path: the isolation headers by `/*` alone, each policy by one of the other rules. The documents and
 * the worker scripts are what a policy governs; other files (models, wasm, json) need none.
 */
export function staticHostHeaders(): string {
  const rule = (path: string, policy: string) => `${path}\n  Content-Security-Policy: ${policy}\n`;
  const isolation = Object.entries(CROSS_ORIGIN_ISOLATION_HEADERS)
    .map(([name, value]) => `  ${name}: ${value}\n`)
    .join('');
  return [
    '# Response headers for static hosts (Netlify, Cloudflare Pages): cross-origin isolation and Content-Security-Policy.',
    '# Generated from vite.config.ts (staticHostHeaders); tests/csp-headers.test.ts checks it is current.',
    '# Workers take their policies from their own script response, not from the page, hence the headers.',
    `/*\n${isolation}`,
    rule('/', CONTENT_SECURITY_POLICY),
    rule('/index.html', CONTENT_SECURITY_POLICY),
    rule('/assets/*', CONTENT_SECURITY_POLICY),
    rule(`/${SANDBOX_DIR}/*`, SANDBOX_CONTENT_SECURITY_POLICY),
  ].join('\n');
}

/** The <meta> policy in the built index.html. */
function contentSecurityPolicy(): Plugin {
  return {
    name: 'ppo-playground:csp',
    apply: 'build',
    transformIndexHtml: {
      order: 'post',
      handler: () => [
        {
          tag: 'meta',
          attrs: { 'http-equiv': 'Content-Security-Policy', content: CONTENT_SECURITY_POLICY },
          injectTo: 'head-prepend',
        },
      ],
    },
  };
}

/**
 * The policy as a response header of `vite preview`, per path (the sandbox worker has its own). A middleware
 * rather than `preview.headers`: those are set on every file alike, the sandbox worker's included.
 */
function contentSecurityPolicyHeaders(): Plugin {
  return {
    name: 'ppo-playground:csp-headers',
    configurePreviewServer(server) {
      server.middlewares.use((req, res, next) => {
        const { pathname } = new URL(req.url ?? '/', 'http://localhost');
        res.setHeader('Content-Security-Policy', contentSecurityPolicyFor(pathname));
        next();
      });
    },
  };
}

/**
 * Set by playwright.config.ts for the server it starts: no file watching and no HMR, so an edit saved while the
 * end-to-end tests run cannot reload the page under test (a reload loses the worker and its model mid-test).
 */
const E2E = process.env.PPO_E2E === '1';

export default defineConfig({
  plugins: [react(), contentSecurityPolicy(), contentSecurityPolicyHeaders()],
  worker: {
    format: 'es',
    rollupOptions: {
      output: {
        // The reward sandbox in a folder of its own (its own CSP, see SANDBOX_DIR); other workers as by default.
        entryFileNames: (chunk) =>
          chunk.name.startsWith('reward-sandbox')
            ? `${SANDBOX_DIR}/[name]-[hash].js`
            : 'assets/[name]-[hash].js',
      },
    },
  },
  // Let the dev server's dependency scan see the worker's imports (tfjs, tokenizer) up front; otherwise it
  // discovers them when the worker starts and reloads the page mid-session.
  optimizeDeps: { entries: ['index.html', 'src/worker/*.worker.ts'] },
  server: {
    port: 5173,
    headers: { ...CROSS_ORIGIN_ISOLATION_HEADERS },
    ...(E2E ? { hmr: false, watch: null } : {}),
  },
  preview: { port: 4173, headers: { ...CROSS_ORIGIN_ISOLATION_HEADERS } },
  build: { target: 'es2022' },
});
