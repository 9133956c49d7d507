import { defineConfig, type Plugin } from 'vite';
import react from '@vitejs/plugin-react';

/**
 * The production Content-Security-Policy. It is added only to the built index.html: Vite's dev server injects
 * inline scripts (React Refresh preamble) that `script-src 'self'` would block.
 * - 'wasm-unsafe-eval': compiling the tfjs WASM backend.
 * - worker-src blob: the WASM backend's threaded build starts its pthreads from blob: URLs.
 * - connect-src: the app's own files (models, wasm) and, later, model downloads from the Hugging Face Hub.
 * - style-src 'unsafe-inline': libraries (charts) may inject style elements or attributes.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self' 'wasm-unsafe-eval'",
  "worker-src 'self' blob:",
  "connect-src 'self' https://huggingface.co https://*.huggingface.co https://*.hf.co",
  "img-src 'self' data: blob:",
  "style-src 'self' 'unsafe-inline'",
  "object-src 'none'",
  "base-uri 'self'",
  "form-action 'self'",
].join('; ');

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
 * Set by playwright.config.ts for the server it starts: no file watching and no HMR, so an edit saved while the
 * end-to-end tests run cannot reload the page under test (a reload loses the worker and its model mid-test).
 */
const E2E = process.env.PPO_E2E === '1';

export default defineConfig({
  plugins: [react(), contentSecurityPolicy()],
  worker: { format: 'es' },
  // Let the dev server's dependency scan see the worker's imports (tfjs, tokenizer) up front; otherwise it
  // discovers them when the worker starts and reloads the page mid-session.
  optimizeDeps: { entries: ['index.html', 'src/worker/*.worker.ts'] },
  server: { port: 5173, ...(E2E ? { hmr: false, watch: null } : {}) },
  preview: { port: 4173 },
  build: { target: 'es2022' },
});
