/**
 * Held-out evaluation in the app (docs/eval.md): the step event's eval record becomes the store's evalLatest
 * (dropped with a history that goes back), the eval charts draw only the evaluated steps, the side-by-side table,
 * and the evalPrompts control. Rendered to HTML in Node (react-dom/server).
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ReactNode } from 'react';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { reduceEvent } from '../src/ui/store/training-slice';
import { EvalPanel } from '../src/ui/components/EvalPanel';
import { ConfigControl } from '../src/ui/components/ConfigControl';
import type { EvalRecord } from '../src/common/eval-record';
import type { MetricsWire, TrainerEvent } from '../src/worker/protocol';
import { validateConfig } from '../src/common/config';
import { taskHasHeldOut } from '../src/ui/lib/catalog';

function storeWith(hash = ''): PlaygroundStore {
  return createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: () => {},
    sendDelayMs: 0,
  });
}
function html(store: PlaygroundStore, node: ReactNode): string {
  store.getInitialState = () => store.getState();
  return renderToString(<StoreContext.Provider value={store}>{node}</StoreContext.Provider>);
}
const record = (step: number): EvalRecord => ({
  step,
  'eval/reward': 0.5,
  'eval/kl': 1.25,
  'eval/winRate': 0.5,
  samples: [
    { prompt: 'What is 1 + 2?', reference: 'four <ref>', policy: '3', referenceReward: 0, policyReward: 1 },
    { prompt: 'What is 2 + 2?', reference: '4', policy: 'five', referenceReward: 1, policyReward: 0 },
  ],
});
const stepEvent = (step: number, ev?: EvalRecord): TrainerEvent => ({
  type: 'step',
  metrics: {
    step,
    reward: step,
    ...(ev ? { 'eval/reward': ev['eval/reward'] } : {}),
  } as unknown as MetricsWire,
  samples: [],
  alerts: [],
  ...(ev ? { eval: ev } : {}),
});

describe('held-out evaluation in the app', () => {
  it('the store keeps the newest evaluation; a history that goes back drops a later one', () => {
    const store = storeWith();
    let s = store.getState();
    const apply = (e: TrainerEvent) => {
      store.setState(reduceEvent(s, e));
      s = store.getState();
    };
    apply(stepEvent(1));
    expect(s.evalLatest).toBeNull();
    apply(stepEvent(2, record(2)));
    expect(s.evalLatest?.step).toBe(2);
    apply(stepEvent(3));
    expect(s.evalLatest?.step).toBe(2); // kept until the next evaluation
    apply(stepEvent(4, record(4)));
    expect(s.evalLatest?.step).toBe(4);
    apply(stepEvent(3)); // the run went back (an import): the evaluation of step 4 is not of this history
    expect(s.evalLatest).toBeNull();
  });

  it('the panel: hidden without evaluation; three sparse charts and the side-by-side table', () => {
    const off = storeWith();
    expect(html(off, <EvalPanel />)).toBe('');
    const store = storeWith('#evalEvery=2&evalPrompts=heldout&task=arithmetic-chat');
    store.setState({
      metrics: [
        { step: 1, reward: 0 },
        { step: 2, reward: 0, 'eval/reward': 0.25, 'eval/kl': 0.5, 'eval/winRate': 0 },
        { step: 3, reward: 0 },
      ],
    });
    const before = html(store, <EvalPanel />);
    expect(before).toContain('Held-out evaluation');
    expect(before.replace(/<!-- -->/g, '')).toContain('every 2 steps and at the last, greedy');
    for (const m of ['eval/reward', 'eval/kl', 'eval/winRate'])
      expect(before).toContain(`data-metric="${m}"`);
    // The newest value of a sparse metric is the last evaluation's, not the missing one of step 3.
    expect(before).toMatch(/data-metric="eval\/kl"[\s\S]*?data-value="0.5"/);
    expect(before).toContain('appear here after the first evaluation');
    store.setState({ evalLatest: record(4) });
    const out = html(store, <EvalPanel />);
    expect(out).toContain('data-testid="eval-table"');
    expect(out).toMatch(/<th[^>]*>Reference<\/th>[\s\S]*<th[^>]*>Policy<\/th>/);
    expect(out).toContain('four &lt;ref&gt;');
    expect(out.replace(/<!-- -->/g, '')).toContain('Step 4: 2 prompts');
    expect((out.match(/data-win="true"/g) ?? []).length).toBe(1);
  });

  it('evalPrompts: "heldout" is offered for a task with a held-out split only', () => {
    expect(taskHasHeldOut('arithmetic-chat')).toBe(true);
    expect(taskHasHeldOut('sentiment')).toBe(false);
    const chat = html(storeWith('#task=arithmetic-chat'), <ConfigControl name="evalPrompts" />);
    expect(chat).toMatch(/<option value="heldout">heldout \(the task’s held-out split\)<\/option>/);
    const sentiment = html(storeWith('#task=sentiment'), <ConfigControl name="evalPrompts" />);
    expect(sentiment).toMatch(/<option value="heldout" disabled="">heldout \(this task has none\)<\/option>/);
    // evalEvery and evalTemperature are number controls of the table.
    expect(html(storeWith(), <ConfigControl name="evalEvery" />)).toContain('type="range"');
    expect(validateConfig({ evalEvery: 2, evalPrompts: 'heldout' }).evalPrompts).toBe('heldout');
  });
});
