/**
 * DPO against reward model + PPO (issue #23 point 7), end to end on the shipped preference pairs
 * (public/preferences/sentiment-pairs.jsonl) and the built-in tiny model:
 *
 *   1. split the pairs as both trainers do (splitPreferences / splitIndices: the same seeded shuffle, so the same
 *      `heldOut` + `seed` give the same 180 training / 20 held-out pairs; the configs must agree, checked here);
 *   2. arm A: `train-reward` on the training pairs (configs/compare/reward-model.json), then PPO
 *      (configs/compare/ppo.json) and GRPO (configs/compare/grpo.json) with that reward model, on the distinct
 *      prompts of the training pairs (the script fills in `prompts` and `reward`: JSON holds no computed lists);
 *   3. arm B: DPO on the same training pairs (configs/compare/dpo.json);
 *   4. judge: each arm's final policy against the shared reference (the base, `tiny`) on two prompt sets — the
 *      distinct prompts of the held-out pairs, and configs/eval-sentiment-prompts.txt (openings no pair has) —
 *      greedy answers of up to `responseLength` tokens, scored by two judges used for every arm: arm A's reward
 *      model (centred by its reward_stats.json mean, as PPO sees it) and the sentiment task's AFINN reward. The
 *      evaluation is src/core/ppo/eval.ts's Evaluator itself, on a trainer built with the arm's final weights as
 *      policy and the base as reference (the same code the RL runs' `evalEvery` use). The PPO run also evaluates
 *      itself at its last step (`evalEvery`), and the script checks that both give the same numbers.
 *
 * Trainings run through the CLI (`npm run cli -- train-reward | train`) in child processes, one after another;
 * the run folders, the filled-in configs and the prompt files go to --out. Prints the markdown table of the
 * README's "DPO against reward model + PPO" section, and writes it with the raw numbers to OUT/results.json.
 *
 *   npx tsx scripts/compare-dpo-ppo.ts [--out runs/compare-dpo-ppo] [--backend wasm|cpu] [--no-grpo] [--quick] [--seed N]
 *
 * 4–11 minutes on 2 shared cores with WASM (one seed, with GRPO). The pure parts (split checks, budgets,
 * aggregation, the table) are exported for tests/compare-dpo-ppo.test.ts. --seed N sets every seed, the split's
 * too (another replicate; both arms still share the split); --quick trains 2 steps each (a smoke run).
 */
import { spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { EvalRecord, EvalSample } from '../src/common/eval-record';
import type { PreferencePair } from '../src/core/reward/preferences';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const CONFIGS = path.join(ROOT, 'configs/compare');

// ---------------------------------------------------------------------------------------------------------
// Pure parts (tests/compare-dpo-ppo.test.ts)
// ---------------------------------------------------------------------------------------------------------

/** The keys of the reward-model and DPO configs that decide which pairs each trains on. */
export interface SplitKeys {
  data: string;
  heldOut: number;
  seed: number;
}

/**
 * Both arms must train on the same pairs: the same data file (paths already resolved), heldOut share and seed.
 * Throws naming the keys that differ.
 */
export function checkSameSplit(rm: SplitKeys, dpo: SplitKeys): void {
  const diff = (['data', 'heldOut', 'seed'] as const).filter((k) => rm[k] !== dpo[k]);
  if (diff.length) {
    throw new Error(
      `configs/compare: the reward model and DPO must train on the same pairs, but ${diff
        .map(
          (k) =>
            `"${k}" is ${JSON.stringify(rm[k])} in reward-model.json and ${JSON.stringify(dpo[k])} in dpo.json`,
        )
        .join('; ')}; make them equal.`,
    );
  }
}

/** The distinct prompts of `pairs`, in order of first appearance. */
export function distinctPrompts(pairs: readonly PreferencePair[]): string[] {
  return [...new Set(pairs.map((p) => p.prompt))];
}

/** What each arm saw: preference pairs (steps × batchSize, counted with repeats) and its own scored rollouts. */
export interface Budget {
  arm: string;
  pairs: number;
  rollouts: number;
}

export function budgets(opts: {
  rm: { steps: number; batchSize: number };
  dpo: { steps: number; batchSize: number };
  rl: { name: string; steps: number; batchSize: number }[];
}): Budget[] {
  const rmPairs = opts.rm.steps * opts.rm.batchSize;
  return [
    ...opts.rl.map((r) => ({ arm: `RM + ${r.name}`, pairs: rmPairs, rollouts: r.steps * r.batchSize })),
    { arm: 'DPO', pairs: opts.dpo.steps * opts.dpo.batchSize, rollouts: 0 },
  ];
}

/** One judge's verdict on one arm over one prompt set. */
export interface Verdict {
  /** Mean judge score of the policy's answers. */
  policy: number;
  /** Mean judge score of the reference's answers (the same for every arm: same base, same greedy answers). */
  reference: number;
  /** Share of prompts where the policy's score is strictly above the reference's (a tie is not a win). */
  winRate: number;
  /** Share of prompts where it is strictly below. */
  lossRate: number;
  n: number;
}

/** Aggregate one evaluation's per-prompt scores (eval.jsonl's samples). */
export function verdictOf(samples: readonly Pick<EvalSample, 'policyReward' | 'referenceReward'>[]): Verdict {
  if (samples.length === 0) throw new Error('verdictOf: no samples to judge.');
  const n = samples.length;
  let p = 0;
  let r = 0;
  let win = 0;
  let loss = 0;
  for (const s of samples) {
    p += s.policyReward;
    r += s.referenceReward;
    if (s.policyReward > s.referenceReward) win++;
    else if (s.policyReward < s.referenceReward) loss++;
  }
  return { policy: p / n, reference: r / n, winRate: win / n, lossRate: loss / n, n };
}

/** One row of the table: an arm, its held-out numbers per (judge, prompt set), and its own training figures. */
export interface ArmResult {
  arm: string;
  /** verdicts[judge][promptSet] */
  verdicts: Record<string, Record<string, Verdict>>;
  /** eval/kl on the held-out pairs' prompts: Σ_t log π − log π_ref over the policy's greedy answer, nats. */
  kl: number;
  pairs: number;
  rollouts: number;
  seconds: number;
}

const f2 = (x: number) => (Math.abs(x) < 0.005 ? '0.00' : x.toFixed(2));
const pct = (x: number) => `${Math.round(x * 100)}%`;

/**
 * The README table: one row per arm plus the reference, for each (judge, prompt set) the mean score and the
 * win / loss rate against the reference, then eval/kl, the pairs and rollouts seen, and the training time.
 */
export function markdownTable(
  arms: readonly ArmResult[],
  judges: readonly { key: string; label: string }[],
  sets: readonly { key: string; label: string }[],
): string {
  const cols: { head: string; cell: (a: ArmResult | null) => string }[] = [
    { head: 'policy', cell: (a) => (a ? a.arm : 'reference (base tiny)') },
  ];
  for (const j of judges) {
    for (const s of sets) {
      cols.push({
        head: `${j.label}, ${s.label}`,
        cell: (a) => {
          const ref = arms[0]?.verdicts[j.key]?.[s.key];
          if (!a) return ref ? f2(ref.reference) : '—';
          const v = a.verdicts[j.key]?.[s.key];
          return v ? `${f2(v.policy)} (${pct(v.winRate)} / ${pct(v.lossRate)})` : '—';
        },
      });
    }
  }
  cols.push({ head: 'eval/kl (nats)', cell: (a) => (a ? a.kl.toFixed(1) : '0') });
  cols.push({ head: 'pairs seen', cell: (a) => (a ? String(a.pairs) : '—') });
  cols.push({ head: 'own rollouts', cell: (a) => (a ? String(a.rollouts) : '—') });
  cols.push({ head: 'train s', cell: (a) => (a ? a.seconds.toFixed(0) : '—') });
  const row = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [
    row(cols.map((c) => c.head)),
    row(cols.map(() => '---')),
    row(cols.map((c) => c.cell(null))),
    ...arms.map((a) => row(cols.map((c) => c.cell(a)))),
  ].join('\n');
}

/** The largest difference between two evaluations' metrics and per-prompt scores (the self-check). */
export function recordDistance(a: EvalRecord, b: EvalRecord): number {
  if (a.samples.length !== b.samples.length) return Infinity;
  let d = Math.max(
    Math.abs(a['eval/reward'] - b['eval/reward']),
    Math.abs(a['eval/kl'] - b['eval/kl']),
    Math.abs(a['eval/winRate'] - b['eval/winRate']),
  );
  a.samples.forEach((s, k) => {
    const t = b.samples[k];
    if (s.prompt !== t.prompt || s.policy !== t.policy || s.reference !== t.reference) d = Infinity;
    d = Math.max(
      d,
      Math.abs(s.policyReward - t.policyReward),
      Math.abs(s.referenceReward - t.referenceReward),
    );
  });
  return d;
}

// ---------------------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------------------

async function readJson(file: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
}

/** Run the CLI in a child process; progress passes through on stderr, the --json line is returned. */
function cli(args: string[]): Promise<{ json: Record<string, unknown>; seconds: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', path.join(ROOT, 'src/cli/main.ts'), ...args, '--json'],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`cli ${args.join(' ')} exited with ${code}`));
      const last = out.trim().split('\n').pop() ?? '';
      try {
        resolve({
          json: JSON.parse(last) as Record<string, unknown>,
          seconds: (performance.now() - t0) / 1000,
        });
      } catch {
        reject(new Error(`cli ${args.join(' ')}: no JSON line on stdout, got: ${out.slice(-500)}`));
      }
    });
  });
}

async function lastJsonl(file: string): Promise<Record<string, unknown>> {
  const lines = (await readFile(file, 'utf8')).trim().split('\n');
  return JSON.parse(lines[lines.length - 1]) as Record<string, unknown>;
}

const JUDGES = [
  { key: 'rm', label: 'reward model' },
  { key: 'sentiment', label: 'AFINN' },
];
const SETS = [
  { key: 'heldout', label: "held-out pairs' prompts" },
  { key: 'new', label: 'new openings' },
];

async function main(): Promise<void> {
  const { values: v } = parseArgs({
    options: {
      out: { type: 'string', default: 'runs/compare-dpo-ppo' },
      backend: { type: 'string', default: 'wasm' },
      'no-grpo': { type: 'boolean', default: false },
      quick: { type: 'boolean', default: false },
      seed: { type: 'string' },
    },
  });
  const out = path.resolve(v.out!);
  const backend = v.backend!;
  await mkdir(out, { recursive: true });

  const { readPairs } = await import('../src/core/dpo/data');
  const { splitPreferences } = await import('../src/core/reward/preferences');

  // 1. Configs and the split.
  const rmCfg = await readJson(path.join(CONFIGS, 'reward-model.json'));
  const dpoCfg = await readJson(path.join(CONFIGS, 'dpo.json'));
  const rlNames = v['no-grpo'] ? ['ppo'] : ['ppo', 'grpo'];
  const rlCfgs = await Promise.all(rlNames.map((n) => readJson(path.join(CONFIGS, `${n}.json`))));
  if (v.seed !== undefined) {
    // Another replicate: every run's seed, the split's included (both arms still share it).
    const seed = Number(v.seed);
    if (!Number.isInteger(seed) || seed < 0)
      throw new Error(`--seed must be a whole number ≥ 0, got ${v.seed}.`);
    for (const c of [rmCfg, dpoCfg, ...rlCfgs]) c.seed = seed;
  }
  if (v.quick) {
    // A smoke run of the whole pipeline: 2 steps per training, the numbers mean nothing.
    for (const c of [rmCfg, dpoCfg, ...rlCfgs]) {
      c.steps = 2;
      if ('saveEvery' in c) c.saveEvery = 2;
      if ('evalEvery' in c) c.evalEvery = 2;
    }
  }
  const keys = (c: Record<string, unknown>): SplitKeys => ({
    data: path.resolve(CONFIGS, String(c.data)),
    heldOut: Number(c.heldOut),
    seed: Number(c.seed),
  });
  checkSameSplit(keys(rmCfg), keys(dpoCfg));
  const split = keys(rmCfg);
  const pairs = readPairs(await readFile(split.data, 'utf8'), split.data).map((p) => p.pair);
  const { train, heldOut } = splitPreferences(pairs, split.heldOut, split.seed);
  const trainPrompts = distinctPrompts(train);
  const heldOutPrompts = distinctPrompts(heldOut);
  const newPrompts = (await readFile(path.join(ROOT, 'configs/eval-sentiment-prompts.txt'), 'utf8'))
    .split('\n')
    .map((l) => l.trimEnd())
    .filter((l) => l.trim() !== '');
  const heldOutFile = path.join(out, 'heldout-prompts.txt');
  await writeFile(heldOutFile, heldOutPrompts.join('\n') + '\n');
  await writeFile(path.join(out, 'train-prompts.txt'), trainPrompts.join('\n') + '\n');
  const seenInTraining = heldOutPrompts.filter((p) => trainPrompts.includes(p)).length;
  const newSeen = newPrompts.filter((p) => trainPrompts.includes(p)).length;
  process.stderr.write(
    `pairs: ${train.length} train, ${heldOut.length} held out; ${trainPrompts.length} distinct training prompts, ` +
      `${heldOutPrompts.length} held-out prompts (${seenInTraining} of them also training prompts), ` +
      `${newPrompts.length} new openings (${newSeen} training prompts)\n`,
  );

  // 2. Arm A: the reward model, then PPO / GRPO with it.
  const run = async (name: string, cmd: string, cfg: Record<string, unknown>) => {
    const dir = path.join(out, name);
    await rm(dir, { recursive: true, force: true });
    const cfgPath = path.join(out, `${name}.config.json`);
    await writeFile(cfgPath, JSON.stringify(cfg, null, 2) + '\n');
    process.stderr.write(`\n== ${name}: ${cmd} --config ${cfgPath}\n`);
    const r = await cli([cmd, '--config', cfgPath, '--out', dir, '--backend', backend]);
    return { dir, ...r };
  };
  const rmRun = await run('reward-model', 'train-reward', { ...rmCfg, data: split.data });
  const rlRuns = [];
  for (let i = 0; i < rlNames.length; i++) {
    const c = rlCfgs[i];
    const r = await run(rlNames[i], 'train', {
      ...c,
      prompts: trainPrompts,
      reward: { model: rmRun.dir },
      evalEvery: c.steps,
      evalPrompts: heldOutFile,
    });
    rlRuns.push({ name: rlNames[i], cfg: c, ...r, ckpt: path.join(r.dir, `checkpoint-${String(c.steps)}`) });
  }
  // 3. Arm B: DPO.
  const dpoRun = await run('dpo', 'train', { ...dpoCfg, data: split.data });
  const dpoLast = await lastJsonl(path.join(dpoRun.dir, 'metrics.jsonl'));

  // 4. The judge, in this process.
  const tf = await import('@tensorflow/tfjs-core');
  const { setNodeBackend } = await import('../src/cli/backend-node');
  const { nodeResources } = await import('../src/cli/train');
  const { validateConfig } = await import('../src/common/config');
  const { buildTrainer } = await import('../src/core/ppo/setup');
  const { Evaluator } = await import('../src/core/ppo/eval');
  const { loadLM } = await import('../src/core/model/folder');
  await setNodeBackend(backend as 'wasm' | 'cpu');
  const rl0 = rlCfgs[0];
  const judgeReward: Record<string, unknown> = { rm: { model: rmRun.dir }, sentiment: 'sentiment' };
  const evaluate = async (policyDir: string, judge: string): Promise<Record<string, EvalRecord>> => {
    const cfg = validateConfig({
      model: 'tiny',
      task: null,
      prompts: trainPrompts,
      reward: judgeReward[judge],
      algorithm: 'grpo', // no value model: the evaluator reads only the policy, the reference and the judge
      groupSize: 2,
      batchSize: 2,
      miniBatches: 1,
      seed: Number(rl0.seed),
      responseLength: Number(rl0.responseLength),
    });
    const pol = await loadLM(nodeResources.modelFiles(policyDir), { trainable: false, label: 'policy' });
    const base = await loadLM(nodeResources.modelFiles('tiny'), { trainable: false, label: 'ref' });
    const t = await buildTrainer(cfg, nodeResources, {
      weights: { policy: pol.model, ref: base.model, value: null, tokenizer: base.tokenizer },
    });
    try {
      const steps = Number(judge === 'rm' ? rl0.steps : 0);
      return {
        heldout: await new Evaluator(t, heldOutPrompts).run(steps),
        new: await new Evaluator(t, newPrompts).run(steps),
      };
    } finally {
      t.disposeAll();
    }
  };

  const arms: ArmResult[] = [];
  const records: Record<string, Record<string, Record<string, EvalRecord>>> = {};
  const budget = budgets({
    rm: { steps: Number(rmCfg.steps), batchSize: Number(rmCfg.batchSize) },
    dpo: { steps: Number(dpoCfg.steps), batchSize: Number(dpoCfg.batchSize) },
    rl: rlRuns.map((r) => ({
      name: r.name.toUpperCase(),
      steps: Number(r.cfg.steps),
      batchSize: Number(r.cfg.batchSize),
    })),
  });
  const policies = [
    ...rlRuns.map((r) => ({
      arm: `RM + ${r.name.toUpperCase()}`,
      dir: r.ckpt,
      seconds: rmRun.seconds + r.seconds,
    })),
    { arm: 'DPO', dir: path.join(dpoRun.dir, `checkpoint-${String(dpoCfg.steps)}`), seconds: dpoRun.seconds },
  ];
  for (const p of policies) {
    const rec: Record<string, Record<string, EvalRecord>> = {};
    for (const j of JUDGES) rec[j.key] = await evaluate(p.dir, j.key);
    records[p.arm] = rec;
    const b = budget.find((x) => x.arm === p.arm)!;
    arms.push({
      arm: p.arm,
      verdicts: Object.fromEntries(
        JUDGES.map((j) => [
          j.key,
          Object.fromEntries(SETS.map((s) => [s.key, verdictOf(rec[j.key][s.key].samples)])),
        ]),
      ),
      kl: rec.rm.heldout['eval/kl'],
      pairs: b.pairs,
      rollouts: b.rollouts,
      seconds: p.seconds,
    });
    process.stderr.write(`judged ${p.arm}; tensors held: ${tf.memory().numTensors}\n`);
  }

  // Self-check: the PPO run's own last-step evaluation (the reward model on the held-out prompts) = the judge's.
  const own = (await lastJsonl(path.join(rlRuns[0].dir, 'eval.jsonl'))) as unknown as EvalRecord;
  const selfCheck = recordDistance(own, records[policies[0].arm].rm.heldout);
  if (!(selfCheck < 1e-5)) {
    throw new Error(
      `self-check: the ${rlNames[0]} run's own eval.jsonl differs from the judge's by ${selfCheck}.`,
    );
  }

  const table = markdownTable(arms, JUDGES, SETS);
  const rmJson = rmRun.json;
  const summary = [
    'Cells: mean judge score (win / loss rate against the reference, ties neither); greedy answers.',
    `Split: ${train.length} training pairs, ${heldOut.length} held out (heldOut ${split.heldOut}, seed ${split.seed}).`,
    `Reward model: held-out preference accuracy ${Number(rmJson.heldOutAccuracy).toFixed(2)} (train ${Number(rmJson.trainAccuracy).toFixed(2)}).`,
    `DPO: held-out preference accuracy ${Number(dpoLast['eval/rewards/accuracies']).toFixed(2)}, margin ${Number(dpoLast['eval/rewards/margins']).toFixed(2)}.`,
    `Held-out pairs' prompts: ${heldOutPrompts.length} (${seenInTraining} also among the ${trainPrompts.length} training prompts); new openings: ${newPrompts.length} (${newSeen} training prompts).`,
    `Self-check: the ${rlNames[0]} run's own last-step evaluation equals the judge's (max difference ${selfCheck.toExponential(1)}).`,
  ];
  process.stdout.write(`${table}\n\n${summary.join('\n')}\n`);
  await writeFile(
    path.join(out, 'results.json'),
    JSON.stringify({ table, summary, arms, budget, records, rm: rmJson, dpo: dpoLast }, null, 2) + '\n',
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main().catch((e: unknown) => {
    process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  });
}
