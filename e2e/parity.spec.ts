import { test, expect } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';

/**
 * The model worker's forward pass on WebGPU (SwiftShader here) against the CPU backend and against the PyTorch
 * reference logits of tests/fixtures/parity (scripts/make_parity_fixtures.py).
 */
const FIXTURE = 'tests/fixtures/parity/tiny-plain';

interface Expected {
  single: { input_ids: number[][]; attention_mask: number[][]; logits: number[][][] };
}

function maxAbsDiff(a: number[][][], b: number[][][]): number {
  let m = 0;
  let compared = 0;
  expect(a.length).toBe(b.length);
  for (let i = 0; i < a.length; i++) {
    expect(a[i].length).toBe(b[i].length);
    for (let t = 0; t < a[i].length; t++) {
      expect(a[i][t].length).toBe(b[i][t].length);
      for (let v = 0; v < a[i][t].length; v++) {
        m = Math.max(m, Math.abs(a[i][t][v] - b[i][t][v]));
        compared++;
      }
    }
  }
  expect(compared).toBeGreaterThan(0);
  return Number.isNaN(m) ? Infinity : m;
}

test('tiny-plain logits: WebGPU = CPU = PyTorch reference (to 1e-3)', async ({ page }) => {
  const consoleWatch = watchConsole(page);
  const expected = JSON.parse(readFileSync(`${FIXTURE}/expected.json`, 'utf8')) as Expected;
  const { input_ids: ids, attention_mask: mask } = expected.single;

  await openWorkerPage(page);

  const got = await page.evaluate(
    async ({ ids, mask, baseUrl }) => {
      const w = window.modelWorker;
      const gpu = await w.init('webgpu');
      await w.loadModel({ kind: 'url', baseUrl });
      const before = await w.memory();
      const gpuLogits = await w.forwardLogits(ids, mask);
      const after = await w.memory();
      const cpu = await w.setBackend('cpu');
      const cpuLogits = await w.forwardLogits(ids, mask);
      return {
        gpu,
        cpu,
        gpuLogits,
        cpuLogits,
        tensorsBefore: before.numTensors,
        tensorsAfter: after.numTensors,
      };
    },
    { ids, mask, baseUrl: `/${FIXTURE}` },
  );

  expect(got.gpu.backend).toBe('webgpu');
  expect(got.gpu.adapter?.architecture).toMatch(/swiftshader/i);
  expect(got.cpu.backend).toBe('cpu');
  expect(got.tensorsAfter, 'forwardLogits leaks no tensors').toBe(got.tensorsBefore);

  const gpuVsCpu = maxAbsDiff(got.gpuLogits, got.cpuLogits);
  const gpuVsRef = maxAbsDiff(got.gpuLogits, expected.single.logits);
  const cpuVsRef = maxAbsDiff(got.cpuLogits, expected.single.logits);
  test.info().annotations.push({
    type: 'max |diff|',
    description: `webgpu-cpu ${gpuVsCpu.toExponential(2)}, webgpu-ref ${gpuVsRef.toExponential(2)}, cpu-ref ${cpuVsRef.toExponential(2)}`,
  });
  console.log(`max |diff|: webgpu−cpu ${gpuVsCpu}, webgpu−ref ${gpuVsRef}, cpu−ref ${cpuVsRef}`);
  expect(gpuVsCpu).toBeLessThan(1e-3);
  expect(gpuVsRef).toBeLessThan(1e-3);
  expect(cpuVsRef).toBeLessThan(1e-3);
  expect(consoleWatch.errors).toEqual([]);
});
