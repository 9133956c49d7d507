/**
 * sampleGpuMemory (src/cli/torch-probe.ts): the most of the MiB lines a background nvidia-smi prints while
 * something runs, in bytes. Here a stand-in command prints the lines (nvidia-smi is not on this machine): the
 * largest line counts wherever it falls (a line split across chunks, the last one without its newline), a line
 * that is not a number is skipped, a command that exits by itself still gives what it printed, and a command that
 * cannot start gives null.
 */
import { describe, expect, it } from 'vitest';
import { sampleGpuMemory } from '../src/cli/torch-probe';

const MiB = 1024 * 1024;
const node = (script: string) => ['-e', script];

describe('sampleGpuMemory', () => {
  it('keeps the largest reading of a command still running when stopped, the unfinished last line included', async () => {
    // Prints 100, 250, "N/A", 180, then "3" and (later) "00" without a newline, then waits until killed.
    const s = sampleGpuMemory(
      50,
      process.execPath,
      node(
        "const w=(x)=>process.stdout.write(x);w('100\\n');setTimeout(()=>w('250\\nN/A\\n18'),30);" +
          "setTimeout(()=>w('0\\n3'),60);setTimeout(()=>w('00'),90);setInterval(()=>{},1000);",
      ),
    );
    await new Promise((r) => setTimeout(r, 2000));
    expect(await s.stop()).toBe(300 * MiB);
  });

  it('a command that ends by itself: what it printed', async () => {
    const s = sampleGpuMemory(50, process.execPath, node("process.stdout.write('7\\n9\\n8\\n')"));
    await new Promise((r) => setTimeout(r, 2000));
    expect(await s.stop()).toBe(9 * MiB);
  });

  it('no such command, or nothing printed: null', async () => {
    expect(await sampleGpuMemory(50, 'no-such-nvidia-smi-here', []).stop()).toBeNull();
    expect(await sampleGpuMemory(50, process.execPath, node('')).stop()).toBeNull();
  });
});
