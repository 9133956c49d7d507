import { describe, expect, it } from 'vitest';
import { TASK_NAMES } from '../src/core/tasks';
import { BUILTIN_REWARD_NAMES } from '../src/core/reward/functions';
import { EXTRA_METRICS, REQUIRED_METRICS } from '../src/core/ppo/metrics';
import { CHARTS, modelSourceFor, REWARD_NAMES, TASKS } from '../src/ui/lib/catalog';

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
