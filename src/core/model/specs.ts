import { isLlamaConfig, type GPT2Config, type LMConfig } from './config';

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

/**
 * How a model's `random` initialises a parameter (GPT2.random, Llama.random; scripts/make-random-model.ts draws its
 * folders by the same rule): LayerNorm / RMSNorm weights 1, biases 0, every other weight normal(0, std) with std
 * 0.02, and GPT-2's residual projections (`c_proj.weight`) 0.02 / √(2·n_layer), as GPT-2's own initialisation.
 */
export function paramInit(c: LMConfig, name: string): { fill: 0 | 1 } | { std: number } {
  const norm = isLlamaConfig(c)
    ? name.endsWith('norm.weight')
    : name.includes('ln_') && name.endsWith('.weight');
  if (norm) return { fill: 1 };
  if (name.endsWith('.bias')) return { fill: 0 };
  if (!isLlamaConfig(c) && name.endsWith('c_proj.weight')) return { std: 0.02 / Math.sqrt(2 * c.n_layer) };
  return { std: 0.02 };
}
