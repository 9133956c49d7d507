import { describe, expect, it } from 'vitest';
import {
  CONFIG_FIELDS,
  CONFIG_KEYS,
  DEFAULT_CONFIG,
  configFromHash,
  configToHash,
  derived,
  describeAllowed,
  validateConfig,
  type ConfigField,
  type TrainConfig,
} from '../src/common/config';
import { applyLive } from '../src/common/config/live';
import { isUserError } from '../src/common/errors';

/** The message of the UserError that `fn` throws. */
function userError(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(isUserError(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}

const CONTRACT_KEYS =
  `model task prompts seed steps batchSize miniBatches ppoEpochs learningRate valueLearningRate
  clipRange clipRangeValue vfCoef entropyCoef klCoef adaptiveKl targetKl klHorizon klEstimator gamma lam
  whitenAdvantages whitenRewards maxGradNorm logRatioClamp responseLength temperature topK topP stopToken
  missingEosPenalty valueInit saveEvery`.split(/\s+/);

describe('the table', () => {
  it('has every key of docs/formats.md §5, each with a doc, a live flag and a sane range', () => {
    for (const k of CONTRACT_KEYS) expect(CONFIG_KEYS).toContain(k);
    for (const k of CONFIG_KEYS) {
      const f: ConfigField = CONFIG_FIELDS[k];
      expect(f.doc.length, k).toBeGreaterThan(10);
      expect(f.doc, k).not.toContain('\n');
      expect(typeof f.live, k).toBe('boolean');
      if (f.type === 'number') {
        expect(f.min, k).toBeLessThan(f.max);
        expect(f.default, k).toBeGreaterThanOrEqual(f.min);
        expect(f.default, k).toBeLessThanOrEqual(f.max);
        if (f.scale === 'log') expect(f.min, k).toBeGreaterThan(0);
      }
    }
  });

  it('defaults are valid and are what validateConfig fills in', () => {
    expect(validateConfig({})).toEqual(DEFAULT_CONFIG);
    expect(validateConfig(undefined)).toEqual(DEFAULT_CONFIG);
    expect(validateConfig(JSON.parse(JSON.stringify(DEFAULT_CONFIG)))).toEqual(DEFAULT_CONFIG);
    expect(DEFAULT_CONFIG).toMatchObject({
      model: 'tiny',
      task: 'sentiment',
      batchSize: 16,
      miniBatches: 2,
      gamma: 1,
    });
  });

  it('validateConfig returns a copy: editing it leaves the defaults alone', () => {
    const c = validateConfig({ prompts: ['a'] });
    c.prompts!.push('b');
    c.steps = 3;
    expect(DEFAULT_CONFIG.steps).toBe(100);
    expect(DEFAULT_CONFIG.prompts).toBeUndefined();
  });

  it('derived sizes', () => {
    expect(derived(DEFAULT_CONFIG)).toEqual({
      miniBatchSize: 8,
      updatesPerStep: 4,
      totalSamples: 1600,
      maxResponseTokensPerStep: 16 * 24,
      pureSampling: true,
      groupSize: 1,
      promptsPerStep: 16,
      hasValueModel: true,
    });
    const d = derived(validateConfig({ topK: 5 }));
    expect(d.pureSampling).toBe(false);
  });

  it('groupSize 0 is the algorithm’s default G: 1 for ppo and reinforce++, 4 for grpo and rloo', () => {
    const g = (o: object) => derived(validateConfig(o));
    expect(g({ algorithm: 'ppo' })).toMatchObject({ groupSize: 1, promptsPerStep: 16, hasValueModel: true });
    expect(g({ algorithm: 'reinforce++' })).toMatchObject({ groupSize: 1, hasValueModel: false });
    expect(g({ algorithm: 'grpo' })).toMatchObject({ groupSize: 4, promptsPerStep: 4, hasValueModel: false });
    expect(g({ algorithm: 'rloo', groupSize: 8 })).toMatchObject({ groupSize: 8, promptsPerStep: 2 });
    expect(g({ algorithm: 'ppo', groupSize: 2 })).toMatchObject({ groupSize: 2, promptsPerStep: 8 });
  });
});

describe('validation errors name the key and what would be right', () => {
  it('algorithms (docs/formats.md §7): groupSize must divide batchSize, grpo/rloo need G ≥ 2, no valueInit without a value model', () => {
    const err = (o: object) => {
      try {
        validateConfig(o, 'cfg.json');
      } catch (e) {
        return (e as Error).message;
      }
      return '';
    };
    expect(err({ algorithm: 'grpo', batchSize: 6 })).toMatch(
      /"groupSize" \(4, the default for "grpo"\) must divide "batchSize" \(6\)/,
    );
    expect(err({ algorithm: 'ppo', batchSize: 16, groupSize: 3 })).toMatch(
      /"groupSize" \(3\) must divide "batchSize" \(16\)/,
    );
    expect(err({ algorithm: 'grpo', groupSize: 1 })).toMatch(
      /"algorithm" "grpo" .* "groupSize" must be 2 or more, got 1/,
    );
    expect(err({ algorithm: 'rloo', groupSize: 1 })).toMatch(
      /"algorithm" "rloo" .* "groupSize" must be 2 or more/,
    );
    expect(err({ algorithm: 'reinforce++', valueInit: 'reward' })).toMatch(
      /"valueInit" "reward" needs a value model, but "algorithm" "reinforce\+\+" has none/,
    );
    expect(err({ algorithm: 'dpo' })).toMatch(
      /"algorithm" must be one of "ppo", "grpo", "rloo", "reinforce\+\+", got "dpo"/,
    );
    expect(err({ scaleRewards: 'mean' })).toMatch(/"scaleRewards" must be one of "group", "batch", "none"/);
    expect(err({ lossAggregation: 'sum' })).toMatch(
      /"lossAggregation" must be one of "token-mean", "seq-mean", "seq-sum-norm"/,
    );
    // The valid ones pass: reinforce++ with G 1, grpo with its default, ppo with groups.
    expect(err({ algorithm: 'reinforce++' })).toBe('');
    expect(err({ algorithm: 'grpo', groupSize: 2, batchSize: 4, miniBatches: 2 })).toBe('');
    expect(err({ algorithm: 'ppo', groupSize: 4 })).toBe('');
  });

  it('algorithm keys round-trip through the URL hash ("reinforce++" escaped)', () => {
    const cfg = validateConfig({ algorithm: 'reinforce++', groupSize: 2, lossAggregation: 'seq-sum-norm' });
    const hash = configToHash(cfg);
    expect(hash).toContain('algorithm=reinforce%2B%2B');
    expect(configFromHash(hash)).toEqual(cfg);
  });

  it('unknown keys, with close suggestions', () => {
    let m = userError(() => validateConfig({ batch_size: 8 }, 'run.json'));
    expect(m).toContain('run.json');
    expect(m).toContain('"batch_size"');
    expect(m).toContain('"batchSize"');
    m = userError(() => validateConfig({ klCoeff: 0.1 }));
    expect(m).toContain('"klCoef"');
    m = userError(() => validateConfig({ zzzqqq: 1 }));
    expect(m).toContain('"zzzqqq"');
    expect(m).toContain('Valid keys: model, task');
  });

  it('out of range and wrong types', () => {
    let m = userError(() => validateConfig({ clipRange: 5 }));
    expect(m).toContain('"clipRange"');
    expect(m).toContain('from 0.01 to 1');
    expect(m).toContain('got 5');
    m = userError(() => validateConfig({ batchSize: 2.5 }));
    expect(m).toContain('an integer from 1 to 4096');
    m = userError(() => validateConfig({ learningRate: '1e-4' }));
    expect(m).toContain('"learningRate" must be a number');
    expect(m).toContain('"1e-4"');
    m = userError(() => validateConfig({ adaptiveKl: 'yes' }));
    expect(m).toContain('true or false');
    m = userError(() => validateConfig({ klEstimator: 'k4' }));
    expect(m).toContain('one of "k1", "k2", "k3"');
    m = userError(() => validateConfig({ gamma: NaN }));
    expect(m).toContain('"gamma"');
    expect(() => validateConfig([])).toThrow(/JSON object/);
  });

  it('reports every problem at once', () => {
    const m = userError(() => validateConfig({ clipRange: 5, topP: 0, foo: 1 }));
    expect(m).toContain('clipRange');
    expect(m).toContain('topP');
    expect(m).toContain('foo');
  });

  it('batchSize must be divisible by miniBatches', () => {
    const m = userError(() => validateConfig({ batchSize: 16, miniBatches: 3 }));
    expect(m).toContain('"batchSize" (16)');
    expect(m).toContain('"miniBatches" (3)');
    expect(m).toContain('1, 2, 4, 8, 16');
    expect(validateConfig({ batchSize: 12, miniBatches: 3 }).miniBatches).toBe(3);
  });

  it('task and prompts', () => {
    expect(validateConfig({ prompts: ['Hello', 'The movie was'] }).prompts).toEqual([
      'Hello',
      'The movie was',
    ]);
    expect(validateConfig({ task: null, prompts: ['x'] }).task).toBeNull();
    expect(userError(() => validateConfig({ task: null }))).toMatch(/"task".*"prompts"/);
    expect(userError(() => validateConfig({ prompts: [] }))).toContain('non-empty array');
    expect(userError(() => validateConfig({ prompts: ['ok', ''] }))).toContain('prompts[1]');
    expect(userError(() => validateConfig({ prompts: 'hello' }))).toContain('"prompts"');
    expect(userError(() => validateConfig({ task: '' }))).toContain('"task"');
  });

  it('reward specs', () => {
    expect(validateConfig({ reward: 'length' }).reward).toBe('length');
    const mix = {
      mix: [
        { name: 'sentiment', weight: 1 },
        { name: 'length', weight: -0.1, options: { target: 5 } },
      ],
    };
    expect(validateConfig({ reward: mix }).reward).toEqual(mix);
    expect(validateConfig({ reward: { model: 'runs/rm' } }).reward).toEqual({ model: 'runs/rm' });
    expect(userError(() => validateConfig({ reward: { mix: [] } }))).toContain('"mix" must be a non-empty');
    expect(userError(() => validateConfig({ reward: { mix: [{ name: 'a', weight: 'x' }] } }))).toContain(
      'mix[0].weight',
    );
    expect(userError(() => validateConfig({ reward: { foo: 1 } }))).toContain('"reward"');
  });

  it('stopToken and cross-key rules', () => {
    expect(validateConfig({ stopToken: null }).stopToken).toBeNull();
    expect(validateConfig({ stopToken: 50256 }).stopToken).toBe(50256);
    expect(userError(() => validateConfig({ stopToken: -1 }))).toContain('"eos", null, or a token id');
    expect(userError(() => validateConfig({ stopToken: 'EOS' }))).toContain('"stopToken"');
    expect(userError(() => validateConfig({ adaptiveKl: true, klCoef: 0 }))).toContain('"klCoef" > 0');
  });

  it('LoRA keys: rank, alpha, targets (kept in table order), valueModel and its cross-key rule', () => {
    expect(DEFAULT_CONFIG.lora).toBe(0);
    expect(DEFAULT_CONFIG.loraAlpha).toBe(16);
    expect(DEFAULT_CONFIG.loraTargets).toEqual(['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj']);
    expect(DEFAULT_CONFIG.valueModel).toBe('shared');
    for (const k of ['lora', 'loraAlpha', 'loraTargets', 'valueModel'] as const) {
      expect(CONFIG_FIELDS[k].live, k).toBe(false);
      expect(CONFIG_FIELDS[k].doc, k).toContain('Applies on reset');
    }
    expect(CONFIG_FIELDS.lora.doc).toMatch(/1e-4 to 1e-3 for GPT-2 small/);
    const c = validateConfig({ lora: 8, loraTargets: ['mlp.c_proj', 'c_attn'] });
    expect(c.loraTargets).toEqual(['c_attn', 'mlp.c_proj']);
    expect(userError(() => validateConfig({ lora: 1.5 }))).toContain(
      '"lora" must be an integer from 0 to 1024',
    );
    expect(userError(() => validateConfig({ loraAlpha: 0 }))).toContain('"loraAlpha"');
    expect(userError(() => validateConfig({ loraTargets: [] }))).toContain(
      '"loraTargets" must be a non-empty list',
    );
    expect(userError(() => validateConfig({ loraTargets: ['c_proj'] }))).toContain('(entry "c_proj")');
    expect(userError(() => validateConfig({ loraTargets: ['c_fc', 'c_fc'] }))).toContain('listed twice');
    expect(userError(() => validateConfig({ loraTargets: 'c_fc' }))).toContain('"loraTargets"');
    expect(userError(() => validateConfig({ valueModel: 'both' }))).toContain('one of "shared", "separate"');
    // Without LoRA "shared" means a separate value model, so valueInit "reward" is fine; with LoRA it is not.
    expect(validateConfig({ valueInit: 'reward' }).valueInit).toBe('reward');
    expect(userError(() => validateConfig({ lora: 4, valueInit: 'reward' }))).toContain(
      'set "valueModel" to "separate" or "valueInit" to "policy"',
    );
    expect(validateConfig({ lora: 4, valueInit: 'reward', valueModel: 'separate' }).lora).toBe(4);
  });

  it('describeAllowed covers every key', () => {
    for (const k of CONFIG_KEYS) expect(describeAllowed(k).length).toBeGreaterThan(4);
  });
});

describe('URL hash', () => {
  it('defaults give an empty hash and back', () => {
    expect(configToHash(DEFAULT_CONFIG)).toBe('');
    expect(configFromHash('')).toEqual(DEFAULT_CONFIG);
    expect(configFromHash('#')).toEqual(DEFAULT_CONFIG);
  });

  it('holds only non-default keys, in table order', () => {
    const cfg = validateConfig({ klCoef: 0.1, steps: 200 });
    expect(configToHash(cfg)).toBe('steps=200&klCoef=0.1');
  });

  it('round trips every kind of value', () => {
    const cfg: TrainConfig = validateConfig({
      model: 'models/my tiny',
      task: null,
      prompts: ['Hello & welcome', 'a=b?c#d', 'unicode ✓ +plus'],
      reward: {
        mix: [
          { name: 'sentiment', weight: 1 },
          { name: 'length', weight: 0.5, options: { n: 3 } },
        ],
      },
      seed: 42,
      learningRate: 3e-5,
      adaptiveKl: true,
      klEstimator: 'k3',
      whitenAdvantages: false,
      stopToken: null,
      valueInit: 'reward',
      temperature: 0.7,
    });
    const hash = configToHash(cfg);
    expect(hash).not.toMatch(/[ #]/);
    expect(configFromHash('#' + hash)).toEqual(cfg);
    const lora = validateConfig({
      lora: 8,
      loraAlpha: 32,
      loraTargets: ['c_attn', 'c_fc'],
      valueModel: 'separate',
    });
    expect(configToHash(lora)).toBe('lora=8&loraAlpha=32&loraTargets=c_attn%2Cc_fc&valueModel=separate');
    expect(configFromHash(configToHash(lora))).toEqual(lora);
    expect(userError(() => configFromHash('loraTargets=c_attn%2Cnope'))).toContain('"loraTargets"');
    const cfg2 = validateConfig({ reward: 'length', stopToken: 7, task: 'other' });
    expect(configFromHash(configToHash(cfg2))).toEqual(cfg2);
    // URLSearchParams reads what we write, and '+' reads as a space like it does there
    expect(new URLSearchParams(hash).get('prompts')).toBe(JSON.stringify(cfg.prompts));
    expect(configFromHash('model=a+b').model).toBe('a b');
  });

  it('a tampered hash is a UserError naming the bad key', () => {
    const cases: [string, string][] = [
      ['clipRange=abc', '"clipRange"'],
      ['clipRange=5', 'from 0.01 to 1'],
      ['steps=1e9', '"steps"'],
      ['fooBar=1', '"fooBar"'],
      ['adaptiveKl=yes', '"adaptiveKl"'],
      ['prompts=%5Bbroken', '"prompts"'],
      ['stopToken=x', '"stopToken"'],
      ['reward=%7Bnot-json', '"reward"'],
      ['model=%E0%A4%A', '"model"'],
      ['steps=5&steps=6', 'more than once'],
      ['batchSize=9', '"miniBatches"'],
    ];
    for (const [hash, word] of cases)
      expect(
        userError(() => configFromHash(hash)),
        hash,
      ).toContain(word);
  });
});

describe('live changes', () => {
  it('accepts live keys and refuses the others, naming them', () => {
    const cfg = validateConfig({});
    expect(applyLive(cfg, { learningRate: 3e-4, klCoef: 0.2 })).toMatchObject({
      learningRate: 3e-4,
      klCoef: 0.2,
    });
    expect(applyLive(cfg, { batchSize: 16 }).batchSize).toBe(16); // unchanged value is fine
    const m = userError(() => applyLive(cfg, { batchSize: 32 }));
    expect(m).toContain('"batchSize" cannot change on a running job');
    expect(m).toContain('learningRate');
    expect(userError(() => applyLive(cfg, { learningRate: 5 }))).toContain('from 1e-7 to 0.1');
  });
});
