import { UserError } from '../common/errors';

/**
 * How Node waits for Dawn. While any WebGPU promise is pending (a buffer's `mapAsync`, so every `await t.data()`,
 * `onSubmittedWorkDone`, a pipeline made asynchronously), Dawn's Node binding polls its instance from a
 * `setImmediate` callback that schedules itself again (dawn/node/binding/AsyncRunner.cpp), so the JavaScript thread
 * runs at 100 % until the GPU answers. On a GPU that is the lowest latency there is. On a software adapter
 * (SwiftShader) the "GPU" is the CPU's other threads, and the spinning thread takes a core from them: a 512 × 512
 * matmul read back on this 2-core machine took 750–795 ms with the spin and 505–525 ms without it (docs/tfjs.md).
 *
 * `sleep` keeps the first poll of a wait immediate (work already done answers at once) and makes every further poll
 * of the same wait a `setTimeout(…, 0)` (about 1 ms apart, the thread asleep between). `spin` is Dawn's own. The
 * default: `sleep` on a software adapter, `spin` on a GPU; `PPO_DAWN_WAIT=spin|sleep` chooses.
 */
export type DawnWait = 'spin' | 'sleep';

/** `PPO_DAWN_WAIT` (`spin` or `sleep`), or the default for the adapter; a UserError naming both otherwise. */
export function dawnWaitMode(software: boolean, env: NodeJS.ProcessEnv = process.env): DawnWait {
  const raw = env.PPO_DAWN_WAIT?.trim();
  if (!raw) return software ? 'sleep' : 'spin';
  if (raw === 'spin' || raw === 'sleep') return raw;
  throw new UserError(
    `PPO_DAWN_WAIT must be "spin" (poll Dawn without pause, the default on a GPU) or "sleep" (poll about once a millisecond, the default on a software adapter), got "${raw}".`,
  );
}

const NATIVE_SOURCE = /^function\s*\(\)\s*\{\s*\[native code\]\s*\}$/;

/**
 * Dawn's polling callback: a function made in C++ with no name (`Napi::Function::New`). A script's functions, bound
 * functions ("bound f") and named built-ins are not.
 */
export function isDawnPoll(fn: unknown): boolean {
  return (
    typeof fn === 'function' && fn.name === '' && NATIVE_SOURCE.test(Function.prototype.toString.call(fn))
  );
}

/** What the installed `sleep` wait did: polls run at once (the first of each wait) and polls put off. */
export const dawnWaitStats = { immediate: 0, deferred: 0 };

interface Timers {
  setImmediate: (fn: (...args: unknown[]) => void, ...args: unknown[]) => unknown;
  setTimeout: (fn: (...args: unknown[]) => void, ms: number, ...args: unknown[]) => unknown;
}

const installed = new WeakSet<object>();

/**
 * Make `target.setImmediate` (the global one, which Dawn looks up at every poll) put off Dawn's polls after the
 * first of each wait; every other caller's `setImmediate` is the original. A poll scheduled from inside a poll's
 * callback continues a wait; one scheduled from anywhere else starts a new one. `isPoll` is for tests. Idempotent
 * per target; returns whether it installed now.
 */
export function installDawnSleep(
  target: Timers = globalThis as unknown as Timers,
  isPoll = isDawnPoll,
): boolean {
  if (installed.has(target)) return false;
  installed.add(target);
  const immediate = target.setImmediate.bind(target);
  const timeout = target.setTimeout.bind(target);
  let inPoll = false;
  const wrapped = (fn: (...args: unknown[]) => void, ...args: unknown[]): unknown => {
    if (!isPoll(fn)) return immediate(fn, ...args);
    const run = (): void => {
      inPoll = true;
      try {
        fn(...args);
      } finally {
        inPoll = false;
      }
    };
    if (inPoll) {
      dawnWaitStats.deferred++;
      return timeout(run, 0);
    }
    dawnWaitStats.immediate++;
    return immediate(run);
  };
  // Keep what hangs off the original (util.promisify's custom form).
  Object.assign(wrapped, target.setImmediate);
  target.setImmediate = wrapped;
  return true;
}
