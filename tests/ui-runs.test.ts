/**
 * Kept runs, the pure parts (src/ui/lib/kept-runs.ts, src/ui/lib/series.ts, src/ui/lib/url-config.ts): names, the
 * storage budget, the overlay list and its series, the comparison in the URL hash, the comparison CSV.
 */
import { describe, expect, it } from 'vitest';
import { CONFIG_FIELDS, DEFAULT_CONFIG, validateConfig, type TrainConfig } from '../src/common/config';
import {
  comparisonCsv,
  configWith,
  enforceBudget,
  estimateRunBytes,
  formatLearningRate,
  groupSizeOf,
  memoryRunStorage,
  overlayRuns,
  parseSetting,
  rerunKeys,
  runName,
  uniqueName,
  type KeptRun,
  settingsTable,
} from '../src/ui/lib/kept-runs';
import { ema, overlayPoints, overlaySeries, valueDomain } from '../src/ui/lib/series';
import { hashFor, readComparisonHash, readConfigHash, splitComparison } from '../src/ui/lib/url-config';
import { addCompared } from '../src/ui/store/kept-runs-slice';
import type { MetricsByName } from '../src/worker/protocol';

const cfg = (over: Record<string, unknown> = {}): TrainConfig => validateConfig({ ...over });
const hasAlgorithms = Object.hasOwn(CONFIG_FIELDS, 'algorithm');

function kept(id: string, createdAt: number, steps = 0, over: Partial<KeptRun> = {}): KeptRun {
  return {
    id,
    name: `run ${id}`,
    config: cfg(),
    createdAt,
    updatedAt: createdAt,
    metrics: Array.from({ length: steps }, (_, i) => ({ step: i + 1, reward: i })),
    ...over,
  };
}

describe('run names', () => {
  it('learning rates read as people write them', () => {
    expect(formatLearningRate(1e-4)).toBe('1e-4');
    expect(formatLearningRate(3e-4)).toBe('3e-4');
    expect(formatLearningRate(0.0005)).toBe('5e-4');
    expect(formatLearningRate(2.5e-5)).toBe('2.5e-5');
    expect(formatLearningRate(1.41e-5)).toBe('1.41e-5');
    expect(formatLearningRate(0.05)).toBe('0.05');
  });

  it('today\'s default config is "ppo lr 1e-4 · tiny · sentiment"; LoRA shows its rank', () => {
    expect(runName(cfg())).toBe('ppo lr 1e-4 · tiny · sentiment');
    expect(runName(cfg({ learningRate: 3e-4, lora: 8 }))).toBe('ppo lr 3e-4 lora r=8 · tiny · sentiment');
  });

  it('the name says the model and the task (issue #33, defect 7)', () => {
    expect(runName(cfg({ model: 'openai-community/gpt2', task: 'arithmetic' }))).toBe(
      'ppo lr 1e-4 · gpt2 · arithmetic',
    );
    expect(runName(cfg({ model: 'uploaded:gpt2-4x160' }))).toBe('ppo lr 1e-4 · gpt2-4x160 · sentiment');
    expect(runName(cfg({ prompts: ['Say hi'] }))).toBe('ppo lr 1e-4 · tiny · own prompts');
  });

  it.runIf(hasAlgorithms)("the algorithm, and G when it is not 1 (0 = the algorithm's default)", () => {
    expect(runName(cfg({ algorithm: 'grpo', learningRate: 3e-4 }))).toBe(
      'grpo G=4 lr 3e-4 · tiny · sentiment',
    );
    expect(groupSizeOf(cfg({ algorithm: 'rloo' }))).toBe(4);
    expect(runName(cfg({ algorithm: 'grpo', groupSize: 2, batchSize: 4, miniBatches: 1 }))).toBe(
      'grpo G=2 lr 1e-4 · tiny · sentiment',
    );
    expect(runName(cfg({ algorithm: 'reinforce++' }))).toBe('reinforce++ lr 1e-4 · tiny · sentiment');
  });

  it('a taken name gets a number', () => {
    expect(uniqueName('ppo lr 1e-4', [])).toBe('ppo lr 1e-4');
    expect(uniqueName('ppo lr 1e-4', ['ppo lr 1e-4'])).toBe('ppo lr 1e-4 (2)');
    expect(uniqueName('ppo lr 1e-4', ['ppo lr 1e-4', 'ppo lr 1e-4 (2)'])).toBe('ppo lr 1e-4 (3)');
  });
});

describe('the budget', () => {
  it('drops the oldest past the run count, and says so', () => {
    const runs = [kept('c', 3), kept('a', 1, 0, { name: 'ppo lr 1e-4' }), kept('b', 2)];
    const r = enforceBudget(runs, { maxRuns: 2, maxBytes: Infinity });
    expect(r.kept.map((x) => x.id)).toEqual(['b', 'c']);
    expect(r.dropped.map((x) => x.id)).toEqual(['a']);
    expect(r.message).toBe("dropped the oldest run 'ppo lr 1e-4' to stay within 2 kept runs");
    expect(enforceBudget(runs, { maxRuns: 3, maxBytes: Infinity })).toMatchObject({
      dropped: [],
      message: null,
    });
  });

  it('drops the oldest past the bytes of history, never the run in progress', () => {
    const runs = [kept('a', 1, 100), kept('b', 2, 100), kept('c', 3, 100)];
    const each = estimateRunBytes(runs[0]);
    expect(each).toBe(2048 + 100 * 2 * 24);
    // Room for two runs; 'a' is the run in progress, so 'b' goes.
    const r = enforceBudget(runs, { maxRuns: 20, maxBytes: 2 * each }, 'a');
    expect(r.kept.map((x) => x.id)).toEqual(['a', 'c']);
    expect(r.message).toBe("dropped the oldest run 'run b' to stay within 13.4 KB of kept history");
    const two = enforceBudget(runs, { maxRuns: 1, maxBytes: Infinity });
    expect(two.message).toBe("dropped the oldest runs 'run a', 'run b' to stay within 1 kept run");
  });

  it('memory storage keeps copies, like IndexedDB', async () => {
    const store = memoryRunStorage();
    const run = kept('a', 1, 2);
    await store.put(run);
    run.name = 'changed after the write';
    expect((await store.list())[0].name).toBe('run a');
    await store.remove('a');
    expect(await store.list()).toEqual([]);
  });
});

describe('the comparison', () => {
  it('overlays the chosen runs in order and the current run (bold) once, one colour each', () => {
    const runs = [kept('a', 1, 3), kept('b', 2, 3), kept('c', 3, 2)];
    const live: MetricsByName[] = [{ step: 1, reward: 5 }];
    const o = overlayRuns({ runs, compared: ['b', 'a'], currentRunId: 'c', metrics: live, runConfig: null });
    expect(o.map((r) => [r.id, r.current])).toEqual([
      ['b', false],
      ['a', false],
      ['c', true],
    ]);
    expect(new Set(o.map((r) => r.colour)).size).toBe(3);
    // The current run draws its live history, not the kept copy.
    expect(o[2].metrics).toBe(live);
    // Ticked itself, it keeps its place in the order; a run no longer kept is skipped.
    const p = overlayRuns({
      runs,
      compared: ['c', 'gone', 'a'],
      currentRunId: 'c',
      metrics: live,
      runConfig: null,
    });
    expect(p.map((r) => r.id)).toEqual(['c', 'a']);
    // Without steps the current run is not drawn.
    expect(
      overlayRuns({ runs, compared: ['a'], currentRunId: null, metrics: [], runConfig: null }),
    ).toHaveLength(1);
  });

  it('a fifth chosen run pushes out the earliest chosen', () => {
    expect(addCompared(['a', 'b', 'c', 'd'], 'e')).toEqual(['b', 'c', 'd', 'e']);
    expect(addCompared(['a', 'b'], 'a')).toEqual(['a', 'b']);
    expect(addCompared(['a', 'b', 'c'], 'd', 3)).toEqual(['b', 'c', 'd']);
  });

  it('overlay series: each run smoothed on its own, merged by step', () => {
    const a: MetricsByName[] = [1, 2, 3].map((s) => ({ step: s, reward: s * 10 }));
    const b: MetricsByName[] = [
      { step: 1, reward: 1 },
      { step: 2, reward: null },
      { step: 3, reward: 3 },
      { step: 4, reward: 5 },
    ];
    const rows = overlaySeries(
      [
        { key: 'r0', metrics: a },
        { key: 'r1', metrics: b },
      ],
      'reward',
      0.5,
    );
    const sa = ema([10, 20, 30], 0.5);
    const sb = ema([1, null, 3, 5], 0.5);
    expect(rows).toEqual([
      { step: 1, r0: sa[0], r1: sb[0] },
      { step: 2, r0: sa[1], r1: null },
      { step: 3, r0: sa[2], r1: sb[2] },
      { step: 4, r0: null, r1: sb[3] },
    ]);
    // By hand: EMA 0.5 debiased of 10, 20 is (0.25·10 + 0.5·20) / 0.75.
    expect(rows[1].r0).toBeCloseTo((0.25 * 10 + 0.5 * 20) / 0.75, 12);
    const pts = overlayPoints(rows, ['r0', 'r1']);
    expect(pts).toHaveLength(6);
    expect(valueDomain(pts)[1]).toBeGreaterThanOrEqual(sa[2]!);
  });

  it('overlay series stay within the point budget together', () => {
    const long = (n: number): MetricsByName[] =>
      Array.from({ length: n }, (_, i) => ({ step: i + 1, reward: Math.sin(i) }));
    const rows = overlaySeries(
      [
        { key: 'r0', metrics: long(5000) },
        { key: 'r1', metrics: long(3000) },
      ],
      'reward',
      0,
      100,
    );
    expect(rows.length).toBeLessThanOrEqual(100);
    expect(rows[0].step).toBe(1);
    expect(rows.some((r) => r.step === 5000 && r.r0 !== null)).toBe(true);
    expect(rows.some((r) => r.step === 3000 && r.r1 !== null)).toBe(true);
  });

  it('the URL hash holds the compared configs with their seeds, and reads back', () => {
    const current = cfg({ batchSize: 2, miniBatches: 1, seed: 7 });
    const others = [cfg({ learningRate: 3e-4, seed: 3 }), current, cfg({ klCoef: 0.2, steps: 2 })];
    const hash = hashFor(current, others);
    expect(hash.startsWith(hashFor(current))).toBe(true);
    expect(splitComparison(hash).compare).toHaveLength(3);
    expect(readConfigHash(hash)).toEqual({ config: current, error: null });
    expect(readComparisonHash(`#${hash}`)).toEqual({ configs: others, error: null });
    // Only configs: no metric travels.
    expect(hash).not.toContain('reward');
    // One run is no comparison; the default config alone still round-trips.
    expect(hashFor(current, [current])).toBe(hashFor(current));
    const defaults = validateConfig({});
    expect(readComparisonHash(hashFor(defaults, [defaults, defaults])).configs).toEqual([defaults, defaults]);
    expect(DEFAULT_CONFIG.seed).toBe(defaults.seed);
  });

  it('a broken comparison in a link says which run', () => {
    const r = readComparisonHash('#batchSize=2&compare=klCoef%3D0.1,klCoef%3Dbanana');
    expect(r.configs).toEqual([]);
    expect(r.error).toContain('run 2 of 2');
    expect(r.error).toContain('"klCoef" must be a number');
    // The config part is still read.
    expect(readConfigHash('#batchSize=2&compare=x').config.batchSize).toBe(2);
  });

  it('the comparison CSV has a run column, a row per step of each run, nulls empty', () => {
    const csv = comparisonCsv([
      { name: 'ppo lr 1e-4', metrics: [{ step: 1, reward: 0.5, valueLoss: 0.25 }] },
      {
        name: 'grpo, "G=4"',
        metrics: [
          { step: 1, reward: 0.75, valueLoss: null },
          { step: 2, reward: NaN, valueLoss: null },
        ],
      },
    ]);
    const lines = csv.trimEnd().split('\n');
    const header = lines[0].split(',');
    expect(header.slice(0, 3)).toEqual(['run', 'step', 'reward']);
    expect(lines).toHaveLength(4);
    const col = (line: string, name: string) => {
      const cells = line.startsWith('"')
        ? ['grpo, "G=4"', ...line.slice(line.indexOf('",') + 2).split(',')]
        : line.split(',');
      return cells[header.indexOf(name)];
    };
    expect(col(lines[1], 'run')).toBe('ppo lr 1e-4');
    expect(col(lines[1], 'valueLoss')).toBe('0.25');
    expect(lines[2].startsWith('"grpo, ""G=4""",1,0.75,')).toBe(true);
    expect(col(lines[2], 'valueLoss')).toBe('');
    expect(col(lines[3], 'reward')).toBe('NaN');
    expect(col(lines[3], 'step')).toBe('2');
  });
});

describe('"Run again with…"', () => {
  it('offers the keys the config has, typed as each wants', () => {
    expect(rerunKeys()).toEqual(expect.arrayContaining(['learningRate', 'seed', 'lora']));
    expect(parseSetting('learningRate', ' 3e-4 ')).toBe(3e-4);
    expect(parseSetting('seed', '42')).toBe(42);
    expect(() => parseSetting('seed', '4.5')).toThrow(/"seed" must be an integer/);
    expect(() => parseSetting('learningRate', 'fast')).toThrow(
      /"learningRate" must be a number from 1e-7 to 0.1, not "fast"/,
    );
  });

  it.runIf(hasAlgorithms)(
    'algorithm is a choice; a combination the config refuses is an error naming the keys',
    () => {
      expect(parseSetting('algorithm' as never, 'grpo')).toBe('grpo');
      expect(() => parseSetting('algorithm' as never, 'dpo')).toThrow(/"algorithm" must be/);
      const small = cfg({ batchSize: 2, miniBatches: 1 });
      // grpo's default G = 4 does not divide batchSize 2.
      expect(() => configWith(small, 'algorithm' as never, 'grpo')).toThrow(/groupSize|batchSize/);
      expect(
        configWith({ ...small, groupSize: 2 } as TrainConfig, 'algorithm' as never, 'grpo'),
      ).toMatchObject({
        algorithm: 'grpo',
        seed: small.seed,
      });
    },
  );

  it('keeps every other key of the source run', () => {
    const source = cfg({ batchSize: 2, miniBatches: 1, seed: 9, klCoef: 0.2 });
    expect(configWith(source, 'learningRate', 3e-4)).toEqual({ ...source, learningRate: 3e-4 });
  });
});

describe('settings side by side (issue #33)', () => {
  it('the differing keys first, marked; the basic ones that agree after; the rest left out', () => {
    const a = { config: cfg({ learningRate: 3e-4, seed: 2 }) };
    const b = {
      config: cfg({ algorithm: 'grpo', learningRate: 3e-4, seed: 2, batchSize: 8, miniBatches: 1 }),
    };
    const dpo = { config: cfg(), job: 'dpo' as const };
    const rows = settingsTable([a, b, dpo], ['learningRate', 'seed']);
    const differing = rows.filter((r) => r.differs).map((r) => r.key);
    expect(differing).toEqual(
      expect.arrayContaining(['algorithm', 'batchSize', 'miniBatches', 'learningRate']),
    );
    expect(rows.find((r) => r.key === 'algorithm')?.values).toEqual(['ppo', 'grpo', 'dpo']);
    expect(rows.find((r) => r.key === 'seed')).toEqual({
      key: 'seed',
      values: ['2', '2', '1'],
      differs: true,
    });
    // gamma agrees and is not asked for: left out.
    expect(rows.map((r) => r.key)).not.toContain('gamma');
    const agree = settingsTable([a, a], ['seed']);
    expect(agree).toEqual([{ key: 'seed', values: ['2', '2'], differs: false }]);
  });
});
