/**
 * sampleGpuMemory (src/cli/torch-probe.ts): the most of the MiB lines a background nvidia-smi prints while
 * something runs, in bytes. Here a stand-in command prints the lines (nvidia-smi is not on this machine): the
 * largest line counts wherever it falls (a line split across chunks, the last one without its newline), a line
 * that is not a number is skipped, a command that exits by itself still gives what it printed, a command that
 * cannot start gives null (and stopping it at once signals nothing: with no pid a kill would reach this process's
 * group), and a command that ignores SIGTERM is killed and stop() still resolves.
 */
import { describe, expect, it } from 'vitest';
import { STOP_GRACE_MS, sampleGpuMemory } from '../src/cli/torch-probe';

const MiB = 1024 * 1024;
const node = (script: string) => ['-e', script];

/** Wait until `f()` holds (polling; the stand-in is a Node process, slow to start on a loaded machine). */
async function until(f: () => boolean, what: string): Promise<void> {
  for (const t0 = Date.now(); !f();) {
    if (Date.now() - t0 > 60_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('sampleGpuMemory', () => {
  it('keeps the largest reading of a command still running when stopped, the unfinished last line included', async () => {
    // Prints 100, 250, "N/A", 180 (split across writes), then "3" and "00" without a newline, then waits until killed.
    const s = sampleGpuMemory(
      50,
      process.execPath,
      node(
        "const w=(x)=>process.stdout.write(x);w('100\\n');setTimeout(()=>w('250\\nN/A\\n18'),30);" +
          "setTimeout(()=>{w('0\\n3');w('00');},60);setTimeout(()=>w('\\n'),5000);setInterval(()=>{},1000);",
      ),
    );
    await until(() => s.samples() === 3, 'three readings');
    // "300" came with the third reading's newline, without its own (due at 5 s): let it land, then stop before that.
    await new Promise((r) => setTimeout(r, 300));
    expect(await s.stop()).toBe(300 * MiB);
    expect(s.samples()).toBe(4);
  });

  it('a command that ends by itself: what it printed', async () => {
    const s = sampleGpuMemory(50, process.execPath, node("process.stdout.write('7\\n9\\n8\\n')"));
    await until(() => s.samples() === 3, 'three readings');
    expect(await s.stop()).toBe(9 * MiB);
  });

  it('no such command, stopped at once, or nothing printed: null', async () => {
    const missing = sampleGpuMemory(50, 'no-such-nvidia-smi-here', []);
    expect(await missing.stop()).toBeNull();
    expect(missing.samples()).toBe(0);
    expect(await sampleGpuMemory(50, process.execPath, node('')).stop()).toBeNull();
  });

  it('a command that ignores SIGTERM: killed after the grace period, and stop() resolves with what it read', async () => {
    const s = sampleGpuMemory(
      50,
      process.execPath,
      node("process.on('SIGTERM',()=>{});process.stdout.write('42\\n');setInterval(()=>{},1000);"),
    );
    await until(() => s.samples() === 1, 'one reading');
    const t0 = Date.now();
    expect(await s.stop()).toBe(42 * MiB);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(STOP_GRACE_MS - 50);
  });
});
