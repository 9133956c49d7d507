/** The CLI as a user runs it (docs/formats.md §1): spawn `tsx src/cli/main.ts …` and read stdout/stderr. */
import { describe, it, expect, beforeAll } from 'vitest';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { makeTinyFolder } from './helpers/tiny';
import { setNodeBackend } from '../src/cli/backend-node';
import { cliSpawned } from './helpers/spawn';
import { REQUIRED_METRICS } from '../src/common/metrics';
import { loadLM } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { generate } from '../src/core/model/sampling';
import { encodePrompt } from '../src/core/tokenizer';

const cli = (args: string[]) => cliSpawned(args, { timeout: 300_000 });

const PARITY = 'tests/fixtures/parity/tiny-plain';

describe('cli generate', () => {
  it("prints the contract JSON; its greedy tokens are the in-process generate's (held to PyTorch by parity.test)", async () => {
    // The fixture's PyTorch prompt is raw byte ids (193, 225) that no text typed as --prompt encodes to, so the CLI is
    // held to the library's generate on the same text and backend; tests/parity.test.ts holds that generate to
    // PyTorch's greedy tokens and log-probs on this folder.
    const prompt = 'Hello';
    const r = await cli([
      'generate',
      '--model',
      PARITY,
      '--prompt',
      prompt,
      '--max-new-tokens',
      '12',
      '--temperature',
      '0',
      '--no-stop',
      '--json',
      '--backend',
      'cpu',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.last) as {
      promptTokens: number[];
      tokens: number[];
      logprobs: number[];
      text: string;
    };
    expect(Object.keys(j).sort()).toEqual(['logprobs', 'promptTokens', 'text', 'tokens']);
    await setNodeBackend('cpu');
    const { model, tokenizer } = await loadLM(nodeFiles(PARITY), { trainable: false });
    try {
      const ids = encodePrompt(tokenizer, prompt, true);
      const g = await generate(model, [ids], {
        maxNewTokens: 12,
        temperature: 0,
        padId: tokenizer.padId,
        rng: 0,
      });
      expect(j.promptTokens).toEqual(ids);
      expect(j.tokens).toEqual(g.tokens[0]);
      expect(j.tokens).toHaveLength(12);
      expect(j.logprobs).toHaveLength(12);
      for (let i = 0; i < 12; i++)
        expect(Math.abs(j.logprobs[i] - g.logprobs[0][i]), `log-prob ${i}`).toBeLessThan(1e-6);
      expect(j.text).toBe(tokenizer.decode(g.tokens[0]));
    } finally {
      model.dispose();
    }
  });

  it('the same seed gives the same sample on WASM, and a different seed another', async () => {
    const run = async (seed: string) =>
      JSON.parse(
        (
          await cli([
            'generate',
            '--model',
            PARITY,
            '--prompt',
            'Hi',
            '--max-new-tokens',
            '8',
            '--temperature',
            '1',
            '--seed',
            seed,
            '--no-stop',
            '--json',
          ])
        ).last,
      );
    const a = await run('5');
    expect(await run('5')).toEqual(a);
    expect((await run('6')).tokens).not.toEqual(a.tokens);
  });

  it('bad input gives a clear one-line error and exit code 1, no stack trace', async () => {
    const cases: [string[], RegExp][] = [
      [['generate', '--model', '/no/such/dir', '--prompt', 'x'], /does not exist/],
      [
        ['generate', '--model', PARITY, '--prompt', 'x', '--temperature', '-1'],
        /--temperature must be a number from 0/,
      ],
      [
        ['generate', '--model', PARITY, '--prompt', 'x', '--max-new-tokens', '1000'],
        /exceeds the model's n_positions/,
      ],
      [['generate', '--model', PARITY, '--prompt', 'x', '--bogus'], /Unknown option/i],
      [['generate', '--model', 'package.json', '--prompt', 'x'], /is a file/],
    ];
    for (const [args, re] of cases) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr).toMatch(re);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  });
});

describe('cli train', () => {
  let model: string;
  beforeAll(async () => {
    await setNodeBackend('wasm');
    model = await makeTinyFolder();
  });

  it('writes metrics.jsonl, checkpoint-0, periodic checkpoints, rollouts, and resumes', async () => {
    const out = mkdtempSync(path.join(tmpdir(), 'ppo-cli-'));
    const cfgFile = path.join(out, 'config.json');
    writeFileSync(
      cfgFile,
      JSON.stringify({
        model,
        task: 'sentiment',
        steps: 3,
        batchSize: 4,
        miniBatches: 2,
        ppoEpochs: 1,
        responseLength: 8,
        saveEvery: 2,
      }),
    );
    const run = path.join(out, 'run');
    const r = await cli(['train', '--config', cfgFile, '--out', run, '--dump-rollouts', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/step 3\/3 \[#+\]/);
    const lines = readFileSync(path.join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.step)).toEqual([1, 2, 3]);
    for (const k of REQUIRED_METRICS) expect(lines[0]).toHaveProperty(k);
    expect(readdirSync(run).sort()).toEqual([
      'checkpoint-0',
      'checkpoint-2',
      'checkpoint-3',
      'metrics.jsonl',
      'rollouts',
    ]);
    expect(readdirSync(path.join(run, 'checkpoint-0')).sort()).toEqual([
      'config.json',
      'model.safetensors',
      'trainer_state.json',
      'value_model.safetensors',
    ]);
    expect(readdirSync(path.join(run, 'rollouts')).sort()).toEqual([
      'step-1.json',
      'step-2.json',
      'step-3.json',
    ]);
    const dump = JSON.parse(readFileSync(path.join(run, 'rollouts', 'step-2.json'), 'utf8'));
    for (const k of [
      'step',
      'temperature',
      'gamma',
      'lam',
      'klCoef',
      'klEstimator',
      'whitenAdvantages',
      'queries',
      'responses',
      'responseMask',
      'logprobs',
      'refLogprobs',
      'values',
      'rewards',
      'advantages',
      'returns',
      'scores',
    ])
      expect(dump).toHaveProperty(k);
    expect(dump.step).toBe(2);
    expect(JSON.parse(r.last).steps).toBe(3);

    const r2 = await cli([
      'train',
      '--resume',
      path.join(run, 'checkpoint-2'),
      '--out',
      path.join(out, 'resumed'),
      '--steps',
      '3',
      '--json',
    ]);
    expect(r2.code, r2.stderr).toBe(0);
    const resumed = readFileSync(path.join(out, 'resumed', 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(resumed.map((l) => l.step)).toEqual([1, 2, 3]);
    expect(resumed[2].reward).toBeCloseTo(lines[2].reward, 6);
    expect(resumed[2].kl).toBeCloseTo(lines[2].kl, 5);
    expect(existsSync(path.join(out, 'resumed', 'checkpoint-3', 'optimizer.safetensors'))).toBe(true);
  });

  it('a reward module scores samples, and one returning NaN is a clear error naming the sample', async () => {
    const out = mkdtempSync(path.join(tmpdir(), 'ppo-cli-'));
    const cfgFile = path.join(out, 'config.json');
    writeFileSync(
      cfgFile,
      JSON.stringify({
        model,
        prompts: ['Hi', 'Yo'],
        task: null,
        steps: 1,
        batchSize: 2,
        miniBatches: 1,
        ppoEpochs: 1,
        responseLength: 4,
      }),
    );
    writeFileSync(
      path.join(out, 'len.mjs'),
      'export default (s) => s.responseTokens.length + s.promptTokens.length * 0;\n',
    );
    writeFileSync(path.join(out, 'nan.mjs'), 'export default (s) => (s.prompt === "Yo" ? NaN : 1);\n');
    const ok = await cli([
      'train',
      '--config',
      cfgFile,
      '--out',
      path.join(out, 'a'),
      '--reward-module',
      path.join(out, 'len.mjs'),
      '--json',
    ]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.last).metrics.reward).toBeGreaterThan(0);
    const bad = await cli([
      'train',
      '--config',
      cfgFile,
      '--out',
      path.join(out, 'b'),
      '--reward-module',
      path.join(out, 'nan.mjs'),
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/NaN for sample \d/);
    expect(bad.stderr).toMatch(/"Yo"/);
  });

  it('an unknown config key is a clear error naming it', async () => {
    const out = mkdtempSync(path.join(tmpdir(), 'ppo-cli-'));
    const cfgFile = path.join(out, 'config.json');
    writeFileSync(cfgFile, JSON.stringify({ model, task: 'sentiment', batch_size: 4 }));
    const r = await cli(['train', '--config', cfgFile, '--out', path.join(out, 'x')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/batch_size/);
    expect(r.stderr).toMatch(/batchSize/);
  });
});
