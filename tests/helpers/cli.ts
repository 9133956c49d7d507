/**
 * The CLI run in-process (src/cli/main.ts runCli), as the tests that drive `train`, `generate` or `train --resume`
 * use it: the exit code and what it wrote — its own output (the error line on stderr, results on stdout) and the
 * progress lines it writes straight to process.stderr (and, with `captureProcessStdout`, to process.stdout).
 */
import { vi } from 'vitest';
import { runCli } from '../../src/cli/main';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

export async function cliInProcess(
  args: string[],
  o: { captureProcessStdout?: boolean } = {},
): Promise<CliRun> {
  let stderr = '';
  let stdout = '';
  const progress = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    stderr += String(chunk);
    return true;
  });
  const printed = o.captureProcessStdout
    ? vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
        stdout += String(chunk);
        return true;
      })
    : null;
  try {
    const code = await runCli(args, { stdout: (t) => void (stdout += t), stderr: (t) => void (stderr += t) });
    return { code, stdout, stderr };
  } finally {
    progress.mockRestore();
    printed?.mockRestore();
  }
}
