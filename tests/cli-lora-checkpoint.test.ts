/**
 * A LoRA run's checkpoint folders as the CLI writes them to disk (docs/formats.md §6): config.json and the merged
 * model.safetensors at the top, PEFT's pairs in adapter/ and value_adapter/, no adapter_config.json at the top
 * (transformers with peft installed would apply it on top of the merged weights). `train --resume` continues from
 * it exactly, and from a folder of an earlier version (the pairs at the top); `generate --model CKPT` reads it.
 * In-process through the CLI's own entry (src/cli/main.ts runCli), CPU backend, a tiny model.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { cpSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { cliInProcess } from './helpers/cli';

let dir: string;
let model: string;

beforeAll(async () => {
  await useCpu();
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-cli-lora-'));
  model = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  writeFileSync(path.join(dir, 'reward.mjs'), 'export default (sample) => sample.response.length;\n');
});

const cli = (args: string[]) => cliInProcess(args, { captureProcessStdout: true });

type Line = Record<string, number | null>;
const metricLines = (out: string): Line[] =>
  readFileSync(path.join(out, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Line);

/** Every non-timing metric of two lines equal to 1e-6 (relative above 1). */
function expectSameStep(a: Line, b: Line): void {
  for (const [k, x] of Object.entries(a)) {
    if (/^(time|tokensPerSecond)/.test(k)) continue;
    const y = b[k];
    if (x === null || y === null) expect(y, k).toBe(x);
    else expect(Math.abs(x - y), k).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(x)));
  }
}

const files = (d: string): string[] =>
  readdirSync(d, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => path.relative(d, path.join(e.parentPath, e.name)))
    .sort();

describe('a LoRA checkpoint written by train', () => {
  it('holds the merged model at the top and the PEFT pairs in adapter/ and value_adapter/; resume (also from the older layout) and generate read it', async () => {
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
        lora: 2,
        loraAlpha: 4,
        learningRate: 0.05,
      }),
    );
    const out = path.join(dir, 'run');
    const reward = ['--reward-module', path.join(dir, 'reward.mjs'), '--backend', 'cpu'];
    const first = await cli(['train', '--config', cfgPath, '--out', out, ...reward]);
    expect(first.code, first.stderr).toBe(0);
    const straight = metricLines(out);
    expect(straight.map((m) => m.step)).toEqual([1, 2, 3]);

    const ckpt = path.join(out, 'checkpoint-2');
    expect(files(ckpt)).toEqual([
      'adapter/adapter_config.json',
      'adapter/adapter_model.safetensors',
      'config.json',
      'model.safetensors',
      'optimizer.safetensors',
      'ref_model.safetensors',
      'trainer_state.json',
      'value_adapter/adapter_config.json',
      'value_adapter/adapter_model.safetensors',
    ]);
    expect(JSON.parse(readFileSync(path.join(ckpt, 'adapter/adapter_config.json'), 'utf8'))).toMatchObject({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      r: 2,
      lora_alpha: 4,
    });

    // Resume from checkpoint-2 into a new folder up to step 3: step 3 as the first run computed it.
    const again = path.join(dir, 'again');
    const r = await cli(['train', '--resume', ckpt, '--out', again, '--steps', '3', ...reward]);
    expect(r.code, r.stderr).toBe(0);
    const resumed = metricLines(again);
    expect(resumed.map((m) => m.step)).toEqual([1, 2, 3]);
    expectSameStep(straight[2], resumed[2]);

    // The same checkpoint in the layout of earlier versions (pairs at the top) resumes the same.
    const old = path.join(dir, 'old-checkpoint');
    cpSync(ckpt, old, { recursive: true });
    renameSync(path.join(old, 'adapter/adapter_config.json'), path.join(old, 'adapter_config.json'));
    renameSync(
      path.join(old, 'adapter/adapter_model.safetensors'),
      path.join(old, 'adapter_model.safetensors'),
    );
    renameSync(
      path.join(old, 'value_adapter/adapter_config.json'),
      path.join(old, 'value_adapter_config.json'),
    );
    renameSync(
      path.join(old, 'value_adapter/adapter_model.safetensors'),
      path.join(old, 'value_adapter_model.safetensors'),
    );
    rmSync(path.join(old, 'adapter'), { recursive: true });
    rmSync(path.join(old, 'value_adapter'), { recursive: true });
    expect(files(old).filter((f) => f.includes('/'))).toEqual([]);
    const fromOld = path.join(dir, 'from-old');
    const o = await cli(['train', '--resume', old, '--out', fromOld, '--steps', '3', ...reward]);
    expect(o.code, o.stderr).toBe(0);
    expectSameStep(straight[2], metricLines(fromOld)[2]);

    // generate reads the folder as a plain model (the merged model.safetensors).
    const g = await cli([
      'generate',
      '--model',
      ckpt,
      '--prompt',
      'Hi',
      '--max-new-tokens',
      '3',
      '--temperature',
      '0',
      '--no-stop',
      '--json',
      '--backend',
      'cpu',
    ]);
    expect(g.code, g.stderr).toBe(0);
    expect(JSON.parse(g.stdout.trim().split('\n').pop()!).tokens).toHaveLength(3);
  }, 180_000);
});
