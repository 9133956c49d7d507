/**
 * `cli bench` as a user runs it: one JSON object on the last stdout line with the keys, the markdown
 * written to --out, and clear errors for bad flags. Speed is not asserted (unit tests never judge speed).
 */
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

function cli(args: string[]) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  const lines = r.stdout.trim().split('\n');
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, last: lines[lines.length - 1] };
}

describe('cli bench', () => {
  it('--json: the headline keys on the last line; the tables in --out', { timeout: 300_000 }, () => {
    const out = path.join(mkdtempSync(path.join(tmpdir(), 'ppo-bench-')), 'bench.md');
    const r = cli([
      'bench',
      '--quick',
      '--no-browser',
      '--sections',
      'matmul',
      '--big-memory',
      'none',
      '--json',
      '--out',
      out,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.last);
    for (const k of [
      'kvSpeedup',
      'kvSpeedupWebgpu',
      'updateMfu',
      'vsNanogpt',
      'gpt2FourModelBytes',
      'memoryGrowthBytes',
      'wasmThreadsSpeedup',
      'wasmThreads',
      'webgpuDispatchesPerLayerFwd',
      'webgpuDispatchesPerLayerFwdBwd',
      'webgpuDispatchesPerStep',
      'readbacksPerStep',
      'gpt2LoraPpoHeldBytes',
      'gpt2GrpoLoraBytes',
    ])
      expect(k in j, k).toBe(true);
    // Sections not run are null ("not measured"), never a pass or a fail.
    expect(j.webgpuDispatchesPerStep).toBeNull();
    expect(j.targets.gpt2GrpoLoraBytes).toMatchObject({ value: null, met: null, target: '≤ 1.0e9' });
    expect(j.targets.updateMfu.target).toBe('≥ 0.5');
    expect(j.runs[0].matmul.map((m: { n: number }) => m.n)).toEqual([512, 1024]);
    expect(j.runs[0].matmul[0].gflops).toBeGreaterThan(0);
    expect(j.runs[0].fusedAdamCheck.maxRelDiff).toBeLessThan(1e-5);
    expect(j.runs[0].tensorLeak).toBe(0);
    const md = readFileSync(out, 'utf8');
    expect(md).toContain('### Targets');
    expect(md).toContain('node/wasm');
    expect(r.stdout).toContain('### Matmul peak');
  });

  it('names a wrong section and lists the right ones', () => {
    const r = cli(['bench', '--sections', 'matmul,speed', '--no-browser']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('unknown section "speed"');
    expect(r.stderr).toContain('matmul, gen, ppo, lm, memory, dispatch');
  });

  it('names a wrong memory setup and lists the right ones', () => {
    const r = cli(['bench', '--big-memory-setups', 'lora-ppo,lora-dpo', '--no-browser']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('unknown setup "lora-dpo"');
    expect(r.stderr).toContain('four-model, lora-ppo, grpo-lora');
  });
});
