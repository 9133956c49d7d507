/**
 * DPO and SFT in the app (docs/dpo.md "In the app", docs/sft.md): the chart set follows the job in the worker's
 * status (RL charts, DPO's TRL-named charts, SFT's loss), the panel offers "Continue with …" only after SFT steps,
 * and the store's actions call the worker and show its refusal (a bad file's lines) in the banner. Rendered to
 * HTML in Node (react-dom/server).
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ReactNode } from 'react';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { ChartPanel } from '../src/ui/components/ChartPanel';
import { SupervisedPanel } from '../src/ui/components/SupervisedPanel';
import { CheckpointPanel } from '../src/ui/components/CheckpointPanel';
import { HyperparameterPanel } from '../src/ui/components/HyperparameterPanel';
import type {
  MetricsWire,
  RunStatus,
  SupervisedJobStatus,
  TrainerEvent,
  WorkerApi,
} from '../src/worker/protocol';
import { validateConfig } from '../src/common/config';
import { hashFor } from '../src/ui/lib/url-config';

function storeWith(
  api: Partial<Pick<WorkerApi, 'setSupervisedJob' | 'continueFromSft'>> = {},
): PlaygroundStore {
  const fake = createFakeWorker();
  return createPlaygroundStore({ ...fake, ...api } as unknown as ModelWorker, 'auto', {
    hash: '',
    writeHash: () => {},
    sendDelayMs: 0,
  });
}
function html(store: PlaygroundStore, node: ReactNode): string {
  store.getInitialState = () => store.getState();
  return renderToString(<StoreContext.Provider value={store}>{node}</StoreContext.Provider>);
}
const status = (job: SupervisedJobStatus | null, step = 0): RunStatus => ({
  state: 'paused',
  phase: 'idle',
  step,
  steps: 2,
  config: validateConfig({}),
  job,
});
const metricsOf = (page: string) => [...page.matchAll(/data-metric="([^"]+)"/g)].map((m) => m[1]);

describe('DPO and SFT in the app', () => {
  it('the charts switch to DPO’s metrics for a DPO job and to the loss for SFT', () => {
    const store = storeWith();
    expect(metricsOf(html(store, <ChartPanel />))).toContain('reward');
    store.setState({
      runStatus: status({ kind: 'dpo', dataName: 'p.jsonl', examples: 6, settings: {} }),
    });
    const dpo = metricsOf(html(store, <ChartPanel />));
    for (const k of [
      'loss',
      'rewards/chosen',
      'rewards/rejected',
      'rewards/accuracies',
      'rewards/margins',
      'logps/chosen',
      'logps/rejected',
      'eval/loss',
      'eval/rewards/accuracies',
      'eval/rewards/margins',
    ])
      expect(dpo, k).toContain(k);
    expect(dpo).not.toContain('reward');
    expect(dpo).not.toContain('kl');
    store.setState({
      runStatus: status({ kind: 'sft', dataName: 's.jsonl', examples: 4, settings: {} }),
    });
    expect(metricsOf(html(store, <ChartPanel />))).toEqual(['loss', 'gradNorm']);
  });

  it('"Continue with …" shows after SFT or DPO steps (after DPO: RL only); the panel says which job runs', () => {
    const store = storeWith();
    expect(html(store, <SupervisedPanel />)).toContain('Training with the RL algorithm');
    store.setState({ runStatus: status({ kind: 'sft', dataName: 's.jsonl', examples: 4, settings: {} }, 0) });
    let page = html(store, <SupervisedPanel />);
    expect(page).toContain('s.jsonl');
    expect(page).not.toContain('Continue with GRPO');
    store.setState({ runStatus: status({ kind: 'sft', dataName: 's.jsonl', examples: 4, settings: {} }, 2) });
    page = html(store, <SupervisedPanel />);
    for (const a of ['PPO', 'GRPO', 'DPO']) expect(page).toContain(`Continue with ${a}`);
    store.setState({ runStatus: status({ kind: 'dpo', dataName: 'p.jsonl', examples: 6, settings: {} }, 2) });
    page = html(store, <SupervisedPanel />);
    // Issue #33, defect 6: after DPO the RL algorithms go on from its weights.
    for (const a of ['PPO', 'GRPO']) expect(page).toContain(`Continue with ${a}`);
    expect(page).not.toContain('Continue with DPO');
    expect(page).toContain('Continue from the DPO result');
    // The hyperparameter column says which of its settings a job takes.
    expect(html(store, <HyperparameterPanel />)).toContain('A DPO job replaces the RL algorithm');
  });

  it('the checkpoint card exports a DPO job as TRL DPOConfig and offers no RL engine files for a job', () => {
    const store = storeWith();
    store.setState({ runStatus: status(null) });
    expect(html(store, <CheckpointPanel />)).toContain('OpenRLHF');
    store.setState({ runStatus: status({ kind: 'dpo', dataName: 'p.jsonl', examples: 6, settings: {} }) });
    const dpo = html(store, <CheckpointPanel />);
    expect(dpo).toContain('TRL 1.13 DPOConfig: trl-dpo-config.json');
    expect(dpo).not.toContain('OpenRLHF');
    store.setState({ runStatus: status({ kind: 'sft', dataName: 's.jsonl', examples: 4, settings: {} }) });
    const sft = html(store, <CheckpointPanel />);
    expect(sft).toContain('No export for other engines: the SFT warm start is not an RL or DPO run.');
    expect(sft).not.toContain('TRL');
  });

  it('a DPO job is kept under its kind and file name', async () => {
    const fake = createFakeWorker();
    let push: ((e: TrainerEvent) => void) | null = null;
    const api = {
      ...fake,
      subscribe: async (cb: (e: TrainerEvent) => void) => {
        push = cb;
        return fake.subscribe(cb);
      },
    };
    const store = createPlaygroundStore(api as unknown as ModelWorker, 'auto', {
      hash: '',
      writeHash: () => {},
      sendDelayMs: 0,
    });
    await store.getState().actions.start();
    push!({
      type: 'status',
      status: status({ kind: 'dpo', dataName: 'p.jsonl', examples: 6, settings: {} }),
    });
    push!({
      type: 'step',
      metrics: { step: 1, loss: 0.69 } as unknown as MetricsWire,
      samples: [],
      alerts: [],
    });
    expect(store.getState().keptRuns.at(-1)?.name).toBe('dpo on p.jsonl · tiny');
    // Issue #33, defect 5: listed as dpo, not as the config's algorithm.
    expect(store.getState().keptRuns.at(-1)?.job).toBe('dpo');
  });

  it('a link never names the SFT result (it lives in this tab only)', () => {
    const cfg = validateConfig({ model: 'sft-model', algorithm: 'grpo' });
    expect(hashFor(cfg)).not.toContain('sft-model');
    expect(hashFor(cfg)).toContain('algorithm=grpo');
  });

  it('the actions call the worker; its refusal naming the line reaches the banner', async () => {
    const calls: unknown[] = [];
    const refusal = Object.assign(new Error('pairs.jsonl: 1 bad line: line 2: "rejected" is missing.'), {
      name: 'UserError',
    });
    const store = storeWith({
      setSupervisedJob: async (job) => {
        calls.push(job);
        if (job && job.data.includes('bad')) throw refusal;
        return status(job && { kind: job.kind, dataName: job.dataName, examples: 1, settings: {} });
      },
      continueFromSft: async (next) => {
        calls.push(next);
        return { ...status(null, 0), state: 'running' };
      },
    });
    const { actions } = store.getState();
    await actions.setSupervisedJob({ kind: 'dpo', data: 'bad', dataName: 'pairs.jsonl' });
    expect(store.getState().error).toContain('line 2');
    await actions.setSupervisedJob({ kind: 'dpo', data: '{}', dataName: 'pairs.jsonl', steps: 2 });
    expect(store.getState().error).toBeNull();
    expect(store.getState().runStatus?.job?.kind).toBe('dpo');
    await actions.continueFromSft({ algorithm: 'grpo' });
    expect(calls.at(-1)).toEqual({ algorithm: 'grpo' });
    expect(store.getState().runStatus?.job).toBeNull();
    expect(store.getState().ioTask).toBeNull();
  });
});
