/**
 * src/core/model/oom.ts: backend allocation failures (the strings the backends really throw) become a UserError naming
 * what ran out, the phase and the step, and what to lower; other errors are left alone. The heap budget guard
 * with a forced small budget (an option, and PPO_HEAP_BUDGET_BYTES).
 */
import { describe, it, expect, beforeAll, afterEach } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import {
  asHeapExhaustion,
  checkHeapBudget,
  defaultHeapBudget,
  HEAP_BUDGET_ENV,
  isHeapExhaustion,
} from '../src/core/model/oom';
import { UserError, isUserError } from '../src/common/errors';

beforeAll(useCpu);
afterEach(() => {
  delete process.env[HEAP_BUDGET_ENV];
});

/** A WebAssembly trap as tfjs-backend-wasm raises it after a failed _malloc (RuntimeError is a WebAssembly class). */
function wasmTrap(message: string): Error {
  const e = new Error(message);
  e.name = 'RuntimeError';
  e.stack = `RuntimeError: ${message}\n    at wasm://wasm/00a3b2c6:wasm-function[512]:0x2c1f4`;
  return e;
}

describe('asHeapExhaustion', () => {
  const real: [string, Error][] = [
    ['the WASM trap after a failed allocation', wasmTrap('memory access out of bounds')],
    [
      "emscripten's abort when the heap cannot grow",
      wasmTrap(
        'Aborted(Cannot enlarge memory arrays to size 4294967296 bytes (OOM). Either (1) compile with -sINITIAL_MEMORY=X with X higher than the current value 16777216, (2) compile with -sALLOW_MEMORY_GROWTH which allows increasing the size at runtime, or (3) if you want malloc to return NULL (0) instead of this abort, compile with -sABORTING_MALLOC=0). Build with -sASSERTIONS for more info.',
      ),
    ],
    ['V8 failing an ArrayBuffer', new RangeError('Array buffer allocation failed')],
    ['V8 refusing a typed array', new RangeError('Invalid typed array length: 4294967296')],
    ['copying into the heap at offset 0 of a failed allocation', new RangeError('offset is out of bounds')],
    ['WebAssembly.Memory failing to grow', new RangeError('WebAssembly.Memory(): could not allocate memory')],
    ['WebGPU / WebGL running out', new Error('Out of memory')],
  ];
  for (const [what, e] of real) {
    it(`recognises ${what}`, () => {
      expect(isHeapExhaustion(e)).toBe(true);
      const u = asHeapExhaustion(e, { phase: 'update', step: 7, backend: 'wasm' });
      expect(u).toBeInstanceOf(UserError);
      expect(isUserError(u)).toBe(true);
      expect(u!.message).toMatch(
        /^Ran out of memory while updating \(the PPO minibatch backward passes\) at step 7: the WASM heap \(at most 4\.29 GB, shared by every tensor\) could not hold the run's tensors/,
      );
      expect(u!.message).toMatch(/Lower batchSize or responseLength, raise miniBatches/);
      // On WASM the way around its heap; the backend's words without the error's class or stack.
      expect(u!.message).toMatch(/`--backend cpu` in the CLI is not bound by the 4 GB WASM heap\.$/);
      expect(u!.message).not.toMatch(/wasm-function|RuntimeError|RangeError|\n/);
    });
  }

  it('names the phase and what to lower for generation, and this process on the CPU backend', () => {
    const u = asHeapExhaustion(new RangeError('Array buffer allocation failed'), {
      phase: 'generate',
      step: 2,
    });
    expect(u!.message).toMatch(
      /^Ran out of memory while generating responses at step 2: this process's memory/,
    );
    expect(u!.message).toMatch(/Lower batchSize or responseLength \(the KV cache grows with both\)/);
    // Not on WASM: no advice to leave its heap.
    const cpu = asHeapExhaustion(new RangeError('Array buffer allocation failed'), {
      phase: 'update',
      backend: 'cpu',
    });
    expect(cpu!.message).toMatch(/or choose a smaller model\.$/);
    expect(cpu!.message).not.toMatch(/--backend cpu/);
    expect(asHeapExhaustion(wasmTrap('memory access out of bounds'), { phase: 'train' })!.message).toMatch(
      /^Ran out of memory while running train: /,
    );
  });

  it('leaves other errors alone (null), UserErrors included', () => {
    expect(
      asHeapExhaustion(new TypeError("Cannot read properties of undefined (reading 'shape')")),
    ).toBeNull();
    expect(
      asHeapExhaustion(new Error('Error in matMul: inner shapes (3) and (4) of Tensors must match')),
    ).toBeNull();
    expect(
      asHeapExhaustion(
        new UserError('batchSize must be at most 4096, got 5000; out of memory is not the point'),
      ),
    ).toBeNull();
    expect(asHeapExhaustion('a string')).toBeNull();
  });
});

describe('checkHeapBudget', () => {
  it('throws the clear error when live tensors exceed a forced small budget, and passes under it', () => {
    const t = tf.zeros([1024]); // 4 KB live
    try {
      const live = tf.memory().numBytes;
      expect(() => checkHeapBudget(live + 1, 'score', 3)).not.toThrow();
      let err: unknown = null;
      try {
        checkHeapBudget(live - 1, 'score', 3);
      } catch (e) {
        err = e;
      }
      expect(isUserError(err)).toBe(true);
      expect((err as Error).message).toMatch(
        /^Ran out of memory while scoring \(the forwards of policy, reference, value and reward models\) at step 3: .* of tensors are live, over the \d+\.\d kB budget\)/,
      );
      expect(() => checkHeapBudget(null, 'score', 3)).not.toThrow();
    } finally {
      t.dispose();
    }
  });

  it(`takes its default budget from ${HEAP_BUDGET_ENV}, else the WASM heap on wasm and none on cpu`, () => {
    expect(defaultHeapBudget('cpu')).toBeNull();
    expect(defaultHeapBudget('wasm')).toBe(4294901760);
    const t = tf.zeros([256]);
    try {
      process.env[HEAP_BUDGET_ENV] = '16';
      expect(defaultHeapBudget('cpu')).toBe(16);
      expect(() => checkHeapBudget(undefined, 'update', 1)).toThrow(/^Ran out of memory while updating/);
      process.env[HEAP_BUDGET_ENV] = 'lots';
      expect(() => checkHeapBudget(undefined, 'update', 1)).toThrow(
        /PPO_HEAP_BUDGET_BYTES must be a positive number of bytes, got "lots"/,
      );
    } finally {
      t.dispose();
    }
  });
});
