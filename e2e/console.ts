import type { ConsoleMessage, Page } from '@playwright/test';

/**
 * Collects console errors and uncaught exceptions from a page and its workers (the model worker's console does
 * not reach page.on('console')). Check `errors` at the end of a test.
 */
export function watchConsole(page: Page): { errors: string[] } {
  const errors: string[] = [];
  const onMessage = (where: string) => (m: ConsoleMessage) => {
    if (m.type() === 'error') errors.push(`${where} console.error: ${m.text()}`);
  };
  page.on('console', onMessage('page'));
  page.on('pageerror', (e) => errors.push(`page uncaught: ${e.message}`));
  page.on('worker', (w) => w.on('console', onMessage(`worker ${w.url()}`)));
  return { errors };
}
