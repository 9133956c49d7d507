import type { Page } from '@playwright/test';

import type { ModelWorkerApi } from '../src/worker/protocol';
import { DEV_PORT } from './ports';

/**
 * The model worker's API (src/worker/protocol.ts, types only). e2e/pages/worker.html puts the app's model
 * worker, wrapped by comlink, on `window.modelWorker`; use it inside page.evaluate.
 */
export type WorkerUnderTest = ModelWorkerApi;

declare global {
  interface Window {
    modelWorker: WorkerUnderTest;
    /** comlink's proxy() from the page's own comlink, for callbacks passed to the worker (subscribe). */
    comlinkProxy: <T>(x: T) => T;
  }
}

/** The test page that puts the model worker on `window.modelWorker` (served by the dev server only). */
export async function openWorkerPage(page: Page): Promise<void> {
  await page.goto(`http://localhost:${DEV_PORT}/e2e/pages/worker.html`);
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
}
