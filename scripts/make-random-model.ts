/**
 * Write a randomly initialised model folder (HF layout). Used for shape-only benchmarks and tests, and as a stand-in
 * before a pretrained model exists.
 *
 * GPT-2:  tsx scripts/make-random-model.ts OUT_DIR [n_layer n_embd n_head n_positions vocab]
 * Llama / Qwen2 / Qwen3 in a published shape (model/llama-config.ts LLAMA_SHAPES):
 *         tsx scripts/make-random-model.ts OUT_DIR --shape smollm2-135m|qwen2.5-0.5b|qwen3-0.6b|qwen2.5-1.5b|qwen3-1.7b [--layers N]
 *   The folder gets the 512-id ChatML tokenizer of tests/fixtures/hf-tokenizer (its ids fit any of these
 *   vocabularies; config.json's token ids are set to its <|im_start|> 510, <|im_end|> 511 and <|endoftext|> 509).
 *   --layers keeps every other dimension and changes only the number of blocks.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseGPT2Config, parseModelConfig } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { Llama } from '../src/core/model/llama';
import { LLAMA_SHAPES, type LlamaConfig, type LlamaShapeName } from '../src/core/model/llama-config';
import { exportLM } from '../src/core/model/folder';
import { writeFolder } from '../src/cli/files-node';
import { setNodeBackend } from '../src/cli/backend-node';

const args = process.argv.slice(2);
const out = args[0];
if (!out) {
  console.error(
    'usage: tsx scripts/make-random-model.ts OUT_DIR [n_layer n_embd n_head n_positions vocab]\n' +
      '       tsx scripts/make-random-model.ts OUT_DIR --shape smollm2-135m|qwen2.5-0.5b|qwen3-0.6b|qwen2.5-1.5b|qwen3-1.7b [--layers N]',
  );
  process.exit(2);
}
await setNodeBackend('cpu');
const shapeAt = args.indexOf('--shape');
if (shapeAt >= 0) {
  const name = args[shapeAt + 1] as LlamaShapeName;
  if (!(name in LLAMA_SHAPES)) {
    console.error(`--shape must be one of ${Object.keys(LLAMA_SHAPES).join(', ')}, got ${name}`);
    process.exit(2);
  }
  const layersAt = args.indexOf('--layers');
  const raw: Record<string, unknown> = {
    ...LLAMA_SHAPES[name],
    bos_token_id: 510,
    eos_token_id: 511,
    pad_token_id: 509,
    ...(layersAt >= 0 ? { num_hidden_layers: Number(args[layersAt + 1]) } : {}),
  };
  const config = parseModelConfig(raw) as LlamaConfig;
  const model = Llama.random(config, 1234);
  const files = await exportLM(model);
  model.dispose();
  const tok = path.resolve(import.meta.dirname, '../tests/fixtures/hf-tokenizer');
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
    files.set(f, new Uint8Array(await readFile(path.join(tok, f))));
  }
  await writeFolder(out, files);
  console.error(`wrote ${out} (${name}, ${config.num_hidden_layers} layers)`);
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
const model = GPT2.random(config, 1234);
await writeFolder(out, await exportLM(model));
console.error(`wrote ${out}`);
