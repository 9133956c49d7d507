/**
 * Write a randomly initialised model folder (HF layout). Used for shape-only benchmarks and tests, and as a stand-in
 * before a pretrained model exists.
 *
 * GPT-2:  tsx scripts/make-random-model.ts OUT_DIR [n_layer n_embd n_head n_positions vocab]
 * Llama / Qwen2 / Qwen3 in a published shape (model/llama-config.ts LLAMA_SHAPES):
 *         tsx scripts/make-random-model.ts OUT_DIR --shape smollm2-135m|qwen2.5-0.5b|qwen3-0.6b|qwen2.5-1.5b|qwen3-1.7b [--layers N] [--vocab N] [--dtype f32|bf16] [--shards N]
 *   The folder gets the 512-id ChatML tokenizer of tests/fixtures/hf-tokenizer (its ids fit any of these
 *   vocabularies; config.json's token ids are set to its <|im_start|> 510, <|im_end|> 511 and <|endoftext|> 509).
 *   --layers keeps every other dimension and changes only the number of blocks; --vocab likewise the number of
 *   token ids (the rows of the embedding and head; at least 512, the tokenizer's).
 *   --dtype bf16 writes model.safetensors in BF16 (each f32 value rounded to nearest even), as Qwen ships its
 *   weights: half the bytes of the default f32 file (a 2-layer Qwen3-1.7B slice: 0.8 GB rather than 1.6 GB).
 *   --shards N writes the weights as Hugging Face's sharded layout instead of one model.safetensors (N files
 *   model-0000K-of-0000N.safetensors and model.safetensors.index.json, as Qwen3-1.7B ships: scripts/shard-safetensors.ts).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseGPT2Config, parseModelConfig } from '../src/core/model/config';
import { LLAMA_SHAPES, type LlamaConfig, type LlamaShapeName } from '../src/core/model/llama-config';
import { configBytes, familyTensorName } from '../src/core/model/folder';
import { lmParamSpecs } from '../src/core/model/causal-lm';
import { paramInit } from '../src/core/model/specs';
import { shardSafetensors } from './shard-safetensors';
import {
  collectBytes,
  safetensorsStream,
  writeSafetensors,
  type ByteSource,
  type FileBody,
} from '../src/core/model/safetensors';
import type { LMConfig } from '../src/core/model/config';
import { Rng } from '../src/core/base/rng';
import { writeFolder } from '../src/cli/files-node';

const args = process.argv.slice(2);
const out = args[0];
if (!out) {
  console.error(
    'usage: tsx scripts/make-random-model.ts OUT_DIR [n_layer n_embd n_head n_positions vocab]\n' +
      '       tsx scripts/make-random-model.ts OUT_DIR --shape smollm2-135m|qwen2.5-0.5b|qwen3-0.6b|qwen2.5-1.5b|qwen3-1.7b [--layers N] [--vocab N] [--dtype f32|bf16] [--shards N]',
  );
  process.exit(2);
}
const shapeAt = args.indexOf('--shape');
if (shapeAt >= 0) {
  const name = args[shapeAt + 1] as LlamaShapeName;
  if (!(name in LLAMA_SHAPES)) {
    console.error(`--shape must be one of ${Object.keys(LLAMA_SHAPES).join(', ')}, got ${name}`);
    process.exit(2);
  }
  const layersAt = args.indexOf('--layers');
  const vocabAt = args.indexOf('--vocab');
  const vocab = vocabAt >= 0 ? Number(args[vocabAt + 1]) : undefined;
  if (vocab !== undefined && !(Number.isInteger(vocab) && vocab >= 512)) {
    console.error(`--vocab must be an integer ≥ 512 (the tokenizer's 512 ids), got ${args[vocabAt + 1]}`);
    process.exit(2);
  }
  const dtypeAt = args.indexOf('--dtype');
  const dtype = dtypeAt >= 0 ? args[dtypeAt + 1] : 'f32';
  if (dtype !== 'f32' && dtype !== 'bf16') {
    console.error(`--dtype must be f32 or bf16, got ${dtype}`);
    process.exit(2);
  }
  const raw: Record<string, unknown> = {
    ...LLAMA_SHAPES[name],
    bos_token_id: 510,
    eos_token_id: 511,
    pad_token_id: 509,
    ...(layersAt >= 0 ? { num_hidden_layers: Number(args[layersAt + 1]) } : {}),
    ...(vocab !== undefined ? { vocab_size: vocab } : {}),
  };
  const config = parseModelConfig(raw) as LlamaConfig;
  const weights = randomWeights(config);
  const files = new Map<string, FileBody>([['config.json', configBytes(config)]]);
  // BF16 rewrites the whole F32 file (its weights drawn into fresh arrays); F32 streams, one weight at a time.
  const model = dtype === 'bf16' ? toBf16(fileOf(weights)) : streamOf(weights);
  const shardsAt = args.indexOf('--shards');
  const shards = shardsAt >= 0 ? Number(args[shardsAt + 1]) : 1;
  if (!Number.isInteger(shards) || shards < 1) {
    console.error(`--shards must be an integer ≥ 1, got ${args[shardsAt + 1]}`);
    process.exit(2);
  }
  if (shards === 1) files.set('model.safetensors', model);
  else for (const [n, b] of shardSafetensors(await collectBytes(model), shards)) files.set(n, b);
  const tok = path.resolve(import.meta.dirname, '../tests/fixtures/hf-tokenizer');
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
    files.set(f, new Uint8Array(await readFile(path.join(tok, f))));
  }
  await writeFolder(out, files);
  console.error(
    `wrote ${out} (${name}, ${config.num_hidden_layers} layers, ${dtype}${shards > 1 ? `, ${shards} shards` : ''})`,
  );
  process.exit(0);
}
const [, nl = '4', ne = '128', nh = '4', np = '128', vocab = '258'] = args;
const bytes = Number(vocab) === 258;
const config = parseGPT2Config({
  vocab_size: Number(vocab),
  n_positions: Number(np),
  n_embd: Number(ne),
  n_layer: Number(nl),
  n_head: Number(nh),
  tokenizer: bytes ? 'bytes' : 'gpt2-bpe',
  bos_token_id: bytes ? 256 : 50256,
  eos_token_id: bytes ? 256 : 50256,
  ...(bytes ? { pad_token_id: 257 } : {}),
});
const weights = randomWeights(config);
await writeFolder(
  out,
  new Map<string, FileBody>([
    ['config.json', configBytes(config)],
    ['model.safetensors', streamOf(weights)],
  ]),
);
console.error(`wrote ${out}`);

/** A weight of the model: its name in the family's files, its shape, and how to draw its values into an array. */
interface RandomWeight {
  name: string;
  shape: number[];
  draw: (out: Float32Array) => Float32Array;
}

/**
 * The model's weights, in its family's file names, drawn by the rule GPT2.random / Llama.random follow
 * (model/specs.ts paramInit) but with a plain-JavaScript generator (Rng.fillNormal, seed 1234 + the weight's
 * index): the same distribution, about 3× faster than tfjs's seeded randomNormal on its CPU backend. No model is
 * built.
 */
function randomWeights(config: LMConfig): RandomWeight[] {
  return lmParamSpecs(config).map((spec, i) => {
    const init = paramInit(config, spec.name);
    return {
      name: familyTensorName(config, spec.name),
      shape: spec.shape.slice(),
      draw: (out: Float32Array) =>
        'fill' in init ? out.fill(init.fill) : new Rng(1234 + i).fillNormal(out, init.std),
    };
  });
}

/** The number of values of a weight. */
function count(w: RandomWeight): number {
  return w.shape.reduce((a, b) => a * b, 1);
}

/** model.safetensors of `weights` (F32), whole. */
function fileOf(weights: RandomWeight[]): Uint8Array {
  return writeSafetensors(
    weights.map((w) => ({ name: w.name, shape: w.shape, data: w.draw(new Float32Array(count(w))) })),
    { format: 'pt' },
  );
}

/**
 * model.safetensors of `weights` (F32) as it is written: each weight drawn when the writer reaches it, into one array
 * reused for every weight (writeFolder writes a chunk before it asks for the next), so the process holds the largest
 * weight, not the file, and touches no fresh memory per weight.
 */
function streamOf(weights: RandomWeight[]): ByteSource {
  const scratch = new Float32Array(Math.max(...weights.map(count)));
  return safetensorsStream(
    weights.map((w) => ({
      name: w.name,
      shape: w.shape,
      data: async () => w.draw(scratch.subarray(0, count(w))),
    })),
    { format: 'pt' },
  );
}

/**
 * An F32 safetensors file (as writeSafetensors makes it: every tensor F32, in offset order) rewritten in BF16: each
 * value's top 16 bits after rounding to nearest, ties to even (torch's `.to(torch.bfloat16)`).
 */
function toBf16(f32File: Uint8Array): Uint8Array {
  const view = new DataView(f32File.buffer, f32File.byteOffset, f32File.byteLength);
  const headerLen = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(f32File.subarray(8, 8 + headerLen))) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const dataAt = 8 + headerLen;
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (t.dtype !== 'F32') throw new Error(`toBf16: ${name} is ${t.dtype}, expected F32`);
    t.dtype = 'BF16';
    t.data_offsets = [t.data_offsets[0] / 2, t.data_offsets[1] / 2];
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8;
  const words = (f32File.length - dataAt) / 4;
  const out = new Uint8Array(8 + padded + 2 * words);
  const outView = new DataView(out.buffer);
  outView.setBigUint64(0, BigInt(padded), true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + padded);
  // The data is one run of f32 words: halve it word by word (the offsets above halve with it).
  // (Little-endian hosts, as the f32 file itself assumes; copied only when the data is not 4-byte aligned.)
  const at = f32File.byteOffset + dataAt;
  const from =
    at % 4 === 0
      ? new Uint32Array(f32File.buffer, at, words)
      : new Uint32Array(f32File.buffer.slice(at, at + 4 * words));
  const to = new Uint16Array(out.buffer, 8 + padded, words);
  for (let i = 0; i < words; i++) {
    const bits = from[i];
    to[i] = (bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16;
  }
  return out;
}
