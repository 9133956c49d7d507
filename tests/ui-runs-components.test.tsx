/**
 * The comparison's components rendered to HTML in Node (react-dom/server): the legend of an overlay chart, the
 * value charts of a critic-free run, the Runs panel and the linked-runs banner — the names the e2e tests and
 * people rely on.
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ReactNode } from 'react';
import { CONFIG_FIELDS, validateConfig } from '../src/common/config';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { MetricChart } from '../src/ui/components/MetricChart';
import { LinkedRunsBanner, RunsPanel } from '../src/ui/components/RunsPanel';
import { memoryRunStorage, type KeptRun } from '../src/ui/lib/kept-runs';
import { hashFor } from '../src/ui/lib/url-config';
import { StoreContext } from '../src/ui/store/hooks';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import type { MetricsByName, RunStatus } from '../src/worker/protocol';

const hasAlgorithms = Object.hasOwn(CONFIG_FIELDS, 'algorithm');

function storeWith(hash = ''): PlaygroundStore {
  return createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: () => {},
    sendDelayMs: 0,
    runStorage: memoryRunStorage(),
  });
}

function html(store: PlaygroundStore, node: ReactNode): string {
  store.getInitialState = () => store.getState();
  return renderToString(<StoreContext.Provider value={store}>{node}</StoreContext.Provider>);
}

const history = (n: number, over: (i: number) => Partial<MetricsByName> = () => ({})): MetricsByName[] =>
  Array.from({ length: n }, (_, i) => ({ step: i + 1, reward: i / 10, valueLoss: 1 / (i + 1), ...over(i) }));

function kept(id: string, name: string, metrics: MetricsByName[], config = validateConfig({})): KeptRun {
  return { id, name, config, createdAt: Date.parse('2025-03-01T10:00:00Z'), updatedAt: 0, metrics };
}

const status = (config: RunStatus['config'], step: number): RunStatus => ({
  state: 'paused',
  phase: 'idle',
  step,
  steps: 2,
  config,
});

describe('an overlay chart', () => {
  it('keeps its accessible name and lists every compared run in its legend, the current one marked', () => {
    const store = storeWith();
    const live = history(2);
    store.setState({
      keptRuns: [kept('a', 'ppo lr 1e-4', history(3)), kept('b', 'ppo lr 3e-4', live)],
      compared: ['a'],
      currentRunId: 'b',
      metrics: live,
    });
    const out = html(store, <MetricChart metric="reward" title="Reward" />);
    const labelledBy = /<figure[^>]*aria-labelledby="([^"]+)"/.exec(out)?.[1];
    expect(out).toMatch(new RegExp(`<figcaption id="${labelledBy}"[^>]*>Reward</figcaption>`));
    const legend = /<ul class="chart-legend" aria-label="Runs in Reward">(.*?)<\/ul>/.exec(out)?.[1] ?? '';
    const items = legend.match(/<li[^>]*>.*?<\/li>/g) ?? [];
    expect(items).toHaveLength(2);
    expect(items[0]).toContain('ppo lr 1e-4');
    expect(items[0]).not.toContain('(current)');
    expect(items[1]).toMatch(/class="current"/);
    expect(items[1]).toContain('ppo lr 3e-4');
    expect(items[1]).toContain('(current)');
    // One colour each.
    const colours = items.map((li) => /background:([^;"]+)/.exec(li)?.[1]);
    expect(new Set(colours).size).toBe(2);
  });

  it('a single run has no legend (as before)', () => {
    const store = storeWith();
    const live = history(2);
    store.setState({ keptRuns: [kept('b', 'ppo lr 3e-4', live)], currentRunId: 'b', metrics: live });
    expect(html(store, <MetricChart metric="reward" title="Reward" />)).not.toContain('chart-legend');
  });
});

describe.runIf(hasAlgorithms)('value charts of a critic-free run', () => {
  it('say "no value model (GRPO)" instead of an empty axis', () => {
    const store = storeWith();
    const config = validateConfig({ algorithm: 'grpo', batchSize: 4, miniBatches: 1 });
    const live = history(2, () => ({ valueLoss: null, explainedVariance: null }));
    store.setState({ runStatus: status(config, 2), editedConfig: config, metrics: live });
    for (const [metric, title] of [
      ['valueLoss', 'Value loss'],
      ['explainedVariance', 'Explained variance'],
    ]) {
      const out = html(store, <MetricChart metric={metric} title={title} />);
      expect(out).toMatch(/data-testid="no-value-model"[^>]*>no value model \(GRPO\)</);
      expect(out).not.toContain('No steps yet');
    }
    // Other charts draw as usual.
    expect(html(store, <MetricChart metric="reward" title="Reward" />)).not.toContain('no value model');
  });

  it('beside a compared PPO run, the PPO line is drawn and the current run is noted', () => {
    const store = storeWith();
    const config = validateConfig({ algorithm: 'rloo', batchSize: 4, miniBatches: 1 });
    const live = history(2, () => ({ valueLoss: null }));
    store.setState({
      runStatus: status(config, 2),
      editedConfig: config,
      keptRuns: [kept('a', 'ppo lr 1e-4', history(2)), kept('b', 'rloo G=4 lr 1e-4', live, config)],
      compared: ['a'],
      currentRunId: 'b',
      metrics: live,
    });
    const out = html(store, <MetricChart metric="valueLoss" title="Value loss" />);
    expect(out).toMatch(/current run: (<!-- -->)?no value model \(RLOO\)/);
    expect(out).not.toContain('data-testid="no-value-model"');
    expect(out).toContain('aria-label="Runs in Value loss"');
  });

  it('a PPO run keeps its value charts', () => {
    const store = storeWith();
    const config = validateConfig({});
    store.setState({ runStatus: status(config, 2), editedConfig: config, metrics: history(2) });
    expect(html(store, <MetricChart metric="valueLoss" title="Value loss" />)).not.toContain(
      'no value model',
    );
  });
});

describe('the Runs panel', () => {
  it('lists runs newest first with name box, algorithm, steps, final reward, compare, run again and delete', () => {
    const store = storeWith();
    store.setState({
      keptRuns: [
        kept('a', 'ppo lr 1e-4', history(3)),
        kept(
          'b',
          'ppo lr 3e-4',
          history(2, (i) => ({ reward: i === 1 ? NaN : 0.5 })),
        ),
      ],
      compared: ['a'],
      currentRunId: 'b',
    });
    const out = html(store, <RunsPanel />);
    const rows = out.match(/<tr aria-label="[^"]*".*?<\/tr>/g) ?? [];
    expect(rows.map((r) => /aria-label="([^"]*)"/.exec(r)?.[1])).toEqual(['ppo lr 3e-4', 'ppo lr 1e-4']);
    expect(rows[0]).toMatch(/aria-label="Run name"[^>]*value="ppo lr 3e-4"/);
    expect(rows[0]).toContain('current');
    // The newest finite reward: NaN at the last step is skipped.
    expect(rows[0]).toContain('<td>0.5</td>');
    expect(rows[1]).toMatch(/data-testid="run-steps"[^>]*>3</);
    expect(rows[1]).toContain('<td>0.2</td>');
    expect(rows[1]).toContain('<td>ppo</td>');
    expect(rows[1]).toMatch(/aria-label="Compare"[^>]*checked/);
    expect(rows[0]).not.toMatch(/aria-label="Compare"[^>]*checked/);
    for (const row of rows) {
      expect(row).toContain('Run again with…</button>');
      expect(row).toMatch(/aria-label="Delete run [^"]+"/);
    }
    expect(out).toContain('Comparison CSV');
  });

  it('says when the oldest run was dropped', () => {
    const store = storeWith();
    store.setState({ keptRunsNote: "dropped the oldest run 'ppo lr 1e-4' to stay within 20 kept runs" });
    expect(html(store, <RunsPanel />)).toMatch(
      /data-testid="runs-note"><span>dropped the oldest run &#x27;ppo lr 1e-4&#x27; to stay within 20 kept runs/,
    );
  });
});

describe('a link that compares runs', () => {
  it('offers "Re-run them"', () => {
    const a = validateConfig({ seed: 1 });
    const b = validateConfig({ seed: 2 });
    const out = html(storeWith(`#${hashFor(a, [a, b])}`), <LinkedRunsBanner />);
    expect(out).toMatch(/This link compares <!-- -->2<!-- --> runs:/);
    expect(out).toContain('>Re-run them</button>');
    expect(html(storeWith(`#${hashFor(a)}`), <LinkedRunsBanner />)).toBe('');
  });
});
