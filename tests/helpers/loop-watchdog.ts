/**
 * Setup file of the unit tier (vitest.config.ts): says which test held this worker's event loop for long. Vitest
 * fails a whole run when a worker cannot answer its RPC for a minute ("Timeout calling onTaskUpdate"), without
 * naming the test; this prints the test that was running when the loop came back after more than 20 s.
 */
import { expect } from 'vitest';

const EVERY_MS = 1000;
const REPORT_MS = 20_000;
let last = Date.now();
const timer = setInterval(() => {
  const now = Date.now();
  const lag = now - last - EVERY_MS;
  last = now;
  if (lag > REPORT_MS) {
    let test = '?';
    try {
      test = expect.getState().currentTestName ?? '(between tests)';
    } catch {
      /* outside a test */
    }
    process.stderr.write(
      `[loop-watchdog] the event loop was held ${(lag / 1000).toFixed(0)} s, in: ${test}\n`,
    );
  }
}, EVERY_MS);
timer.unref();
