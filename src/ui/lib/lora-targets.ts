/**
 * The loraTargets checkboxes for the loaded model's family (issue #21). GPT-2 models have c_attn, attn.c_proj,
 * c_fc and mlp.c_proj; Llama / Qwen2 / Qwen3 models have q/k/v/o_proj and gate/up/down_proj. The config default
 * (GPT-2's four) means all seven on a Llama-family model (src/core/model/lora.ts resolveLoraTargets), so for such a
 * model the default shows as the seven checked, and checking all seven again writes the default back (the config
 * then still suits a GPT-2 model). A name of the other family in the config stays shown, checked, so it can be
 * cleared. Pure: ConfigControl renders it.
 */
import {
  ALL_LORA_TARGET_NAMES,
  LLAMA_LORA_TARGET_NAMES,
  LORA_TARGET_NAMES,
  type LoraTargetName,
} from '../../common/config';
import type { ModelSummary } from '../../worker/protocol';

type Family = ModelSummary['family'];

/** The target names of a family's linear layers; every name when no model is loaded. */
export function familyTargets(family: Family | null): readonly LoraTargetName[] {
  if (family === null) return ALL_LORA_TARGET_NAMES;
  return family === 'gpt2' ? LORA_TARGET_NAMES : LLAMA_LORA_TARGET_NAMES;
}

const isGpt2Default = (value: readonly string[]) =>
  value.length === LORA_TARGET_NAMES.length && LORA_TARGET_NAMES.every((t) => value.includes(t));

/** The boxes shown (the family's, then any other name in the config) and those checked. */
export function loraTargetView(
  family: Family | null,
  value: readonly string[],
): { choices: LoraTargetName[]; checked: LoraTargetName[] } {
  const own = familyTargets(family);
  if (family !== null && family !== 'gpt2' && isGpt2Default(value)) {
    return { choices: [...own], checked: [...own] };
  }
  const choices = ALL_LORA_TARGET_NAMES.filter((t) => own.includes(t) || value.includes(t));
  return { choices, checked: choices.filter((t) => value.includes(t)) };
}

/** The config value after `name` is checked or cleared; null when that would leave no target. */
export function toggleLoraTarget(
  family: Family | null,
  value: readonly string[],
  name: LoraTargetName,
  on: boolean,
): LoraTargetName[] | null {
  const { choices, checked } = loraTargetView(family, value);
  const next = choices.filter((t) => (t === name ? on : checked.includes(t)));
  if (next.length === 0) return null;
  const own = familyTargets(family);
  if (
    family !== null &&
    family !== 'gpt2' &&
    next.length === own.length &&
    own.every((t) => next.includes(t))
  ) {
    return [...LORA_TARGET_NAMES];
  }
  return next;
}
