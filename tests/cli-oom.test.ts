/**
 * `train` running out of memory mid-step, through the CLI's own entry (src/cli/main.ts runCli, in-process on the
 * CPU backend with a tiny model): a forced-small heap budget (PPO_HEAP_BUDGET_BYTES) outgrown while scoring, and
 * a WASM trap ("RuntimeError: memory access out of bounds") thrown mid-update. Each exits 1 with one clear line
 * (phase, step, what to lower; no RuntimeError, no wasm frames, no stack), metrics.jsonl holds exactly the
 * finished steps as complete lines, and the last checkpoint folder is complete and loads (restoreTrainer).
 */
import { describe, it, expect, beforeAll, afterEach, vi } from 'vitest';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { cliInProcess } from './helpers/cli';
import { nodeFiles } from '../src/cli/files-node';
import { nodeResources, writeFolderAtomic } from '../src/cli/train';
import { restoreTrainer } from '../src/core/run/checkpoint';
import { readConfig } from '../src/core/model/folder';
import { paramCount, scalarParamCount } from '../src/core/model/size';
import { FusedAdamOptimizer } from '../src/core/optim/fused-adam';
import { HEAP_BUDGET_ENV } from '../src/core/model/oom';

let dir: string;
let model: string;
/** What the reward module calls (it is imported by the CLI from a file; the test sets the function). */
type Scorer = (s: { response: string }) => number;
const g = globalThis as { __cliOomReward?: Scorer };

beforeAll(async () => {
  await useCpu();
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-cli-oom-'));
  model = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  writeFileSync(
    path.join(dir, 'reward.mjs'),
    'export default (sample) => globalThis.__cliOomReward(sample);\n',
  );
});

afterEach(() => {
  delete process.env[HEAP_BUDGET_ENV];
  delete g.__cliOomReward;
  vi.restoreAllMocks();
});

const cli = (args: string[]) => cliInProcess(args);

function trainArgs(name: string, cfg: Record<string, unknown>): { out: string; args: string[] } {
  const cfgPath = path.join(dir, `${name}.json`);
  writeFileSync(
    cfgPath,
    JSON.stringify({
      model,
      task: 'sentiment',
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
      steps: 5,
      saveEvery: 1,
      seed: 3,
      ...cfg,
    }),
  );
  const out = path.join(dir, name);
  return {
    out,
    args: [
      'train',
      '--config',
      cfgPath,
      '--out',
      out,
      '--backend',
      'cpu',
      '--reward-module',
      path.join(dir, 'reward.mjs'),
      '--json',
    ],
  };
}

/** Every line of metrics.jsonl parses; their steps. */
function metricSteps(out: string): number[] {
  const text = readFileSync(path.join(out, 'metrics.jsonl'), 'utf8');
  expect(text.endsWith('\n') || text === '').toBe(true);
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => (JSON.parse(l) as { step: number }).step);
}

/** The checkpoint folder loads as a trainer at `step`, with the history of the steps before it. */
async function expectLoads(folder: string, step: number): Promise<void> {
  const t = await restoreTrainer(nodeFiles(folder), nodeResources);
  try {
    expect(t.step).toBe(step);
    expect(t.history.map((m) => m.step)).toEqual(Array.from({ length: step }, (_, i) => i + 1));
  } finally {
    t.disposeOptimizers();
    t.models.policy.dispose();
    t.models.ref.dispose();
    t.models.value?.dispose();
  }
}

function expectClear(stderr: string): void {
  expect(stderr).not.toMatch(/RuntimeError|wasm-function|internal error|\n {4}at /);
}

describe('train: running out of memory mid-step (CLI, in-process, CPU, tiny model)', () => {
  it('a forced-small PPO_HEAP_BUDGET_BYTES outgrown while scoring step 3: exit 1, the clear error, files intact', async () => {
    const c = await readConfig(nodeFiles(model));
    const P = paramCount(c);
    const S = scalarParamCount(c);
    // Live during the steps: policy, reference and value weights, and from step 1 on Adam's two moments of the
    // policy and the value model. The budget leaves 4 MB above that; step 3's reward holds 16 MB.
    const steady = 4 * (2 * P + S) + 2 * 4 * (P + S);
    process.env[HEAP_BUDGET_ENV] = String(tf.memory().numBytes + steady + 4e6);
    const held: tf.Tensor[] = [];
    let calls = 0;
    g.__cliOomReward = (s) => {
      if (++calls === 5) held.push(tf.zeros([4e6])); // the first sample of step 3 (batchSize 2)
      return s.response.length;
    };
    const { out, args } = trainArgs('budget', {});
    const r = await cli(args);
    tf.dispose(held);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toBe('');
    const line = r.stderr.split('\n').find((l) => l.startsWith('error: '))!;
    expect(line).toMatch(
      /^error: Ran out of memory while scoring \(the forwards of policy, reference, value and reward models\) at step 3: this process's memory could not hold the run's tensors \(\d+\.\d MB of tensors are live, over the \d+\.\d MB budget\)\. Lower batchSize or responseLength, raise miniBatches/,
    );
    expect(line).toContain(
      'The run stopped at step 3 and saves nothing from here on (the step was left half-done)',
    );
    expect(line).toContain(
      `Your files are intact: the last checkpoint, ${path.join(out, 'checkpoint-2')} (step 2), is complete, and ` +
        'metrics.jsonl holds one complete line per finished step (its last line is step 2); continue with ' +
        `\`train --resume ${path.join(out, 'checkpoint-2')}\``,
    );
    expectClear(r.stderr);
    expect(metricSteps(out)).toEqual([1, 2]);
    expect(readdirSync(out).sort()).toEqual([
      'checkpoint-0',
      'checkpoint-1',
      'checkpoint-2',
      'metrics.jsonl',
    ]);
    await expectLoads(path.join(out, 'checkpoint-2'), 2);
  }, 120_000);

  it('a WASM trap mid-update (simulated: "RuntimeError: memory access out of bounds") at step 2 gives the same clear error', async () => {
    g.__cliOomReward = (s) => s.response.length;
    // Per step: the policy's update, then the value model's (one minibatch, one epoch). Step 2's value update
    // traps after the policy's was applied.
    let applies = 0;
    const real = FusedAdamOptimizer.prototype.applyControlled;
    vi.spyOn(FusedAdamOptimizer.prototype, 'applyControlled').mockImplementation(function (
      this: FusedAdamOptimizer,
      ...a: Parameters<FusedAdamOptimizer['applyControlled']>
    ) {
      if (++applies === 4) {
        const e = new Error('memory access out of bounds');
        e.name = 'RuntimeError';
        e.stack =
          'RuntimeError: memory access out of bounds\n    at wasm://wasm/00a3b2c6:wasm-function[512]:0x2c1f4';
        throw e;
      }
      return real.apply(this, a);
    });
    const { out, args } = trainArgs('trap', {});
    const r = await cli(args);
    expect(r.code, r.stderr).toBe(1);
    const line = r.stderr.split('\n').find((l) => l.startsWith('error: '))!;
    expect(line).toMatch(
      /^error: Ran out of memory while updating \(the PPO minibatch backward passes\) at step 2: this process's memory could not hold the run's tensors \(\d+\.\d [kM]B of tensors were live; the backend said "memory access out of bounds"\)\. Lower batchSize or responseLength, raise miniBatches/,
    );
    expect(line).toContain(
      'The run stopped at step 2 and saves nothing from here on (its weights and optimiser state may be half-updated)',
    );
    expect(line).toContain(`the last checkpoint, ${path.join(out, 'checkpoint-1')} (step 1), is complete`);
    expectClear(r.stderr);
    expect(metricSteps(out)).toEqual([1]);
    // No checkpoint of the half-updated state, and no half-written folder.
    expect(readdirSync(out).sort()).toEqual(['checkpoint-0', 'checkpoint-1', 'metrics.jsonl']);
    await expectLoads(path.join(out, 'checkpoint-1'), 1);
  }, 120_000);
});

describe('checkpoint folders are written whole or not at all', () => {
  const bytes = (s: string) => new TextEncoder().encode(s);
  it('a write that fails half-way leaves the folder as it was and no half-written one; a good write replaces it', async () => {
    const parent = mkdtempSync(path.join(tmpdir(), 'ppo-atomic-'));
    const ckpt = path.join(parent, 'checkpoint-2');
    await writeFolderAtomic(ckpt, new Map([['a.json', bytes('old a')]]));
    expect(readdirSync(parent)).toEqual(['checkpoint-2']);
    // The second file cannot be written (its folder would be a.json, which is a file): the failure comes after
    // a.json was written.
    const failing = new Map([
      ['a.json', bytes('new a')],
      ['a.json/b.json', bytes('b')],
    ]);
    await expect(writeFolderAtomic(ckpt, failing)).rejects.toThrow(/EEXIST|ENOTDIR/);
    expect(readFileSync(path.join(ckpt, 'a.json'), 'utf8')).toBe('old a');
    expect(readdirSync(ckpt)).toEqual(['a.json']);
    expect(readdirSync(parent).sort()).toEqual(['checkpoint-2', 'checkpoint-2.partial']);
    mkdirSync(path.join(parent, 'checkpoint-3.partial'));
    await writeFolderAtomic(path.join(parent, 'checkpoint-3'), new Map([['c.json', bytes('c')]]));
    await writeFolderAtomic(ckpt, new Map([['a.json', bytes('new a')]]));
    expect(readFileSync(path.join(ckpt, 'a.json'), 'utf8')).toBe('new a');
    // Leftover .partial folders (of a write that failed) are cleared by the next write of the same name.
    expect(readdirSync(parent).sort()).toEqual(['checkpoint-2', 'checkpoint-3']);
  });
});
