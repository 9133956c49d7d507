/**
 * DPO through the CLI (`train --config` with "algorithm": "dpo", `train --resume` of a DPO checkpoint; contracts
 * §9): metrics.jsonl lines with TRL's names and the held-out keys at evalEvery and the last step, checkpoints at 0,
 * saveEvery and the end, resume byte-exact, and a PPO-only key refused naming it. CPU backend, a small random model.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { cliInProcess } from './helpers/cli';

let dir: string;
let model: string;

beforeAll(async () => {
  await useCpu();
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-cli-dpo-'));
  model = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  const lines = Array.from({ length: 12 }, (_, i) =>
    JSON.stringify({ prompt: `x ${i}`, chosen: ' yes', rejected: ' no' }),
  );
  writeFileSync(path.join(dir, 'pairs.jsonl'), lines.join('\n') + '\n');
});

const cli = (args: string[]) => cliInProcess(args);

const lines = (out: string) =>
  readFileSync(path.join(out, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, number>);

describe('train with algorithm "dpo"', () => {
  it('writes metrics, eval keys and checkpoints; resume from checkpoint-2 gives the same weights', async () => {
    const cfgPath = path.join(dir, 'dpo.json');
    writeFileSync(
      cfgPath,
      JSON.stringify({
        algorithm: 'dpo',
        model,
        data: 'pairs.jsonl',
        steps: 4,
        batchSize: 2,
        saveEvery: 2,
        evalEvery: 2,
        learningRate: 0.01,
      }),
    );
    const out = path.join(dir, 'run');
    const first = await cli(['train', '--config', cfgPath, '--out', out, '--backend', 'cpu']);
    expect(first.stderr).not.toMatch(/error/i);
    expect(first.code).toBe(0);
    const ms = lines(out);
    expect(ms.map((m) => m.step)).toEqual([1, 2, 3, 4]);
    expect(ms[0].loss).toBeCloseTo(Math.LN2, 5);
    expect(ms[0]['rewards/margins']).toBe(0);
    for (const k of [
      'loss',
      'rewards/chosen',
      'rewards/rejected',
      'rewards/accuracies',
      'rewards/margins',
      'logps/chosen',
      'logps/rejected',
    ])
      expect(typeof ms[2][k]).toBe('number');
    expect(ms.map((m) => 'eval/rewards/accuracies' in m)).toEqual([false, true, false, true]);
    for (const s of [0, 2, 4])
      expect(existsSync(path.join(out, `checkpoint-${s}`, 'model.safetensors'))).toBe(true);

    const out2 = path.join(dir, 'resumed');
    const again = await cli([
      'train',
      '--resume',
      path.join(out, 'checkpoint-2'),
      '--out',
      out2,
      '--backend',
      'cpu',
    ]);
    expect(again.code).toBe(0);
    expect(lines(out2).map((m) => m.step)).toEqual([1, 2, 3, 4]);
    const a = readFileSync(path.join(out, 'checkpoint-4', 'model.safetensors'));
    const b = readFileSync(path.join(out2, 'checkpoint-4', 'model.safetensors'));
    expect(Buffer.compare(a, b)).toBe(0);
    expect(lines(out2)[3].loss).toBe(ms[3].loss);
  }, 120_000);

  it('a PPO-only key is an error naming it', async () => {
    const cfgPath = path.join(dir, 'bad.json');
    writeFileSync(cfgPath, JSON.stringify({ algorithm: 'dpo', model, data: 'pairs.jsonl', clipRange: 0.2 }));
    const r = await cli(['train', '--config', cfgPath, '--out', path.join(dir, 'bad'), '--backend', 'cpu']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/"clipRange" is a key of the RL algorithms/);
  });
});
