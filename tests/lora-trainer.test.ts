/**
 * LoRA in the trainer (docs/formats.md §6): one frozen base for policy, reference and (shared) value model;
 * gradients and Adam state for adapters and heads only; step 1's policy is the reference (KL exactly 0);
 * every tensor freed once; checkpoints with the merged policy at the top and PEFT's pairs in adapter/ and
 * value_adapter/ (never a top-level adapter_config.json); resume (folder, zip, older layout) exact; bad adapter
 * files refused naming file and tensor with nothing left behind.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import type { TrainConfig } from '../src/common/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { disposeModels, type PpoTrainer } from '../src/core/ppo/trainer';
import {
  checkpointFiles,
  restoreTrainer,
  VALUE_ADAPTER_CONFIG_FILE,
  VALUE_ADAPTER_WEIGHTS_FILE,
  VALUE_HEAD_TENSOR,
} from '../src/core/run/checkpoint';
import { zipFolder, unzipFolder } from '../src/common/checkpoint-zip';
import { loadLM, memoryFiles } from '../src/core/model/folder';
import { readSafetensors, writeSafetensors, type NamedTensor } from '../src/core/model/safetensors';
import { peftTensorName, ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE } from '../src/core/model/peft';
import { REQUIRED_METRICS, type StepMetrics } from '../src/common/metrics';
import { isUserError } from '../src/common/errors';
import { tinyResources, tinyConfig, meanByteReward } from './helpers/trainer-fixture';

let dir: string;
const res = (): Resources => tinyResources(() => dir);
const eReward = meanByteReward;

function config(over: Partial<TrainConfig> = {}): TrainConfig {
  return tinyConfig({
    learningRate: 1e-2,
    valueLearningRate: 1e-2,
    lora: 4,
    loraAlpha: 8,
    ...over,
  });
}

const TIMING = new Set(['tokensPerSecond', 'timeGenerate', 'timeScore', 'timeUpdate', 'timeStep']);

function expectSameMetrics(a: StepMetrics[], b: StepMetrics[], firstStep: number): void {
  expect(b.length).toBe(a.length);
  for (let i = 0; i < a.length; i++) {
    for (const k of REQUIRED_METRICS) {
      if (TIMING.has(k)) continue;
      const x = a[i][k];
      const y = b[i][k];
      if (x === null || y === null) expect(y, `${k} at step ${firstStep + i}`).toBe(x);
      else if (Number.isNaN(x)) expect(Number.isNaN(y), `${k} at step ${firstStep + i}`).toBe(true);
      else
        expect(Math.abs(x - y), `${k} at step ${firstStep + i}`).toBeLessThanOrEqual(
          1e-6 * Math.max(1, Math.abs(x)),
        );
    }
  }
}

/** The optimiser's state: variable names its moments belong to, and the bytes the moments hold. */
async function adamState(opt: tf.Optimizer): Promise<{ names: string[]; bytes: number }> {
  const [iter, ...moments] = await opt.getWeights();
  iter?.tensor.dispose();
  return {
    names: moments.map((w) => w.name.replace(/\/[mv]$/, '')),
    bytes: moments.reduce((s, w) => s + w.tensor.size * 4, 0),
  };
}

/**
 * A checkpoint as versions before the adapter/ folder wrote it: the policy's pair at the top
 * (adapter_config.json, adapter_model.safetensors), the value model's as value_adapter_config.json +
 * value_adapter_model.safetensors.
 */
function legacyLayout(files: Map<string, Uint8Array>): Map<string, Uint8Array> {
  const rename: Record<string, string> = {
    'adapter/adapter_config.json': 'adapter_config.json',
    'adapter/adapter_model.safetensors': 'adapter_model.safetensors',
    'value_adapter/adapter_config.json': 'value_adapter_config.json',
    'value_adapter/adapter_model.safetensors': 'value_adapter_model.safetensors',
  };
  return new Map([...files].map(([n, b]) => [rename[n] ?? n, b]));
}

const varName = (v: tf.Variable) => v.name.slice(v.name.indexOf('/') + 1);

async function userErrorOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(isUserError(e), String(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}

describe('LoRA PPO runs', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    dir = await makeTinyFolder();
  });

  it('one frozen base: the reference is the base, the value model shares it, Adam holds adapters and the head only', async () => {
    const t = await buildTrainer(config(), res(), eReward);
    const { policy, ref } = t.models;
    const value = t.models.value!;
    expect(ref).toBe(policy.base);
    expect(value.trunkModel.base).toBe(ref);
    expect([...ref.params.values()].every((v) => !v.trainable)).toBe(true);
    // The variables handed to each optimiser: A and B of every adapted layer (+ the value head), nothing else.
    const pVars = policy.trainableVariables();
    const vVars = value.trainableVariables();
    const layers = policy.config.n_layer;
    expect(pVars.length).toBe(layers * 4 * 2);
    expect(
      pVars.every((v) =>
        /^h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.lora_[AB]\.weight$/.test(varName(v)),
      ),
    ).toBe(true);
    expect(vVars.map(varName)).toEqual([...pVars.map(varName), 'score.weight']);
    // Disjoint sets of variables (the value model has adapters of its own).
    expect(vVars.some((v) => pVars.includes(v))).toBe(false);
    await t.trainStep();
    const adapterBytes = policy.lora!.bytes();
    const C = policy.config.n_embd;
    // r 4, C 32, 2 layers: Σ over c_attn, attn.c_proj, c_fc, mlp.c_proj of r·(in + out) floats.
    expect(adapterBytes).toBe(2 * 4 * (32 + 96 + 32 + 32 + 32 + 128 + 128 + 32) * 4);
    const pState = await adamState(t.policyOpt);
    const vState = await adamState(t.valueOpt!);
    expect(pState.names).toEqual([...pVars, ...pVars].map((v) => v.name));
    expect(pState.bytes).toBe(2 * adapterBytes);
    expect(vState.names).toEqual([...vVars, ...vVars].map((v) => v.name));
    expect(vState.bytes).toBe(2 * (value.trunkModel.lora!.bytes() + C * 4));
    // The checkpoint's optimizer.safetensors holds exactly these moments.
    const files = await checkpointFiles(t);
    const opt = readSafetensors(files.get('optimizer.safetensors')!, 'optimizer.safetensors');
    const names = [...opt.tensors.keys()].filter((n) => !n.endsWith('.step'));
    expect(names.sort()).toEqual(
      [
        ...pVars.flatMap((v) => [`policy.m.${varName(v)}`, `policy.v.${varName(v)}`]),
        ...vVars.flatMap((v) => [`value.m.${varName(v)}`, `value.v.${varName(v)}`]),
      ].sort(),
    );
    const optBytes = names.reduce((s, n) => s + opt.tensors.get(n)!.data.length * 4, 0);
    expect(optBytes).toBe(pState.bytes + vState.bytes);
    t.disposeAll();
  });

  it('step 1: the policy is the reference, so KL is exactly 0 and the first minibatch ratio exactly 1', async () => {
    const t = await buildTrainer(config({ klCoef: 0.1 }), res(), eReward);
    const r = await t.trainStep();
    expect(r.metrics.kl).toBe(0);
    expect(r.metrics.nonScoreReward).toBe(0);
    for (let i = 0; i < 4; i++) expect(r.rollout.logprobs[i]).toEqual(r.rollout.refLogprobs[i]);
    expect(r.firstMinibatch.ratioMean).toBe(1);
    expect(r.firstMinibatch.ratioMax).toBe(1);
    expect(r.firstMinibatch.approxKl).toBe(0);
    // The adapters moved (B is no longer 0), the base did not: step 2's policy differs from the reference.
    const r2 = await t.trainStep();
    expect(r2.metrics.kl).not.toBe(0);
    t.disposeAll();
  });

  it('the base is never trained: its weights are bit-identical after two steps', async () => {
    const t = await buildTrainer(config(), res(), eReward);
    const before = await t.models.ref.toArrays();
    await t.trainStep();
    await t.trainStep();
    const after = await t.models.ref.toArrays();
    for (const [k, v] of before)
      expect(Buffer.from(after.get(k)!.buffer).equals(Buffer.from(v.buffer)), k).toBe(true);
    t.disposeAll();
  });

  it.each(['shared', 'separate'] as const)(
    'valueModel "%s": build + 2 steps + disposeAll frees every tensor once; numTensors flat across steps',
    async (valueModel) => {
      const start = tf.memory().numTensors;
      const t = await buildTrainer(config({ valueModel, ppoEpochs: 1 }), res(), eReward);
      await t.trainStep();
      const flat = tf.memory().numTensors;
      await t.trainStep();
      expect(tf.memory().numTensors).toBe(flat);
      t.disposeAll();
      expect(tf.memory().numTensors).toBe(start);
    },
  );

  it('disposeModels frees a full fine-tuning run too (lora 0: policy, its reference copy and the value model)', async () => {
    const start = tf.memory().numTensors;
    const t = await buildTrainer(config({ lora: 0 }), res(), eReward);
    await t.trainStep();
    t.disposeOptimizers();
    disposeModels(t.models);
    expect(tf.memory().numTensors).toBe(start);
  });

  it('valueModel "separate" with LoRA: a full value model of its own, started from the policy (= the base)', async () => {
    const t = await buildTrainer(config({ valueModel: 'separate' }), res(), eReward);
    const { policy } = t.models;
    const value = t.models.value!;
    expect(value.trunkModel.base).toBe(value.trunkModel);
    expect(value.trunkModel.params).not.toBe(policy.base.params);
    expect(value.trainableVariables().length).toBe(policy.base.params.size + 1);
    t.disposeAll();
  });

  it('GRPO with LoRA: no value model (no value adapters, head or Adam), PEFT files for the policy only; resume exact', async () => {
    const cfg = config({ algorithm: 'grpo', groupSize: 2 });
    const start = tf.memory().numTensors;
    const a = await buildTrainer(cfg, res(), eReward);
    expect(a.models.value).toBeNull();
    expect(a.valueOpt).toBeNull();
    const straight: StepMetrics[] = [];
    for (let i = 0; i < 4; i++) straight.push((await a.trainStep()).metrics);
    a.disposeAll();
    expect(tf.memory().numTensors).toBe(start);
    const b = await buildTrainer(cfg, res(), eReward);
    await b.trainStep();
    await b.trainStep();
    const files = await checkpointFiles(b);
    b.disposeAll();
    expect([...files.keys()].sort()).toEqual([
      'adapter/adapter_config.json',
      'adapter/adapter_model.safetensors',
      'config.json',
      'model.safetensors',
      'optimizer.safetensors',
      'ref_model.safetensors',
      'trainer_state.json',
    ]);
    const c = await restoreTrainer(memoryFiles('ckpt', files), res(), eReward);
    expect(c.models.value).toBeNull();
    const resumed = [(await c.trainStep()).metrics, (await c.trainStep()).metrics];
    c.disposeAll();
    expect(tf.memory().numTensors).toBe(start);
    expectSameMetrics(straight.slice(2), resumed, 3);
  });

  it('valueInit "reward" with the shared value model is a config error naming both ways out', () => {
    expect(() => config({ valueInit: 'reward' })).toThrow(
      /"valueModel" to "separate" or "valueInit" to "policy"/,
    );
    expect(config({ valueInit: 'reward', valueModel: 'separate' }).valueInit).toBe('reward');
  });

  it.each([
    ['valueModel "shared", step 1', {}, 1],
    ['valueModel "separate", step 1', { valueModel: 'separate' as const }, 1],
    ['grpo (no value model), step 1', { algorithm: 'grpo' as const, groupSize: 2 }, 1],
    ['valueModel "shared", step 0', {}, 0],
  ])(
    'no top-level adapter_config.json (%s): PEFT pairs only in adapter/ and value_adapter/',
    async (_, over, steps) => {
      // transformers with peft installed applies a top-level adapter_config.json on top of the folder's
      // model.safetensors, which is already merged: the adapters would count twice (docs/formats.md §6).
      const t = await buildTrainer(config(over), res(), eReward);
      for (let i = 0; i < steps; i++) await t.trainStep();
      const files = await checkpointFiles(t);
      const shared = t.models.value !== null && t.models.value.trunkModel.lora !== null;
      t.disposeAll();
      const names = [...files.keys()];
      const top = names.filter((n) => !n.includes('/'));
      expect(top).not.toContain('adapter_config.json');
      expect(top).not.toContain('adapter_model.safetensors');
      expect(top.filter((n) => n.startsWith('value_adapter'))).toEqual([]);
      expect(top).toContain('model.safetensors');
      expect(names.filter((n) => n.includes('/')).sort()).toEqual(
        [
          'adapter/adapter_config.json',
          'adapter/adapter_model.safetensors',
          ...(shared ? ['value_adapter/adapter_config.json', 'value_adapter/adapter_model.safetensors'] : []),
        ].sort(),
      );
    },
  );

  it('checkpoint files follow §6: PEFT pair in adapter/, merged model.safetensors, the base once, the value adapters + head in value_adapter/', async () => {
    const t = await buildTrainer(config(), res(), eReward);
    await t.trainStep();
    const files = await checkpointFiles(t);
    expect([
      ADAPTER_CONFIG_FILE,
      ADAPTER_WEIGHTS_FILE,
      VALUE_ADAPTER_CONFIG_FILE,
      VALUE_ADAPTER_WEIGHTS_FILE,
    ]).toEqual([
      'adapter/adapter_config.json',
      'adapter/adapter_model.safetensors',
      'value_adapter/adapter_config.json',
      'value_adapter/adapter_model.safetensors',
    ]);
    expect([...files.keys()].sort()).toEqual(
      [
        ADAPTER_CONFIG_FILE,
        ADAPTER_WEIGHTS_FILE,
        'config.json',
        'model.safetensors',
        'optimizer.safetensors',
        'ref_model.safetensors',
        'trainer_state.json',
        VALUE_ADAPTER_CONFIG_FILE,
        VALUE_ADAPTER_WEIGHTS_FILE,
      ].sort(),
    );
    const ac = JSON.parse(new TextDecoder().decode(files.get(ADAPTER_CONFIG_FILE)));
    expect(ac).toMatchObject({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      r: 4,
      lora_alpha: 8,
      fan_in_fan_out: true,
    });
    const vc = JSON.parse(new TextDecoder().decode(files.get(VALUE_ADAPTER_CONFIG_FILE)));
    expect(vc).toMatchObject({ peft_type: 'LORA', task_type: 'SEQ_CLS', r: 4, modules_to_save: ['score'] });
    const vw = readSafetensors(files.get(VALUE_ADAPTER_WEIGHTS_FILE)!, 'v');
    expect(vw.tensors.get(VALUE_HEAD_TENSOR)!.shape).toEqual([1, 32]);
    expect(vw.tensors.has(peftTensorName('h.1.mlp.c_proj', 'B'))).toBe(true);
    const state = JSON.parse(new TextDecoder().decode(files.get('trainer_state.json')));
    expect(state.lora).toEqual({
      r: 4,
      loraAlpha: 8,
      targets: ['c_attn', 'attn.c_proj', 'c_fc', 'mlp.c_proj'],
      valueModel: 'shared',
    });
    // model.safetensors is the merged policy: loaded as a plain model (what `generate --model CKPT` does) it
    // computes the policy's logits; ref_model.safetensors is the base.
    const ids = tf.tensor2d([[72, 101, 108, 108, 111, 32, 119]], [1, 7], 'int32');
    const mask = tf.onesLike(ids) as tf.Tensor2D;
    const merged = (await loadLM(memoryFiles('ckpt', files))).model;
    const base = (await loadLM(memoryFiles('ckpt', files), { file: 'ref_model.safetensors' })).model;
    const want = await t.models.policy.logits(ids, mask).array();
    const got = await merged.logits(ids, mask).array();
    let worst = 0;
    want[0].forEach((row, i) => row.forEach((x, j) => (worst = Math.max(worst, Math.abs(x - got[0][i][j])))));
    expect(worst).toBeLessThan(1e-4);
    const baseWant = await t.models.ref.toArrays();
    const baseGot = await base.toArrays();
    for (const [k, v] of baseWant) expect(baseGot.get(k), k).toEqual(v);
    // ... and the policy really moved away from the base (so the comparison above means something).
    const refLogits = await t.models.ref.logits(ids, mask).array();
    let moved = 0;
    refLogits[0].forEach((row, i) =>
      row.forEach((x, j) => (moved = Math.max(moved, Math.abs(x - want[0][i][j])))),
    );
    expect(moved).toBeGreaterThan(1e-3);
    merged.dispose();
    base.dispose();
    tf.dispose([ids, mask]);
    t.disposeAll();
  });

  it.each(['shared', 'separate'] as const)(
    'valueModel "%s": 4 steps straight equal 2 steps + checkpoint + restore + 2 steps (metrics to 1e-6), also from a resume-only checkpoint (no merged policy) and the older layout (pairs at the top); "shared" also through a zip',
    async (valueModel) => {
      const cfg = config({ valueModel });
      const a = await buildTrainer(cfg, res(), eReward);
      const straight: StepMetrics[] = [];
      for (let i = 0; i < 4; i++) straight.push((await a.trainStep()).metrics);
      a.disposeAll();

      const b = await buildTrainer(cfg, res(), eReward);
      await b.trainStep();
      await b.trainStep();
      const files = await checkpointFiles(b);
      // What the app's autosave keeps: every file but the merged policy, byte for byte the same.
      const lean = await checkpointFiles(b, 'resume');
      b.disposeAll();
      expect(files.has('model.safetensors')).toBe(true);
      expect([...lean.keys()].sort()).toEqual(
        [...files.keys()].filter((k) => k !== 'model.safetensors').sort(),
      );
      for (const [k, v] of lean) expect(v, k).toEqual(files.get(k));
      expect(files.has('value_model.safetensors')).toBe(valueModel === 'separate');
      expect(files.has(VALUE_ADAPTER_WEIGHTS_FILE)).toBe(valueModel === 'shared');

      const resumeFrom = async (c: PpoTrainer) => {
        expect(c.step).toBe(2);
        expect(c.models.ref).toBe(c.models.policy.base);
        const out = [(await c.trainStep()).metrics, (await c.trainStep()).metrics];
        c.disposeAll();
        return out;
      };
      expectSameMetrics(
        straight.slice(2),
        await resumeFrom(await restoreTrainer(memoryFiles('ckpt', files), res(), eReward)),
        3,
      );
      expectSameMetrics(
        straight.slice(2),
        await resumeFrom(await restoreTrainer(memoryFiles('autosave', lean), res(), eReward)),
        3,
      );
      // A checkpoint of an earlier version (the pairs at the top: adapter_*, value_adapter_*) resumes the same.
      const old = legacyLayout(files);
      expect([...old.keys()].filter((n) => n.includes('/'))).toEqual([]);
      expect(old.has('adapter_config.json')).toBe(true);
      expect(old.has('value_adapter_model.safetensors')).toBe(valueModel === 'shared');
      expectSameMetrics(
        straight.slice(2),
        await resumeFrom(await restoreTrainer(memoryFiles('old-ckpt', old), res(), eReward)),
        3,
      );
      if (valueModel === 'separate') return; // the zip path is the same for both; once is enough
      // The app's zip import: the same files through zipFolder / unzipFolder, then the same restore.
      const unzipped = unzipFolder(zipFolder(files, 'ppo-playground-step-2'), 'ckpt.zip');
      expect([...unzipped.keys()].sort()).toEqual([...files.keys()].sort());
      expectSameMetrics(
        straight.slice(2),
        await resumeFrom(await restoreTrainer(memoryFiles('ckpt.zip', unzipped), res(), eReward)),
        3,
      );
    },
  );

  it('a step-0 checkpoint (no ref_model.safetensors: the merged policy is the base) restores exactly', async () => {
    const cfg = config();
    const a = await buildTrainer(cfg, res(), eReward);
    const straight = [(await a.trainStep()).metrics];
    a.disposeAll();
    const b = await buildTrainer(cfg, res(), eReward);
    const files = await checkpointFiles(b);
    // At step 0 the merged policy is the base: a resume-only checkpoint keeps it (there is no ref_model to read).
    const lean = await checkpointFiles(b, 'resume');
    b.disposeAll();
    expect(files.has('ref_model.safetensors')).toBe(false);
    expect([...lean.keys()].sort()).toEqual([...files.keys()].sort());
    const c = await restoreTrainer(memoryFiles('ckpt', files), res(), eReward);
    expectSameMetrics(straight, [(await c.trainStep()).metrics], 1);
    c.disposeAll();
  });

  describe('bad adapter files in a checkpoint', () => {
    let good: Map<string, Uint8Array>;
    beforeAll(async () => {
      const t = await buildTrainer(config(), res(), eReward);
      await t.trainStep();
      good = await checkpointFiles(t);
      t.disposeAll();
    });

    /** The checkpoint with one safetensors file's tensors changed by `edit`. */
    function withTensors(file: string, edit: (ts: NamedTensor[]) => NamedTensor[]): Map<string, Uint8Array> {
      const st = readSafetensors(good.get(file)!, file);
      const ts = [...st.tensors].map(([name, t]) => ({ name, shape: t.shape, data: t.data }));
      return new Map([...good, [file, writeSafetensors(edit(ts), { format: 'pt' })]]);
    }
    function withJson(file: string, edit: (o: Record<string, unknown>) => void): Map<string, Uint8Array> {
      const o = JSON.parse(new TextDecoder().decode(good.get(file)));
      edit(o);
      return new Map([...good, [file, new TextEncoder().encode(JSON.stringify(o))]]);
    }

    const cases: [string, () => Map<string, Uint8Array>, RegExp][] = [
      [
        'lora_A whose input size does not fit the base',
        () =>
          withTensors(ADAPTER_WEIGHTS_FILE, (ts) =>
            ts.map((t) =>
              t.name === peftTensorName('h.0.attn.c_attn', 'A')
                ? { ...t, shape: [4, 16], data: t.data.subarray(0, 64) }
                : t,
            ),
          ),
        /ckpt\/adapter\/adapter_model\.safetensors: tensor "base_model\.model\.transformer\.h\.0\.attn\.c_attn\.lora_A\.weight" has shape \[4,16\], which does not fit the base/,
      ],
      [
        'a missing lora_B',
        () =>
          withTensors(ADAPTER_WEIGHTS_FILE, (ts) =>
            ts.filter((t) => t.name !== peftTensorName('h.1.mlp.c_fc', 'B')),
          ),
        /ckpt\/adapter\/adapter_model\.safetensors: tensor "base_model\.model\.transformer\.h\.1\.mlp\.c_fc\.lora_B\.weight" is missing/,
      ],
      [
        'peft_type not LORA',
        () => withJson(ADAPTER_CONFIG_FILE, (o) => (o.peft_type = 'IA3')),
        /ckpt\/adapter\/adapter_config\.json: "peft_type" is "IA3"; only "LORA"/,
      ],
      [
        'a value adapter of the wrong rank',
        () =>
          withTensors(VALUE_ADAPTER_WEIGHTS_FILE, (ts) =>
            ts.map((t) =>
              t.name === peftTensorName('h.1.attn.c_proj', 'B')
                ? { ...t, shape: [32, 2], data: t.data.subarray(0, 64) }
                : t,
            ),
          ),
        /ckpt\/value_adapter\/adapter_model\.safetensors: tensor "base_model\.model\.transformer\.h\.1\.attn\.c_proj\.lora_B\.weight" has shape \[32,2\]: its rank 2 disagrees with "r": 4 in value_adapter\/adapter_config\.json/,
      ],
      [
        'a value head of the wrong shape',
        () =>
          withTensors(VALUE_ADAPTER_WEIGHTS_FILE, (ts) =>
            ts.map((t) => (t.name === VALUE_HEAD_TENSOR ? { ...t, shape: [2, 16] } : t)),
          ),
        /ckpt\/value_adapter\/adapter_model\.safetensors: tensor "base_model\.model\.score\.weight" has shape \[2,16\]; it must be \[1,32\]/,
      ],
      [
        "adapters whose r disagrees with the run's lora",
        () =>
          withJson('trainer_state.json', (o) => {
            (o.config as Record<string, unknown>).lora = 8;
          }),
        /ckpt\/adapter\/adapter_config\.json: the adapters have r 4, .* but trainer_state\.json's config has lora 8/,
      ],
      [
        'no policy adapters at all (neither adapter/ nor the top)',
        () => new Map([...good].filter(([n]) => !n.startsWith('adapter/'))),
        /^ckpt: adapter\/adapter_config\.json is missing; a LoRA checkpoint needs adapter\/adapter_config\.json and adapter\/adapter_model\.safetensors \(checkpoints of earlier versions: adapter_config\.json and adapter_model\.safetensors at the top\)\.$/,
      ],
      [
        'adapter/adapter_config.json without its weights file',
        () => new Map([...good].filter(([n]) => n !== ADAPTER_WEIGHTS_FILE)),
        /^ckpt: adapter\/adapter_model\.safetensors is missing; a LoRA checkpoint needs it beside adapter\/adapter_config\.json\.$/,
      ],
      [
        'an older checkpoint (pairs at the top) whose adapter_config.json is not LORA',
        () => {
          const old = legacyLayout(good);
          const o = JSON.parse(new TextDecoder().decode(old.get('adapter_config.json')));
          o.peft_type = 'IA3';
          return new Map([...old, ['adapter_config.json', new TextEncoder().encode(JSON.stringify(o))]]);
        },
        /ckpt\/adapter_config\.json: "peft_type" is "IA3"; only "LORA"/,
      ],
      [
        'an older checkpoint whose value_adapter_model.safetensors lacks the head',
        () => {
          const old = legacyLayout(good);
          const st = readSafetensors(old.get('value_adapter_model.safetensors')!, 'v');
          const ts = [...st.tensors]
            .filter(([name]) => name !== VALUE_HEAD_TENSOR)
            .map(([name, t]) => ({ name, shape: t.shape, data: t.data }));
          return new Map([
            ...old,
            ['value_adapter_model.safetensors', writeSafetensors(ts, { format: 'pt' })],
          ]);
        },
        /ckpt\/value_adapter_model\.safetensors: tensor "base_model\.model\.score\.weight" of shape \[1,32\] is missing/,
      ],
    ];
    it.each(cases)(
      '%s: a clear error naming file and tensor, and no tensor left behind',
      async (_, make, want) => {
        const files = make();
        const before = tf.memory().numTensors;
        const msg = await userErrorOf(restoreTrainer(memoryFiles('ckpt', files), res(), eReward));
        expect(msg).toMatch(want);
        expect(tf.memory().numTensors).toBe(before);
      },
    );

    it('the good checkpoint restores (the cases above fail for their edit alone)', async () => {
      const before = tf.memory().numTensors;
      const t = await restoreTrainer(memoryFiles('ckpt', good), res(), eReward);
      t.disposeAll();
      expect(tf.memory().numTensors).toBe(before);
    });
  });
});
