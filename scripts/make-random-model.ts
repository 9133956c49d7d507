/**
 * Write a randomly initialised GPT-2 folder (HF layout). Used for shape-only benchmarks and as a stand-in
 * before a pretrained model exists. Usage: tsx scripts/make-random-model.ts OUT_DIR [n_layer n_embd n_head n_positions vocab]
 */
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { exportLM } from '../src/core/model/folder';
import { writeFolder } from '../src/cli/files-node';
import { setNodeBackend } from '../src/cli/backend-node';

const [out, nl = '4', ne = '128', nh = '4', np = '128', vocab = '258'] = process.argv.slice(2);
if (!out) {
  console.error('usage: tsx scripts/make-random-model.ts OUT_DIR [n_layer n_embd n_head n_positions vocab]');
  process.exit(2);
}
await setNodeBackend('cpu');
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
