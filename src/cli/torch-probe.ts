/**
 * `bench --gpu`'s PyTorch side (issue #22, `vsTorchEager`; docs/gpu.md): the probe runs `python -c` with
 * TORCH_PROBE_CODE (src/bench/webgpu-gpu.ts) and reads whether torch imports and CUDA is available
 * (torchProbeFromRun); runTorchPpoStep runs scripts/torch_ppo_step.py, the same PPO step in PyTorch eager.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TORCH_PROBE_CODE, torchProbeFromRun, type ProbeRun, type TorchProbe } from '../bench/webgpu-gpu';
import { parseTorchResult, type TorchPpoResult, type TorchPpoSpec } from '../bench/torch-ppo';

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

/**
 * Run scripts/torch_ppo_step.py on `spec` with `python` (`bench --gpu`'s PyTorch column): the spec goes to a
 * temporary file, progress lines go to `log`, and the last stdout line is parsed (parseTorchResult). Throws with
 * the script's last stderr line when it fails or runs past `timeoutMs`.
 */
export async function runTorchPpoStep(
  python: string,
  spec: TorchPpoSpec,
  log: (m: string) => void,
  timeoutMs = 600_000,
): Promise<TorchPpoResult> {
  const dir = await mkdtemp(join(tmpdir(), 'ppo-torch-'));
  const specPath = join(dir, 'spec.json');
  await writeFile(specPath, JSON.stringify(spec));
  const script = fileURLToPath(new URL('../../scripts/torch_ppo_step.py', import.meta.url));
  try {
    const { stdout, stderr, code } = await new Promise<{
      stdout: string;
      stderr: string;
      code: number | null;
    }>((resolve, reject) => {
      const p = spawn(python, [script, specPath], {
        env: { ...process.env, PYTHONUNBUFFERED: '1' },
        timeout: timeoutMs,
      });
      let out = '';
      let err = '';
      p.stdout.on('data', (d: Buffer) => (out += d.toString()));
      p.stderr.on('data', (d: Buffer) => {
        err += d.toString();
        for (const l of d.toString().split('\n')) if (l.startsWith('[torch]')) log(l);
      });
      p.on('error', reject);
      p.on('close', (c) => resolve({ stdout: out, stderr: err, code: c }));
    });
    if (code !== 0) {
      const last = stderr.trim().split('\n').slice(-3).join(' | ') || `exit ${code}`;
      throw new Error(`scripts/torch_ppo_step.py exited with ${code}: ${last}`);
    }
    return parseTorchResult(stdout);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
