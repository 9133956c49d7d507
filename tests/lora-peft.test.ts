/**
 * PEFT's LoRA files (src/core/model/peft.ts; docs/formats.md §6): adapter/adapter_config.json and
 * adapter/adapter_model.safetensors written with PEFT's names and shapes and read back exactly (also from the top
 * of the folder, where older checkpoints kept them); every bad file refused with an error that names the file
 * (with its subfolder) and the tensor (or key), leaving the model and its adapters as they were.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { GPT2 } from '../src/core/model/gpt2';
import { LoraAdapters } from '../src/core/model/lora';
import {
  adapterFiles,
  readAdapters,
  readAdapterSet,
  peftTensorName,
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
} from '../src/core/model/peft';
import { memoryFiles } from '../src/core/model/folder';
import { readSafetensors, writeSafetensors, type NamedTensor } from '../src/core/model/safetensors';
import { parseGPT2Config } from '../src/core/model/config';

const cfg = parseGPT2Config({
  vocab_size: 258,
  n_positions: 40,
  n_embd: 16,
  n_layer: 2,
  n_head: 2,
  tokenizer: 'bytes',
  bos_token_id: 256,
  eos_token_id: 256,
  pad_token_id: 257,
});

function rand(n: number, seed: number): Float32Array {
  let x = seed;
  return Float32Array.from({ length: n }, () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);
}

const bitEqual = (a: Float32Array, b: Float32Array): boolean =>
  a.length === b.length && a.every((x, i) => Object.is(x, b[i]));

async function snapshot(m: GPT2): Promise<Map<string, Float32Array>> {
  const out = new Map<string, Float32Array>();
  for (const [k, v] of m.params) out.set(k, (await v.data()) as Float32Array);
  if (m.lora) for (const v of m.lora.variables()) out.set(v.name, (await v.data()) as Float32Array);
  return out;
}

async function expectSame(a: Map<string, Float32Array>, b: Map<string, Float32Array>): Promise<void> {
  expect([...a.keys()]).toEqual([...b.keys()]);
  for (const [k, v] of a) expect(bitEqual(v, b.get(k)!), k).toBe(true);
}

describe('PEFT adapter files', () => {
  let base: GPT2;
  let saved: LoraAdapters;
  let files: Map<string, Uint8Array>;
  beforeAll(async () => {
    await useCpu();
    base = GPT2.random(cfg, 5, false, 'base');
    saved = LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 3, 'saved');
    let k = 1;
    for (const m of saved.modules.values())
      m.b.assign(tf.tensor2d(rand(m.b.size, k++), m.b.shape as [number, number]));
    files = await adapterFiles(saved, 'tiny-base');
  });

  it("writes PEFT's adapter_config.json and tensor names/shapes byte for byte, in adapter/", async () => {
    // In a subfolder: a top-level adapter_config.json beside the merged model.safetensors would make
    // transformers (with peft installed) apply the adapters a second time.
    expect([...files.keys()]).toEqual(['adapter/adapter_config.json', 'adapter/adapter_model.safetensors']);
    const json = new TextDecoder().decode(files.get(ADAPTER_CONFIG_FILE)!);
    expect(json).toBe(
      '{\n  "peft_type": "LORA",\n  "task_type": "CAUSAL_LM",\n  "r": 4,\n  "lora_alpha": 8,\n  "target_modules": [\n' +
        '    "c_attn",\n    "attn.c_proj",\n    "c_fc",\n    "mlp.c_proj"\n  ],\n  "fan_in_fan_out": true,\n' +
        '  "bias": "none",\n  "lora_dropout": 0,\n  "base_model_name_or_path": "tiny-base"\n}\n',
    );
    const st = readSafetensors(files.get(ADAPTER_WEIGHTS_FILE)!, 'x');
    const want: [string, number[]][] = [];
    for (let i = 0; i < 2; i++) {
      const p = `base_model.model.transformer.h.${i}.`;
      want.push(
        [`${p}attn.c_attn.lora_A.weight`, [4, 16]],
        [`${p}attn.c_attn.lora_B.weight`, [48, 4]],
        [`${p}attn.c_proj.lora_A.weight`, [4, 16]],
        [`${p}attn.c_proj.lora_B.weight`, [16, 4]],
        [`${p}mlp.c_fc.lora_A.weight`, [4, 16]],
        [`${p}mlp.c_fc.lora_B.weight`, [64, 4]],
        [`${p}mlp.c_proj.lora_A.weight`, [4, 64]],
        [`${p}mlp.c_proj.lora_B.weight`, [16, 4]],
      );
    }
    expect([...st.tensors].map(([n, t]) => [n, t.shape]).sort()).toEqual(want.sort());
    expect([...st.tensors.values()].every((t) => t.dtype === 'F32')).toBe(true);
    expect(st.metadata).toEqual({ format: 'pt' });
  });

  it("reads back exactly: into a new set for a base, and into an existing view's adapters", async () => {
    const fresh = await readAdapters(memoryFiles('ckpt', files), base);
    expect(fresh.config()).toEqual(saved.config());
    for (const [key, m] of saved.modules) {
      const f = fresh.modules.get(key)!;
      expect(bitEqual((await f.a.data()) as Float32Array, (await m.a.data()) as Float32Array), key).toBe(
        true,
      );
      expect(bitEqual((await f.b.data()) as Float32Array, (await m.b.data()) as Float32Array), key).toBe(
        true,
      );
    }
    // Written again: the same bytes.
    const again = await adapterFiles(fresh, 'tiny-base');
    for (const [name, bytes] of files)
      expect(Buffer.from(again.get(name)!).equals(Buffer.from(bytes)), name).toBe(true);
    fresh.dispose();
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 99));
    const got = await readAdapters(memoryFiles('ckpt', files), view);
    expect(got).toBe(view.lora);
    for (const [key, m] of saved.modules) {
      expect(
        bitEqual(
          (await view.lora!.modules.get(key)!.b.data()) as Float32Array,
          (await m.b.data()) as Float32Array,
        ),
      ).toBe(true);
    }
    view.dispose();
  });

  it('reads the pair at the top of the folder (checkpoints of earlier versions) the same; adapter/ first', async () => {
    const top = new Map([
      ['adapter_config.json', files.get(ADAPTER_CONFIG_FILE)!],
      ['adapter_model.safetensors', files.get(ADAPTER_WEIGHTS_FILE)!],
    ]);
    const read = await readAdapterSet(memoryFiles('old', top), base);
    expect(read.configFile).toBe('adapter_config.json');
    for (const [key, m] of saved.modules) {
      const f = read.adapters.modules.get(key)!;
      expect(bitEqual((await f.a.data()) as Float32Array, (await m.a.data()) as Float32Array), key).toBe(
        true,
      );
      expect(bitEqual((await f.b.data()) as Float32Array, (await m.b.data()) as Float32Array), key).toBe(
        true,
      );
    }
    read.adapters.dispose();
    // Both present: adapter/ is read (the top-level pair here has r 2).
    const rank2 = LoraAdapters.create(cfg, { lora: 2, loraAlpha: 8 }, 7, 'other');
    const other = new Map(
      [...(await adapterFiles(rank2, 'tiny-base'))].map(([n, b]) => [n.slice('adapter/'.length), b]),
    );
    rank2.dispose();
    const both = await readAdapterSet(memoryFiles('both', new Map([...files, ...other])), base);
    expect(both.configFile).toBe('adapter/adapter_config.json');
    expect(both.adapters.r).toBe(4);
    both.adapters.dispose();
    // Other paths given: no fallback to the top.
    await expect(
      readAdapterSet(memoryFiles('old', top), base, {
        configFile: 'value_adapter/adapter_config.json',
        weightsFile: 'value_adapter/adapter_model.safetensors',
      }),
    ).rejects.toThrow(
      /^old: value_adapter\/adapter_config\.json is missing; a LoRA checkpoint needs value_adapter\/adapter_config\.json and value_adapter\/adapter_model\.safetensors\.$/,
    );
  });

  it('"fan_in_fan_out": false on GPT-2 loads with a warning, read as true as PEFT corrects it: the same logits', async () => {
    // PEFT (peft/tuners/lora/model.py, _create_new_module) warns "fan_in_fan_out is set to False but the target
    // module is `Conv1D`. Setting fan_in_fan_out to True." and builds the same layers as from true; checked with
    // peft 0.21 (scripts/check_peft_export.py on a CLI checkpoint edited to false: PEFT warns, and its logits equal
    // our merged model's within 1.2e-5 on logits up to 16).
    const warnings: string[] = [];
    for (const flag of [false, null]) {
      const f = variant({ config: (c) => (c.fan_in_fan_out = flag) });
      const read = await readAdapterSet(memoryFiles('ckpt', f), base, {
        onWarning: (w) => warnings.push(w),
      });
      expect(read.warnings).toHaveLength(1);
      expect(read.warnings[0]).toMatch(
        new RegExp(
          `^ckpt/adapter/adapter_config\\.json: "fan_in_fan_out" is ${flag}, but GPT-2's layers are Conv1D .*read as true, as PEFT does`,
        ),
      );
      const ids = tf.tensor2d([[3, 17, 99, 256, 40, 2]], undefined, 'int32');
      const mask = tf.onesLike(ids) as tf.Tensor2D;
      const viewRead = base.withLora(read.adapters);
      const viewSaved = base.withLora(saved);
      const [a, b] = [viewRead, viewSaved].map((v) => tf.tidy(() => v.lmHead(v.trunk(ids, mask))));
      expect(bitEqual((await a.data()) as Float32Array, (await b.data()) as Float32Array)).toBe(true);
      // The adapters are not the base's: their logits differ from the base's.
      const plain = tf.tidy(() => base.lmHead(base.trunk(ids, mask)));
      expect(bitEqual((await a.data()) as Float32Array, (await plain.data()) as Float32Array)).toBe(false);
      tf.dispose([ids, mask, a, b, plain]);
      read.adapters.dispose();
    }
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toMatch(/^warning: ckpt\/adapter\/adapter_config\.json: "fan_in_fan_out" is false/);
    // true: no warning.
    const ok = await readAdapterSet(memoryFiles('ckpt', files), base, { onWarning: (w) => warnings.push(w) });
    expect(ok.warnings).toEqual([]);
    expect(warnings).toHaveLength(2);
    ok.adapters.dispose();
  });

  it('accepts PEFT\'s usual GPT-2 target list ["c_attn", "c_proj", "c_fc"] (c_proj = both projections)', async () => {
    const cfgJson = JSON.parse(new TextDecoder().decode(files.get(ADAPTER_CONFIG_FILE)!));
    cfgJson.target_modules = ['c_attn', 'c_proj', 'c_fc'];
    const f = new Map(files);
    f.set(ADAPTER_CONFIG_FILE, new TextEncoder().encode(JSON.stringify(cfgJson)));
    const ad = await readAdapters(memoryFiles('ckpt', f), base);
    expect(ad.targets).toEqual(['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj']);
    ad.dispose();
  });

  /** The saved files with the config edited and/or the tensors edited. */
  function variant(edit: {
    config?: (c: Record<string, unknown>) => void;
    tensors?: (t: NamedTensor[]) => NamedTensor[];
  }): Map<string, Uint8Array> {
    const c = JSON.parse(new TextDecoder().decode(files.get(ADAPTER_CONFIG_FILE)!)) as Record<
      string,
      unknown
    >;
    edit.config?.(c);
    const st = readSafetensors(files.get(ADAPTER_WEIGHTS_FILE)!, 'x');
    let t: NamedTensor[] = [...st.tensors].map(([name, v]) => ({ name, shape: v.shape, data: v.data }));
    if (edit.tensors) t = edit.tensors(t);
    return new Map([
      [ADAPTER_CONFIG_FILE, new TextEncoder().encode(JSON.stringify(c))],
      [ADAPTER_WEIGHTS_FILE, writeSafetensors(t, { format: 'pt' })],
    ]);
  }

  const A0 = peftTensorName('h.0.attn.c_attn', 'A');
  const CFG = `ckpt/${ADAPTER_CONFIG_FILE}`;
  const W = `ckpt/${ADAPTER_WEIGHTS_FILE}`;
  const cases: {
    name: string;
    files: () => Map<string, Uint8Array>;
    message: RegExp;
    file: string;
    what: string;
  }[] = [
    {
      name: 'a shape that does not fit the base',
      files: () =>
        variant({
          tensors: (t) =>
            t.map((x) => (x.name === A0 ? { ...x, shape: [4, 17], data: new Float32Array(68) } : x)),
        }),
      message: /has shape \[4,17\], which does not fit the base: its attn\.c_attn takes 16 inputs/,
      file: W,
      what: A0,
    },
    {
      name: 'an r in the config that disagrees with the tensors',
      files: () => variant({ config: (c) => (c.r = 8) }),
      message: /its rank 4 disagrees with "r": 8 in adapter\/adapter_config\.json/,
      file: W,
      what: 'base_model.model.transformer.h.0.attn.c_attn.lora_A.weight',
    },
    {
      name: 'a missing A (last block)',
      files: () =>
        variant({ tensors: (t) => t.filter((x) => x.name !== peftTensorName('h.1.mlp.c_proj', 'A')) }),
      message: /is missing; target_modules .* asks for lora_A and lora_B in every one of the base's 2 blocks/,
      file: W,
      what: peftTensorName('h.1.mlp.c_proj', 'A'),
    },
    {
      name: 'a missing B',
      files: () =>
        variant({ tensors: (t) => t.filter((x) => x.name !== peftTensorName('h.1.attn.c_proj', 'B')) }),
      message: /is missing/,
      file: W,
      what: peftTensorName('h.1.attn.c_proj', 'B'),
    },
    {
      name: 'an unknown module name',
      files: () =>
        variant({
          tensors: (t) => [
            ...t,
            {
              name: 'base_model.model.transformer.h.0.attn.q_proj.lora_A.weight',
              shape: [4, 16],
              data: new Float32Array(64),
            },
          ],
        }),
      message: /is not a LoRA tensor of a GPT-2 Conv1D layer/,
      file: W,
      what: 'base_model.model.transformer.h.0.attn.q_proj.lora_A.weight',
    },
    {
      name: 'a block the base does not have',
      files: () =>
        variant({
          tensors: (t) => [
            ...t,
            { name: peftTensorName('h.2.mlp.c_fc', 'A'), shape: [4, 16], data: new Float32Array(64) },
          ],
        }),
      message: /is for block 2, but the base model has 2 blocks/,
      file: W,
      what: peftTensorName('h.2.mlp.c_fc', 'A'),
    },
    {
      name: 'a module target_modules does not list',
      files: () => variant({ config: (c) => (c.target_modules = ['c_attn', 'attn.c_proj', 'c_fc']) }),
      message: /adapts mlp\.c_proj, which adapter\/adapter_config\.json's target_modules/,
      file: W,
      what: peftTensorName('h.0.mlp.c_proj', 'A'),
    },
    {
      name: 'peft_type not LORA',
      files: () => variant({ config: (c) => (c.peft_type = 'IA3') }),
      message: /"peft_type" is "IA3"; only "LORA" adapters can be loaded/,
      file: CFG,
      what: 'peft_type',
    },
    {
      name: 'fan_in_fan_out not a boolean',
      files: () => variant({ config: (c) => (c.fan_in_fan_out = 'yes') }),
      message: /"fan_in_fan_out" is "yes"; it must be true or false\./,
      file: CFG,
      what: 'fan_in_fan_out',
    },
    {
      name: 'an unknown target module',
      files: () => variant({ config: (c) => (c.target_modules = ['q_proj']) }),
      message: /"target_modules" names "q_proj", which is not a GPT-2 Conv1D layer/,
      file: CFG,
      what: 'target_modules',
    },
    {
      name: 'a missing adapter_config.json',
      files: () => new Map([[ADAPTER_WEIGHTS_FILE, files.get(ADAPTER_WEIGHTS_FILE)!]]),
      message:
        /^ckpt: adapter\/adapter_config\.json is missing; a LoRA checkpoint needs adapter\/adapter_config\.json and adapter\/adapter_model\.safetensors \(checkpoints of earlier versions: adapter_config\.json and adapter_model\.safetensors at the top\)\.$/,
      file: 'ckpt',
      what: ADAPTER_CONFIG_FILE,
    },
    {
      name: 'a missing adapter/adapter_model.safetensors',
      files: () => new Map([[ADAPTER_CONFIG_FILE, files.get(ADAPTER_CONFIG_FILE)!]]),
      message:
        /^ckpt: adapter\/adapter_model\.safetensors is missing; a LoRA checkpoint needs it beside adapter\/adapter_config\.json\.$/,
      file: 'ckpt',
      what: ADAPTER_WEIGHTS_FILE,
    },
    {
      name: 'a bad pair at the top (an older checkpoint), named at the top',
      files: () =>
        new Map(
          [...variant({ tensors: (t) => t.filter((x) => x.name !== A0) })].map(([n, b]) => [
            n.slice('adapter/'.length),
            b,
          ]),
        ),
      message: /^ckpt\/adapter_model\.safetensors: tensor ".*" is missing/,
      file: 'ckpt/adapter_model.safetensors',
      what: A0,
    },
  ];

  it.each(cases)('refuses $name, naming the file and the tensor, and changes nothing', async (c) => {
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 8 }, 42));
    const before = await snapshot(view);
    const tensorsBefore = tf.memory().numTensors;
    const err = await readAdapters(memoryFiles('ckpt', c.files()), view).then(
      () => null,
      (e: Error) => e,
    );
    expect(err).not.toBeNull();
    expect(err!.name).toBe('UserError');
    expect(err!.message).toMatch(c.message);
    expect(err!.message.startsWith(c.file)).toBe(true);
    expect(err!.message).toContain(c.what);
    await expectSame(await snapshot(view), before);
    expect(tf.memory().numTensors).toBe(tensorsBefore);
    // A plain base: no adapters created, nothing left behind.
    await expect(readAdapters(memoryFiles('ckpt', c.files()), base)).rejects.toThrow(c.message);
    expect(tf.memory().numTensors).toBe(tensorsBefore);
    view.dispose();
  });

  it('refuses files whose settings differ from the view they are loaded into, before assigning anything', async () => {
    const view = base.withLora(LoraAdapters.create(cfg, { lora: 4, loraAlpha: 16 }, 42));
    const before = await snapshot(view);
    await expect(readAdapters(memoryFiles('ckpt', files), view)).rejects.toThrow(
      /ckpt\/adapter\/adapter_config\.json: the adapters have r 4, lora_alpha 8, .*the model they are loaded into has r 4, lora_alpha 16/,
    );
    await expectSame(await snapshot(view), before);
    view.dispose();
  });
});
