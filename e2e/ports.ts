/**
 * Where the e2e web servers listen (playwright.config.ts starts them): the production build (the app's specs) and
 * the dev server (the worker specs' test pages, e2e/worker-page.ts).
 */
export const DEV_PORT = 5173;
export const PREVIEW_PORT = 4173;
