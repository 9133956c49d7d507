/**
 * The few platform globals core uses that exist in both Node and Web Workers. Core compiles without the
 * DOM and Node libs (so it cannot reach for `document` or `fs`); these declarations are the whole
 * allowance.
 */
declare class TextEncoder {
  encode(input?: string): Uint8Array;
}
declare class TextDecoder {
  constructor(label?: string, options?: { fatal?: boolean; ignoreBOM?: boolean });
  decode(input?: ArrayBufferView | ArrayBuffer, options?: { stream?: boolean }): string;
}
declare class URLSearchParams {
  constructor(init?: string | Record<string, string> | [string, string][]);
  get(name: string): string | null;
  set(name: string, value: string): void;
  has(name: string): boolean;
  keys(): IterableIterator<string>;
  entries(): IterableIterator<[string, string]>;
  forEach(cb: (value: string, key: string) => void): void;
  toString(): string;
}
declare const console: {
  log(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};
declare const performance: { now(): number };
declare function setTimeout(cb: () => void, ms?: number): unknown;
declare function clearTimeout(id: unknown): void;
/** WebAssembly, for the SIMD kernels over the tfjs WASM backend's heap (src/core/kernels/wasm-simd.ts). */
declare namespace WebAssembly {
  class Module {
    constructor(bytes: Uint8Array);
  }
  class Memory {
    readonly buffer: ArrayBuffer;
  }
  class Instance {
    constructor(module: Module, imports?: Record<string, Record<string, unknown>>);
    readonly exports: Record<string, unknown>;
  }
  function validate(bytes: Uint8Array): boolean;
}
