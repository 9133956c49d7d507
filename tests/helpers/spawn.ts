/**
 * spawnSync's result, without blocking: a Vitest worker whose event loop is blocked for over a minute (its RPC
 * timeout) is reported as an unhandled error — "Timeout calling onTaskUpdate" — and fails the run, even though
 * every test passed. Making a GPT-2- or Qwen-sized random model (0.5–2 GB written) or running the CLI for a step
 * can take that long on a loaded 2-core machine, so tests spawn those through this.
 */
import { spawn } from 'node:child_process';

export interface SpawnResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function spawnAsync(
  command: string,
  args: string[],
  opts: { timeout?: number; env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<SpawnResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { timeout: opts.timeout, env: opts.env, cwd: opts.cwd });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/** `tsx src/cli/main.ts …` as a person runs it, in a child process: exit code, output, and stdout's last line. */
export async function cliSpawned(
  args: string[],
  opts: { timeout?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number | null; stdout: string; stderr: string; last: string }> {
  const r = await spawnAsync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], opts);
  const lines = r.stdout.trim().split('\n');
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, last: lines[lines.length - 1] };
}
