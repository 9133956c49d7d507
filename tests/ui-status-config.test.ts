/**
 * A running job reports its status about ten times a step (each phase, and the samples or minibatches done inside
 * it), each time with a fresh copy of its config. The charts read that config (useRunConfig); before the store
 * kept the config object across equal reports, every report re-rendered every chart (measured in Chromium: the
 * page's main thread busy 8.0 of 20 s while training the default run, 4.8 s after).
 */
import { describe, expect, it } from 'vitest';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';
import { reduceEvent } from '../src/ui/store/training-slice';
import { validateConfig } from '../src/common/config';
import type { RunStatus, TrainerEvent } from '../src/worker/protocol';

const config = () => validateConfig({}, 'test');

function status(over: Partial<RunStatus>): TrainerEvent {
  return {
    type: 'status',
    status: { state: 'running', phase: 'generating', step: 0, steps: 100, config: config(), ...over },
  };
}

describe('status reports and the config object the charts read', () => {
  it('equal configs keep the first report’s object; the rest of the status is the newest', () => {
    const store = createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
      writeHash: () => {},
      sendDelayMs: 0,
    });
    let s = store.getState();
    const apply = (e: TrainerEvent) => {
      store.setState(reduceEvent(s, e));
      s = store.getState();
    };
    /** What useRunConfig selects. */
    const selected = () => s.runStatus?.config ?? s.editedConfig;
    apply(status({}));
    const first = selected();
    expect(first).toBe(s.runStatus?.config);
    const reports: Partial<RunStatus>[] = [
      { phaseProgress: { done: 8, total: 16, unit: 'samples' } },
      { phase: 'scoring' },
      { phase: 'scoring', phaseProgress: { done: 8, total: 16, unit: 'samples' } },
      { phase: 'updating' },
      { phase: 'updating', phaseProgress: { done: 1, total: 4, unit: 'updates' } },
      { phase: 'idle', step: 1 },
    ];
    let changes = 0;
    let last = first;
    for (const r of reports) {
      apply(status(r));
      expect(s.runStatus?.phase).toBe(r.phase ?? 'generating');
      expect(s.runStatus?.phaseProgress ?? null).toEqual(r.phaseProgress ?? null);
      if (selected() !== last) changes++;
      last = selected();
    }
    expect(changes, 'config objects the charts saw change').toBe(0);
    expect(s.runStatus?.step).toBe(1);

    // A config that did change arrives as itself.
    const changed = { ...config(), learningRate: 0.002 };
    apply(status({ phase: 'idle', step: 1, config: changed }));
    expect(selected()).not.toBe(first);
    expect(selected()).toBe(changed);
    expect(s.runStatus?.config.learningRate).toBe(0.002);
  });
});
