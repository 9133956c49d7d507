/**
 * `bench --gpu`'s PyTorch probe (issue #22, `vsTorchEager`): runs `python -c` with TORCH_PROBE_CODE
 * (src/bench/webgpu-gpu.ts) and reads whether torch imports and CUDA is available (torchProbeFromRun).
 */
import { spawnSync } from 'node:child_process';
import { TORCH_PROBE_CODE, torchProbeFromRun, type ProbeRun, type TorchProbe } from '../bench/webgpu-gpu';

/** Whether `python` can import torch with CUDA available, and why not. */
export function probeTorchCuda(python: string): TorchProbe {
  const r = spawnSync(python, ['-c', TORCH_PROBE_CODE], { encoding: 'utf8', timeout: 120_000 });
  return torchProbeFromRun(python, {
    error: (r.error as ProbeRun['error']) ?? null,
    status: r.status,
    stdout: r.stdout ?? '',
    stderr: r.stderr ?? '',
  });
}
