/**
 * The trainer on the Llama families (docs/models.md): the tiny Llama / Qwen2 / Qwen3 folders of
 * tests/fixtures/parity-llama train with every algorithm, with LoRA on nn.Linear (PEFT's targets, step 1's KL exactly
 * 0) and in full; every tensor is freed; checkpoints carry the tokenizer files and PEFT's pair for nn.Linear
 * (fan_in_fan_out false, `base_model.model.model.layers.…` names) and resume exactly; the adapters read back onto
 * the base give the merged model.safetensors' logits; recomputing blocks gives the same update as keeping them.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import type { TrainConfig } from '../src/common/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { loadLM, memoryFiles } from '../src/core/model/folder';
import { readAdapters, ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE } from '../src/core/model/peft';
import { readSafetensors } from '../src/core/model/safetensors';
import { REQUIRED_METRICS, type StepMetrics } from '../src/common/metrics';
import { tinyResources, tinyConfig, meanByteReward, meanIdReward } from './helpers/trainer-fixture';

const FIX = 'tests/fixtures/parity-llama';
let folder = `${FIX}/qwen2-tiny`;
const res = (): Resources => tinyResources(() => folder);
const reward = meanIdReward;
void meanByteReward;

function config(over: Partial<TrainConfig> = {}): TrainConfig {
  return tinyConfig({ learningRate: 1e-2, valueLearningRate: 1e-2, lora: 4, loraAlpha: 8, ...over });
}

const TIMING = new Set(['tokensPerSecond', 'timeGenerate', 'timeScore', 'timeUpdate', 'timeStep']);

function expectSameMetrics(a: StepMetrics[], b: StepMetrics[]): void {
  expect(b.length).toBe(a.length);
  for (let i = 0; i < a.length; i++) {
    for (const k of REQUIRED_METRICS) {
      if (TIMING.has(k)) continue;
      const x = a[i][k];
      const y = b[i][k];
      if (x === null || y === null) expect(y, k).toBe(x);
      else expect(Math.abs(x - y), `${k} at step ${i}`).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(x)));
    }
  }
}

beforeAll(() => setNodeBackend('wasm'));

describe.each(['llama-tiny', 'qwen2-tiny', 'qwen3-tiny'])('%s', (name) => {
  for (const algorithm of ['ppo', 'grpo', 'rloo', 'reinforce++'] as const) {
    it(`${algorithm} with LoRA: step 1 is the reference (KL 0), the adapters train, every tensor freed`, async () => {
      folder = `${FIX}/${name}`;
      const start = tf.memory().numTensors;
      const groupSize = algorithm === 'grpo' || algorithm === 'rloo' ? 2 : 1;
      const t = await buildTrainer(config({ algorithm, groupSize }), res(), reward);
      const targets = [...t.models.policy.lora!.targets];
      expect(targets).toEqual(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']);
      const m1 = (await t.trainStep()).metrics;
      const m2 = (await t.trainStep()).metrics;
      expect(m1.kl).toBe(0);
      for (const k of ['reward', 'policyLoss', 'entropy', 'gradNorm'] as const) {
        expect(Number.isFinite(m2[k]), k).toBe(true);
      }
      expect(m1.gradNorm).toBeGreaterThan(0);
      t.disposeAll();
      expect(tf.memory().numTensors).toBe(start);
    });
  }
});

describe('qwen2-tiny checkpoints', () => {
  it('GRPO, LoRA r 4 α 8: tokenizer files and PEFT nn.Linear files; resume exact; adapters on the base = the merged weights', async () => {
    folder = `${FIX}/qwen2-tiny`;
    const cfg = config({ algorithm: 'grpo', groupSize: 2 });
    const start = tf.memory().numTensors;
    const a = await buildTrainer(cfg, res(), reward);
    const straight: StepMetrics[] = [];
    for (let i = 0; i < 4; i++) straight.push((await a.trainStep()).metrics);
    a.disposeAll();
    const b = await buildTrainer(cfg, res(), reward);
    await b.trainStep();
    await b.trainStep();
    const files = await checkpointFiles(b);
    b.disposeAll();
    expect([...files.keys()].sort()).toEqual([
      ADAPTER_CONFIG_FILE,
      ADAPTER_WEIGHTS_FILE,
      'config.json',
      'generation_config.json',
      'model.safetensors',
      'optimizer.safetensors',
      'ref_model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
      'trainer_state.json',
    ]);
    const peft = JSON.parse(new TextDecoder().decode(files.get(ADAPTER_CONFIG_FILE)!));
    expect(peft.fan_in_fan_out).toBe(false);
    expect(peft.target_modules).toEqual([
      'q_proj',
      'k_proj',
      'v_proj',
      'o_proj',
      'gate_proj',
      'up_proj',
      'down_proj',
    ]);
    const names = [...readSafetensors(files.get(ADAPTER_WEIGHTS_FILE)!, 'adapter').tensors.keys()];
    expect(names).toContain('base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight');
    expect(names).toContain('base_model.model.model.layers.0.mlp.down_proj.lora_B.weight');
    const cfgJson = JSON.parse(new TextDecoder().decode(files.get('config.json')!));
    expect(cfgJson.model_type).toBe('qwen2');
    expect(cfgJson.dtype).toBe('float32');

    const c = await restoreTrainer(memoryFiles('ckpt', files), res(), reward);
    const resumed = [(await c.trainStep()).metrics, (await c.trainStep()).metrics];
    c.disposeAll();
    expectSameMetrics(straight.slice(2), resumed);

    // The base (ref_model.safetensors as a folder of its own) with the adapters read back = model.safetensors.
    const baseFiles = new Map(files);
    baseFiles.set('model.safetensors', files.get('ref_model.safetensors')!);
    const base = (await loadLM(memoryFiles('base', baseFiles), { trainable: false })).model;
    const adapted = base.withLora(await readAdapters(memoryFiles('ckpt', files), base));
    const merged = (await loadLM(memoryFiles('ckpt', files))).model;
    const ids = tf.tensor2d([[510, 12, 300, 7, 99, 511, 45, 2]], undefined, 'int32');
    const mask = tf.onesLike(ids) as tf.Tensor2D;
    const [x, y, z] = tf.tidy(() => [
      adapted.logits(ids, mask),
      merged.logits(ids, mask),
      base.logits(ids, mask),
    ]);
    const d = tf.tidy(() => tf.max(tf.abs(tf.sub(x, y))).dataSync()[0]);
    const fromBase = tf.tidy(() => tf.max(tf.abs(tf.sub(x, z))).dataSync()[0]);
    expect(d).toBeLessThan(1e-5);
    expect(fromBase).toBeGreaterThan(1e-3); // the adapters are not a no-op
    tf.dispose([x, y, z, ids, mask]);
    adapted.dispose();
    base.dispose();
    merged.dispose();
    expect(tf.memory().numTensors).toBe(start);
  });
});

describe('llama-tiny full fine-tuning', () => {
  it('recomputing the blocks gives the update of keeping them (PPO, untied head)', async () => {
    folder = `${FIX}/llama-tiny`;
    const weights: Float32Array[][] = [];
    let before: Float32Array[] = [];
    const read = (t: Awaited<ReturnType<typeof buildTrainer>>) =>
      Promise.all(t.models.policy.trainableVariables().map(async (v) => (await v.data()) as Float32Array));
    for (const recompute of ['off', 'blocks'] as const) {
      const t = await buildTrainer(config({ lora: 0, recompute, steps: 1 }), res(), reward);
      // The two runs must differ in keeping the blocks' activations, and the step must move the weights.
      expect(t.stepPlan().recompute, recompute).toBe(recompute === 'blocks');
      if (recompute === 'off') before = await read(t);
      await t.trainStep();
      weights.push(await read(t));
      t.disposeAll();
    }
    let worst = 0;
    weights[0].forEach((w, i) =>
      w.forEach((v, j) => (worst = Math.max(worst, Math.abs(v - weights[1][i][j])))),
    );
    let moved = 0;
    before.forEach((w, i) => w.forEach((v, j) => (moved = Math.max(moved, Math.abs(v - weights[0][i][j])))));
    expect(weights[0].length).toBeGreaterThan(10);
    expect(moved).toBeGreaterThan(100 * 1e-5);
    expect(worst).toBeLessThan(1e-5);
  });
});
