import { describe, expect, it } from 'vitest';
import { UserError } from '../src/common/errors';
import {
  BUILTIN_REWARDS,
  arithmeticReward,
  keywordsReward,
  lengthReward,
  makeReward,
  mix,
  sentimentReward,
  type Sample,
} from '../src/core/reward/functions';
import { rewardFnFromModule, scoreSamples, validateScore } from '../src/core/reward/module';

const sample = (response: string, prompt = 'The movie was', responseTokens: number[] = []): Sample => ({
  prompt,
  response,
  promptTokens: [],
  responseTokens,
});

describe('sentiment', () => {
  const r = sentimentReward();
  it('orders positive > neutral > negative, bounded in (-1, 1)', () => {
    const pos = r(sample('I love this, it is great')) as number;
    const neg = r(sample('I hate this, it is terrible')) as number;
    expect(pos).toBeGreaterThan(0);
    expect(neg).toBeLessThan(0);
    expect(r(sample('the table'))).toBe(0);
    expect(pos).toBeCloseTo(Math.tanh(6 / 5)); // love +3, great +3
    expect(neg).toBeCloseTo(Math.tanh(-6 / 5));
    // tanh saturates: 50 × love (+3) = 150, tanh(150 / 5) = 1 to float64 (≤ 1 alone holds for any tanh).
    expect(r(sample('love '.repeat(50)))).toBe(Math.tanh(150 / 5));
  });
  it('honours negators and options', () => {
    expect(r(sample('not good'))).toBeLessThan(0);
    expect(sentimentReward({ scale: 1 })(sample('good'))).toBeCloseTo(Math.tanh(3));
    expect(sentimentReward({ comparative: true })(sample('good day'))).toBeCloseTo(Math.tanh(1.5 / 5));
    expect(() => sentimentReward({ scale: 0 })).toThrow(/"scale" must be a positive number/);
    expect(() => sentimentReward({ sacle: 2 })).toThrow(/unknown option "sacle"/);
  });
});

describe('length', () => {
  it('is -|len - target| / target in characters by default (target 20)', () => {
    const r = lengthReward();
    expect(r(sample('x'.repeat(20)))).toBe(0);
    expect(r(sample('x'.repeat(15)))).toBe(-0.25);
    expect(r(sample('x'.repeat(30)))).toBe(-0.5);
    expect(r(sample('é😀'.repeat(10)))).toBe(0); // code points, not UTF-16 units or bytes
  });
  it('counts tokens when asked', () => {
    expect(lengthReward({ target: 4, unit: 'tokens' })(sample('whatever', '', [1, 2]))).toBe(-0.5);
    expect(() => lengthReward({ unit: 'words' })).toThrow(/"unit" must be one of "chars", "tokens"/);
  });
});

describe('keywords', () => {
  const r = keywordsReward({ include: ['happy', 'love'], avoid: ['sad', 'thank you'] });
  it('counts each keyword once, whole words, any case', () => {
    expect(r(sample('I am HAPPY, so happy'))).toBe(1);
    expect(r(sample('Love makes me happy'))).toBe(2);
    expect(r(sample('a glove, unhappy'))).toBe(0);
    expect(r(sample('happy but sad'))).toBe(0);
    expect(r(sample('Thank you, sad day'))).toBe(-2);
    expect(r(sample('thank, you'))).toBe(-1); // phrase words match across punctuation
  });
  it('defaults to include happy/love and rejects bad options', () => {
    expect(keywordsReward()(sample('love'))).toBe(1);
    expect(() => keywordsReward({ include: 'love' })).toThrow(/"include" must be a string list/);
    expect(() => keywordsReward({ include: [], avoid: [] })).toThrow(UserError);
  });
});

describe('arithmetic', () => {
  const r = arithmeticReward();
  it('gives 1 for the right first number, 0.1 for a wrong one, 0 for none', () => {
    expect(r(sample('19', '12+7='))).toBe(1);
    expect(r(sample(' 7 and 8', '3+4='))).toBe(1);
    expect(r(sample('8 or 7', '3+4='))).toBe(0.1);
    expect(r(sample('77', '3+4='))).toBe(0.1);
    expect(r(sample('seven', '3+4='))).toBe(0);
    expect(r(sample('-1', '3-4='))).toBe(1);
    expect(r(sample('12', 'Q: 3*4='))).toBe(1);
    expect(arithmeticReward({ partial: 0 })(sample('8', '3+4='))).toBe(0);
  });
  it('names a prompt that is not a problem', () => {
    expect(() => r(sample('7', 'hello'))).toThrow(/prompt "hello" is not a problem like "12\+7="/);
  });
});

describe('mix and makeReward', () => {
  it('mix is the weighted sum', () => {
    const s = sample('I love it, happy', '1+1=');
    const fn = mix([
      { fn: () => 0.5, weight: 2 },
      { fn: keywordsReward(), weight: -0.25 },
    ]);
    expect(fn(s)).toBe(2 * 0.5 - 0.25 * 2);
  });
  it('mix awaits async parts', async () => {
    const fn = mix([
      { fn: async () => 1, weight: 3 },
      { fn: () => 2, weight: 0.5 },
    ]);
    await expect(fn(sample(''))).resolves.toBe(4);
  });
  it('builds specs by name, with options, and as a mix', () => {
    const s = sample('I love this, it is great');
    expect(makeReward('sentiment')(s)).toBeCloseTo(Math.tanh(6 / 5));
    expect(makeReward({ name: 'keywords', options: { include: ['great'] } })(s)).toBe(1);
    const mixed = makeReward({
      mix: [
        { name: 'sentiment', weight: 1 },
        { name: 'length', weight: 0.5, options: { target: 24 } },
        { name: 'keywords', weight: 2, options: { include: ['love', 'great', 'bad'] } },
      ],
    });
    // length: 24 chars → 0; keywords: love + great = 2
    expect(mixed(s)).toBeCloseTo(Math.tanh(6 / 5) + 0.5 * 0 + 2 * 2);
  });
  it('names the valid rewards for an unknown one, and rejects bad weights', () => {
    expect(() => makeReward('sentimnet')).toThrow(UserError);
    expect(() => makeReward('sentimnet')).toThrow(/"sentiment", "length", "keywords", "arithmetic"/);
    expect(() => makeReward({ mix: [{ name: 'length', weight: Number.NaN }] })).toThrow(
      /"weight" must be a finite number/,
    );
    expect(() => makeReward({ mix: [{ name: 'length', weight: '1' }] })).toThrow(/finite number/);
    expect(() => makeReward({ mix: [] })).toThrow(/non-empty/);
    expect(() => mix([{ fn: () => 1, weight: Infinity }])).toThrow(/finite/);
    expect(() => makeReward(42)).toThrow(UserError);
    expect(Object.keys(BUILTIN_REWARDS)).toEqual([
      'sentiment',
      'length',
      'keywords',
      'arithmetic',
      'arithmetic-chat',
    ]);
  });
});

describe('reward module helpers', () => {
  it('validateScore names the source, sample and prompt', () => {
    expect(validateScore(0.5, 0, 'x')).toBe(0.5);
    expect(() => validateScore(Number.NaN, 3, 'reward module my.mjs', 'The movie was')).toThrow(
      'reward module my.mjs returned NaN for sample 3 (prompt "The movie was"); it must return a finite number.',
    );
    expect(() => validateScore('1', 0, 'm')).toThrow(/returned the string "1" for sample 0/);
    expect(() => validateScore(undefined, 1, 'm')).toThrow(/returned undefined for sample 1;/);
  });
  it('scoreSamples calls in order, awaits, and wraps throws', async () => {
    const samples = [sample('a'), sample('bb')];
    await expect(scoreSamples(async (s) => s.response.length, samples, 'm')).resolves.toEqual([1, 2]);
    await expect(
      scoreSamples(
        () => {
          throw new Error('boom');
        },
        samples,
        'reward module r.mjs',
      ),
    ).rejects.toThrow('reward module r.mjs threw for sample 0 (prompt "The movie was"): boom');
    expect(() => rewardFnFromModule({}, 'reward module r.mjs')).toThrow(/default export/);
    expect(rewardFnFromModule({ default: () => 1 }, 'r')(sample(''))).toBe(1);
  });
});
