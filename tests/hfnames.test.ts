import { describe, it, expect } from 'vitest';
import { UserError } from '../src/common/errors';
import type { GPT2Config } from '../src/core/model/config';
import { mapHfTensors, toHfTensors } from '../src/core/model/hfnames';
import { readSafetensors, writeSafetensors, type SafetensorsFile } from '../src/core/model/safetensors';
import { scoreHeadSpecs, trunkParamSpecs, type ParamSpec } from '../src/core/model/specs';

const FILE = 'my-model/model.safetensors';

const config: GPT2Config = {
  model_type: 'gpt2',
  vocab_size: 7,
  n_positions: 5,
  n_embd: 4,
  n_layer: 2,
  n_head: 2,
  layer_norm_epsilon: 1e-5,
  activation_function: 'gelu_new',
  bos_token_id: 6,
  eos_token_id: 6,
  tokenizer: 'bytes',
};
const trunk = trunkParamSpecs(config);
const withScore = [...trunk, ...scoreHeadSpecs(config)];

function count(shape: number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Distinct deterministic values per tensor so mix-ups show. */
function params(specs: ParamSpec[]): Map<string, Float32Array> {
  const m = new Map<string, Float32Array>();
  specs.forEach((s, k) =>
    m.set(
      s.name,
      Float32Array.from({ length: count(s.shape) }, (_, i) => k + i / 1000),
    ),
  );
  return m;
}

type Entry = { dtype: string; shape: number[]; data: Float32Array };

/** An HF-style file: specs with optional prefix, plus extra entries. */
function hfFile(specs: ParamSpec[], prefix: boolean, extra: Record<string, Entry> = {}): SafetensorsFile {
  const p = params(specs);
  const tensors = new Map<string, Entry>();
  for (const s of specs) {
    const name = prefix && !s.name.startsWith('score.') ? `transformer.${s.name}` : s.name;
    tensors.set(name, { dtype: 'F32', shape: s.shape.slice(), data: p.get(s.name)! });
  }
  for (const [k, v] of Object.entries(extra)) tensors.set(k, v);
  return { tensors, metadata: { format: 'pt' } };
}

function f32(shape: number[], fill = 0): Entry {
  return { dtype: 'F32', shape, data: new Float32Array(count(shape)).fill(fill) };
}

function userError(fn: () => unknown): UserError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return e as UserError;
  }
  throw new Error('expected a UserError');
}

describe('mapHfTensors', () => {
  it('maps names with the transformer. prefix', () => {
    const got = mapHfTensors(hfFile(trunk, true), trunk, FILE);
    expect([...got.keys()]).toEqual(trunk.map((s) => s.name));
    const want = params(trunk);
    for (const s of trunk) expect(got.get(s.name)).toEqual(want.get(s.name));
  });

  it('maps names without the prefix', () => {
    const got = mapHfTensors(hfFile(trunk, false), trunk, FILE);
    expect(got.size).toBe(trunk.length);
    expect(got.get('h.1.mlp.c_fc.weight')).toEqual(params(trunk).get('h.1.mlp.c_fc.weight'));
  });

  it('accepts a mix of prefixed and unprefixed names, score.* unprefixed', () => {
    const f = hfFile(withScore, true);
    const wpe = f.tensors.get('transformer.wpe.weight')!;
    f.tensors.delete('transformer.wpe.weight');
    f.tensors.set('wpe.weight', wpe);
    const got = mapHfTensors(f, withScore, FILE);
    expect(got.get('score.weight')).toEqual(params(withScore).get('score.weight'));
    expect(got.get('wpe.weight')).toBe(wpe.data);
  });

  it('ignores attn.bias / attn.masked_bias buffers, with or without prefix', () => {
    const f = hfFile(trunk, true, {
      'transformer.h.0.attn.bias': f32([1, 1, 5, 5], 1),
      'transformer.h.0.attn.masked_bias': f32([], -1e4),
      'h.1.attn.bias': f32([1, 1, 5, 5], 1),
    });
    expect(mapHfTensors(f, trunk, FILE).size).toBe(trunk.length);
  });

  it('ignores lm_head.weight equal to wte.weight, rejects an untied one', () => {
    const f = hfFile(trunk, true);
    const wte = f.tensors.get('transformer.wte.weight')!;
    f.tensors.set('lm_head.weight', { dtype: 'F32', shape: wte.shape.slice(), data: wte.data.slice() });
    expect(mapHfTensors(f, trunk, FILE).size).toBe(trunk.length);

    const diff = wte.data.slice();
    diff[3] += 1;
    f.tensors.set('lm_head.weight', { dtype: 'F32', shape: wte.shape.slice(), data: diff });
    const e = userError(() => mapHfTensors(f, trunk, FILE));
    expect(e.message.startsWith(FILE)).toBe(true);
    expect(e.message).toContain('lm_head.weight');
    expect(e.message).toMatch(/untied LM heads are not supported/);
  });

  it('reports a missing tensor with its expected shape', () => {
    const f = hfFile(trunk, true);
    f.tensors.delete('transformer.h.1.attn.c_attn.weight');
    const e = userError(() => mapHfTensors(f, trunk, FILE));
    expect(e.message).toContain(FILE);
    expect(e.message).toContain('h.1.attn.c_attn.weight');
    expect(e.message).toContain('[4, 12]');
  });

  it('reports a missing score.weight', () => {
    const e = userError(() => mapHfTensors(hfFile(trunk, true), withScore, FILE));
    expect(e.message).toContain('"score.weight"');
    expect(e.message).toContain('[1, 4]');
  });

  it('reports a wrong shape with got and expected', () => {
    const f = hfFile(trunk, false);
    f.tensors.set('ln_f.bias', f32([5]));
    const e = userError(() => mapHfTensors(f, trunk, FILE));
    expect(e.message).toContain(FILE);
    expect(e.message).toContain('ln_f.bias');
    expect(e.message).toContain('[5]');
    expect(e.message).toContain('[4]');
  });

  it('hints at a transposed Conv1D weight', () => {
    const f = hfFile(trunk, true);
    f.tensors.set('transformer.h.0.mlp.c_fc.weight', f32([16, 4]));
    const e = userError(() => mapHfTensors(f, trunk, FILE));
    expect(e.message).toContain('"transformer.h.0.mlp.c_fc.weight" has shape [16, 4], expected [4, 16]');
    expect(e.message).toMatch(/transposed/);
  });

  it('rejects unexpected extra tensors, listing up to 5', () => {
    const extra: Record<string, Entry> = {};
    for (let i = 0; i < 7; i++) extra[`transformer.h.${i + 2}.ln_1.weight`] = f32([4]);
    const e = userError(() => mapHfTensors(hfFile(trunk, true, extra), trunk, FILE));
    expect(e.message).toContain(FILE);
    expect(e.message).toContain('transformer.h.2.ln_1.weight');
    expect(e.message).toContain('transformer.h.6.ln_1.weight');
    expect(e.message).not.toContain('transformer.h.7.ln_1.weight');
    expect(e.message).toContain('2 more');
  });

  it('treats a score head as extra for the policy unless allowed', () => {
    const f = hfFile(withScore, true);
    expect(userError(() => mapHfTensors(f, trunk, FILE)).message).toContain('score.weight');
    expect(mapHfTensors(f, trunk, FILE, { allowExtra: ['score.weight'] }).size).toBe(trunk.length);
  });

  it('rejects a prefixed score.weight as extra (and reports the real one missing)', () => {
    const f = hfFile(trunk, true, { 'transformer.score.weight': f32([1, 4]) });
    expect(userError(() => mapHfTensors(f, withScore, FILE)).message).toContain(
      'missing tensor "score.weight"',
    );
  });

  it('rejects the same tensor given with and without the prefix', () => {
    const f = hfFile(trunk, true, { 'wte.weight': f32([7, 4]) });
    const e = userError(() => mapHfTensors(f, trunk, FILE));
    expect(e.message).toContain('transformer.wte.weight');
    expect(e.message).toMatch(/appears twice/);
  });

  it('accepts a zero score.bias, rejects a nonzero one, uses it when specs have it', () => {
    const zero = hfFile(withScore, true, { 'score.bias': f32([1], 0) });
    expect(mapHfTensors(zero, withScore, FILE).has('score.bias')).toBe(false);
    const nonzero = hfFile(withScore, true, { 'score.bias': f32([1], 0.5) });
    const e = userError(() => mapHfTensors(nonzero, withScore, FILE));
    expect(e.message).toContain(FILE);
    expect(e.message).toMatch(/score\.bias is not supported/);
    const specsWithBias = [...withScore, { name: 'score.bias', shape: [1] }];
    expect(mapHfTensors(nonzero, specsWithBias, FILE).get('score.bias')![0]).toBe(0.5);
  });
});

describe('toHfTensors', () => {
  it('prefixes trunk names only when asked, never score.*, no lm_head', () => {
    const p = params(withScore);
    const pre = toHfTensors(p, withScore, { prefix: true });
    expect(pre.map((t) => t.name)).toEqual(
      withScore.map((s) => (s.name.startsWith('score.') ? s.name : `transformer.${s.name}`)),
    );
    expect(pre.some((t) => t.name.includes('lm_head'))).toBe(false);
    const plain = toHfTensors(p, withScore, { prefix: false });
    expect(plain.map((t) => t.name)).toEqual(withScore.map((s) => s.name));
    expect(pre.find((t) => t.name === 'transformer.h.0.attn.c_attn.weight')!.shape).toEqual([4, 12]);
  });

  it('round-trips through safetensors and back', () => {
    const p = params(withScore);
    const bytes = writeSafetensors(toHfTensors(p, withScore, { prefix: true }), { format: 'pt' });
    const got = mapHfTensors(readSafetensors(bytes, FILE), withScore, FILE);
    for (const s of withScore) expect(got.get(s.name)).toEqual(p.get(s.name));
  });
});
