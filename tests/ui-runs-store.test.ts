/**
 * Kept runs in the store, against the fake worker (src/ui/dev/fake-worker.ts) and an in-memory run storage:
 * every run is kept from its first step and written to storage, the budget drops the oldest and says so,
 * the comparison goes into the URL hash, "Run again with…" and a linked comparison start new runs.
 */
import { describe, expect, it } from 'vitest';
import { CONFIG_FIELDS, validateConfig } from '../src/common/config';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker, type FakeWorker } from '../src/ui/dev/fake-worker';
import { memoryRunStorage, type KeptRun, type RunBudget } from '../src/ui/lib/kept-runs';
import { hashFor, readComparisonHash, splitComparison } from '../src/ui/lib/url-config';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';

const TINY = 'batchSize=2&miniBatches=1&ppoEpochs=1&responseLength=4&steps=2';
const hasAlgorithms = Object.hasOwn(CONFIG_FIELDS, 'algorithm');

interface Harness {
  fake: FakeWorker;
  store: PlaygroundStore;
  storage: ReturnType<typeof memoryRunStorage>;
  hashes: string[];
  downloads: { name: string; data: Uint8Array | string }[];
}

async function started(
  hash = `#${TINY}`,
  opts: { runs?: KeptRun[]; budget?: RunBudget } = {},
): Promise<Harness> {
  const fake = createFakeWorker();
  const storage = memoryRunStorage(opts.runs);
  const hashes: string[] = [];
  const downloads: Harness['downloads'] = [];
  const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: (h) => hashes.push(h),
    download: (name, data) => downloads.push({ name, data }),
    sendDelayMs: 0,
    runStorage: storage,
    runSaveDelayMs: 0,
    runBudget: opts.budget,
  });
  await store.getState().actions.start();
  return { fake, store, storage, hashes, downloads };
}

const flush = () => new Promise((r) => setTimeout(r, 0));

/** Step the fake worker until the run is paused at its `steps`. */
async function runToEnd(h: Harness): Promise<void> {
  await h.store.getState().actions.startRun();
  for (let i = 0; i < 20 && h.store.getState().runStatus?.state === 'running'; i++) await h.fake.tick();
  await flush();
}

describe('kept runs', () => {
  it('a run is kept from its first step with its config, seed and history, and written to storage', async () => {
    const h = await started(`#${TINY}&seed=5`);
    expect(h.store.getState().keptRuns).toEqual([]);
    await h.store.getState().actions.stepRun();
    let s = h.store.getState();
    expect(s.keptRuns).toHaveLength(1);
    expect(s.currentRunId).toBe(s.keptRuns[0].id);
    expect(s.keptRuns[0]).toMatchObject({
      name: 'ppo lr 1e-4 · tiny · sentiment',
      config: { seed: 5, batchSize: 2 },
    });
    await h.store.getState().actions.stepRun();
    s = h.store.getState();
    expect(s.keptRuns).toHaveLength(1);
    expect(s.keptRuns[0].metrics.map((m) => m.step)).toEqual([1, 2]);
    await s.actions.flushRuns();
    const stored = [...h.storage.map.values()];
    expect(stored).toHaveLength(1);
    expect(stored[0].metrics).toHaveLength(2);
    expect(stored[0].config.seed).toBe(5);
  });

  it('start() twice at once (React StrictMode) subscribes once', async () => {
    const fake = createFakeWorker();
    const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
      hash: `#${TINY}`,
      writeHash: () => {},
      sendDelayMs: 0,
      runStorage: memoryRunStorage(),
    });
    await Promise.all([store.getState().actions.start(), store.getState().actions.start()]);
    expect(fake.calls.filter(([n]) => n === 'subscribe')).toHaveLength(1);
  });

  it('an event heard twice keeps one run', async () => {
    const fake = createFakeWorker();
    const subscribe = fake.subscribe.bind(fake);
    fake.subscribe = (cb) =>
      subscribe((e) => {
        cb(e);
        cb(e);
      });
    const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
      hash: `#${TINY}`,
      writeHash: () => {},
      sendDelayMs: 0,
      runStorage: memoryRunStorage(),
    });
    await store.getState().actions.start();
    await store.getState().actions.stepRun();
    await store.getState().actions.stepRun();
    expect(store.getState().keptRuns.map((r) => [r.name, r.metrics.length])).toEqual([
      ['ppo lr 1e-4 · tiny · sentiment', 2],
    ]);
  });

  it('Reset and a changed setting begin a new run; names stay distinct', async () => {
    const h = await started();
    await runToEnd(h);
    await h.store.getState().actions.resetRun();
    expect(h.store.getState().currentRunId).toBeNull();
    await h.store.getState().actions.stepRun();
    h.store.getState().actions.setConfigValue('learningRate', 3e-4);
    await h.store.getState().actions.resetRun();
    await h.store.getState().actions.stepRun();
    const names = h.store.getState().keptRuns.map((r) => r.name);
    expect(names).toEqual([
      'ppo lr 1e-4 · tiny · sentiment',
      'ppo lr 1e-4 · tiny · sentiment (2)',
      'ppo lr 3e-4 · tiny · sentiment',
    ]);
  });

  it('runs of earlier visits are loaded; past the budget the oldest is dropped, and the UI says so', async () => {
    const old: KeptRun = {
      id: 'old',
      name: 'ppo lr 1e-5',
      config: validateConfig({}),
      createdAt: 1,
      updatedAt: 1,
      metrics: [{ step: 1, reward: 0.1 }],
    };
    const h = await started(`#${TINY}`, { runs: [old], budget: { maxRuns: 2, maxBytes: Infinity } });
    expect(h.store.getState().keptRuns.map((r) => r.id)).toEqual(['old']);
    await runToEnd(h);
    expect(h.store.getState().keptRunsNote).toBeNull();
    await h.store.getState().actions.resetRun();
    await h.store.getState().actions.stepRun();
    const s = h.store.getState();
    expect(s.keptRuns.map((r) => r.name)).toEqual([
      'ppo lr 1e-4 · tiny · sentiment',
      'ppo lr 1e-4 · tiny · sentiment (2)',
    ]);
    expect(s.keptRunsNote).toBe("dropped the oldest run 'ppo lr 1e-5' to stay within 2 kept runs");
    await s.actions.flushRuns();
    expect(h.storage.map.has('old')).toBe(false);
    expect(h.storage.map.size).toBe(2);
  });

  it('renaming and deleting reach storage; a deleted current run is not kept again', async () => {
    const h = await started();
    await h.store.getState().actions.stepRun();
    const id = h.store.getState().keptRuns[0].id;
    h.store.getState().actions.renameRun(id, '  my   first run ');
    expect(h.store.getState().keptRuns[0].name).toBe('my first run');
    await h.store.getState().actions.flushRuns();
    expect(h.storage.map.get(id)?.name).toBe('my first run');
    h.store.getState().actions.deleteRun(id);
    await h.store.getState().actions.stepRun();
    expect(h.store.getState().keptRuns).toEqual([]);
    await h.store.getState().actions.flushRuns();
    expect(h.storage.map.size).toBe(0);
  });
});

describe('the comparison', () => {
  it('chosen runs go into the URL hash (configs and seeds only) and the CSV', async () => {
    const h = await started(`#${TINY}&seed=3`);
    await runToEnd(h);
    const first = h.store.getState().keptRuns[0];
    h.store.getState().actions.setConfigValue('learningRate', 3e-4);
    await h.store.getState().actions.resetRun();
    await runToEnd(h);
    h.store.getState().actions.toggleCompare(first.id);
    const hash = h.hashes.at(-1)!;
    const { configs } = readComparisonHash(hash);
    expect(configs.map((c) => [c.learningRate, c.seed])).toEqual([
      [1e-4, 3],
      [3e-4, 3],
    ]);
    expect(splitComparison(hash).config).toBe(hashFor(h.store.getState().editedConfig));

    h.store.getState().actions.exportComparisonCsv();
    const csv = String(h.downloads.at(-1)!.data).trimEnd().split('\n');
    expect(csv[0].startsWith('run,step,')).toBe(true);
    expect(csv.slice(1).map((l) => l.split(',').slice(0, 2).join(','))).toEqual([
      'ppo lr 1e-4 · tiny · sentiment,1',
      'ppo lr 1e-4 · tiny · sentiment,2',
      'ppo lr 3e-4 · tiny · sentiment,1',
      'ppo lr 3e-4 · tiny · sentiment,2',
    ]);
    // Unticking the other run ends the comparison in the link.
    h.store.getState().actions.toggleCompare(first.id);
    expect(splitComparison(h.hashes.at(-1)!).compare).toBeNull();
  });

  it('"Run again with…" starts a new run from a kept config with one key changed, both compared', async () => {
    const h = await started(`#${TINY}&seed=4`);
    await runToEnd(h);
    const source = h.store.getState().keptRuns[0];
    expect(await h.store.getState().actions.runAgainWith(source.id, 'learningRate', 'fast')).toMatch(
      /"learningRate" must be a number/,
    );
    expect(await h.store.getState().actions.runAgainWith(source.id, 'learningRate', '3e-4')).toBeNull();
    expect(h.store.getState().runStatus?.state).toBe('running');
    expect(h.fake.calls.map(([n]) => n)).toContain('reset');
    await h.fake.tick();
    const s = h.store.getState();
    expect(s.keptRuns).toHaveLength(2);
    expect(s.keptRuns[1]).toMatchObject({
      name: 'ppo lr 3e-4 · tiny · sentiment',
      config: { seed: 4, learningRate: 3e-4, batchSize: 2 },
    });
    expect(s.compared).toEqual([source.id, s.keptRuns[1].id]);
    expect(s.metrics.map((m) => m.step)).toEqual([1]);
  });

  it.runIf(hasAlgorithms)('a critic-free run has null value metrics, kept as null', async () => {
    const h = await started(`#${TINY}`);
    await runToEnd(h);
    const source = h.store.getState().keptRuns[0];
    // grpo's default G = 4 does not divide batchSize 2: the error names the keys.
    expect(await h.store.getState().actions.runAgainWith(source.id, 'algorithm' as never, 'grpo')).toMatch(
      /groupSize|batchSize/,
    );
    h.store.getState().actions.setConfigValue('groupSize' as never, 2 as never);
    h.store.getState().actions.setConfigValue('algorithm' as never, 'grpo' as never);
    // Not live: it applies on reset.
    await h.store.getState().actions.resetRun();
    await h.store.getState().actions.stepRun();
    const grpo = h.store.getState().keptRuns[1];
    expect(grpo.name).toBe('grpo G=2 lr 1e-4 · tiny · sentiment');
    expect(grpo.metrics[0].valueLoss).toBeNull();
  });

  it('a link that compares runs offers to re-run them, and runs them one after the other', async () => {
    const a = validateConfig({ batchSize: 2, miniBatches: 1, steps: 2, seed: 11 });
    const b = validateConfig({ batchSize: 2, miniBatches: 1, steps: 2, seed: 12, learningRate: 3e-4 });
    const h = await started(`#${hashFor(a, [a, b])}`);
    expect(h.store.getState().linkedRuns).toEqual([a, b]);
    expect(h.store.getState().editedConfig).toEqual(a);
    await h.store.getState().actions.rerunLinked();
    expect(h.store.getState().linkedRuns).toBeNull();
    await h.fake.tick();
    await h.fake.tick();
    // The first finished: the second starts by itself.
    await flush();
    await flush();
    expect(h.store.getState().runStatus?.state).toBe('running');
    expect(h.store.getState().editedConfig.seed).toBe(12);
    await h.fake.tick();
    await h.fake.tick();
    await flush();
    const s = h.store.getState();
    expect(s.keptRuns.map((r) => [r.config.seed, r.metrics.length])).toEqual([
      [11, 2],
      [12, 2],
    ]);
    expect(s.compared).toEqual(s.keptRuns.map((r) => r.id));
    expect(s.rerunQueue).toEqual([]);
    expect(readComparisonHash(h.hashes.at(-1)!).configs).toEqual([a, b]);
  });

  it('a pasted link with a comparison makes the offer too', async () => {
    const h = await started();
    const a = validateConfig({ seed: 1 });
    const b = validateConfig({ seed: 2 });
    h.store.getState().actions.hashChanged(`#${hashFor(h.store.getState().editedConfig, [a, b])}`);
    expect(h.store.getState().linkedRuns).toEqual([a, b]);
    h.store.getState().actions.dismissLinkedRuns();
    expect(h.store.getState().linkedRuns).toBeNull();
  });
});
