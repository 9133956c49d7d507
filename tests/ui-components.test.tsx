/** Components rendered to HTML in Node (react-dom/server): names and structure the e2e tests and people rely on. */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ReactNode } from 'react';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore, type PlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { MetricChart } from '../src/ui/components/MetricChart';
import { ConfigControl } from '../src/ui/components/ConfigControl';
import { HyperparameterPanel } from '../src/ui/components/HyperparameterPanel';
import { TopBar } from '../src/ui/components/TopBar';
import { SamplesPanel } from '../src/ui/components/SamplesPanel';
import { GeneratePanel } from '../src/ui/components/GeneratePanel';
import { ModelCard } from '../src/ui/components/ModelCard';
import { DataPanel } from '../src/ui/components/DataPanel';
import { RewardPanel } from '../src/ui/components/RewardPanel';
import { App } from '../src/ui/App';
import { CONFIG_FIELDS, CONFIG_KEYS } from '../src/common/config';
import { SETUP_KEYS } from '../src/ui/lib/catalog';
import { formatBytes } from '../src/ui/lib/format';

function storeWith(hash = ''): PlaygroundStore {
  return createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: () => {},
    sendDelayMs: 0,
  });
}

/** Server rendering reads the store's initial state (zustand's server snapshot): make that the current one. */
function html(store: PlaygroundStore, node: ReactNode): string {
  store.getInitialState = () => store.getState();
  return renderToString(<StoreContext.Provider value={store}>{node}</StoreContext.Provider>);
}

describe('components', () => {
  it('a chart is a <figure> named by its caption, with the newest value', () => {
    const store = storeWith();
    store.setState({
      metrics: [
        { step: 1, klCoef: 0.05 },
        { step: 2, klCoef: 0.25 },
      ],
    });
    const out = html(store, <MetricChart metric="klCoef" title="KL coefficient" />);
    const labelledBy = /<figure[^>]*aria-labelledby="([^"]+)"/.exec(out)?.[1];
    expect(labelledBy).toBeTruthy();
    expect(out).toContain(`<figcaption id="${labelledBy}"`);
    expect(out).toMatch(/<figcaption[^>]*>KL coefficient<\/figcaption>/);
    expect(out).toMatch(/data-testid="chart-latest"[^>]*>0.25</);
  });

  it('a number control has a slider named by its key, the doc line and the range', () => {
    const out = html(storeWith('#klCoef=0.2'), <ConfigControl name="klCoef" />);
    expect(out).toMatch(/<label[^>]*>klCoef<\/label>/);
    expect(out).toContain('type="range"');
    expect(out).toContain('aria-label="klCoef value"');
    expect(out).toContain('value="0.2"');
    expect(out).toContain(CONFIG_FIELDS.klCoef.doc.replace(/'/g, '&#x27;').slice(0, 30));
    expect(out).toContain('a number from 0 to 10');
  });

  it('every config key has a control somewhere (hyperparameters, or the data/model/reward cards)', () => {
    const store = storeWith();
    const out = html(store, <HyperparameterPanel />);
    for (const k of CONFIG_KEYS) {
      if (SETUP_KEYS.includes(k)) continue;
      expect(out, k).toContain(`data-key="${k}"`);
    }
    // The setup keys, each in its card: the model's radio buttons, the task's select and the prompts' text box
    // (each named by its label), the reward's "Mix rewards" switch.
    const labelled = (card: string, label: string, tag: string) => {
      const id = new RegExp(`<label for="([^"]+)"[^>]*>${label}</label>`).exec(card)?.[1];
      return id !== undefined && card.includes(`<${tag} id="${id}"`);
    };
    const data = html(store, <DataPanel />);
    const cards: Record<string, () => boolean> = {
      model: () =>
        /<legend[^>]*>Model to train<\/legend><label[^>]*><input type="radio"/.test(
          html(store, <ModelCard />),
        ),
      task: () => labelled(data, 'Task', 'select'),
      prompts: () => labelled(data, 'Prompts', 'textarea'),
      reward: () => /<input type="checkbox"[^>]*\/>Mix rewards<\/label>/.test(html(store, <RewardPanel />)),
    };
    expect(Object.keys(cards).sort()).toEqual([...SETUP_KEYS].sort());
    for (const k of SETUP_KEYS) expect(cards[k](), k).toBe(true);
  });

  it('a non-live key edited during a run says "applies on reset"', () => {
    const store = storeWith('#batchSize=2&miniBatches=1');
    const run = {
      state: 'paused' as const,
      phase: 'idle' as const,
      step: 3,
      steps: 100,
      config: { ...store.getState().editedConfig },
    };
    store.setState({ runStatus: run, editedConfig: { ...store.getState().editedConfig, batchSize: 4 } });
    const out = html(store, <ConfigControl name="batchSize" />);
    expect(out).toContain('applies on reset');
    expect(out).toContain('control-waiting');
    expect(html(store, <ConfigControl name="klCoef" />)).not.toContain('applies on reset');
  });

  it('the top bar has Start, Pause, Step and Reset, and "Step N"', () => {
    const store = storeWith();
    store.setState({
      runStatus: {
        state: 'idle',
        phase: 'idle',
        step: 12,
        steps: 1000,
        config: store.getState().editedConfig,
      },
    });
    const out = html(store, <TopBar />);
    for (const name of ['Start', 'Pause', 'Step', 'Reset'])
      expect(out).toMatch(new RegExp(`</svg>${name}</button>`));
    expect(out).toMatch(/data-testid="step-counter"[^>]*>Step <!-- -->12</);
  });

  it("the memory line shows the bytes held between steps and the last step's peak", () => {
    const store = storeWith();
    store.setState({
      memory: {
        numTensors: 77,
        numBytes: 5.26e8,
        peakBytes: 9.5e8,
        heapBytes: 1.2e9,
        backend: 'wasm',
      },
    });
    const out = html(store, <TopBar />);
    const line = /data-testid="memory-line"[^>]*title="([^"]*)"[^>]*>(.*?)<\/span><\/div>/.exec(out);
    expect(line).not.toBeNull();
    const text = line![2].replace(/<!-- -->/g, '').replace(/<[^>]+>/g, '');
    expect(text).toBe(`memory 77 tensors · held ${formatBytes(5.26e8)} · peak ${formatBytes(9.5e8)}`);
    expect(line![1]).toContain(`WASM heap ${formatBytes(1.2e9)}`);
  });

  it('samples show prompt, coloured tokens, score and KL', () => {
    const store = storeWith();
    store.setState({
      samples: [
        {
          step: 4,
          samples: [
            {
              prompt: 'The film',
              response: ' was good',
              score: 0.75,
              kl: 0.125,
              tokens: [
                { text: ' was', logprob: -1, kl: 0.1, advantage: 1 },
                { text: ' good', logprob: -2, kl: 0.025, advantage: -1 },
              ],
            },
          ],
        },
      ],
    });
    const out = html(store, <SamplesPanel />);
    expect(out).toContain('The film');
    expect(out).toContain('background:rgb(8, 119, 189)');
    expect(out).toContain('background:rgb(245, 147, 34)');
    expect(out).toContain('0.75');
    expect(out).toContain('0.125');
  });

  it('a sample in a chat template shows the prompt as the model saw it, the plain prompt in its title', () => {
    const store = storeWith();
    const chatPrompt = '<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n';
    const sample = {
      response: '5',
      score: 1,
      kl: 0,
      tokens: [{ text: '5', logprob: -1, kl: 0, advantage: 1 }],
    };
    store.setState({
      samples: [
        {
          step: 1,
          samples: [
            { ...sample, prompt: 'What is 2 + 3?', chatPrompt },
            { ...sample, prompt: 'What is 4 + 4?' },
          ],
        },
      ],
    });
    const out = html(store, <SamplesPanel />);
    const cells = [...out.matchAll(/<td class="prompt"([^>]*)>([^<]*)<\/td>/g)];
    expect(cells).toHaveLength(2);
    expect(cells[0][1]).toContain('data-chat="true"');
    expect(cells[0][1]).toContain('title="In the chat template; the prompt: What is 2 + 3?"');
    expect(cells[0][2]).toBe(
      '&lt;|im_start|&gt;user\nWhat is 2 + 3?&lt;|im_end|&gt;\n&lt;|im_start|&gt;assistant\n',
    );
    expect(cells[1][1]).not.toContain('data-chat');
    expect(cells[1][2]).toBe('What is 4 + 4?');
  });

  it('chatTemplate is a switch in the sampling group of the hyperparameters', () => {
    /** The <input> that the chatTemplate label names, in the Sampling fieldset. */
    const chatSwitch = (hash: string) => {
      const out = html(storeWith(hash), <HyperparameterPanel />);
      const sampling = /<legend>Sampling<\/legend>([\s\S]*?)<\/fieldset>/.exec(out)?.[1] ?? '';
      const id = /<label for="([^"]+)"[^>]*>chatTemplate<\/label>/.exec(sampling)?.[1];
      expect(id, 'a chatTemplate label in Sampling').toBeDefined();
      return [...sampling.matchAll(/<input[^>]*>/g)].map((m) => m[0]).find((t) => t.includes(`id="${id}"`));
    };
    const off = chatSwitch('#chatTemplate=false');
    expect(off).toMatch(/type="checkbox"/);
    expect(off).toMatch(/role="switch"/);
    expect(off).not.toMatch(/checked/);
    expect(chatSwitch('')).toMatch(/checked=""/); // on by default
  });

  it('Generate sends the chatTemplate setting; the panel says the prompt goes in the template when the model has one', async () => {
    const fake = createFakeWorker();
    const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
      hash: '#chatTemplate=false',
      writeHash: () => {},
      sendDelayMs: 0,
    });
    await store.getState().actions.start();
    const asked = () =>
      fake.calls
        .filter(([n]) => n === 'generate')
        .map(([, r]) => (r as { chatTemplate?: boolean }).chatTemplate);
    await store.getState().actions.generate();
    store.getState().actions.setConfigValue('chatTemplate', true);
    await store.getState().actions.generate();
    expect(asked()).toEqual([false, true]);

    const note = 'chat template, as in training';
    expect(store.getState().model?.chatTemplate).toBe(false);
    expect(html(store, <GeneratePanel />)).not.toContain(note);
    store.setState({
      model: { ...store.getState().model!, family: 'qwen2', tokenizer: 'hf', chatTemplate: true },
    });
    expect(html(store, <GeneratePanel />)).toContain(note);
    store.getState().actions.setConfigValue('chatTemplate', false);
    expect(html(store, <GeneratePanel />)).not.toContain(note);
  });

  it('the whole app renders without a worker answer yet', () => {
    const out = html(storeWith(), <App />);
    expect(out).toContain('PPO Playground');
    expect(out).toContain('No steps yet');
  });
});
