/**
 * The plan in force in the app (issue #31, item 3): the memory estimate strip says which step plan a run uses —
 * the worker's status once a run exists (RunStatus.plan: smaller after the device ran out of memory), else the one
 * the estimate plans (MemoryEstimateReport.plan). Store and component on the UI's stand-in worker.
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ReactNode } from 'react';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { MemoryEstimate } from '../src/ui/components/MemoryEstimate';
import type { MemoryEstimateReport, RunStatus } from '../src/worker/protocol';

const REPORT: MemoryEstimateReport = {
  model: 'openai-community/gpt2',
  params: 124_439_808,
  policyTrainableParams: 1_179_648,
  trainableParams: 2_360_064,
  lora: 8,
  bytes: 4_290_000_000,
  parts: {
    base: 497_759_232,
    reference: 0,
    value: 3072,
    rewardModel: 0,
    adapters: 9_437_184,
    adam: 18_880_512,
    gradients: 9_440_256,
    activations: 3_754_479_744,
    packed: 0,
    heapGrowth: 0,
  },
  budgetBytes: 5_153_960_755,
  budget: 'the budget here is 5.2 GB (60% of this device’s memory)',
  problem: null,
  plan: 'whole minibatch (8) on WebGPU, recompute off',
};

async function started(): Promise<PlaygroundStore> {
  const store = createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash: '',
    writeHash: () => {},
    sendDelayMs: 0,
  });
  await store.getState().actions.start();
  return store;
}

function html(store: PlaygroundStore, node: ReactNode): string {
  store.getInitialState = () => store.getState();
  return renderToString(<StoreContext.Provider value={store}>{node}</StoreContext.Provider>);
}

describe('the plan beside the memory estimate', () => {
  it('before a run: the plan the estimate makes; with a run: the plan in force, also after a fallback', async () => {
    const store = await started();
    store.setState({ estimate: REPORT });
    expect(html(store, <MemoryEstimate />)).toMatch(
      /data-testid="memory-plan"[^>]*> · plan: whole minibatch \(8\) on WebGPU, recompute off</,
    );
    const run = store.getState().runStatus as RunStatus;
    store.setState({
      runStatus: {
        ...run,
        plan: {
          microBatchSize: 4,
          generateMicroBatchSize: 16,
          recompute: false,
          reason: 'out-of-memory',
          text: 'micro-batches of 4 after the device ran out of memory',
        },
      },
    });
    expect(html(store, <MemoryEstimate />)).toMatch(
      /data-testid="memory-plan"[^>]*> · plan: micro-batches of 4 after the device ran out of memory</,
    );
    // Neither says one (an older worker): no plan line.
    store.setState({ runStatus: { ...run, plan: null }, estimate: { ...REPORT, plan: undefined } });
    expect(html(store, <MemoryEstimate />)).not.toContain('memory-plan');
  });
});
