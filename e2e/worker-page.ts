import type { Page } from '@playwright/test';

/**
 * The part of the worker's API (src/worker/protocol.ts) the specs call, restated because the e2e project
 * (tsconfig.node.json) does not reference the worker's. e2e/pages/worker.html puts the app's model worker,
 * wrapped by comlink, on `window.modelWorker`; use it inside page.evaluate.
 */
export interface WorkerUnderTest {
  init(
    pref: string,
  ): Promise<{ backend: string; adapter: { architecture: string; isSoftware: boolean } | null }>;
  setBackend(pref: string): Promise<{ backend: string }>;
  loadModel(
    source: { kind: 'builtin'; name: 'tiny' } | { kind: 'url'; baseUrl: string },
  ): Promise<{ params: number }>;
  generate(req: {
    prompt: string;
    maxNewTokens: number;
    temperature: number;
    topK: number;
    topP: number;
    seed: number;
  }): Promise<{ tokens: number[]; logprobs: number[]; text: string }>;
  memory(): Promise<{ numTensors: number; numBytes: number }>;
  forwardLogits(ids: number[][], mask: number[][]): Promise<number[][][]>;
}

declare global {
  interface Window {
    modelWorker: WorkerUnderTest;
    /** comlink's proxy() from the page's own comlink, for callbacks passed to the worker (subscribe). */
    comlinkProxy: <T>(x: T) => T;
  }
}

export async function openWorkerPage(page: Page): Promise<void> {
  await page.goto('/e2e/pages/worker.html');
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
}
