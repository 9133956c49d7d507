/**
 * The fused WGSL kernels in Chromium on WebGPU (SwiftShader here): each one's values and gradients against
 * tfjs's ops on the same backend, and its dispatch count (e2e/pages/kernels.ts runs the check functions of
 * src/core/backend/webgpu-fused.ts, the ones Vitest runs on Node's Dawn). This spec's browser runs Dawn's default
 * toggles, as a user's browser does; every other spec and the unit tests turn off workgroup zeroing for speed
 * (e2e/chromium.ts, TEST_DAWN_TOGGLES).
 */
import { test, expect } from '@playwright/test';
import { CHROMIUM_ARGS } from './chromium';
import { DEV_PORT } from './ports';

// Its own browser, launched in the test, rather than `test.use({ launchOptions })`: a spec with options of its own
// gets a worker of its own, which Playwright starts after every other spec, so this minute ran alone at the end of
// the tier with the other worker idle (49 s of the 2026-12-02 run).
test('fused WebGPU kernels equal tfjs ops in Chromium (values and gradients)', async ({ playwright }) => {
  test.setTimeout(240_000);
  const browser = await playwright.chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
  });
  let r: Awaited<ReturnType<typeof window.runKernelChecks>>;
  try {
    const page = await browser.newPage();
    await page.goto(`http://localhost:${DEV_PORT}/e2e/pages/kernels.html`);
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
    r = await page.evaluate(() => window.runKernelChecks());
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(r));
  expect(r.backend).toBe('webgpu');
  const names = Object.keys(r.checks);
  expect(names).toEqual(
    expect.arrayContaining([
      'layer norm',
      'Conv1D + bias + LoRA + gelu_new + residual',
      'causal self-attention',
      'token log-prob (and entropy)',
      'KV-cache decode attention',
      'RMSNorm',
      'SwiGLU',
      'GQA causal attention with RoPE (hs 16)',
      'GQA causal attention with RoPE (hs 128)',
      'GQA KV-cache decode attention with RoPE (hs 16)',
      'GQA KV-cache decode attention with RoPE (hs 128)',
      'GQA decode from q|k|v, biases, cache written in place',
      'GQA decode from q|k|v, q/k norms, cache written in place',
      'fused Adam',
    ]),
  );
  for (const name of names.filter((n) => n !== 'fused Adam')) {
    const c = r.checks[name] as Record<string, number> & { error?: string };
    expect(c.error, name).toBeUndefined();
    expect(c.maxRelValue, name).toBeLessThan(1e-5);
    expect(c.maxRelGrad, name).toBeLessThan(1e-5);
    expect(c.dispatchesFwd, name).toBeLessThanOrEqual(3);
  }
  const adam = r.checks['fused Adam'] as { maxRelDiff: number; fusedCalls: number };
  expect(adam.fusedCalls).toBeGreaterThan(0);
  expect(adam.maxRelDiff).toBeLessThan(1e-5);
});
