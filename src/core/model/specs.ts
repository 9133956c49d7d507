import type { GPT2Config, LMConfig } from './config';

/** One parameter of a model: its Hugging Face name (without the `transformer.` prefix) and shape. */
export interface ParamSpec {
  name: string;
  shape: number[];
}

/**
 * The GPT-2 trunk's parameters in GPT2Model's names and Conv1D layout ([in, out]).
 * The LM head is tied to `wte.weight` and has no parameter of its own.
 */
export function trunkParamSpecs(c: GPT2Config): ParamSpec[] {
  const C = c.n_embd;
  const specs: ParamSpec[] = [
    { name: 'wte.weight', shape: [c.vocab_size, C] },
    { name: 'wpe.weight', shape: [c.n_positions, C] },
  ];
  for (let i = 0; i < c.n_layer; i++) {
    const p = `h.${i}.`;
    specs.push(
      { name: `${p}ln_1.weight`, shape: [C] },
      { name: `${p}ln_1.bias`, shape: [C] },
      { name: `${p}attn.c_attn.weight`, shape: [C, 3 * C] },
      { name: `${p}attn.c_attn.bias`, shape: [3 * C] },
      { name: `${p}attn.c_proj.weight`, shape: [C, C] },
      { name: `${p}attn.c_proj.bias`, shape: [C] },
      { name: `${p}ln_2.weight`, shape: [C] },
      { name: `${p}ln_2.bias`, shape: [C] },
      { name: `${p}mlp.c_fc.weight`, shape: [C, 4 * C] },
      { name: `${p}mlp.c_fc.bias`, shape: [4 * C] },
      { name: `${p}mlp.c_proj.weight`, shape: [4 * C, C] },
      { name: `${p}mlp.c_proj.bias`, shape: [C] },
    );
  }
  specs.push({ name: 'ln_f.weight', shape: [C] }, { name: 'ln_f.bias', shape: [C] });
  return specs;
}

/** *ForSequenceClassification's head with one label: `score.weight` [1, n_embd] (no bias in HF), every family. */
export function scoreHeadSpecs(c: LMConfig): ParamSpec[] {
  return [{ name: 'score.weight', shape: [1, c.n_embd] }];
}
