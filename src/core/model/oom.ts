/**
 * Running out of tensor memory, said in words (platform-neutral: the CLI, the worker and the training session
 * use it). Two halves:
 *
 * - `asHeapExhaustion(e, where)`: recognise what a backend throws when an allocation fails and turn it into a
 *   UserError naming what ran out, at which phase and step, and what to lower. tfjs-backend-wasm does not check
 *   `_malloc`'s result: a failed allocation returns offset 0, and the next kernel writes through it and traps
 *   with "RuntimeError: memory access out of bounds" (or copying into it fails with "RangeError: offset is out of
 *   bounds"); emscripten itself aborts with "Cannot enlarge memory arrays" / "Aborted(OOM)"; V8 says "Array buffer
 *   allocation failed" or "Invalid typed array length" for a buffer it cannot make; WebGPU and WebGL report
 *   "out of memory". None of these is a bug of the person's config, and none should reach them as a stack.
 * - `checkHeapBudget(budget, phase, step)`: a guard at phase boundaries that compares `tf.memory().numBytes`
 *   with a budget (default: the backend's limit, docs/formats.md §8; `PPO_HEAP_BUDGET_BYTES` overrides it for
 *   tests and operations) and throws the same error before the backend fails somewhere less clear.
 */
import * as tf from '@tensorflow/tfjs-core';
import { UserError } from '../../common/errors';
import { WASM_HEAP_BYTES } from './size';

/** The phases of a training step (the session's names), or a whole command. */
export type OomPhase = 'load' | 'generate' | 'score' | 'update' | 'save' | string;

export interface OomWhere {
  phase?: OomPhase;
  /** The step being run (1-based), when training. */
  step?: number;
  /** The backend in use (`tf.getBackend()` when absent). */
  backend?: string;
}

/** What each backend's allocation failures look like (messages as thrown, matched case-insensitively). */
export const HEAP_EXHAUSTION_PATTERNS: readonly RegExp[] = [
  /memory access out of bounds/i, // wasm trap after a failed _malloc returned 0
  /cannot enlarge memory/i, // emscripten: "Cannot enlarge memory arrays to size N bytes (OOM)"
  /aborted\(oom\)/i,
  /\bout of memory\b/i, // "Out of memory", WebGL's CONTEXT_LOST/OUT_OF_MEMORY, WebGPU's GPUOutOfMemoryError
  /array buffer allocation failed/i, // V8: RangeError when an ArrayBuffer cannot be allocated
  /invalid typed array length/i, // V8: a typed array too large to make
  /offset is out of bounds/i, // TypedArray.set into the heap at a failed allocation
  /could not allocate memory/i, // WebAssembly.Memory(): could not allocate memory
  /webassembly\.memory\.grow/i,
  /failed to grow (the )?(wasm )?memory/i,
  // WebGPU: createBuffer with mappedAtCreation (tfjs-backend-webgpu uploads through it) throws a RangeError when the
  // mapping cannot be allocated ("createBuffer failed, size (N) is too large for the implementation when
  // mappedAtCreation == true"); an ordinary failed allocation is reported through the device's error scope
  // instead (src/core/ppo/gpu-plan.ts).
  /createbuffer failed/i,
  /too large for the implementation/i,
];

function messageOf(e: unknown): string {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}

/** True when `e` is an allocation failure of a backend (not a bug to report as such). */
export function isHeapExhaustion(e: unknown): boolean {
  if (e instanceof UserError) return false;
  const text = messageOf(e);
  return HEAP_EXHAUSTION_PATTERNS.some((p) => p.test(text));
}

/** Decimal units, two decimals in GB (the messages' budgets), MB and kB below (small runs and forced budgets). */
const gb = (n: number): string =>
  n >= 1e9
    ? `${(n / 1e9).toFixed(2)} GB`
    : n >= 1e6
      ? `${(n / 1e6).toFixed(1)} MB`
      : `${(n / 1e3).toFixed(1)} kB`;

function currentBackend(where: OomWhere): string {
  if (where.backend) return where.backend;
  try {
    return tf.getBackend() ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

function whatRanOut(backend: string): string {
  if (backend === 'wasm') return `the WASM heap (at most ${gb(WASM_HEAP_BYTES)}, shared by every tensor)`;
  if (backend === 'webgpu' || backend === 'webgl') return 'the GPU memory';
  return "this process's memory";
}

function whereText(where: OomWhere): string {
  const parts: string[] = [];
  if (where.phase) parts.push(`while ${phaseWords(where.phase)}`);
  if (where.step !== undefined) parts.push(`at step ${where.step}`);
  return parts.length ? ` ${parts.join(' ')}` : '';
}

function phaseWords(phase: OomPhase): string {
  switch (phase) {
    case 'generate':
    case 'generating':
      return 'generating responses';
    case 'score':
    case 'scoring':
      return 'scoring (the forwards of policy, reference, value and reward models)';
    case 'update':
    case 'updating':
      return 'updating (the PPO minibatch backward passes)';
    case 'load':
      return 'loading the models';
    case 'save':
      return 'saving a checkpoint';
    default:
      return `running ${phase}`;
  }
}

/** What to lower, by phase: the sizes each phase's tensors grow with (and on WASM, the way around its heap). */
function remedy(phase: OomPhase | undefined, backend: string): string {
  const generic =
    'Lower batchSize or responseLength, raise miniBatches (smaller forwards and backwards), or choose a smaller ' +
    (backend === 'wasm' ? 'model; `--backend cpu` in the CLI is not bound by the 4 GB WASM heap.' : 'model.');
  switch (phase) {
    case 'generate':
    case 'generating':
      return 'Lower batchSize or responseLength (the KV cache grows with both), or choose a smaller model.';
    case 'score':
    case 'scoring':
    case 'update':
    case 'updating':
      return generic;
    default:
      return generic;
  }
}

/**
 * Running out of memory, said in words: a UserError (isUserError holds; the CLI prints its message, the worker
 * sends it with userError true) that also keeps where it happened, so the training session can tell whether the
 * weights may be half-updated (src/core/run/session.ts).
 */
export class HeapExhaustedError extends UserError {
  constructor(
    message: string,
    readonly phase: OomPhase | undefined,
    readonly step: number | undefined,
    /**
     * Set by the training session: `exhausted` (what ran out, where, what to lower) and `stopped` (what became
     * of the run), so an adapter can say what of its own files is intact in place of the session's last words.
     */
    readonly parts?: { exhausted: string; stopped: string },
  ) {
    super(message);
  }
}

/** The step's phase in the session's words: the trainer's 'generating' is 'generate', and so on. */
export function stepPhase(phase: OomPhase | undefined): 'generate' | 'score' | 'update' | undefined {
  switch (phase) {
    case 'generate':
    case 'generating':
      return 'generate';
    case 'score':
    case 'scoring':
      return 'score';
    case 'update':
    case 'updating':
      return 'update';
    default:
      return undefined;
  }
}

/** The UserError for running out, with the numbers when known. */
export function heapExhaustedError(where: OomWhere, detail?: string): HeapExhaustedError {
  const backend = currentBackend(where);
  const tail = detail ? ` (${detail})` : '';
  return new HeapExhaustedError(
    `Ran out of memory${whereText(where)}: ${whatRanOut(backend)} could not hold the run's tensors${tail}. ` +
      remedy(where.phase, backend),
    where.phase,
    where.step,
  );
}

/**
 * `e` as a clear UserError when it is a backend's allocation failure, else null (rethrow it as it is).
 * The backend's own words are kept at the end, in brackets, for bug reports: the first line of the message only,
 * without the error's class or its stack (a person sees no "RuntimeError" and no wasm-function frames).
 */
export function asHeapExhaustion(e: unknown, where: OomWhere = {}): HeapExhaustedError | null {
  if (!isHeapExhaustion(e)) return null;
  const first = (e instanceof Error ? e.message : String(e)).split('\n')[0].slice(0, 200);
  let bytes: number | null = null;
  try {
    bytes = tf.memory().numBytes;
  } catch {
    bytes = null;
  }
  const detail = `${bytes !== null ? `${gb(bytes)} of tensors were live; ` : ''}the backend said "${first}"`;
  return heapExhaustedError(where, detail);
}

/** The environment variable that overrides the heap budget (bytes), for tests and operations. */
export const HEAP_BUDGET_ENV = 'PPO_HEAP_BUDGET_BYTES';

function envBudget(): number | null {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  const raw = env?.[HEAP_BUDGET_ENV];
  if (raw === undefined || raw.trim() === '') return null;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) {
    throw new UserError(`${HEAP_BUDGET_ENV} must be a positive number of bytes, got "${raw}".`);
  }
  return n;
}

/**
 * The tensor-memory budget on the current backend: `PPO_HEAP_BUDGET_BYTES` when set, else the WASM heap's
 * limit on `wasm` (`wasmHeapBytes`: the worker passes the heap its WASM module really has), else null (no fixed
 * limit known: CPU and GPU backends fail on their own terms).
 */
export function defaultHeapBudget(
  backend = currentBackend({}),
  wasmHeapBytes = WASM_HEAP_BYTES,
): number | null {
  const fromEnv = envBudget();
  if (fromEnv !== null) return fromEnv;
  return backend === 'wasm' ? wasmHeapBytes : null;
}

/**
 * Throw the out-of-memory UserError when live tensors (`tf.memory().numBytes`) exceed `budgetBytes` (default:
 * `defaultHeapBudget()`; null = no check). Call at phase boundaries: after generating, after scoring, after
 * an update.
 */
export function checkHeapBudget(
  budgetBytes: number | null | undefined,
  phase: OomPhase,
  step?: number,
): void {
  const budget = budgetBytes === undefined ? defaultHeapBudget() : budgetBytes;
  if (budget === null) return;
  const live = tf.memory().numBytes;
  if (live > budget) {
    throw heapExhaustedError(
      { phase, step },
      `${gb(live)} of tensors are live, over the ${gb(budget)} budget`,
    );
  }
}
