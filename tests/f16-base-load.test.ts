/**
 * The f16 base's loading and estimate without a GPU (issue #36, docs/models.md, "The frozen base in f16"): a BF16 / F16 / F32 safetensors file
 * read with `half` decodes the large matrices straight to packed f16 words, never allocating an f32 array of their
 * size; the memory estimate halves the base's matrices and counts no tape copies of them.
 */
import { describe, it, expect } from 'vitest';
import { readSafetensors } from '../src/core/model/safetensors';
import { HalfArray, isF16Matrix } from '../src/core/model/f16-base';
import { f16Bits, packF16 } from '../src/core/kernels/webgpu-f16';
import { LLAMA_SHAPES, parseLlamaConfig } from '../src/core/model/llama-config';
import { llamaParamSpecs } from '../src/core/model/llama';
import {
  baseWeightBytes,
  estimateRunMemory,
  LORA_WEIGHT_TAPE_COPIES,
  WTE_TAPE_COPIES,
} from '../src/core/model/size';

/** A safetensors file of one [rows, cols] tensor per name in `dtype`, values v(i) (exact in bf16 and f16). */
function fileOf(
  dtype: 'BF16' | 'F16' | 'F32',
  tensors: { name: string; shape: number[] }[],
  v: (i: number) => number,
) {
  const width = dtype === 'F32' ? 4 : 2;
  let off = 0;
  const header: Record<string, unknown> = {};
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    header[t.name] = { dtype, shape: t.shape, data_offsets: [off, off + n * width] };
    off += n * width;
  }
  let json = JSON.stringify(header);
  while ((json.length + 8) % 8) json += ' ';
  const bytes = new Uint8Array(8 + json.length + off);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, json.length, true);
  bytes.set(new TextEncoder().encode(json), 8);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  let pos = 8 + json.length;
  let k = 0;
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    for (let i = 0; i < n; i++, k++) {
      f32[0] = v(k);
      if (dtype === 'F32') view.setFloat32(pos + 4 * i, f32[0], true);
      else if (dtype === 'BF16') view.setUint16(pos + 2 * i, u32[0] >>> 16, true);
      else view.setUint16(pos + 2 * i, f16Bits(f32[0]), true);
    }
    pos += n * width;
  }
  return bytes;
}

/** Runs f while recording the length of every Float32Array constructed (through the global constructor). */
function recordingFloat32Arrays<T>(f: () => T): { result: T; largest: number } {
  const Original = globalThis.Float32Array;
  let largest = 0;
  const proxy = new Proxy(Original, {
    construct(target, args: unknown[]) {
      const made = Reflect.construct(target, args) as Float32Array;
      largest = Math.max(largest, made.length);
      return made;
    },
  });
  globalThis.Float32Array = proxy;
  try {
    return { result: f(), largest };
  } finally {
    globalThis.Float32Array = Original;
  }
}

describe('reading a weights file for an f16 base', () => {
  const tensors = [
    { name: 'model.embed_tokens.weight', shape: [512, 64] },
    { name: 'model.layers.0.mlp.up_proj.weight', shape: [256, 64] },
    { name: 'model.norm.weight', shape: [64] },
  ];
  // Values exact in bf16 and in f16 (8 significant bits, magnitudes 2^-6 … 2^1).
  const v = (i: number) => (((i * 37) % 255) - 127) / 64;
  const half = (name: string) => isF16Matrix(name.replace(/^model\./, ''));
  for (const dtype of ['BF16', 'F16', 'F32'] as const) {
    it(`${dtype}: the matrices come out packed, the norm f32, and no f32 array of a matrix's size is made`, () => {
      const bytes = fileOf(dtype, tensors, v);
      // The F16 reader's 65 536-entry lookup table (made once per process, whatever the model) is made first, so
      // that what is recorded is the reading of this file.
      readSafetensors(fileOf('F16', [{ name: 'x', shape: [2] }], v), 'warm.safetensors');
      const { result: file, largest } = recordingFloat32Arrays(() =>
        readSafetensors(bytes, 'w.safetensors', { half }),
      );
      const emb = file.tensors.get('model.embed_tokens.weight')!.data;
      const up = file.tensors.get('model.layers.0.mlp.up_proj.weight')!.data;
      const norm = file.tensors.get('model.norm.weight')!.data;
      expect(emb).toBeInstanceOf(HalfArray);
      expect(up).toBeInstanceOf(HalfArray);
      expect(norm).toBeInstanceOf(Float32Array);
      const want = packF16(Float32Array.from({ length: 512 * 64 }, (_, i) => v(i)));
      expect((emb as HalfArray).words).toEqual(want);
      expect((norm as Float32Array)[3]).toBe(v(512 * 64 + 256 * 64 + 3));
      // The largest f32 array made while reading: the norm's 64 values at most (BF16 would otherwise make 32768).
      expect(largest).toBeLessThanOrEqual(64);
    });
  }

  it('refuses a value beyond f16 range, saying so', () => {
    const bytes = fileOf('BF16', [{ name: 'model.layers.0.mlp.up_proj.weight', shape: [2, 4] }], (i) =>
      i === 5 ? 1e6 : 0.5,
    );
    expect(() => readSafetensors(bytes, 'w.safetensors', { half })).toThrow(
      /"model.layers.0.mlp.up_proj.weight" holds 999424 at index 5, beyond the range of f16.*"baseDtype" to "f32"/,
    );
  });
});

describe('the memory estimate of an f16 base', () => {
  it('Qwen2.5-1.5B under LoRA: the base is about half its f32 bytes (the matrices exactly half), no tape copies', () => {
    const c = parseLlamaConfig({ ...LLAMA_SHAPES['qwen2.5-1.5b'] });
    let matrices = 0;
    let rest = 0;
    for (const s of llamaParamSpecs(c)) {
      const n = s.shape.reduce((a, b) => a * b, 1);
      if (isF16Matrix(s.name)) matrices += n;
      else rest += n;
    }
    expect(baseWeightBytes(c, 'f32')).toBe(4 * (matrices + rest));
    expect(baseWeightBytes(c, 'f16')).toBe(2 * matrices + 4 * rest);
    const run = { batchSize: 16, miniBatches: 1, promptLength: 64, responseLength: 64 };
    const opts = {
      lora: { r: 64, targets: ['q_proj', 'v_proj'] as const },
      valueModel: 'none' as const,
      rewardModel: false,
    };
    const e32 = estimateRunMemory(c, run, opts);
    const e16 = estimateRunMemory(c, run, { ...opts, baseDtype: 'f16' });
    const ratio = e16.parts.base / e32.parts.base;
    console.log(
      `Qwen2.5-1.5B base: f32 ${(e32.parts.base / 1e9).toFixed(3)} GB, f16 ${(e16.parts.base / 1e9).toFixed(3)} GB`,
    );
    expect(ratio).toBeGreaterThan(0.5);
    expect(ratio).toBeLessThan(0.501);
    // Adapters, Adam and gradients are f32 as before. The activations lose only the update's tape copies of the
    // frozen weights, which the f16 kernels never make (f16LinearNT saves nothing, f16Gather has no gradient): the
    // embedding's (WTE_TAPE_COPIES of V × C) and the blocks' matrices' (LORA_WEIGHT_TAPE_COPIES of each).
    for (const k of ['adapters', 'adam', 'gradients'] as const) expect(e16.parts[k]).toBe(e32.parts[k]);
    expect([e32.peakPhase, e16.peakPhase]).toEqual(['update', 'update']);
    const embedding = c.vocab_size * c.n_embd;
    const blocks = matrices - embedding; // tied head: the embedding is the only other matrix
    expect(e32.parts.activations - e16.parts.activations).toBe(
      4 * (WTE_TAPE_COPIES * embedding + LORA_WEIGHT_TAPE_COPIES * blocks),
    );
    // By hand: (2 × 151 936 × 1536 + 28 × (2 × 1536² + 2 × 256 × 1536 + 3 × 1536 × 8960)) floats × 4 bytes.
    expect(e32.parts.activations - e16.parts.activations).toBe(7_107_772_416);
    // A learned reward model is held like the base: its matrices in f16, the rest and its score head ([1, C]) f32.
    const r32 = estimateRunMemory(c, run, { ...opts, rewardModel: true });
    const r16 = estimateRunMemory(c, run, { ...opts, rewardModel: true, baseDtype: 'f16' });
    expect(r32.parts.rewardModel).toBe(4 * (matrices + rest + c.n_embd));
    expect(r16.parts.rewardModel).toBe(2 * matrices + 4 * (rest + c.n_embd));
    // Without LoRA f16 is not applied (full fine-tuning stays f32).
    const full = { valueModel: 'none' as const, rewardModel: false };
    expect(estimateRunMemory(c, run, { ...full, baseDtype: 'f16' }).parts.base).toBe(
      estimateRunMemory(c, run, full).parts.base,
    );
  });
});
