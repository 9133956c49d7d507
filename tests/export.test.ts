/** Export → the Hugging Face layout `transformers` loads, and back. */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { readFileSync } from 'node:fs';
import { useCpu } from './helpers/backend';
import { loadLM, exportLM, memoryFiles } from '../src/core/model/folder';
import { readSafetensors, writeSafetensors } from '../src/core/model/safetensors';
import { nodeFiles } from '../src/cli/files-node';

const DIR = 'tests/fixtures/parity/tiny-prefixed';

/** GPT2LMHeadModel's state-dict keys for n_layer layers, minus the tied lm_head and the attn.bias buffers. */
function hfKeys(nLayer: number): string[] {
  const keys = [
    'transformer.wte.weight',
    'transformer.wpe.weight',
    'transformer.ln_f.weight',
    'transformer.ln_f.bias',
  ];
  for (let i = 0; i < nLayer; i++) {
    for (const k of [
      'ln_1.weight',
      'ln_1.bias',
      'attn.c_attn.weight',
      'attn.c_attn.bias',
      'attn.c_proj.weight',
      'attn.c_proj.bias',
      'ln_2.weight',
      'ln_2.bias',
      'mlp.c_fc.weight',
      'mlp.c_fc.bias',
      'mlp.c_proj.weight',
      'mlp.c_proj.bias',
    ]) {
      keys.push(`transformer.h.${i}.${k}`);
    }
  }
  return keys.sort();
}

describe('export', () => {
  beforeAll(useCpu);

  it('writes GPT2LMHeadModel names, F32, Conv1D [in, out] shapes and an HF config; reloads to identical logits', async () => {
    const { model } = await loadLM(nodeFiles(DIR));
    const files = await exportLM(model);
    expect([...files.keys()].sort()).toEqual(['config.json', 'model.safetensors']);
    const st = readSafetensors(files.get('model.safetensors')!, 'export');
    expect([...st.tensors.keys()].sort()).toEqual(hfKeys(2));
    for (const t of st.tensors.values()) expect(t.dtype).toBe('F32');
    expect(st.tensors.get('transformer.h.0.attn.c_attn.weight')!.shape).toEqual([16, 48]);
    expect(st.tensors.get('transformer.h.1.mlp.c_proj.weight')!.shape).toEqual([64, 16]);
    const cfg = JSON.parse(new TextDecoder().decode(files.get('config.json')!));
    expect(cfg).toMatchObject({
      model_type: 'gpt2',
      architectures: ['GPT2LMHeadModel'],
      n_embd: 16,
      n_layer: 2,
      n_head: 4,
      n_positions: 32,
      vocab_size: 258,
      activation_function: 'gelu_new',
      layer_norm_epsilon: 1e-5,
      tie_word_embeddings: true,
      tokenizer: 'bytes',
    });
    // The source file's tensors survive bit-exactly (export drops only the buffers and the tied lm_head).
    const src = readSafetensors(new Uint8Array(readFileSync(`${DIR}/model.safetensors`)), 'src');
    for (const [k, t] of st.tensors) expect(Array.from(t.data)).toEqual(Array.from(src.tensors.get(k)!.data));
    // And it loads back to the same logits.
    const back = (await loadLM(memoryFiles('exported', files))).model;
    const ids = tf.tensor2d([[1, 2, 3, 4]], undefined, 'int32');
    const mask = tf.onesLike(ids) as tf.Tensor2D;
    const [a, b] = [model.logits(ids, mask), back.logits(ids, mask)];
    expect(Array.from(await a.data())).toEqual(Array.from(await b.data()));
    tf.dispose([ids, mask, a, b]);
    model.dispose();
    back.dispose();
  });

  it('a safetensors file written from a read of an exported one is byte-identical', async () => {
    const { model } = await loadLM(nodeFiles(DIR));
    const bytes = (await exportLM(model)).get('model.safetensors')!;
    model.dispose();
    const st = readSafetensors(bytes, 'x');
    const again = writeSafetensors(
      [...st.tensors].map(([name, t]) => ({ name, shape: t.shape, data: t.data })),
      st.metadata ?? undefined,
    );
    expect(Buffer.from(again).equals(Buffer.from(bytes))).toBe(true);
  });
});
