import { describe, expect, it } from 'vitest';
import { familyTargets, loraTargetView, toggleLoraTarget } from '../src/ui/lib/lora-targets';

const GPT2 = ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'];
const LLAMA = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

/** loraTargets offered by the loaded model's family; the default (GPT-2's four) shows as all seven on a Qwen model. */
describe('loraTargets checkboxes per family (pure)', () => {
  it('a family offers its own layers; no model: every name', () => {
    expect(familyTargets('gpt2')).toEqual(GPT2);
    for (const f of ['llama', 'qwen2', 'qwen3'] as const) expect(familyTargets(f)).toEqual(LLAMA);
    expect(familyTargets(null)).toEqual([...GPT2, ...LLAMA]);
  });

  it('GPT-2: its four, the default all checked', () => {
    expect(loraTargetView('gpt2', GPT2)).toEqual({ choices: GPT2, checked: GPT2 });
    expect(loraTargetView('gpt2', ['c_attn'])).toEqual({ choices: GPT2, checked: ['c_attn'] });
  });

  it('Qwen: the default shows as all seven; a Llama subset as itself', () => {
    expect(loraTargetView('qwen2', GPT2)).toEqual({ choices: LLAMA, checked: LLAMA });
    expect(loraTargetView('qwen2', ['v_proj', 'q_proj'])).toEqual({
      choices: LLAMA,
      checked: ['q_proj', 'v_proj'],
    });
  });

  it('a name of the other family stays shown and checked, so it can be cleared', () => {
    expect(loraTargetView('qwen3', ['c_attn', 'q_proj'])).toEqual({
      choices: ['c_attn', ...LLAMA],
      checked: ['c_attn', 'q_proj'],
    });
    expect(toggleLoraTarget('qwen3', ['c_attn', 'q_proj'], 'c_attn', false)).toEqual(['q_proj']);
    expect(loraTargetView('gpt2', ['q_proj'])).toEqual({ choices: [...GPT2, 'q_proj'], checked: ['q_proj'] });
  });

  it('clearing one of the seven from the default writes the other six; checking all seven writes the default back', () => {
    const six = toggleLoraTarget('llama', GPT2, 'down_proj', false);
    expect(six).toEqual(LLAMA.filter((t) => t !== 'down_proj'));
    expect(toggleLoraTarget('llama', six!, 'down_proj', true)).toEqual(GPT2);
  });

  it('the last target cannot be cleared', () => {
    expect(toggleLoraTarget('qwen2', ['q_proj'], 'q_proj', false)).toBeNull();
    expect(toggleLoraTarget('gpt2', ['c_fc'], 'c_fc', false)).toBeNull();
    expect(toggleLoraTarget('gpt2', ['c_fc'], 'c_attn', true)).toEqual(['c_attn', 'c_fc']);
  });
});
