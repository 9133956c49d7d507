/**
 * The frozen base of a LoRA model in f16 (config `baseDtype`, docs/models.md, "The frozen base in f16"): which weights are packed, the check
 * that refuses f16 where it cannot apply, the host form of packed data as a loader hands it over, and reading a
 * packed weight back as f32 (export, merge).
 */
import * as tf from '@tensorflow/tfjs-core';
import { UserError } from '../../common/errors';
import type { BaseDtype } from '../../common/config/fields';
import { f16Gather, isPackedF16, packF16, unpackF16 } from '../kernels/webgpu-f16';

export type { BaseDtype };

/**
 * Packed f16 values on the host: `words` holds `length` binary16 values two per 32-bit word (low half first), the
 * form in which the safetensors reader hands over a tensor it was asked to keep in f16 (no f32 copy is made).
 */
export class HalfArray {
  constructor(readonly words: Int32Array) {}
  get length(): number {
    return this.words.length * 2;
  }
}

/** A weight's host data: f32 values, or packed f16 values (only for the matrices isF16Matrix names). */
export type WeightData = Float32Array | HalfArray;

/**
 * The parameters stored in f16 when baseDtype is "f16" (the Llama families' large matrices): the embedding, an
 * untied LM head, and every nn.Linear weight of the blocks. Norm weights and biases stay f32.
 */
export function isF16Matrix(name: string): boolean {
  return (
    name === 'embed_tokens.weight' ||
    name === 'lm_head.weight' ||
    /^layers\.\d+\.(self_attn|mlp)\.[a-z]+_proj\.weight$/.test(name)
  );
}

/**
 * Refuse baseDtype "f16" where it cannot apply, naming what is wrong and what would be right: a trainable base
 * (full fine-tuning, or any model built trainable), another backend than webgpu, another family than Llama/Qwen.
 */
export function checkBaseDtype(
  baseDtype: BaseDtype | undefined,
  o: { trainable: boolean; family: string; backend?: string },
): void {
  if (baseDtype === undefined || baseDtype === 'f32') return;
  if (baseDtype !== 'f16') {
    throw new UserError(`"baseDtype" is ${JSON.stringify(baseDtype)}; it must be "f32" or "f16".`);
  }
  const backend = o.backend ?? tf.getBackend();
  if (backend !== 'webgpu') {
    throw new UserError(
      `"baseDtype" "f16" stores the frozen base in half precision for the WebGPU kernels, but the backend is ` +
        `"${backend}"; use the webgpu backend, or set "baseDtype" to "f32".`,
    );
  }
  if (o.trainable) {
    throw new UserError(
      '"baseDtype" "f16" is for the frozen base of a LoRA model, but this model is built trainable (full ' +
        'fine-tuning keeps every weight f32); set "lora" to a rank ≥ 1, or "baseDtype" to "f32".',
    );
  }
  if (o.family === 'gpt2') {
    throw new UserError(
      '"baseDtype" "f16" is implemented for the Llama / Qwen2 / Qwen3 families, not GPT-2 (its Conv1D kernels ' +
        'read f32 weights); set "baseDtype" to "f32".',
    );
  }
}

/** Packed words of a weight's host data (f32 rounded to nearest even; packed data as it is). */
export function packedWords(data: WeightData): Int32Array {
  return data instanceof HalfArray ? data.words : packF16(data);
}

/** The f32 values of host data (packed values widened exactly). */
export function f32Values(data: WeightData): Float32Array {
  return data instanceof HalfArray ? unpackF16(data.words) : data;
}

/** A weight's values as f32 on the host (a packed weight widened: every f16 value is exact in f32). */
export async function weightValues(t: tf.Tensor): Promise<Float32Array> {
  const d = await t.data();
  return isPackedF16(t) ? unpackF16(d as Int32Array) : (d as Float32Array);
}

/**
 * A weight as an f32 tensor of its logical shape (a packed weight widened; a float32 one returned as is). Widened
 * on the device, with no readback: every row gathered through the f16 gather kernel (each value exact in f32).
 */
export function asF32Tensor(t: tf.Tensor): tf.Tensor {
  if (!isPackedF16(t)) return t;
  return tf.tidy(() => f16Gather(t, tf.range(0, t.shape[0]!, 1, 'int32')));
}
