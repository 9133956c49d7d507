/**
 * Letting the event loop run during long computations. On the CPU and WASM backends tfjs computes synchronously
 * and `await tensor.data()` resolves as a microtask, so a training loop can hold its thread's event loop for a
 * whole run: a Web Worker then answers no message (pause, a slider) until the run ends, and a Node process
 * handles no timer or I/O (Vitest fails a run whose worker does not answer for a minute). `maybeYield` gives the
 * loop a turn — a macrotask — when more than `YIELD_EVERY_MS` have passed since the last one, and costs a clock
 * read otherwise. It changes no number: it only lets other work run between two ops. The engine calls it once per
 * decode token, per scoring slice, per minibatch and per optimiser step.
 */
export const YIELD_EVERY_MS = 100;

let last = typeof performance !== 'undefined' ? performance.now() : Date.now();
const now = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

/** A macrotask: setImmediate in Node; a MessageChannel message elsewhere (setTimeout(0) is clamped to 4 ms). */
export function yieldToEventLoop(): Promise<void> {
  const g = globalThis as {
    setImmediate?: (f: () => void) => unknown;
    MessageChannel?: new () => {
      port1: { onmessage: (() => void) | null; close(): void };
      port2: { postMessage(m: unknown): void };
    };
  };
  if (typeof g.setImmediate === 'function') return new Promise((r) => g.setImmediate!(r));
  if (typeof g.MessageChannel === 'function') {
    const Channel = g.MessageChannel;
    return new Promise((r) => {
      const ch = new Channel();
      ch.port1.onmessage = () => {
        ch.port1.close();
        r();
      };
      ch.port2.postMessage(null);
    });
  }
  return new Promise((r) => setTimeout(r, 0));
}

/** Yield to the event loop if YIELD_EVERY_MS have passed since the last yield (a clock read otherwise). */
export async function maybeYield(): Promise<void> {
  if (now() - last < YIELD_EVERY_MS) return;
  await yieldToEventLoop();
  last = now();
}
