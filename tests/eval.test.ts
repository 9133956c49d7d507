/**
 * Held-out evaluation of RL runs (src/core/ppo/eval.ts, docs/eval.md, contracts §9): the config keys and their
 * errors, the schedule, the three metrics against their definitions, that a run with evaluation trains bit for bit
 * like the same run without, that a resumed run writes the same eval.jsonl lines, LoRA's reference (adapters
 * off), and that evaluation leaves no tensor behind. Tiny random model on the WASM backend.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { cliInProcess } from './helpers/cli';
import { trimEvalLog } from '../src/cli/train';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { TrainingSession } from '../src/core/run/session';
import type { Resources } from '../src/core/ppo/setup';
import type { StepResult } from '../src/core/ppo/trainer';
import {
  EVAL_METRICS,
  evalSeeds,
  isEvalStep,
  parseEvalPromptsFile,
  resolveEvalPrompts,
  type EvalRecord,
} from '../src/core/ppo/eval';
import { generate } from '../src/core/model/sampling';
import { ScalarModel } from '../src/core/model/heads';
import { isUserError } from '../src/common/errors';
import { Rng } from '../src/core/base/rng';

const userError = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    expect(isUserError(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
};
const rejected = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
  } catch (e) {
    expect(isUserError(e), String(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
};

describe('evaluation config and schedule', () => {
  it('evalEvery: every N steps and the last step; 0 = never', () => {
    const due = (every: number, last: number) =>
      Array.from({ length: last + 1 }, (_, s) => s).filter((s) => isEvalStep(s, every, last));
    expect(due(2, 5)).toEqual([2, 4, 5]);
    expect(due(3, 6)).toEqual([3, 6]);
    expect(due(1, 3)).toEqual([1, 2, 3]);
    expect(due(0, 4)).toEqual([]);
  });

  it('validates evalEvery, evalPrompts and evalTemperature with clear errors', () => {
    const c = validateConfig({ evalEvery: 5, evalPrompts: 'heldout', task: 'arithmetic-chat' });
    expect([c.evalEvery, c.evalPrompts, c.evalTemperature]).toEqual([5, 'heldout', 0]);
    expect(validateConfig({}).evalEvery).toBe(0);
    expect(validateConfig({}).evalPrompts).toBeNull();
    expect(userError(() => validateConfig({ evalEvery: -1, evalPrompts: 'heldout' }))).toContain(
      '"evalEvery" must be an integer from 0 to 1000000, got -1.',
    );
    expect(userError(() => validateConfig({ evalEvery: 2.5, evalPrompts: 'heldout' }))).toContain(
      '"evalEvery" must be an integer from 0 to 1000000, got 2.5 (not an integer).',
    );
    expect(userError(() => validateConfig({ evalEvery: 3 }))).toContain(
      '"evalEvery" (3) needs "evalPrompts": "heldout" (the task\'s held-out split) or a file of prompts, one a line',
    );
    expect(userError(() => validateConfig({ evalPrompts: '' }))).toContain(
      '"evalPrompts" must be a non-empty string or null, got "".',
    );
    expect(userError(() => validateConfig({ evalTemperature: -0.5 }))).toContain(
      '"evalTemperature" must be a number from 0 to 10, got -0.5.',
    );
  });

  it('a prompts file: one a line, blank lines skipped; an empty file names itself', () => {
    expect(parseEvalPromptsFile('a b\r\n\n  \nc\n', 'p.txt')).toEqual(['a b', 'c']);
    expect(userError(() => parseEvalPromptsFile('\n \n', 'evals/p.txt'))).toBe(
      'evalPrompts file evals/p.txt has no prompts; write one prompt a line (blank lines are skipped), or set ' +
        '"evalPrompts" to "heldout" for a task with a held-out split.',
    );
  });

  it('"heldout" takes the task’s split; a task without one, no task, or a file in the app are clear errors', async () => {
    const src = { loadTask: loadTaskNode };
    const chat = validateConfig({ task: 'arithmetic-chat', evalEvery: 1, evalPrompts: 'heldout' });
    const task = await loadTaskNode('arithmetic-chat');
    expect(await resolveEvalPrompts(chat, src)).toEqual(task.evalPrompts);
    expect(await resolveEvalPrompts({ ...chat, evalEvery: 0 }, src)).toBeNull();
    expect(await rejected(resolveEvalPrompts({ ...chat, task: 'sentiment' }, src))).toBe(
      '"evalPrompts" "heldout": the task "sentiment" has no held-out split (no "evalPrompts" in its task file); ' +
        'give "evalPrompts" a file of prompts, one a line, or use a task that has one (e.g. "arithmetic-chat").',
    );
    expect(await rejected(resolveEvalPrompts({ ...chat, task: null, prompts: ['x'] }, src))).toContain(
      '"evalPrompts" "heldout" takes the held-out split of the run\'s task, but "task" is null',
    );
    expect(await rejected(resolveEvalPrompts({ ...chat, evalPrompts: 'p.txt' }, src))).toContain(
      '"evalPrompts" "p.txt": a prompts file is read by the CLI only; here use "heldout"',
    );
    const missing = await rejected(
      resolveEvalPrompts(
        { ...chat, evalPrompts: '/nope/p.txt' },
        { ...src, readText: () => Promise.reject(new Error('ENOENT')) },
      ),
    );
    expect(missing).toContain('"evalPrompts" file /nope/p.txt could not be read (ENOENT)');
  });

  it('the eval seeds are fixed by the run seed and are not the training stream', () => {
    expect(evalSeeds(3, 4)).toEqual(evalSeeds(3, 4));
    expect(evalSeeds(3, 4)).not.toEqual(evalSeeds(4, 4));
    // Not the training stream: the trainer draws its per-sample seeds from new Rng(cfg.seed) (trainer.ts); none
    // of its first 1000 draws is an eval seed.
    const train = new Rng(3);
    const trainSeeds = new Set(Array.from({ length: 1000 }, () => train.seed()));
    expect(evalSeeds(3, 4).filter((s) => trainSeeds.has(s))).toEqual([]);
  });
});

describe('evaluation in a run (WASM, tiny model)', () => {
  let res: Resources;
  let cfg: TrainConfig;
  const PROMPTS = ['hello there', 'the film was', 'I think that', 'once upon a time', 'ab'];
  const readText = () => Promise.resolve(PROMPTS.join('\n') + '\n');
  const lengthReward = {
    kind: 'fn' as const,
    fn: (s: { response: string }) => s.response.length / 4,
    label: 'len',
  };
  beforeAll(async () => {
    await setNodeBackend('wasm');
    const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
    res = { modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p), loadTask: loadTaskNode };
    cfg = validateConfig({
      model: 'tiny-test',
      task: 'sentiment',
      batchSize: 4,
      miniBatches: 2,
      ppoEpochs: 2,
      responseLength: 6,
      learningRate: 3e-3,
      steps: 3,
      seed: 5,
      stopToken: null,
    });
  });

  /** Run `c` to its end; every step's result, the final policy (and value) weights and the training rng state. */
  async function runAll(c: TrainConfig) {
    const results: StepResult[] = [];
    const s = await TrainingSession.build(c, res, { hooks: { step: (r) => void results.push(r) }, readText });
    s.overrideReward(lengthReward);
    await s.run();
    const weights = [
      ...s.trainer.models.policy.trainableVariables(),
      ...(s.trainer.models.value?.trainableVariables() ?? []),
    ].map((v) => Array.from(v.dataSync()));
    const rng = s.trainer.rng.state();
    s.dispose();
    return { results, weights, rng };
  }

  /** A step's training metrics: every key but eval's and the wall-clock ones. */
  const training = (m: object) =>
    Object.fromEntries(
      Object.entries(m).filter(
        ([k]) => !k.startsWith('eval/') && !k.startsWith('time') && k !== 'tokensPerSecond',
      ),
    );

  for (const [name, variant] of [
    ['ppo', { algorithm: 'ppo' }],
    ['grpo', { algorithm: 'grpo' }],
    ['ppo with LoRA', { algorithm: 'ppo', lora: 4, learningRate: 3e-2 }],
  ] as const) {
    it(`${name}: a run with evaluation trains bit for bit like the same run without`, async () => {
      const base = { ...cfg, ...variant };
      const plain = await runAll(base);
      const withEval = await runAll({ ...base, evalEvery: 2, evalPrompts: 'p.txt', evalTemperature: 0.7 });
      expect(withEval.weights).toEqual(plain.weights);
      expect(withEval.rng).toEqual(plain.rng);
      expect(withEval.results.map((r) => training(r.metrics))).toEqual(
        plain.results.map((r) => training(r.metrics)),
      );
      // Steps 2 and 3 (the last) were evaluated, step 1 not; the run without evaluation has no eval keys.
      expect(withEval.results.map((r) => r.eval?.step ?? null)).toEqual([null, 2, 3]);
      expect(withEval.results.map((r) => 'eval/reward' in r.metrics)).toEqual([false, true, true]);
      expect(plain.results.some((r) => r.eval || 'eval/kl' in r.metrics)).toBe(false);
    }, 120_000);
  }

  it('the metrics follow their definitions; the reference answers the same way at every evaluation', async () => {
    const results: StepResult[] = [];
    const s = await TrainingSession.build({ ...cfg, evalEvery: 1, evalPrompts: 'p.txt' }, res, {
      hooks: { step: (r) => void results.push(r) },
      readText,
    });
    s.overrideReward(lengthReward);
    // Before any update the policy equals its reference: the same greedy answers, KL 0, no wins.
    const start = await s.evaluator!.run(0);
    expect(start.samples.map((x) => x.policy)).toEqual(start.samples.map((x) => x.reference));
    expect(start['eval/kl']).toBe(0);
    expect(start['eval/winRate']).toBe(0);
    await s.run();
    const records = results.map((r) => r.eval!);
    expect(records.map((r) => r.step)).toEqual([1, 2, 3]);
    for (const r of records) {
      expect(Object.keys(r)).toEqual(['step', ...EVAL_METRICS, 'samples']);
      expect(r.samples.map((x) => x.prompt)).toEqual(PROMPTS);
      // The run's reward scored both answers.
      for (const x of r.samples) {
        expect(x.policyReward).toBe(x.policy.length / 4);
        expect(x.referenceReward).toBe(x.reference.length / 4);
      }
      const mean = r.samples.reduce((a, x) => a + x.policyReward, 0) / PROMPTS.length;
      expect(r['eval/reward']).toBeCloseTo(mean, 12);
      const wins = r.samples.filter((x) => x.policyReward > x.referenceReward).length;
      expect(r['eval/winRate']).toBe(wins / PROMPTS.length);
      // The step's metrics line carries the same three numbers.
      const line = results[r.step - 1].metrics as unknown as Record<string, number>;
      for (const k of EVAL_METRICS) expect(line[k]).toBe(r[k]);
      // The frozen reference gives the same greedy answers as at the start.
      expect(r.samples.map((x) => x.reference)).toEqual(start.samples.map((x) => x.reference));
    }
    // eval/kl against a plain recomputation: Σ_t log π − Σ_t log π_ref of the policy's greedy answer, the policy's
    // log-probs from generate itself (T = 1 when greedy), the reference's by one forward per prompt.
    const t = s.trainer;
    const ev = s.evaluator!;
    let klSum = 0;
    for (let k = 0; k < PROMPTS.length; k++) {
      const q = ev.promptTokens[k];
      const g = await generate(t.models.policy, [q], {
        maxNewTokens: cfg.responseLength,
        temperature: 0,
        padId: t.tokenizer.padId,
        rng: 1,
      });
      const y = g.tokens[0];
      const ids = [...q, ...y];
      const refLp = tf.tidy(() => {
        const x = tf.tensor2d([ids], [1, ids.length], 'int32');
        const logits = t.models.ref.logits(x, tf.onesLike(x));
        const lsm = tf.logSoftmax(tf.squeeze(logits, [0]));
        const a = lsm.arraySync() as number[][];
        return y.reduce((acc, tok, i) => acc + a[q.length - 1 + i][tok], 0);
      });
      klSum += g.logprobs[0].reduce((a, b) => a + b, 0) - refLp;
    }
    expect(records[2]['eval/kl']).toBeCloseTo(klSum / PROMPTS.length, 4);
    expect(Math.abs(records[2]['eval/kl'])).toBeGreaterThan(1e-3); // trained away from the reference
    s.dispose();
  }, 120_000);

  it('a reward model scores both answers at their last token, centred on its recorded mean', async () => {
    const results: StepResult[] = [];
    const s = await TrainingSession.build({ ...cfg, steps: 2, evalEvery: 2, evalPrompts: 'p.txt' }, res, {
      hooks: { step: (r) => void results.push(r) },
      readText,
      resume: { rewardMean: 0.25 },
    });
    const t = s.trainer;
    const rm = ScalarModel.random(t.models.policy.config, 3, false, 'rm');
    s.overrideReward({ kind: 'model', model: rm, label: 'rm' });
    await s.run();
    const r = results[1].eval!;
    expect(r.step).toBe(2);
    // Plain references: each model's greedy answer, then the reward model over prompt + answer, unpadded.
    const ev = s.evaluator!;
    for (const [who, model] of [
      ['policy', t.models.policy],
      ['reference', t.models.ref],
    ] as const) {
      for (let k = 0; k < PROMPTS.length; k++) {
        const q = ev.promptTokens[k];
        const y = (
          await generate(model, [q], {
            maxNewTokens: cfg.responseLength,
            temperature: 0,
            padId: t.tokenizer.padId,
            rng: 1,
          })
        ).tokens[0];
        const score = tf.tidy(() => {
          const x = tf.tensor2d([[...q, ...y]], [1, q.length + y.length], 'int32');
          return rm.lastTokenValues(x, tf.onesLike(x)).dataSync()[0];
        });
        const got = who === 'policy' ? r.samples[k].policyReward : r.samples[k].referenceReward;
        expect(got, `${who} ${k}`).toBeCloseTo(score - 0.25, 5);
      }
    }
    s.dispose();
  }, 120_000);

  it('LoRA: the reference is the base with the adapters off', async () => {
    const results: StepResult[] = [];
    const c = { ...cfg, lora: 4, learningRate: 3e-2, evalEvery: 1, evalPrompts: 'p.txt' };
    const s = await TrainingSession.build(c, res, { hooks: { step: (r) => void results.push(r) }, readText });
    s.overrideReward(lengthReward);
    const base = await TrainingSession.build({ ...cfg, evalEvery: 1, evalPrompts: 'p.txt' }, res, {
      readText,
    });
    const untrained = await base.evaluator!.run(0);
    base.dispose();
    await s.run();
    for (const r of results) {
      expect(r.eval!.samples.map((x) => x.reference)).toEqual(untrained.samples.map((x) => x.reference));
    }
    expect(results[2].eval!['eval/kl']).not.toBe(0);
    s.dispose();
  }, 120_000);

  it('evaluation steps leave no tensor behind; a failed build frees everything', async () => {
    const beforeEval: number[] = []; // the worker starts the reward code's time budget there
    const s = await TrainingSession.build({ ...cfg, steps: 4, evalEvery: 1, evalPrompts: 'p.txt' }, res, {
      readText,
      hooks: { beforeEval: (x) => void beforeEval.push(x.step) },
    });
    s.overrideReward(lengthReward);
    await s.run({ until: 1 }); // Adam's moments exist from here on
    const held = tf.memory().numTensors;
    await s.run({ until: 4 });
    expect(s.history.filter((m) => 'eval/reward' in m).length).toBe(4);
    expect(beforeEval).toEqual([1, 2, 3, 4]);
    expect(tf.memory().numTensors).toBe(held);
    await s.evaluator!.run(4);
    expect(tf.memory().numTensors).toBe(held);
    s.dispose();

    const before = tf.memory().numTensors;
    const msg = await rejected(
      TrainingSession.build({ ...cfg, evalEvery: 1, evalPrompts: 'heldout' }, res, { readText }),
    );
    expect(msg).toContain('the task "sentiment" has no held-out split');
    expect(tf.memory().numTensors).toBe(before);
  }, 120_000);
});

describe('train CLI: eval.jsonl, and resume continues the same evaluations', () => {
  let dir: string;
  let model: string;
  beforeAll(async () => {
    await setNodeBackend('wasm');
    dir = mkdtempSync(path.join(tmpdir(), 'ppo-eval-cli-'));
    model = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
    writeFileSync(path.join(dir, 'reward.mjs'), 'export default (sample) => sample.response.length;\n');
  });

  const cli = (args: string[]) => cliInProcess(args);
  const lines = (file: string) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as EvalRecord & Record<string, unknown>);

  it('4 steps evalEvery 2 straight, vs 2 steps + resume to 4: the same eval.jsonl lines', async () => {
    // The prompts file's path is relative to the config file (a sub-folder here).
    const sub = path.join(dir, 'configs');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(sub, { recursive: true });
    writeFileSync(path.join(sub, 'eval-prompts.txt'), 'hello\nthe cat sat\n\nwhat is\n');
    const cfgPath = path.join(sub, 'run.json');
    writeFileSync(
      cfgPath,
      JSON.stringify({
        model,
        task: 'sentiment',
        batchSize: 2,
        miniBatches: 1,
        ppoEpochs: 1,
        responseLength: 4,
        learningRate: 3e-3,
        steps: 4,
        saveEvery: 2,
        seed: 3,
        evalEvery: 2,
        evalPrompts: 'eval-prompts.txt',
        evalTemperature: 0.8,
      }),
    );
    const reward = ['--reward-module', path.join(dir, 'reward.mjs'), '--backend', 'cpu'];
    const straight = path.join(dir, 'straight');
    const a = await cli(['train', '--config', cfgPath, '--out', straight, ...reward]);
    expect(a.code, a.stderr).toBe(0);
    const want = lines(path.join(straight, 'eval.jsonl'));
    expect(want.map((r) => r.step)).toEqual([2, 4]);
    expect(want[0].samples.map((x) => x.prompt)).toEqual(['hello', 'the cat sat', 'what is']);
    expect(Object.keys(want[0])).toEqual(['step', 'eval/reward', 'eval/kl', 'eval/winRate', 'samples']);
    expect(Object.keys(want[0].samples[0])).toEqual([
      'prompt',
      'reference',
      'policy',
      'referenceReward',
      'policyReward',
    ]);
    expect(a.stderr).toMatch(/eval: reward [\d.-]+ kl [\d.-]+ winRate [\d.]+ \(3 prompts\)/);
    const metrics = readFileSync(path.join(straight, 'metrics.jsonl'), 'utf8')
      .split('\n')
      .filter((l) => l)
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(metrics.map((m) => m['eval/winRate'] ?? null)).toEqual([
      null,
      want[0]['eval/winRate'],
      null,
      want[1]['eval/winRate'],
    ]);

    const split = path.join(dir, 'split');
    const b = await cli(['train', '--config', cfgPath, '--out', split, '--steps', '2', ...reward]);
    expect(b.code, b.stderr).toBe(0);
    expect(lines(path.join(split, 'eval.jsonl')).map((r) => r.step)).toEqual([2]);
    const c = await cli([
      'train',
      '--resume',
      path.join(split, 'checkpoint-2'),
      '--out',
      split,
      '--steps',
      '4',
      ...reward,
    ]);
    expect(c.code, c.stderr).toBe(0);
    expect(lines(path.join(split, 'eval.jsonl'))).toEqual(want);
  }, 180_000);

  it('trimEvalLog keeps the evaluations up to the checkpoint’s step', async () => {
    const p = path.join(mkdtempSync(path.join(tmpdir(), 'ppo-trim-eval-')), 'eval.jsonl');
    const line = (step: number) => JSON.stringify({ step, 'eval/reward': step }) + '\n';
    writeFileSync(p, line(2) + line(4) + line(6) + '{"step": 8, "ev');
    expect(await trimEvalLog(p, 4)).toBe(2);
    expect(readFileSync(p, 'utf8')).toBe(line(2) + line(4));
    const q = path.join(path.dirname(p), 'none.jsonl');
    expect(await trimEvalLog(q, 4)).toBe(0);
    expect(readFileSync(q, 'utf8')).toBe('');
  });
});
