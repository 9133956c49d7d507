/**
 * WASM threads (docs/tfjs.md, "Cross-origin isolation and WASM threads"): the count the worker gives tfjs
 * (src/worker/wasm-threads.ts), the `?wasmThreads=N` override, and how the top bar says it (BackendBadge).
 * The browser side (a cross-origin isolated page really running tfjs's threaded build) is e2e/isolation.spec.ts.
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import {
  MAX_WASM_THREADS,
  startWasmWithThreads,
  wasmThreadsFor,
  wasmThreadsParam,
} from '../src/worker/wasm-threads';
import { BackendBadge, wasmThreadsText } from '../src/ui/components/BackendBadge';
import type { ModelWorker } from '../src/ui/bridge';
import type { BackendReport } from '../src/worker/protocol';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';

describe('the WASM thread count', () => {
  it('defaults to the logical cores less one (the page and the worker keep a core), 1 to 8', () => {
    expect(MAX_WASM_THREADS).toBe(8);
    expect(wasmThreadsFor(1)).toBe(1);
    expect(wasmThreadsFor(2)).toBe(1);
    expect(wasmThreadsFor(4)).toBe(3);
    expect(wasmThreadsFor(8)).toBe(7);
    expect(wasmThreadsFor(16)).toBe(8);
    expect(wasmThreadsFor(undefined)).toBe(1);
    expect(wasmThreadsFor(0)).toBe(1);
    expect(wasmThreadsFor(Number.NaN)).toBe(1);
  });

  it('takes a positive integer override (1 forces one thread), capped too, and ignores anything else', () => {
    expect(wasmThreadsFor(8, 1)).toBe(1);
    expect(wasmThreadsFor(2, 4)).toBe(4);
    expect(wasmThreadsFor(16, 12)).toBe(8);
    for (const bad of [0, -2, 1.5, Number.NaN, null, undefined]) expect(wasmThreadsFor(6, bad)).toBe(5);
  });

  it('reads ?wasmThreads=N from a query string', () => {
    expect(wasmThreadsParam('?wasmThreads=1')).toBe(1);
    expect(wasmThreadsParam('?backend=wasm&wasmThreads=4')).toBe(4);
    expect(wasmThreadsParam('')).toBeUndefined();
    expect(wasmThreadsParam('?wasmThreads=0')).toBeUndefined();
    expect(wasmThreadsParam('?wasmThreads=two')).toBeUndefined();
    expect(wasmThreadsParam('?wasmThreads=-1')).toBeUndefined();
  });
});

describe('starting the WASM backend on N threads', () => {
  // tfjs-backend-wasm 4.22 uses min(asked, 8, ⌊navigator.hardwareConcurrency / 2⌋), reading the cores while its
  // module starts: this stands in for that, as its wasm does it (the real thing runs in e2e/isolation.spec.ts).
  const tfjsThreads = (asked: number): number =>
    Math.min(
      Math.max(asked, 1),
      8,
      Math.floor(
        (globalThis as unknown as { navigator: { hardwareConcurrency: number } }).navigator
          .hardwareConcurrency / 2,
      ),
    );

  function withNavigator(cores: number, body: () => Promise<void>): Promise<void> {
    const g = globalThis as { navigator?: unknown };
    const saved = Object.getOwnPropertyDescriptor(g, 'navigator');
    // As in browsers: hardwareConcurrency is a getter on the prototype, not the object's own property.
    const nav = Object.create({
      get hardwareConcurrency() {
        return cores;
      },
    }) as object;
    Object.defineProperty(g, 'navigator', { value: nav, configurable: true, writable: true });
    return body().finally(() => {
      if (saved) Object.defineProperty(g, 'navigator', saved);
      else delete g.navigator;
    });
  }

  it('gets the count asked for on 2 cores (tfjs alone would give 1), and puts the core count back', () =>
    withNavigator(2, async () => {
      const nav = (globalThis as unknown as { navigator: { hardwareConcurrency: number } }).navigator;
      expect(tfjsThreads(2)).toBe(1); // what tfjs does by itself here
      let asked = 0;
      const got = await startWasmWithThreads(
        2,
        (n) => (asked = n),
        async () => tfjsThreads(asked),
      );
      expect(asked).toBe(2);
      expect(got).toBe(2);
      expect(nav.hardwareConcurrency).toBe(2);
      expect(Object.getOwnPropertyDescriptor(nav, 'hardwareConcurrency')).toBeUndefined();
      expect(
        await startWasmWithThreads(
          1,
          (n) => (asked = n),
          async () => tfjsThreads(asked),
        ),
      ).toBe(1);
    }));

  it('puts the core count back when starting fails', () =>
    withNavigator(16, async () => {
      const nav = (globalThis as unknown as { navigator: { hardwareConcurrency: number } }).navigator;
      await expect(
        startWasmWithThreads(
          3,
          () => {},
          async () => {
            expect(nav.hardwareConcurrency).toBe(6);
            throw new Error('no wasm');
          },
        ),
      ).rejects.toThrow('no wasm');
      expect(nav.hardwareConcurrency).toBe(16);
    }));
});

describe('the top bar says WASM’s threads', () => {
  const wasm = (threads: number, isolated: boolean): BackendReport => ({
    backend: 'wasm',
    adapter: null,
    notice: null,
    wasm: { threads, isolated },
  });

  it('in words: the count, and why it is 1 on a page that is not cross-origin isolated', () => {
    expect(wasmThreadsText(wasm(8, true))).toBe('8 threads');
    expect(wasmThreadsText(wasm(1, true))).toBe('1 thread');
    expect(wasmThreadsText(wasm(1, false))).toBe('1 thread (page not cross-origin isolated)');
    expect(wasmThreadsText({ backend: 'webgpu', adapter: null, notice: null })).toBeNull();
    expect(wasmThreadsText({ backend: 'wasm', adapter: null, notice: null })).toBeNull();
    expect(wasmThreadsText(null)).toBeNull();
  });

  it('next to the backend name: "WASM · 2 threads"', () => {
    const store = createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
      hash: '',
      writeHash: () => {},
      sendDelayMs: 0,
    });
    const render = (backend: BackendReport): string => {
      store.setState({ backend, backendLoadState: 'ready' });
      store.getInitialState = () => store.getState();
      return renderToString(
        <StoreContext.Provider value={store}>
          <BackendBadge />
        </StoreContext.Provider>,
      )
        .replace(/<!-- -->/g, '')
        .replace(/<[^>]+>/g, '|');
    };
    expect(render(wasm(2, true))).toMatch(/\|WASM\|\|· 2 threads\|/);
    expect(render(wasm(1, false))).toContain('· 1 thread (page not cross-origin isolated)');
    expect(render({ backend: 'webgpu', adapter: null, notice: null })).not.toContain('thread');
  });
});
