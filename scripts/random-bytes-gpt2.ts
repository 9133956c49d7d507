/**
 * For the timing scripts (shared-prefix-step.ts, dpo-shared-prefix-step.ts): a random GPT-2-shaped model on the
 * bytes tokenizer written as a model folder in a fresh temporary directory, and letter strings of a given length.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { writeFolder } from '../src/cli/files-node';
import { parseGPT2Config } from '../src/core/model/config';
import { exportLM } from '../src/core/model/folder';
import { GPT2 } from '../src/core/model/gpt2';

/** The folder of a random GPT-2 of width `C` (heads of 64), `L` layers and `positions` positions (seed 3). */
export async function randomBytesGpt2Folder(
  C: number,
  L: number,
  positions: number,
  prefix: string,
): Promise<string> {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  const config = parseGPT2Config({
    vocab_size: 258,
    n_positions: positions,
    n_embd: C,
    n_layer: L,
    n_head: Math.max(1, C / 64),
    tokenizer: 'bytes',
    bos_token_id: 256,
    eos_token_id: 256,
    pad_token_id: 257,
  });
  const m = GPT2.random(config, 3);
  await writeFolder(dir, await exportLM(m));
  m.dispose();
  return dir;
}

/** `n` lowercase letters, a different run for each seed. */
export const letters = (n: number, seed: number): string =>
  Array.from({ length: n }, (_, i) => String.fromCharCode(97 + ((i * 7 + seed) % 26))).join('');
