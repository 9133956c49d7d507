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
 * Run `python SCRIPT SPEC` (scripts/trl_grpo_step.py, scripts/torch_ppo_step.py) offline, with the script's
 * `[tag]` stderr lines (and errors) as progress; resolves its stdout, rejects on a non-zero exit.
 */
export function runPython(
  python: string,
  args: string[],
  log: (m: string) => void,
  tag: 'trl' | 'torch',
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1', HF_DATASETS_OFFLINE: '1' },
    });
    const kill = (): void => void child.kill('SIGTERM');
    process.once('exit', kill);
    let stdout = '';
    let tail = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    let errBuf = '';
    child.stderr.on('data', (d: Buffer) => {
      errBuf += d.toString();
      const lines = errBuf.split(/\r?\n|\r/);
      errBuf = lines.pop() ?? '';
      for (const l of lines)
        if (l.trim()) {
          tail = l;
          if (l.startsWith(`[${tag}]`) || /Error|Traceback/.test(l))
            log(`(${tag}) ${l.replace(`[${tag}] `, '')}`);
        }
    });
    child.on('error', reject);
    child.on('close', (code) => {
      process.off('exit', kill);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${python} ${args[0]} exited with ${code}: ${(errBuf || tail).trim()}`));
    });
  });
}

/**
 * Run scripts/torch_ppo_step.py on `spec` with `python` (`bench --gpu`'s PyTorch column): the spec goes to a
 * temporary file, progress lines go to `log`, and the last JSON line of stdout is parsed (parseTorchResult).
 */
export async function runTorchPpoStep(
  python: string,
  spec: TorchPpoSpec,
  log: (m: string) => void,
): Promise<TorchPpoResult> {
  const dir = await mkdtemp(join(tmpdir(), 'ppo-torch-'));
  const specPath = join(dir, 'spec.json');
  try {
    await writeFile(specPath, JSON.stringify(spec));
    const script = fileURLToPath(new URL('../../scripts/torch_ppo_step.py', import.meta.url));
    return parseTorchResult(await runPython(python, [script, specPath], log, 'torch'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
