/**
 * The reward sandbox: a worker of its own that runs the person's reward code, with no network and no way to
 * load more code. The model worker (./reward-sandbox.ts) starts one per code version and terminates it when a
 * batch takes longer than the time limit.
 *
 * Messages in:  {type: 'compile', id, code} | {type: 'score', id, sample}
 * Messages out: {type: 'ready'} once loaded; {id, ok: true, value} | {id, ok: false, error}
 */
export {};

const scope = self as unknown as Record<string, unknown>;
// Captured before anything is locked down: our only way to answer and to compile.
const post = (self as DedicatedWorkerGlobalScope).postMessage.bind(self);
const listen = self.addEventListener.bind(self);
const FunctionCtor = Function;

/** Everything that reaches the network, storage or more code. */
const BLOCKED = [
  'fetch',
  'XMLHttpRequest',
  'WebSocket',
  'WebSocketStream',
  'WebTransport',
  'EventSource',
  'importScripts',
  'indexedDB',
  'caches',
  'Worker',
  'SharedWorker',
  'BroadcastChannel',
  'RTCPeerConnection',
  'Request',
  'navigator',
  'postMessage',
  'close',
  'eval',
  'Function',
];

function blocked(): never {
  throw new Error('not available in reward code (no network, storage or code loading)');
}

function lockDown(): void {
  for (const name of BLOCKED) {
    // Remove the name from the global object and every prototype it inherits from, then pin it to undefined.
    for (let o: object | null = self; o; o = Object.getPrototypeOf(o)) {
      if (Object.prototype.hasOwnProperty.call(o, name)) {
        try {
          delete (o as Record<string, unknown>)[name];
        } catch {
          /* non-configurable: shadowed below */
        }
      }
    }
    try {
      Object.defineProperty(self, name, { value: undefined, writable: false, configurable: false });
    } catch {
      scope[name] = undefined;
    }
  }
  // setTimeout / setInterval with a string compile it like eval: only functions are let through.
  for (const name of ['setTimeout', 'setInterval']) {
    const real = scope[name] as ((...a: unknown[]) => unknown) | undefined;
    if (typeof real !== 'function') continue;
    const bound = real.bind(self);
    const safe = (fn: unknown, ...rest: unknown[]) =>
      typeof fn === 'function' ? bound(fn, ...rest) : blocked();
    try {
      Object.defineProperty(self, name, { value: safe, writable: false, configurable: false });
    } catch {
      scope[name] = safe;
    }
  }
  // `(() => {}).constructor` is Function: make every function constructor throw.
  const kinds = [function () {}, async function () {}, function* () {}, async function* () {}];
  for (const f of kinds) {
    try {
      Object.defineProperty(Object.getPrototypeOf(f), 'constructor', {
        value: blocked,
        writable: false,
        configurable: false,
      });
    } catch {
      /* already locked */
    }
  }
}

type RewardFn = (sample: unknown) => unknown;
let fn: RewardFn | null = null;

/**
 * `new Function` refused by a Content-Security-Policy without 'unsafe-eval': the host sent this worker the app's
 * policy instead of the sandbox's own (vite.config.ts SANDBOX_CONTENT_SECURITY_POLICY, public/_headers).
 */
function refusedByPolicy(e: unknown): boolean {
  return e instanceof EvalError || (e as { name?: unknown } | null)?.name === 'EvalError';
}
const REFUSED =
  "this site's Content-Security-Policy does not let the reward sandbox compile code. Whoever hosts the app " +
  "must send the sandbox worker (/sandbox/…) its own policy: see the README's Hosting section";

/**
 * The code is an arrow/function expression (`(sample) => …`), else the body of `function (sample) { … }`
 * (`return …;`); a bare expression of `sample` (`sample.response.length / 10`) is taken as what to return.
 * `import` (static or dynamic) is refused: it would load code from the network.
 */
function compile(code: string): RewardFn {
  // Any `import` (also `import/**/(…)`): the keyword cannot be escaped, so this catches every module load.
  if (/\bimport\b/.test(code))
    throw new Error(
      'reward code cannot use import (not even the word, in strings or comments); write a plain function',
    );
  let expression: (() => unknown) | null = null;
  try {
    expression = new FunctionCtor(`"use strict";\nreturn (\n${code}\n);`) as () => unknown;
  } catch (e) {
    if (refusedByPolicy(e)) throw new Error(REFUSED);
    expression = null; // not an expression: a function body
  }
  if (expression) {
    let value: unknown;
    try {
      value = expression();
    } catch {
      value = undefined; // an expression of `sample`, which is not defined here
    }
    if (typeof value === 'function') return value as RewardFn;
    return new FunctionCtor('sample', `"use strict";\nreturn (\n${code}\n);`) as RewardFn;
  }
  try {
    return new FunctionCtor('sample', `"use strict";\n${code}`) as RewardFn;
  } catch (e) {
    if (refusedByPolicy(e)) throw new Error(REFUSED);
    throw new Error(`syntax error: ${(e as Error).message}`);
  }
}

/** A value that survives postMessage (functions, symbols and the like become a description). */
function cloneable(v: unknown): unknown {
  if (v === null || ['number', 'string', 'boolean', 'undefined', 'bigint'].includes(typeof v)) return v;
  try {
    return JSON.parse(JSON.stringify(v)) as unknown;
  } catch {
    return `<${typeof v}>`;
  }
}

listen('message', (ev: MessageEvent) => {
  const msg = ev.data as
    { type: 'compile'; id: number; code: string } | { type: 'score'; id: number; sample: unknown };
  if (msg.type === 'compile') {
    try {
      // Locked down before any of the person's code runs (compiling an expression evaluates it), so the code
      // cannot keep a reference to Function or eval for later.
      lockDown();
      fn = compile(msg.code);
      post({ id: msg.id, ok: true, value: null });
    } catch (e) {
      post({ id: msg.id, ok: false, error: (e as Error).message ?? String(e) });
    }
    return;
  }
  if (!fn) {
    post({ id: msg.id, ok: false, error: 'no reward code was compiled' });
    return;
  }
  const reward = fn;
  Promise.resolve()
    .then(() => reward(msg.sample))
    .then(
      (value) => post({ id: msg.id, ok: true, value: cloneable(value) }),
      (e: unknown) => post({ id: msg.id, ok: false, error: e instanceof Error ? e.message : String(e) }),
    );
});

// Network and storage go at once; the rest (Function, eval, string timers) in lockDown, before compiling.
for (const name of BLOCKED.filter((n) => n !== 'Function' && n !== 'postMessage' && n !== 'eval')) {
  for (let o: object | null = self; o; o = Object.getPrototypeOf(o)) {
    if (Object.prototype.hasOwnProperty.call(o, name)) {
      try {
        delete (o as Record<string, unknown>)[name];
      } catch {
        /* shadowed in lockDown */
      }
    }
  }
}
post({ type: 'ready' });
