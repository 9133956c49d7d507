/**
 * The memory estimate before Start and the LoRA UI (issue #11 points 4 and 6): the estimate's line broken down
 * by part, "N trainable of M" in the model card, LoRA preselected (with a learning rate for it, and the sentence
 * saying why) when a model over 50 M parameters is loaded, and the way back; the LoRA keys' controls with their
 * docs, ranges and "applies on reset". Store and components on the UI's stand-in worker (src/ui/dev/fake-worker.ts).
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ReactNode } from 'react';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker, type FakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { MemoryEstimate } from '../src/ui/components/MemoryEstimate';
import { ModelCard } from '../src/ui/components/ModelCard';
import { ConfigControl } from '../src/ui/components/ConfigControl';
import { HyperparameterPanel } from '../src/ui/components/HyperparameterPanel';
import { App } from '../src/ui/App';
import { CONFIG_FIELDS } from '../src/common/config';
import {
  estimateLine,
  formatParams,
  loraPreselection,
  loraReason,
  trainableLine,
  LORA_LEARNING_RATE,
} from '../src/ui/lib/memory-estimate';
import type { MemoryEstimateReport, ModelSummary } from '../src/worker/protocol';

/** GPT-2 124M with LoRA r=8, a function reward, the value model on the shared base (hand-made numbers). */
const LORA_REPORT: MemoryEstimateReport = {
  model: 'openai-community/gpt2',
  params: 124_439_808,
  policyTrainableParams: 1_179_648,
  trainableParams: 2_360_064,
  lora: 8,
  bytes: 2_185_228_032,
  parts: {
    base: 497_759_232,
    reference: 0,
    value: 3072,
    rewardModel: 0,
    adapters: 9_437_184,
    adam: 18_880_512,
    gradients: 9_440_256,
    activations: 1_649_707_776,
    packed: 0,
    heapGrowth: 0,
  },
  budgetBytes: 3_221_176_320,
  budget: 'the WASM backend allows 3.2 GB (75% of its 4.3 GB heap)',
  problem: null,
};
const FULL_REPORT: MemoryEstimateReport = {
  ...LORA_REPORT,
  policyTrainableParams: 124_439_808,
  trainableParams: 248_880_384,
  lora: 0,
  bytes: 6_129_553_152,
  parts: {
    base: 497_759_232,
    reference: 497_759_232,
    value: 497_762_304,
    rewardModel: 0,
    adapters: 0,
    adam: 1_991_043_072,
    gradients: 995_521_536,
    activations: 1_649_707_776,
    packed: 0,
    heapGrowth: 0,
  },
  problem: 'Training openai-community/gpt2 … with full copies needs ≈ 4.5 GB …',
};
const GPT2_SUMMARY: ModelSummary = {
  label: 'openai-community/gpt2',
  family: 'gpt2',
  n_layer: 12,
  n_embd: 768,
  n_head: 12,
  vocab_size: 50257,
  n_positions: 1024,
  params: 124_439_808,
  tokenizer: 'gpt2-bpe',
  chatTemplate: false,
};

interface Harness {
  fake: FakeWorker;
  store: PlaygroundStore;
}

async function started(hash = ''): Promise<Harness> {
  const fake = createFakeWorker();
  const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: () => {},
    sendDelayMs: 0,
  });
  await store.getState().actions.start();
  return { fake, store };
}

/** Server rendering reads the store's initial state (zustand's server snapshot): make that the current one. */
function html(store: PlaygroundStore, node: ReactNode): string {
  store.getInitialState = () => store.getState();
  return renderToString(<StoreContext.Provider value={store}>{node}</StoreContext.Provider>);
}

const lastConfigure = (f: FakeWorker) =>
  f.calls.filter(([n]) => n === 'configure').at(-1)?.[1] as Record<string, unknown> | undefined;

describe('the estimate in words (pure)', () => {
  it('LoRA: one base, reward model —, adapters, Adam, gradients, activations (GB)', () => {
    expect(estimateLine(LORA_REPORT)).toBe(
      '≈ 2.2 GB: base 0.50, value 0.00, reward model —, adapters 0.01, Adam 0.02, gradients 0.01, activations 1.65 GB',
    );
  });

  it('full copies: policy, reference and value each; a learned reward model is shown', () => {
    expect(estimateLine({ ...FULL_REPORT, parts: { ...FULL_REPORT.parts, rewardModel: 497_762_304 } })).toBe(
      '≈ 6.1 GB: policy 0.50, reference 0.50, value 0.50, reward model 0.50, Adam 1.99, gradients 1.00, activations 1.65 GB',
    );
  });

  it('parameter counts and "trainable of total"', () => {
    expect([124_439_808, 81_912_576, 1_179_648, 98_304, 512].map(formatParams)).toEqual([
      '124 M',
      '81.9 M',
      '1.2 M',
      '98 k',
      '512',
    ]);
    expect(trainableLine(LORA_REPORT)).toBe('1.2 M trainable of 124 M');
    expect(trainableLine(FULL_REPORT)).toBe('124 M trainable of 124 M');
  });
});

describe('LoRA preselected for a model over 50 M parameters (pure)', () => {
  const defaults = (over: Record<string, unknown> = {}) =>
    ({ ...createFakeWorkerConfig(), ...over }) as ReturnType<typeof createFakeWorkerConfig>;

  it('big model, full fine-tuning at the default learning rate: lora 8 and 3e-4', () => {
    const pre = loraPreselection(GPT2_SUMMARY, defaults());
    expect(pre).toEqual({ patch: { lora: 8, learningRate: LORA_LEARNING_RATE }, previousLearningRate: 1e-4 });
    expect(loraReason(GPT2_SUMMARY, pre!, FULL_REPORT, LORA_REPORT)).toBe(
      'openai-community/gpt2 has 124 M parameters: full copies need ≈ 4.5 GB of weights and optimiser state; ' +
        'LoRA trains 1.2 M adapter parameters on one shared base (≈ 2.2 GB with the activations of this batch). ' +
        'LoRA is on (lora 8). The learning rate went from 0.0001 (the full-fine-tuning default) to 0.0003: ' +
        'LoRA wants a larger one.',
    );
  });

  it('a learning rate the person chose stays; LoRA already on, or a small model: nothing changes', () => {
    expect(loraPreselection(GPT2_SUMMARY, defaults({ learningRate: 5e-5 }))).toEqual({
      patch: { lora: 8 },
      previousLearningRate: 5e-5,
    });
    expect(loraPreselection(GPT2_SUMMARY, defaults({ lora: 4 }))).toBeNull();
    expect(loraPreselection({ ...GPT2_SUMMARY, params: 49_000_000 }, defaults())).toBeNull();
  });

  it('a Llama, Qwen2 or Qwen3 model gets LoRA whatever its size, and the note says why', () => {
    const qwen: ModelSummary = {
      ...GPT2_SUMMARY,
      label: 'uploaded:qwen2-tiny',
      family: 'qwen2',
      params: 36_000,
      tokenizer: 'hf',
      chatTemplate: true,
    };
    for (const family of ['llama', 'qwen2', 'qwen3'] as const) {
      expect(loraPreselection({ ...qwen, family }, defaults())).toEqual({
        patch: { lora: 8, learningRate: LORA_LEARNING_RATE },
        previousLearningRate: 1e-4,
      });
    }
    expect(loraPreselection({ ...qwen, family: 'gpt2' }, defaults())).toBeNull();
    expect(loraPreselection(qwen, defaults({ lora: 4 }))).toBeNull();
    const pre = loraPreselection(qwen, defaults())!;
    expect(loraReason(qwen, pre, null, null)).toBe(
      'uploaded:qwen2-tiny is a Qwen2 model (36 k parameters), which is usually fine-tuned with LoRA on ' +
        'q/k/v/o/gate/up/down_proj: full copies of it (policy, reference, value model and two Adams) would not fit ' +
        'most browsers; LoRA trains small adapters on one shared base. LoRA is on (lora 8). The learning rate went ' +
        'from 0.0001 (the full-fine-tuning default) to 0.0003: LoRA wants a larger one.',
    );
  });
});

function createFakeWorkerConfig() {
  return structuredClone(
    createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
      writeHash: () => {},
    }).getState().editedConfig,
  );
}

describe('the store: estimate from the worker, LoRA on loading GPT-2', () => {
  it('refreshEstimate asks the worker with the edited config and keeps the answer', async () => {
    const h = await started();
    await h.store.getState().actions.refreshEstimate();
    const e = h.store.getState().estimate;
    expect(e).toMatchObject({ model: 'built-in tiny', params: 120_000, lora: 0, problem: null });
    h.store.getState().actions.setConfigValue('lora', 4);
    await h.store.getState().actions.refreshEstimate();
    expect(h.store.getState().estimate).toMatchObject({ lora: 4, policyTrainableParams: 4000 });
    const asked = h.fake.calls.filter(([n]) => n === 'estimateMemory').at(-1)?.[1];
    expect(asked).toMatchObject({ model: 'tiny', lora: 4 });
  });

  it('loading GPT-2 (124 M) turns LoRA on with 3e-4 and says why; "Train all weights instead" undoes it', async () => {
    const h = await started();
    expect(h.store.getState().editedConfig).toMatchObject({ lora: 0, learningRate: 1e-4 });
    await h.store.getState().actions.loadModel({ kind: 'hub', repo: 'openai-community/gpt2' });
    const s = h.store.getState();
    expect(s.model?.params).toBe(124_439_808);
    expect(s.editedConfig).toMatchObject({ model: 'openai-community/gpt2', lora: 8, learningRate: 3e-4 });
    expect(s.loraNote?.text).toMatch(
      /^openai-community\/gpt2 has 124 M parameters: full copies need ≈ \d\.\d GB of weights and optimiser state; LoRA trains 1\.2 M adapter parameters on one shared base \(≈ \d\.\d GB with the activations of this batch\)\. LoRA is on \(lora 8\)\. The learning rate went from 0\.0001/,
    );
    await s.actions.flushConfig();
    expect(lastConfigure(h.fake)).toMatchObject({ lora: 8, learningRate: 3e-4 });

    const card = html(h.store, <ModelCard />);
    expect(card).toContain('data-testid="lora-note"');
    expect(card).toContain('Train all weights instead');

    s.actions.trainAllWeights();
    expect(h.store.getState().editedConfig).toMatchObject({ lora: 0, learningRate: 1e-4 });
    expect(h.store.getState().loraNote).toBeNull();
    await s.actions.flushConfig();
    expect(lastConfigure(h.fake)).toMatchObject({ lora: 0, learningRate: 1e-4 });
  });

  it('loading the tiny model changes nothing', async () => {
    const h = await started();
    await h.store.getState().actions.loadModel({ kind: 'builtin', name: 'tiny' });
    expect(h.store.getState().editedConfig.lora).toBe(0);
    expect(h.store.getState().loraNote).toBeNull();
  });
});

describe('components', () => {
  it('the estimate line near Start, and what Start would refuse', async () => {
    const h = await started();
    h.store.setState({ estimate: LORA_REPORT });
    const out = html(h.store, <MemoryEstimate />);
    expect(out).toContain('data-testid="memory-estimate"');
    expect(out).toContain(
      '≈ 2.2 GB: base 0.50, value 0.00, reward model —, adapters 0.01, Adam 0.02, gradients 0.01, activations 1.65 GB',
    );
    expect(out).not.toContain('memory-estimate-problem');
    h.store.setState({ estimate: FULL_REPORT });
    expect(html(h.store, <MemoryEstimate />)).toMatch(
      /data-testid="memory-estimate-problem"[^>]*>Training openai-community\/gpt2 … with full copies/,
    );
    h.store.setState({ estimate: null });
    expect(html(h.store, <MemoryEstimate />)).toBe('');
    // In the app, right under the top bar with Start.
    h.store.setState({ estimate: LORA_REPORT });
    expect(html(h.store, <App />)).toMatch(/<\/header><div class="memory-estimate/);
  });

  it('the model card shows trainable parameters against the total', async () => {
    const h = await started();
    h.store.setState({ model: GPT2_SUMMARY, estimate: LORA_REPORT });
    expect(html(h.store, <ModelCard />)).toMatch(
      /data-testid="trainable-params"[^>]*>1\.2 M trainable of 124 M</,
    );
    // An estimate of another model (still on its way) is not shown against this one.
    h.store.setState({ estimate: { ...LORA_REPORT, params: 120_000 } });
    expect(html(h.store, <ModelCard />)).not.toContain('trainable-params');
  });

  it('the picker shows the worker’s verdict beside each Llama / Qwen entry (issue #36)', async () => {
    const h = await started();
    h.store.setState({
      modelFits: {
        'smollm2-135m': { fits: true, text: 'fits with LoRA r=8 (≈ 0.6 GB of 5.2 GB before activations)' },
        'qwen3-0.6b': {
          fits: false,
          text: 'needs WebGPU (≈ 2.5 GB of 5.2 GB before activations there; ≈ 4.2 GB here, over 4.1 GB)',
        },
      },
    });
    const card = html(h.store, <ModelCard />);
    const fits = [
      ...card.matchAll(/<small class="([^"]*)" data-testid="model-fit">([^<]*(?:<!-- -->[^<]*)*)<\/small>/g),
    ].map((m) => [m[1], m[2].replace(/<!-- -->/g, '')]);
    expect(fits).toEqual([
      ['muted model-fit', ' · fits with LoRA r=8 (≈ 0.6 GB of 5.2 GB before activations)'],
      [
        'model-fit model-fit-over',
        ' · needs WebGPU (≈ 2.5 GB of 5.2 GB before activations there; ≈ 4.2 GB here, over 4.1 GB)',
      ],
    ]);
    // Each verdict inside its own entry (from its label to the entry's end); none for Qwen2.5-0.5B (none was given).
    const entry = (label: string) => {
      const at = card.indexOf(label);
      expect(at, label).toBeGreaterThan(-1);
      return card.slice(at, card.indexOf('</label>', at));
    };
    expect(entry('SmolLM2-135M-Instruct (Hub)')).toContain('fits with LoRA r=8');
    expect(entry('Qwen2.5-0.5B-Instruct (Hub)')).not.toContain('model-fit');
    expect(entry('Qwen3-0.6B (Hub)')).toContain('needs WebGPU');
    // The stand-in worker answers the store's request (no verdicts of its own).
    await h.store.getState().actions.refreshModelFits();
    expect(h.store.getState().modelFits).toEqual({});
  });

  it('lora, loraAlpha, loraTargets have controls with their doc and range, and wait for reset during a run', async () => {
    const h = await started('#lora=8');
    const panel = html(h.store, <HyperparameterPanel />);
    for (const k of ['lora', 'loraAlpha', 'loraTargets', 'valueModel'] as const) {
      expect(panel, k).toContain(`data-key="${k}"`);
      const doc = CONFIG_FIELDS[k].doc.replace(/'/g, '&#x27;').replace(/"/g, '&quot;');
      expect(panel, k).toContain(doc);
      expect(doc, k).toMatch(/Applies on reset\.$/);
    }
    expect(html(h.store, <ConfigControl name="lora" />)).toContain('an integer from 0 to 1024');
    expect(html(h.store, <ConfigControl name="loraAlpha" />)).toContain('a number from 0.01 to 10000');
    const targets = html(h.store, <ConfigControl name="loraTargets" />);
    // A GPT-2-family model (the fake's): its four layers only, all checked by default.
    const boxes = (out: string) =>
      [...out.matchAll(/<input[^>]*type="checkbox"([^>]*)\/> <!-- -->([\w.]+)<\/label>/g)].map(
        (m) => `${m[2]}${m[1].includes('checked') ? ' ✓' : ''}`,
      );
    expect(h.store.getState().model?.family).toBe('gpt2');
    expect(boxes(targets)).toEqual(['c_attn ✓', 'attn.c_proj ✓', 'c_fc ✓', 'mlp.c_proj ✓']);
    // A Qwen2 model: its seven layers, all checked (the default means all seven).
    h.store.setState({ model: { ...h.store.getState().model!, family: 'qwen2' } });
    const qwen = html(h.store, <ConfigControl name="loraTargets" />);
    expect(boxes(qwen)).toEqual(
      ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'].map((t) => `${t} ✓`),
    );
    h.store.setState({ model: { ...h.store.getState().model!, family: 'gpt2' } });

    const config = h.store.getState().editedConfig;
    h.store.setState({
      runStatus: { state: 'paused', phase: 'idle', step: 2, steps: 100, config: { ...config } },
      editedConfig: { ...config, lora: 16 },
    });
    const waiting = html(h.store, <ConfigControl name="lora" />);
    expect(waiting).toContain('applies on reset');
    expect(waiting).toContain('control-waiting');
  });
});
