import { describe, expect, it } from 'vitest';
import { TASK_NAMES } from '../src/core/tasks';
import { BUILTIN_REWARD_NAMES } from '../src/core/reward/functions';
import { EXTRA_METRICS, REQUIRED_METRICS } from '../src/common/metrics';
import { CHARTS, MODEL_CHOICES, modelSourceFor, REWARD_NAMES, TASKS } from '../src/ui/lib/catalog';
import { LLAMA_SHAPES, parseLlamaConfig, type LlamaShapeName } from '../src/core/model/llama-config';
import { paramCount } from '../src/core/model/size';

/** The UI's lists mirror core's (which the UI must not import: they pull in the sentiment lexicon). */
describe('UI catalog', () => {
  it('offers exactly the built-in tasks and rewards', () => {
    expect(TASKS.map((t) => t.name)).toEqual([...TASK_NAMES]);
    expect(REWARD_NAMES.map((r) => r.name)).toEqual(BUILTIN_REWARD_NAMES);
  });

  it('charts only metrics the engine reports, the four headline ones first', () => {
    const names: string[] = [...REQUIRED_METRICS, ...EXTRA_METRICS];
    for (const c of CHARTS) expect(names).toContain(c.key);
    expect(CHARTS.filter((c) => c.headline).map((c) => c.key)).toEqual([
      'reward',
      'kl',
      'clipFrac',
      'valueLoss',
    ]);
  });

  it('lists SmolLM2-135M, Qwen2.5-0.5B / 1.5B-Instruct, Qwen3-0.6B / 1.7B with their parameters and bf16 downloads', () => {
    // The published configs (LLAMA_SHAPES) give the parameter count; the Hub's model.safetensors is bf16 (2 bytes a
    // parameter), and Qwen3-0.6B's file stores its tied lm_head (vocab × hidden) a second time.
    const hub: Record<string, { shape: LlamaShapeName; family: string; headStored: boolean }> = {
      'HuggingFaceTB/SmolLM2-135M-Instruct': { shape: 'smollm2-135m', family: 'Llama', headStored: false },
      'Qwen/Qwen2.5-0.5B-Instruct': { shape: 'qwen2.5-0.5b', family: 'Qwen2', headStored: false },
      'Qwen/Qwen3-0.6B': { shape: 'qwen3-0.6b', family: 'Qwen3', headStored: true },
      'Qwen/Qwen2.5-1.5B-Instruct': { shape: 'qwen2.5-1.5b', family: 'Qwen2', headStored: false },
      'Qwen/Qwen3-1.7B': { shape: 'qwen3-1.7b', family: 'Qwen3', headStored: true },
    };
    for (const [id, want] of Object.entries(hub)) {
      const choice = MODEL_CHOICES.find((m) => m.id === id);
      expect(choice, id).toBeDefined();
      // The shape the worker's verdict (api.modelFits) is keyed by.
      expect(choice!.shape).toBe(want.shape);
      expect(modelSourceFor(id)).toEqual({ kind: 'hub', repo: id });
      const c = parseLlamaConfig({ ...LLAMA_SHAPES[want.shape] }, id);
      const params = paramCount(c);
      const m = /^(\w+), (\d+)M parameters, ~(\d+(?:\.\d)?) (MB|GB) download \(bf16\)$/.exec(choice!.note);
      expect(m, choice!.note).not.toBeNull();
      expect(m![1]).toBe(want.family);
      expect(Number(m![2])).toBe(Math.round(params / 1e6));
      const bytes = 2 * (params + (want.headStored ? c.vocab_size * c.n_embd : 0));
      const said = Number(m![3]) * (m![4] === 'GB' ? 1e9 : 1e6);
      expect(Math.abs(said - bytes) / bytes, `${id}: ${choice!.note} vs ${bytes} bytes`).toBeLessThan(0.05);
    }
  });

  it('only Llama / Qwen entries name a shape, each one of LLAMA_SHAPES', () => {
    const shapes = MODEL_CHOICES.filter((m) => m.shape !== undefined).map((m) => m.shape);
    expect(shapes).toEqual(['smollm2-135m', 'qwen2.5-0.5b', 'qwen3-0.6b', 'qwen2.5-1.5b', 'qwen3-1.7b']);
    for (const s of shapes) expect(Object.keys(LLAMA_SHAPES)).toContain(s);
  });

  it('maps config model names to worker sources', () => {
    expect(modelSourceFor('tiny')).toEqual({ kind: 'builtin', name: 'tiny' });
    expect(modelSourceFor('openai-community/gpt2')).toEqual({ kind: 'hub', repo: 'openai-community/gpt2' });
    expect(modelSourceFor('distilbert/distilgpt2@main')).toEqual({
      kind: 'hub',
      repo: 'distilbert/distilgpt2',
      revision: 'main',
    });
    expect(modelSourceFor('https://example.org/m/')).toEqual({
      kind: 'url',
      baseUrl: 'https://example.org/m/',
    });
    expect(modelSourceFor('models/tiny')).toEqual({ kind: 'hub', repo: 'models/tiny' });
    expect(modelSourceFor('./models/tiny')).toEqual({ kind: 'url', baseUrl: './models/tiny' });
  });
});
