/**
 * `train --resume CKPT --out DIR` into the folder the first run wrote: metrics.jsonl already holds the steps
 * after the checkpoint (the first run went on, or crashed, after writing it). Those lines are dropped (the file
 * rewritten whole, a temporary file then a rename) and said on stderr, so every step appears once. In-process
 * through the CLI's own entry (src/cli/main.ts runCli), CPU backend, a tiny model.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { cliInProcess } from './helpers/cli';
import { trimMetrics } from '../src/cli/train';

let dir: string;
let model: string;

beforeAll(async () => {
  await useCpu();
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-cli-resume-'));
  model = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  writeFileSync(path.join(dir, 'reward.mjs'), 'export default (sample) => sample.response.length;\n');
});

const cli = (args: string[]) => cliInProcess(args);

function metricLines(out: string): { step: number; reward: number }[] {
  const text = readFileSync(path.join(out, 'metrics.jsonl'), 'utf8');
  expect(text.endsWith('\n')).toBe(true);
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as { step: number; reward: number });
}

describe('train --resume into the same out folder', () => {
  it('3 steps with saveEvery 2, then resume from checkpoint-2 for 1 more step: steps 1, 2, 3 once each', async () => {
    const cfgPath = path.join(dir, 'run.json');
    writeFileSync(
      cfgPath,
      JSON.stringify({
        model,
        task: 'sentiment',
        batchSize: 2,
        miniBatches: 1,
        ppoEpochs: 1,
        responseLength: 4,
        steps: 3,
        saveEvery: 2,
        seed: 3,
      }),
    );
    const out = path.join(dir, 'run');
    const reward = ['--reward-module', path.join(dir, 'reward.mjs'), '--backend', 'cpu'];
    const first = await cli(['train', '--config', cfgPath, '--out', out, ...reward]);
    expect(first.code, first.stderr).toBe(0);
    expect(metricLines(out).map((m) => m.step)).toEqual([1, 2, 3]);
    expect(readdirSync(out)).toContain('checkpoint-2');
    const before = metricLines(out);

    const ckpt = path.join(out, 'checkpoint-2');
    const again = await cli(['train', '--resume', ckpt, '--out', out, '--steps', '3', ...reward]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain(
      'metrics.jsonl: dropped 1 line after step 2, the checkpoint resumed from\n',
    );
    const after = metricLines(out);
    expect(after.map((m) => m.step)).toEqual([1, 2, 3]);
    // Steps 1 and 2 are the first run's lines, kept as they were.
    expect(after.slice(0, 2)).toEqual(before.slice(0, 2));
    expect(readdirSync(out).filter((f) => f.includes('.tmp'))).toEqual([]);
  }, 120_000);

  it('trimMetrics: keeps the lines up to the step, drops later and torn ones, rewrites atomically', async () => {
    const p = path.join(mkdtempSync(path.join(tmpdir(), 'ppo-trim-')), 'metrics.jsonl');
    const line = (step: number) => JSON.stringify({ step, reward: step / 10 }) + '\n';
    writeFileSync(p, line(1) + line(2) + line(3) + line(4));
    appendFileSync(p, '{"step": 5, "rew'); // a crash mid-write
    expect(await trimMetrics(p, 2, [])).toBe(3);
    expect(readFileSync(p, 'utf8')).toBe(line(1) + line(2));
    expect(readdirSync(path.dirname(p))).toEqual(['metrics.jsonl']);
    // Nothing after the step: the file is left as it is.
    expect(await trimMetrics(p, 2, [])).toBe(0);
    expect(readFileSync(p, 'utf8')).toBe(line(1) + line(2));
    // No file: the checkpoint's history is written.
    const q = path.join(path.dirname(p), 'other.jsonl');
    expect(await trimMetrics(q, 1, [{ step: 1, reward: 0.1 }])).toBe(0);
    expect(readFileSync(q, 'utf8')).toBe(line(1));
  });
});
