/**
 * Issue #33, defects 10 and 5 in the held-out evaluation panel: an empty answer says "(empty)" instead of a
 * blank cell, and the panel leaves while a DPO or SFT job runs.
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { EvalPanel } from '../src/ui/components/EvalPanel';
import type { EvalRecord } from '../src/common/eval-record';
import type { RunStatus } from '../src/worker/protocol';

function render(store: PlaygroundStore): string {
  store.getInitialState = () => store.getState();
  return renderToString(
    <StoreContext.Provider value={store}>
      <EvalPanel />
    </StoreContext.Provider>,
  ).replace(/<!-- -->/g, '');
}

const latest: EvalRecord = {
  step: 2,
  'eval/reward': 0.5,
  'eval/kl': 0.1,
  'eval/winRate': 0.5,
  samples: [{ prompt: 'What is 1 + 2?', reference: '', policy: '3', referenceReward: 0, policyReward: 1 }],
};

describe('held-out evaluation table', () => {
  const store = createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash: '#evalEvery=1',
    writeHash: () => {},
    sendDelayMs: 0,
  });
  store.setState({ evalLatest: latest });

  it('an empty answer reads "(empty)", not a blank cell', () => {
    const out = render(store);
    expect(out).toMatch(/<td class="answer"><span class="muted empty-answer"[^>]*>\(empty\)<\/span><\/td>/);
    expect(out).not.toMatch(/<td class="answer"><\/td>/);
  });

  it('is not shown during a DPO job', () => {
    const status = {
      job: { kind: 'dpo', dataName: 'p.jsonl', examples: 6, settings: {} },
    } as unknown as RunStatus;
    store.setState({ runStatus: status });
    expect(render(store)).toBe('');
  });
});
