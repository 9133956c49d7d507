/**
 * How Node waits for Dawn (src/cli/dawn-wait.ts): the mode from PPO_DAWN_WAIT or the adapter, which callbacks are
 * Dawn's polls, and the `sleep` wait's schedule (the first poll of a wait at once, every further poll of it put
 * off by a timer; everyone else's setImmediate untouched), on a pair of recording timers. On Dawn itself:
 * tests/webgpu-node.slow.test.ts.
 */
import { describe, it, expect } from 'vitest';
import { UserError } from '../src/common/errors';
import { dawnWaitMode, dawnWaitStats, installDawnSleep, isDawnPoll } from '../src/cli/dawn-wait';

describe('PPO_DAWN_WAIT', () => {
  it('unset or blank: sleep on a software adapter, spin on a GPU; spin or sleep chooses; anything else is refused in words', () => {
    expect(dawnWaitMode(true, {})).toBe('sleep');
    expect(dawnWaitMode(false, {})).toBe('spin');
    expect(dawnWaitMode(true, { PPO_DAWN_WAIT: ' ' })).toBe('sleep');
    expect(dawnWaitMode(true, { PPO_DAWN_WAIT: 'spin' })).toBe('spin');
    expect(dawnWaitMode(false, { PPO_DAWN_WAIT: ' sleep ' })).toBe('sleep');
    let err: unknown;
    try {
      dawnWaitMode(false, { PPO_DAWN_WAIT: 'poll' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toMatch(/^PPO_DAWN_WAIT must be "spin" .* or "sleep" .*, got "poll"\.$/);
  });
});

describe("Dawn's polls", () => {
  it('are nameless functions made in native code: not a script function, a bound one or a named built-in', () => {
    expect(isDawnPoll(Function.prototype)).toBe(true); // nameless and native, as Napi::Function::New makes them
    expect(isDawnPoll(() => {})).toBe(false);
    expect(isDawnPoll(function () {})).toBe(false);
    expect(isDawnPoll((() => {}).bind(null))).toBe(false); // "bound " + name, native source
    expect(isDawnPoll(Math.max)).toBe(false);
    expect(isDawnPoll(undefined)).toBe(false);
  });
});

/** A setImmediate / setTimeout pair that records what was scheduled how, and runs it when asked. */
function recordingTimers() {
  const queue: { how: string; fn: () => void }[] = [];
  const timers = {
    setImmediate: (fn: (...a: unknown[]) => void, ...args: unknown[]) => {
      queue.push({ how: 'immediate', fn: () => fn(...args) });
      return queue.length;
    },
    setTimeout: (fn: (...a: unknown[]) => void, ms: number, ...args: unknown[]) => {
      queue.push({ how: `timeout ${ms}`, fn: () => fn(...args) });
      return queue.length;
    },
  };
  const runNext = (): string => {
    const next = queue.shift()!;
    next.fn();
    return next.how;
  };
  return { timers, queue, runNext };
}

describe("the sleep wait's schedule", () => {
  it('the first poll of a wait runs at once, the ones it schedules are put off; other callbacks are untouched', () => {
    const { timers, queue, runNext } = recordingTimers();
    const polls = new WeakSet<object>();
    /** A stand-in for Dawn's poll: reschedules itself `left` more times, as AsyncRunner does while work waits. */
    const poll = (left: number, log: number[]): ((...a: unknown[]) => void) => {
      const f = (tag: unknown) => {
        log.push(tag as number);
        if (left > 0) timers.setImmediate(poll(left - 1, log), (tag as number) + 1);
      };
      polls.add(f);
      return f;
    };
    const before = { ...dawnWaitStats };
    expect(installDawnSleep(timers, (fn) => polls.has(fn as object))).toBe(true);
    expect(installDawnSleep(timers, (fn) => polls.has(fn as object))).toBe(false);

    const log: number[] = [];
    timers.setImmediate(poll(2, log), 10);
    expect(runNext()).toBe('immediate');
    expect(runNext()).toBe('timeout 0');
    expect(runNext()).toBe('timeout 0');
    expect(queue).toHaveLength(0);
    expect(log).toEqual([10, 11, 12]);

    // A script's callback scheduled from inside a poll keeps setImmediate.
    let ran = 0;
    const inside = (tag: unknown) => {
      log.push(tag as number);
      timers.setImmediate(() => ran++);
    };
    polls.add(inside);
    timers.setImmediate(inside, 20);
    expect(runNext()).toBe('immediate');
    expect(runNext()).toBe('immediate');
    expect(ran).toBe(1);

    // A new wait (scheduled outside any poll) starts at once again.
    timers.setImmediate(poll(0, log), 30);
    expect(runNext()).toBe('immediate');
    expect(log).toEqual([10, 11, 12, 20, 30]);
    expect(dawnWaitStats.immediate - before.immediate).toBe(3);
    expect(dawnWaitStats.deferred - before.deferred).toBe(2);
  });

  it('a poll that throws still ends its wait: the next poll starts a new one', () => {
    const { timers, runNext } = recordingTimers();
    const bad = () => {
      throw new Error('boom');
    };
    const good = () => {};
    installDawnSleep(timers, (fn) => fn === bad || fn === good);
    timers.setImmediate(bad);
    expect(() => runNext()).toThrow('boom');
    timers.setImmediate(good);
    expect(runNext()).toBe('immediate');
  });
});
