/**
 * DPO learns the shipped preference pairs (issue #23): configs/dpo-sentiment.json on the tiny model through the CLI
 * (WASM), 20 steps of 8 pairs: held-out preference accuracy > 0.8 (measured 1.0 at step 20, 0.85 at step 10).
 */
import { describe, it, expect, vi } from 'vitest';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runCli } from '../src/cli/main';

describe('DPO on the shipped preference pairs', () => {
  it('held-out accuracy > 0.8 after 20 steps', async () => {
    const out = mkdtempSync(path.join(tmpdir(), 'ppo-dpo-learn-'));
    const cfg = path.join(__dirname, '..', 'configs', 'dpo-sentiment.json');
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    let code: number;
    try {
      code = await runCli(['train', '--config', cfg, '--out', out, '--steps', '20'], {
        stdout: () => undefined,
        stderr: () => undefined,
      });
    } finally {
      spy.mockRestore();
    }
    expect(code).toBe(0);
    const last = readFileSync(path.join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').pop()!;
    const m = JSON.parse(last) as Record<string, number>;
    expect(m.step).toBe(20);
    expect(m['eval/rewards/accuracies']).toBeGreaterThan(0.8);
  }, 300_000);
});
