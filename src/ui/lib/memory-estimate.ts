/**
 * Words for the worker's memory estimate (protocol.ts MemoryEstimateReport, src/worker/sources.ts estimateReport)
 * and the LoRA preselection for big models (issue #11: a model over ~50 M parameters trains with LoRA unless the
 * person says otherwise). Pure: the store and the components call these.
 */
import { CONFIG_FIELDS, type TrainConfig } from '../../common/config';
import type { MemoryEstimateReport, ModelSummary } from '../../worker/protocol';

/** Models with more parameters than this get LoRA preselected when loaded. */
export const LORA_PRESELECT_PARAMS = 50e6;
/**
 * Families that get LoRA preselected whatever their size (issue #21): the Llama / Qwen instruct models people
 * fine-tune with PEFT adapters on q/k/v/o/gate/up/down_proj.
 */
export const LORA_PRESELECT_FAMILIES: readonly ModelSummary['family'][] = ['llama', 'qwen2', 'qwen3'];
const FAMILY_NAMES: Record<ModelSummary['family'], string> = {
  gpt2: 'GPT-2',
  llama: 'Llama',
  qwen2: 'Qwen2',
  qwen3: 'Qwen3',
};

/** "Qwen2", "Llama", "GPT-2": a family as people write it. */
export function familyName(family: ModelSummary['family']): string {
  return FAMILY_NAMES[family] ?? family;
}
/** The rank preselected (PEFT's usual r). */
export const LORA_PRESELECT_RANK = 8;
/**
 * The learning rate preselected with LoRA when the current one is the full-fine-tuning default: LoRA wants about
 * 10× the full-fine-tuning rate, 1e-4 to 1e-3 for GPT-2 small (docs/engine.md); 3e-4 is the middle of that range.
 */
export const LORA_LEARNING_RATE = 3e-4;
const FULL_FT_LEARNING_RATE = CONFIG_FIELDS.learningRate.default as number;

/** "124 M", "1.2 M", "98 k": parameter counts as the model card shows them. */
export function formatParams(n: number): string {
  if (n >= 1e8) return `${Math.round(n / 1e6)} M`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
  if (n >= 1e3) return `${Math.round(n / 1e3)} k`;
  return String(n);
}

const gb = (bytes: number, digits = 2) => (bytes / 1e9).toFixed(digits);

/**
 * "≈ 2.2 GB: base 0.50, value 0.00, reward model —, adapters 0.01, Adam 0.02, gradients 0.01, activations 1.65 GB".
 * With LoRA the one frozen base serves policy, reference and a shared value model (no reference part), "base in
 * f16 0.25" when it is held in half precision (config baseDtype); without it the policy, its reference copy and the
 * value model are each shown. The reward model is always named ("—" when the reward is a function).
 */
export function estimateLine(e: MemoryEstimateReport): string {
  const p = e.parts;
  const shown: string[] = [];
  if (e.lora > 0) shown.push(`${e.baseDtype === 'f16' ? 'base in f16' : 'base'} ${gb(p.base)}`);
  else shown.push(`policy ${gb(p.base)}`, `reference ${gb(p.reference)}`);
  if (p.value > 0) shown.push(`value ${gb(p.value)}`);
  shown.push(`reward model ${p.rewardModel > 0 ? gb(p.rewardModel) : '—'}`);
  if (e.lora > 0) shown.push(`adapters ${gb(p.adapters)}`);
  shown.push(`Adam ${gb(p.adam)}`, `gradients ${gb(p.gradients)}`, `activations ${gb(p.activations)}`);
  // WASM: XNNPACK's packed copies of the weight matrices (model/size.ts, the WASM heap).
  if (p.packed > 0) shown.push(`packed weights ${gb(p.packed)}`);
  return `≈ ${gb(e.bytes, 1)} GB: ${shown.join(', ')} GB`;
}

/** "1.2 M trainable of 124 M": the policy's trainable parameters against the model's. */
export function trainableLine(e: MemoryEstimateReport): string {
  return `${formatParams(e.policyTrainableParams)} trainable of ${formatParams(e.params)}`;
}

/** What loading a big model changes in the config, and whether the learning rate was changed too. */
export interface LoraPreselection {
  patch: Pick<TrainConfig, 'lora'> & Partial<Pick<TrainConfig, 'learningRate'>>;
  /** The learning rate before (set back when the person turns LoRA off). */
  previousLearningRate: number;
}

/**
 * LoRA for a loaded model over LORA_PRESELECT_PARAMS, or of a LORA_PRESELECT_FAMILIES family, when the config
 * trains all weights (lora 0), with LORA_LEARNING_RATE when the learning rate is the full-fine-tuning default; null
 * when nothing changes.
 */
export function loraPreselection(model: ModelSummary, config: TrainConfig): LoraPreselection | null {
  const wanted = model.params > LORA_PRESELECT_PARAMS || LORA_PRESELECT_FAMILIES.includes(model.family);
  if (!wanted || config.lora > 0) return null;
  const patch: LoraPreselection['patch'] = { lora: LORA_PRESELECT_RANK };
  if (config.learningRate === FULL_FT_LEARNING_RATE) patch.learningRate = LORA_LEARNING_RATE;
  return { patch, previousLearningRate: config.learningRate };
}

/**
 * The plain sentence saying why LoRA was chosen: "openai-community/gpt2 has 124 M parameters: full copies need
 * ≈ 4.5 GB of weights and optimiser state; LoRA trains 1.2 M adapter parameters on one shared base (≈ 2.2 GB
 * with the activations here). …". `full` and `lora` are the worker's estimates of the two runs.
 */
export function loraReason(
  model: ModelSummary,
  pre: LoraPreselection,
  full: MemoryEstimateReport | null,
  lora: MemoryEstimateReport | null,
): string {
  const fixed = (e: MemoryEstimateReport) => e.bytes - e.parts.activations;
  const fullPart = full
    ? `full copies need ≈ ${gb(fixed(full), 1)} GB of weights and optimiser state`
    : 'full copies of it (policy, reference, value model and two Adams) would not fit most browsers';
  const loraPart = lora
    ? `LoRA trains ${formatParams(lora.policyTrainableParams)} adapter parameters on one shared base ` +
      `(≈ ${gb(lora.bytes, 1)} GB with the activations of this batch)`
    : 'LoRA trains small adapters on one shared base';
  const lr =
    pre.patch.learningRate !== undefined
      ? ` The learning rate went from ${pre.previousLearningRate} (the full-fine-tuning default) to ` +
        `${pre.patch.learningRate}: LoRA wants a larger one.`
      : '';
  const why =
    model.params > LORA_PRESELECT_PARAMS
      ? `${model.label} has ${formatParams(model.params)} parameters`
      : `${model.label} is a ${familyName(model.family)} model (${formatParams(model.params)} parameters), ` +
        'which is usually fine-tuned with LoRA on q/k/v/o/gate/up/down_proj';
  return `${why}: ${fullPart}; ${loraPart}. LoRA is on (lora ${pre.patch.lora}).${lr}`;
}
