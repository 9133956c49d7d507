/**
 * The fused Adam's WebGPU kernel (src/core/optim/fused-adam.ts) against tfjs's Adam on WebGPU, in Chromium
 * (SwiftShader here): the bench page's `mode=adamcheck` runs both optimizers on the same variables and gradients
 * for three steps. Also checks the page ran on a real WebGPU backend (and names its adapter), and the WASM kernel in
 * the browser.
 * Skipped when there is no Chromium (CHROMIUM_PATH or /usr/bin/chromium).
 */
import { describe, it, expect } from 'vitest';
import { chromiumPath, runBrowserBench } from '../src/cli/bench-browser';

describe.skipIf(!chromiumPath())('fused Adam in Chromium', () => {
  it('matches tfjs Adam on webgpu and wasm', { timeout: 240_000 }, async () => {
    const s = await runBrowserBench({
      backends: ['webgpu', 'wasm'],
      quick: true,
      query: { mode: 'adamcheck' },
      // Not the WASM thread-count measurement (two more pages training PPO, which nothing here reads).
      wasmThreads: false,
      timeoutSeconds: () => 150,
      log: () => {},
    });
    for (const r of s.results) {
      expect(r.error).toBeNull();
      expect(r.result!.backend).toBe(r.backend);
      const check = r.result!.fusedAdamCheck as { maxRelDiff: number; variables: number; fusedCalls: number };
      expect(check.variables).toBe(6);
      expect(check.fusedCalls).toBe(3 * 6); // the fused kernel ran (no silent fallback to tfjs's Adam)
      expect(check.maxRelDiff).toBeLessThan(1e-5);
    }
    const gpu = s.results.find((r) => r.backend === 'webgpu')!.result!;
    // The page names the adapter it ran on (SwiftShader here).
    const adapter = gpu.adapter as { vendor?: string; architecture?: string; description?: string } | null;
    expect(adapter, 'the WebGPU page reports its adapter').not.toBeNull();
    expect(`${adapter?.vendor ?? ''}${adapter?.architecture ?? ''}${adapter?.description ?? ''}`).not.toBe(
      '',
    );
  });
});
