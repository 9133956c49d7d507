/**
 * scripts/make-random-model.ts, which the real-size tests and benches make their GPT-2- and Qwen-shaped folders
 * with: a small GPT-2 and a one-layer Qwen2.5-0.5B-shaped slice are written, loaded as the CLI loads a folder, and
 * their weights drawn as GPT2.random / Llama.random draw them (norm weights 1, biases 0, matrices normal(0, 0.02),
 * GPT-2's c_proj normal(0, 0.02/√(2·n_layer))); the BF16 file holds the F32 file's values rounded to BF16.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnAsync } from './helpers/spawn';
import { readSafetensors } from '../src/core/model/safetensors';
import { loadLM } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { setNodeBackend } from '../src/cli/backend-node';

let dir = '';
const make = async (out: string, args: string[]) => {
  const r = await spawnAsync(process.execPath, [
    '--import',
    'tsx',
    'scripts/make-random-model.ts',
    out,
    ...args,
  ]);
  expect(r.status, r.stderr).toBe(0);
};
const tensors = (folder: string) =>
  readSafetensors(new Uint8Array(readFileSync(path.join(folder, 'model.safetensors'))), folder).tensors;
const stdOf = (x: Float32Array) => Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length);

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-random-model-'));
  await Promise.all([
    make(path.join(dir, 'gpt2'), ['4', '128', '4', '64', '258']),
    make(path.join(dir, 'qwen'), ['--shape', 'qwen2.5-0.5b', '--layers', '1', '--vocab', '1024']),
  ]);
  await make(path.join(dir, 'qwen-bf16'), [
    '--shape',
    'qwen2.5-0.5b',
    '--layers',
    '1',
    '--vocab',
    '1024',
    '--dtype',
    'bf16',
  ]);
}, 120_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('scripts/make-random-model.ts', () => {
  it('GPT-2: loads; LayerNorm weights 1, biases 0, c_proj normal(0, 0.02/√8), the rest normal(0, 0.02)', async () => {
    await setNodeBackend('cpu');
    const { model, config } = await loadLM(nodeFiles(path.join(dir, 'gpt2')), { trainable: false });
    expect(config.n_layer).toBe(4);
    model.dispose();
    const t = tensors(path.join(dir, 'gpt2'));
    expect([...t.get('transformer.h.3.ln_2.weight')!.data].every((v) => v === 1)).toBe(true);
    expect([...t.get('transformer.h.0.attn.c_attn.bias')!.data].every((v) => v === 0)).toBe(true);
    expect(stdOf(t.get('transformer.h.1.mlp.c_proj.weight')!.data) / (0.02 / Math.sqrt(8))).toBeCloseTo(1, 1);
    expect(stdOf(t.get('transformer.h.1.mlp.c_fc.weight')!.data) / 0.02).toBeCloseTo(1, 1);
    expect(stdOf(t.get('transformer.wte.weight')!.data) / 0.02).toBeCloseTo(1, 1);
    // Each weight its own draw.
    const a = t.get('transformer.h.0.mlp.c_fc.weight')!.data;
    const b = t.get('transformer.h.1.mlp.c_fc.weight')!.data;
    expect(a[0]).not.toBe(b[0]);
  });

  it('Qwen2.5 slice: loads; RMSNorm weights 1, q/k/v biases 0, matrices normal(0, 0.02); BF16 rounds the same values', async () => {
    await setNodeBackend('cpu');
    const { model, config } = await loadLM(nodeFiles(path.join(dir, 'qwen')), { trainable: false });
    expect(config.model_type).toBe('qwen2');
    model.dispose();
    const t = tensors(path.join(dir, 'qwen'));
    expect([...t.get('model.layers.0.input_layernorm.weight')!.data].every((v) => v === 1)).toBe(true);
    expect([...t.get('model.norm.weight')!.data].every((v) => v === 1)).toBe(true);
    expect([...t.get('model.layers.0.self_attn.q_proj.bias')!.data].every((v) => v === 0)).toBe(true);
    expect(stdOf(t.get('model.layers.0.mlp.down_proj.weight')!.data) / 0.02).toBeCloseTo(1, 1);
    const f32 = t.get('model.embed_tokens.weight')!.data;
    const bf16 = readSafetensors(
      new Uint8Array(readFileSync(path.join(dir, 'qwen-bf16', 'model.safetensors'))),
      'bf16',
    ).tensors.get('model.embed_tokens.weight')!.data;
    for (let i = 0; i < 1000; i++)
      expect(Math.abs(bf16[i] - f32[i])).toBeLessThanOrEqual(Math.abs(f32[i]) * 2 ** -8);
  });
});
