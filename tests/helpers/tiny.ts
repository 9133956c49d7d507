import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseGPT2Config } from '../../src/core/model/config';
import { GPT2 } from '../../src/core/model/gpt2';
import { exportLM } from '../../src/core/model/folder';
import { writeFolder } from '../../src/cli/files-node';

/** Write a small random bytes-tokenizer GPT-2 folder to a temp dir (fast enough for the CPU backend). */
export async function makeTinyFolder(
  opts: { n_layer?: number; n_embd?: number; n_head?: number; seed?: number } = {},
): Promise<string> {
  const dir = mkdtempSync(path.join(tmpdir(), 'ppo-tiny-'));
  const config = parseGPT2Config({
    vocab_size: 258,
    n_positions: 64,
    n_embd: opts.n_embd ?? 32,
    n_layer: opts.n_layer ?? 2,
    n_head: opts.n_head ?? 2,
    tokenizer: 'bytes',
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });
  const m = GPT2.random(config, opts.seed ?? 11);
  await writeFolder(dir, await exportLM(m));
  m.dispose();
  return dir;
}
