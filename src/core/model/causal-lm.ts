/**
 * The model of a config's family (its `model_type`): GPT2 or Llama (also Qwen2, Qwen3), as a CausalLM (model/lm.ts).
 */
import { checkBaseDtype, type WeightData } from './f16-base';
import { isLlamaConfig, type LMConfig } from './config';
import { GPT2 } from './gpt2';
import { Llama, llamaParamSpecs } from './llama';
import type { CausalLM, GPT2Options } from './lm';
import { trunkParamSpecs, type ParamSpec } from './specs';

export type { CausalLM } from './lm';

/** The model of `config`'s family from host arrays by spec name. */
export function lmFromArrays(
  config: LMConfig,
  arrays: Map<string, WeightData>,
  trainable: boolean,
  label?: string,
  opts: GPT2Options = {},
): CausalLM {
  if (isLlamaConfig(config)) return Llama.fromArrays(config, arrays, trainable, label, opts);
  // GPT-2 holds f32 only (a packed array comes from a baseDtype "f16" read, which GPT2.fromArrays refuses first).
  checkBaseDtype(opts.baseDtype, { trainable, family: 'gpt2' });
  return GPT2.fromArrays(config, arrays as Map<string, Float32Array>, trainable, label, opts);
}

/**
 * lmFromArrays a weight at a time (Llama.fromReader, GPT2.fromReader): `read` gives each spec's values in turn; each
 * weight goes to the device before the next is read (model/build-params.ts).
 */
export async function lmFromReader(
  config: LMConfig,
  read: (spec: ParamSpec) => Promise<WeightData>,
  trainable: boolean,
  label?: string,
  opts: GPT2Options = {},
): Promise<CausalLM> {
  if (isLlamaConfig(config)) return Llama.fromReader(config, read, trainable, label, opts);
  checkBaseDtype(opts.baseDtype, { trainable, family: 'gpt2' });
  // GPT-2 holds f32 only: nothing packs its weights (the f16 base is refused above).
  const f32 = async (spec: ParamSpec) => {
    const data = await read(spec);
    if (!(data instanceof Float32Array)) throw new Error(`GPT-2 weight "${spec.name}" was not read as f32.`);
    return data;
  };
  return GPT2.fromReader(config, f32, trainable, label, opts);
}

/** A seeded random model of `config`'s family (each family's own initialisation). */
export function lmRandom(
  config: LMConfig,
  seed: number,
  trainable = true,
  label?: string,
  opts: GPT2Options = {},
): CausalLM {
  return isLlamaConfig(config)
    ? Llama.random(config, seed, trainable, label, opts)
    : GPT2.random(config, seed, trainable, label, opts);
}

/** The trunk's parameter specs of any family (without the scalar head). */
export function lmParamSpecs(config: LMConfig): ParamSpec[] {
  return isLlamaConfig(config) ? llamaParamSpecs(config) : trunkParamSpecs(config);
}
