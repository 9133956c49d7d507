/**
 * `bench --gpu`'s issue #22 keys, the pure parts (src/bench/webgpu-gpu.ts): gpuBenchKeys (which figure goes under
 * which name, and null with a note where it was not measured) and torchProbeFromRun (the PyTorch probe's outcome
 * from its process result). No GPU, no Python needed.
 */
import { describe, it, expect } from 'vitest';
import { gpuBenchKeys, torchProbeFromRun, TORCH_PROBE_CODE, type TorchProbe } from '../src/bench/webgpu-gpu';

const decode = { perLayer: 7, fixed: 4 };
const noTorch: TorchProbe = { ok: false, reason: 'no Python at "python3"' };
const timing = { batch: 16, greedyMsPerToken: 4, sampledMsPerToken: 5 };

describe('gpuBenchKeys', () => {
  it('a 2048² matmul is reported in TFLOP/s; sampled ÷ greedy; the decode count as measured', () => {
    const { keys, notes } = gpuBenchKeys({
      matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 },
      decode,
      timing,
      torch: noTorch,
    });
    expect(keys.matmulTflops2048).toBeCloseTo(9.3, 12);
    expect(keys.sampledOverGreedy).toBe(1.25);
    expect(keys.decodeDispatchesPerLayer).toBe(7);
    expect(keys.vsTorchEager).toBeNull();
    expect(notes.some((n) => n.startsWith('matmulTflops2048'))).toBe(false);
    expect(notes.some((n) => n.startsWith('sampledOverGreedy'))).toBe(false);
    expect(notes).toContain('vsTorchEager: null (no PyTorch on a GPU: no Python at "python3").');
  });

  it("a software adapter's 256² matmul is not reported as matmulTflops2048: null with a note naming the size", () => {
    const { keys, notes } = gpuBenchKeys({
      matmul: { n: 256, iters: 1, seconds: 0.2, gflops: 12.5 },
      decode,
      timing,
      torch: noTorch,
    });
    expect(keys.matmulTflops2048).toBeNull();
    expect(notes.find((n) => n.startsWith('matmulTflops2048'))).toMatch(/256².*not 2048²/);
  });

  it('sampledOverGreedy is null with a note when either time is missing, zero or not finite', () => {
    for (const t of [
      { greedyMsPerToken: null, sampledMsPerToken: 5 },
      { greedyMsPerToken: 4, sampledMsPerToken: null },
      { greedyMsPerToken: 0, sampledMsPerToken: 5 },
      { greedyMsPerToken: 4, sampledMsPerToken: NaN },
      { greedyMsPerToken: -1, sampledMsPerToken: 5 },
    ]) {
      const { keys, notes } = gpuBenchKeys({
        matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 },
        decode,
        timing: { batch: 16, ...t },
        torch: noTorch,
      });
      expect(keys.sampledOverGreedy, JSON.stringify(t)).toBeNull();
      expect(notes.find((n) => n.startsWith('sampledOverGreedy'))).toMatch(/batch 16/);
    }
  });

  it('with PyTorch on CUDA found, vsTorchEager stays null and the note says the PyTorch step is not built', () => {
    const { keys, notes } = gpuBenchKeys({
      matmul: { n: 2048, iters: 8, seconds: 2, gflops: 9300 },
      decode,
      timing,
      torch: { ok: true, reason: 'torch 2.5.1 with CUDA on NVIDIA H100' },
    });
    expect(keys.vsTorchEager).toBeNull();
    expect(notes.find((n) => n.startsWith('vsTorchEager'))).toBe(
      'vsTorchEager: null (torch 2.5.1 with CUDA on NVIDIA H100 is here, but the PyTorch eager PPO step is not built yet).',
    );
  });
});

describe('torchProbeFromRun', () => {
  const run = (o: Partial<Parameters<typeof torchProbeFromRun>[1]>) =>
    torchProbeFromRun('python3', { error: null, status: 0, stdout: '', stderr: '', ...o });

  it('no Python, a Python without torch, torch without CUDA, torch with CUDA', () => {
    expect(run({ error: { code: 'ENOENT', message: 'spawn python3 ENOENT' }, status: null })).toEqual({
      ok: false,
      reason: 'no Python at "python3"',
    });
    expect(run({ status: 1, stderr: "Traceback …\nModuleNotFoundError: No module named 'torch'\n" })).toEqual(
      {
        ok: false,
        reason: `"python3" cannot import torch: ModuleNotFoundError: No module named 'torch'`,
      },
    );
    expect(run({ stdout: '{"torch": "2.5.1+cpu", "cuda": false, "device": null}\n' })).toEqual({
      ok: false,
      reason: 'torch 2.5.1+cpu is installed but CUDA is not available',
    });
    expect(
      run({
        stdout: 'a warning line\n{"torch": "2.5.1", "cuda": true, "device": "NVIDIA H100 80GB HBM3"}\n',
      }),
    ).toEqual({ ok: true, reason: 'torch 2.5.1 with CUDA on NVIDIA H100 80GB HBM3' });
    expect(run({ stdout: 'not json' }).ok).toBe(false);
  });

  it("the probe's code asks torch for its version, CUDA and the device", () => {
    expect(TORCH_PROBE_CODE).toContain('torch.cuda.is_available()');
    expect(TORCH_PROBE_CODE).toContain('torch.cuda.get_device_name(0)');
  });
});
