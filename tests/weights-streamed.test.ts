/**
 * Llama-family weights loaded a weight at a time (docs/models.md, "Reading a weights file"): loadLM and loadScalar
 * check the file's header against the model first (planLlamaTensors), then read each weight, make its variables and,
 * on WebGPU, upload them (settleOnDevice) before the next weight is read, so loading holds one weight's values on the
 * host beside what the model holds — not the whole model a second time (a Qwen2.5-1.5B-shaped 12-layer slice in
 * f16 peaked 4.79 GB above its baseline before, 1.89 GB after, for 1.59 GB of weights: scripts/load-memory.ts).
 * Checked here: the same weights, bit for bit, as the whole-file path (readWeights + lmFromArrays) for Llama, Qwen2
 * and Qwen3, whole, by ranges and sharded; the reads interleaved with the variables (each read after the previous
 * weight's variables exist, and on WebGPU after they are on the device); a failure part-way leaves no tensor and a
 * closed file; the tied head's check; the scalar (reward) model; the script.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import {
  loadLM,
  loadScalar,
  mapFamilyTensors,
  memoryFiles,
  readWeights,
  type ModelFiles,
} from '../src/core/model/folder';
import { lmFromArrays, lmParamSpecs } from '../src/core/model/causal-lm';
import { mapLlamaTensors } from '../src/core/model/hfnames';
import {
  readSafetensors,
  writeSafetensors,
  type RangedFile,
  type SafetensorsFile,
} from '../src/core/model/safetensors';
import { parseModelConfig, isLlamaConfig } from '../src/core/model/config';
import { ScalarModel } from '../src/core/model/heads';
import { scoreHeadSpecs } from '../src/core/model/specs';
import { isF16Matrix } from '../src/core/model/f16-base';
import { replayBackend } from '../src/core/kernels/webgpu-replay';
import { shardSafetensors } from '../scripts/shard-safetensors';
import { refusal } from './helpers/qwen3-config-only';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';

const FIXTURES = path.resolve(import.meta.dirname, 'fixtures/parity-llama');
const GPT2_FIXTURES = path.resolve(import.meta.dirname, 'fixtures/parity');
/** Tiny folders of each family: Llama, Qwen2, Qwen3, and GPT-2 with and without the `transformer.` prefix. */
const FAMILIES = ['llama-tiny', 'qwen2-tiny', 'qwen3-tiny', 'gpt2/tiny-prefixed', 'gpt2/tiny-plain'] as const;

function fixture(name: string): Map<string, Uint8Array> {
  const dir = name.startsWith('gpt2/') ? path.join(GPT2_FIXTURES, name.slice(5)) : path.join(FIXTURES, name);
  const m = new Map<string, Uint8Array>();
  for (const n of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']) {
    try {
      m.set(n, new Uint8Array(readFileSync(path.join(dir, n))));
    } catch {
      // the GPT-2 fixtures have no tokenizer files (the built-in GPT-2 tokenizer serves)
    }
  }
  return m;
}

/** A safetensors file's tensors as writeSafetensors takes them. */
function tensorsOf(bytes: Uint8Array) {
  return [...readSafetensors(bytes, 'model.safetensors').tensors].map(([name, t]) => ({
    name,
    shape: t.shape,
    data: t.data,
  }));
}

/**
 * A folder whose weights are read by ranges, calling `onRead` before each tensor's bytes are read (not for the
 * length and header, the first two reads of a file) and recording whether each file was closed.
 */
function watched(
  label: string,
  files: Map<string, Uint8Array>,
  onRead: (file: string, start: number) => void = () => {},
  failAt = Infinity,
  closeFails = false,
): ModelFiles & { closed: Map<string, boolean>; tensorReads: number } {
  const out = {
    label,
    closed: new Map<string, boolean>(),
    tensorReads: 0,
    has: async (n: string) => files.has(n),
    read: async (n: string) => {
      if (n.endsWith('.safetensors')) throw new Error(`${n} read whole`);
      return files.get(n) ?? null;
    },
    open: async (n: string): Promise<RangedFile | null> => {
      const b = files.get(n);
      if (!b) return null;
      out.closed.set(n, false);
      let reads = 0;
      return {
        size: b.length,
        read: async (start, end) => {
          if (++reads > 2) {
            onRead(n, start);
            if (++out.tensorReads >= failAt) throw new Error(`disk error at tensor ${out.tensorReads}`);
          }
          return b.slice(start, end);
        },
        close: async () => {
          out.closed.set(n, true);
          if (closeFails) throw new Error(`${n}: close failed`);
        },
      };
    },
  };
  return out;
}

/** The model the whole-file path builds (every tensor decoded first, then the model made from the arrays). */
async function wholeFileModel(files: ModelFiles, half: boolean) {
  const config = parseModelConfig(JSON.parse(new TextDecoder().decode((await files.read('config.json'))!)));
  const { file, path: p } = await readWeights(
    files,
    'model.safetensors',
    'weights',
    half ? (n) => isF16Matrix(n.replace(/^model\./, '')) : undefined,
  );
  const arrays = isLlamaConfig(config)
    ? mapLlamaTensors(file, lmParamSpecs(config), p, { tied: config.tie_word_embeddings })
    : mapFamilyTensors(config, file as SafetensorsFile, lmParamSpecs(config), p);
  return lmFromArrays(config, arrays, false, 'whole', half ? { baseDtype: 'f16' } : {});
}

/** Two scalar models give the same values, bit for bit, on one short sequence; both are then disposed. */
async function expectSameScores(got: ScalarModel, expected: ScalarModel): Promise<void> {
  const ids = tf.tensor2d([[1, 2, 3, 4]], [1, 4], 'int32');
  const mask = tf.ones([1, 4], 'int32') as tf.Tensor2D;
  const a = got.values(ids, mask);
  const b = expected.values(ids, mask);
  expect(Array.from(await a.data())).toEqual(Array.from(await b.data()));
  tf.dispose([ids, mask, a, b]);
  got.dispose();
  expected.dispose();
}

/** Every parameter's values, by name (packed f16 words read as int32). */
async function paramValues(model: { params: Map<string, tf.Variable> }): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (const [name, v] of model.params) out.set(name, Array.from(await v.data()));
  return out;
}

describe('loadLM a weight at a time (CPU backend)', () => {
  beforeAll(async () => {
    await tf.setBackend('cpu');
  });

  for (const name of FAMILIES) {
    it(`${name}: the whole-file path's weights bit for bit, whole, by ranges and in 3 shards`, async () => {
      const folder = fixture(name);
      const before = tf.memory().numTensors;
      const expected = await wholeFileModel(memoryFiles(name, folder), false);
      const want = await paramValues(expected);
      expected.dispose();
      const sharded = new Map(folder);
      sharded.delete('model.safetensors');
      for (const [n, b] of shardSafetensors(folder.get('model.safetensors')!, 3)) sharded.set(n, b);
      const sources: (ModelFiles & { closed?: Map<string, boolean> })[] = [
        memoryFiles(name, folder),
        watched(name, folder),
        watched(name, sharded),
      ];
      for (const files of sources) {
        const { model } = await loadLM(files, { trainable: false });
        expect(await paramValues(model)).toEqual(want);
        model.dispose();
        if (files.closed) expect([...files.closed.values()].every(Boolean)).toBe(true);
      }
      expect(tf.memory().numTensors).toBe(before);
    });
  }

  it('each weight is read after the previous weight’s variables exist', async () => {
    const folder = fixture('qwen3-tiny');
    const config = parseModelConfig(JSON.parse(new TextDecoder().decode(folder.get('config.json')!)));
    const weights = lmParamSpecs(config).length;
    const before = tf.memory().numTensors;
    const made: number[] = [];
    const files = watched('qwen3-tiny', folder, () => made.push(tf.memory().numTensors - before));
    const { model } = await loadLM(files, { trainable: false });
    // One read per weight; at the k-th read, the k − 1 weights before it are variables already (each one tensor here:
    // no vocabulary chunks without a binding limit). Read whole first, the count would stay 0 until the last read.
    expect(made).toEqual(Array.from({ length: weights }, (_, k) => k));
    model.dispose();
  });

  it('a read that fails part-way leaves no tensor behind, closes the file and keeps its message', async () => {
    const folder = fixture('qwen2-tiny');
    const before = tf.memory().numTensors;
    const files = watched('qwen2-tiny', folder, () => {}, 5);
    await expect(loadLM(files, { trainable: false })).rejects.toThrow('disk error at tensor 5');
    expect(tf.memory().numTensors).toBe(before);
    expect(files.closed.get('model.safetensors')).toBe(true);
  });

  it('a close that fails after the model is built: its error goes on and the model is disposed', async () => {
    for (const name of ['qwen3-tiny', 'gpt2/tiny-plain']) {
      const before = tf.memory().numTensors;
      const files = watched(name, fixture(name), () => {}, Infinity, true);
      await expect(loadLM(files, { trainable: false })).rejects.toThrow('model.safetensors: close failed');
      expect(tf.memory().numTensors).toBe(before);
    }
  });

  it('header problems are named before any tensor is read', async () => {
    const folder = fixture('qwen3-tiny');
    const file = readSafetensors(folder.get('model.safetensors')!, 'model.safetensors');
    const tensors = [...file.tensors].map(([n, t]) => ({ name: n, shape: t.shape, data: t.data }));
    const without = tensors.filter((t) => t.name !== 'model.norm.weight');
    const broken = new Map(folder).set('model.safetensors', writeSafetensors(without));
    const files = watched('broken', broken);
    expect(await refusal(() => loadLM(files, { trainable: false }))).toBe(
      'broken/model.safetensors: missing tensor "model.norm.weight" (expected shape [32]). Is this a model file ' +
        'of the family config.json names?',
    );
    expect(files.tensorReads).toBe(0);
    expect(files.closed.get('model.safetensors')).toBe(true);
  });

  it('a tied model’s repeated lm_head.weight: loaded when it is the embedding, refused when it differs', async () => {
    const folder = fixture('qwen2-tiny'); // tie_word_embeddings: true
    const file = readSafetensors(folder.get('model.safetensors')!, 'model.safetensors');
    const tensors = [...file.tensors].map(([n, t]) => ({ name: n, shape: t.shape, data: t.data }));
    const emb = file.tensors.get('model.embed_tokens.weight')!;
    const same = new Map(folder).set(
      'model.safetensors',
      writeSafetensors([...tensors, { name: 'lm_head.weight', shape: emb.shape, data: emb.data }]),
    );
    const { model } = await loadLM(watched('same', same), { trainable: false });
    model.dispose();
    const other = Float32Array.from(emb.data as Float32Array, (x, i) => (i === 7 ? x + 1 : x));
    const differs = new Map(folder).set(
      'model.safetensors',
      writeSafetensors([...tensors, { name: 'lm_head.weight', shape: emb.shape, data: other }]),
    );
    const before = tf.memory().numTensors;
    expect(await refusal(() => loadLM(watched('differs', differs), { trainable: false }))).toBe(
      'differs/model.safetensors: tensor "lm_head.weight" differs from "model.embed_tokens.weight", but ' +
        'config.json says "tie_word_embeddings": true; set it to false for a model with its own LM head.',
    );
    expect(tf.memory().numTensors).toBe(before);
  });

  it('loadScalar: a Llama-family reward model a weight at a time, the same as from its arrays', async () => {
    const folder = fixture('qwen3-tiny');
    const config = parseModelConfig(JSON.parse(new TextDecoder().decode(folder.get('config.json')!)));
    const file = readSafetensors(folder.get('model.safetensors')!, 'model.safetensors');
    const score = Float32Array.from({ length: config.n_embd }, (_, i) => (i - 7) / 64);
    const tensors = [...file.tensors].map(([n, t]) => ({ name: n, shape: t.shape, data: t.data }));
    tensors.push({ name: 'score.weight', shape: scoreHeadSpecs(config)[0].shape, data: score });
    const bytes = writeSafetensors(tensors);
    const rm = new Map(folder).set('model.safetensors', bytes);
    const arrays = mapLlamaTensors(
      readSafetensors(bytes, 'rm'),
      [...lmParamSpecs(config), ...scoreHeadSpecs(config)],
      'rm',
      { tied: isLlamaConfig(config) && config.tie_word_embeddings },
    );
    const expected = ScalarModel.fromArrays(config, arrays, false, 'expected');
    const got = await loadScalar(watched('rm', rm), 'model.safetensors', { trainable: false });
    expect(Array.from(await got.score.data())).toEqual(Array.from(score));
    await expectSameScores(got, expected);
    // Without its head: refused in words, nothing left behind.
    const before = tf.memory().numTensors;
    const noHead = new Map(folder);
    expect(await refusal(() => loadScalar(watched('nohead', noHead), 'model.safetensors'))).toBe(
      'nohead/model.safetensors: missing tensor "score.weight" (expected shape [1, 32]). Is this a model file of ' +
        'the family config.json names?',
    );
    expect(tf.memory().numTensors).toBe(before);
  });

  it('GPT-2: a repeated lm_head.weight loads when it is wte, is refused when it differs; score.bias must be 0', async () => {
    const folder = fixture('gpt2/tiny-prefixed');
    // (This fixture stores lm_head.weight already, as GPT2LMHeadModel saves it.)
    const tensors = tensorsOf(folder.get('model.safetensors')!).filter((t) => t.name !== 'lm_head.weight');
    const wte = tensors.find((t) => t.name === 'transformer.wte.weight')!;
    const withHead = (data: Float32Array) =>
      new Map(folder).set(
        'model.safetensors',
        writeSafetensors([...tensors, { name: 'lm_head.weight', shape: wte.shape, data }]),
      );
    const { model } = await loadLM(watched('same', withHead(wte.data as Float32Array)), { trainable: false });
    model.dispose();
    const other = Float32Array.from(wte.data as Float32Array, (x, i) => (i === 3 ? x + 1 : x));
    const before = tf.memory().numTensors;
    expect(await refusal(() => loadLM(watched('differs', withHead(other)), { trainable: false }))).toBe(
      `differs/model.safetensors: tensor "lm_head.weight" (shape [${wte.shape.join(', ')}]) differs from ` +
        `"transformer.wte.weight" (shape [${wte.shape.join(', ')}]); untied LM heads are not supported, ` +
        'lm_head.weight must equal wte.weight.',
    );
    // A reward model whose file has a nonzero score.bias: refused before any weight is made.
    const rmTensors = tensorsOf(
      new Uint8Array(readFileSync(path.join(GPT2_FIXTURES, 'tiny-prefixed', 'reward_model.safetensors'))),
    );
    const biased = new Map(folder).set(
      'reward_model.safetensors',
      writeSafetensors([...rmTensors, { name: 'score.bias', shape: [1], data: Float32Array.of(0.5) }]),
    );
    expect(await refusal(() => loadScalar(watched('biased', biased), 'reward_model.safetensors'))).toBe(
      'biased/reward_model.safetensors: tensor "score.bias" is nonzero; score.bias is not supported ' +
        '(GPT2ForSequenceClassification has no bias; a zero bias is accepted and dropped).',
    );
    expect(tf.memory().numTensors).toBe(before);
  });

  it('loadScalar: a GPT-2 reward model a weight at a time, the same as from its arrays', async () => {
    const folder = fixture('gpt2/tiny-prefixed');
    const bytes = new Uint8Array(
      readFileSync(path.join(GPT2_FIXTURES, 'tiny-prefixed', 'reward_model.safetensors')),
    );
    const config = parseModelConfig(JSON.parse(new TextDecoder().decode(folder.get('config.json')!)));
    const arrays = mapFamilyTensors(
      config,
      readSafetensors(bytes, 'rm'),
      [...lmParamSpecs(config), ...scoreHeadSpecs(config)],
      'rm',
    );
    const expected = ScalarModel.fromArrays(config, arrays, false, 'expected');
    const rm = new Map(folder).set('reward_model.safetensors', bytes);
    const got = await loadScalar(watched('rm', rm), 'reward_model.safetensors', { trainable: false });
    await expectSameScores(got, expected);
  });
});

const adapter = await webGpuAdapter();

describe('loadLM a weight at a time on WebGPU (Dawn in Node)', () => {
  if (!adapter) {
    skipWithoutAdapter();
    return;
  }
  beforeAll(async () => {
    await useNodeWebGpu();
  });

  for (const half of [false, true]) {
    it(`each weight is on the device before the next is read; the weights as the whole-file path's (${
      half ? 'f16 base' : 'f32'
    })`, async () => {
      const folder = fixture('qwen3-tiny');
      const backend = replayBackend()!;
      const known = new Set(Object.keys(tf.engine().state.registeredVariables));
      // Variables made since the test began whose values still wait on the host for their first use (tfjs
      // uploads lazily).
      const onHost = () =>
        Object.entries(tf.engine().state.registeredVariables).filter(([name, v]) => {
          const d = backend.tensorMap.get(v.dataId);
          return !known.has(name) && d !== undefined && d.values != null && d.resource == null;
        }).length;
      const pending: number[] = [];
      const before = tf.memory().numTensors;
      const files = watched('qwen3-tiny', folder, () => pending.push(onHost()));
      const opts = { trainable: false, ...(half ? { baseDtype: 'f16' as const } : {}) };
      const { model } = await loadLM(files, opts);
      expect(pending.length).toBeGreaterThan(10);
      expect(pending.every((n) => n === 0)).toBe(true);
      const expected = await wholeFileModel(memoryFiles('qwen3-tiny', folder), half);
      // The whole-file path leaves its weights on the host until first use: what this load no longer does.
      expect(onHost()).toBe(expected.params.size);
      expect(await paramValues(model)).toEqual(await paramValues(expected));
      model.dispose();
      expected.dispose();
      expect(tf.memory().numTensors).toBe(before);
      expect(await webGpuErrors()).toEqual([]);
    });
  }
});

describe('scripts/load-memory.ts', () => {
  it('loads a folder a weight at a time and as before, and says what each held', () => {
    const dir = path.join(FIXTURES, 'qwen3-tiny');
    const run = (...more: string[]) => {
      const r = spawnSync(
        process.execPath,
        ['--expose-gc', '--import', 'tsx', 'scripts/load-memory.ts', dir, '--backend', 'cpu', ...more],
        { encoding: 'utf8', timeout: 120_000 },
      );
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
    };
    for (const [more, mode] of [
      [[], 'loadLM'],
      [['--together'], 'together'],
    ] as const) {
      const out = run(...more);
      expect(out.mode).toBe(mode);
      expect(out.backend).toBe('cpu');
      expect(out.weightBytes).toBeGreaterThan(0);
      expect(typeof out.peakOverBaseline).toBe('number');
    }
  });
});
