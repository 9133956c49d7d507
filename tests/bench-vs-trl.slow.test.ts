/**
 * `bench --vs-trl` end to end (issue #24) where a Python with torch, transformers, peft and trl exists ($PPO_PYTHON,
 * /tmp/venv/bin/python or python3; skipped otherwise): both sides at a small GPT-2 shape (2 layers, width 64,
 * GPT-2's vocabulary), one timed step each, through the CLI as a user runs it. Checks that the two sides did the
 * same work (prompt lengths token for token, 24-token completions: parseTrlResult refuses otherwise) and that every
 * figure of the JSON is there. Times are not checked: speed is the bench's to report, not a test's.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { probePython, resolvePython } from '../src/cli/bench';

const ROOT = path.resolve(__dirname, '..');
const probe = probePython(resolvePython(), path.join(ROOT, 'scripts/trl_grpo_step.py'));

describe('bench --vs-trl with TRL', () => {
  it.skipIf(!probe.ok)(
    `runs both sides at a small shape and reports every figure${probe.ok ? '' : ` (skipped: ${probe.reason})`}`,
    () => {
      const d = mkdtempSync(path.join(tmpdir(), 'vs-trl-slow-'));
      try {
        const r = spawnSync(
          process.execPath,
          [
            '--import',
            'tsx',
            'src/cli/main.ts',
            'bench',
            '--vs-trl',
            '--vs-trl-shape',
            '2,64,2,64,50257',
            '--vs-trl-warmup',
            '0',
            '--vs-trl-steps',
            '1',
            '--json',
            '--out',
            path.join(d, 'vs-trl.md'),
          ],
          { cwd: ROOT, encoding: 'utf8', timeout: 540_000 },
        );
        expect(r.status, r.stderr).toBe(0);
        const j = JSON.parse(r.stdout.trim().split('\n').pop()!);
        expect(j.vsTrlCpu).toBeGreaterThan(0);
        expect(j.vsTrlCpuTime).toBeGreaterThan(0);
        expect(j.vsTrlPeakRatio).toBeGreaterThan(0);
        const v = j.vsTrl;
        expect(v.setup).toMatchObject({
          batchSize: 8,
          groupSize: 4,
          responseLength: 24,
          ourMicroBatchSize: 8,
          ourRecompute: false,
          wasmThreads: 1,
          threads: 1,
          steps: 1,
        });
        for (const n of v.setup.promptLengths) expect([12, 13]).toContain(n);
        for (const side of [v.ours, v.trl]) {
          for (const k of ['generate', 'score', 'update', 'step'])
            expect(side.gflopsPerSecond[k], k).toBeGreaterThan(0);
          expect(side.peakResidentBytes).toBeGreaterThan(1e8);
          expect(side.matmul.map((m: { m: number }) => m.m)).toEqual([512, 1024, 8]);
        }
        // Ours scores with the policy and the reference, TRL with the reference only.
        expect(v.ours.flops.score).toBeGreaterThan(v.trl.flops.score);
        expect(v.ours.flops.generate).toBe(v.trl.flops.generate);
        expect(v.versions.trl).toMatch(/^\d/);
        expect(r.stdout).toContain('## CPU beside TRL');
      } finally {
        rmSync(d, { recursive: true, force: true });
      }
    },
    600_000,
  );
});
