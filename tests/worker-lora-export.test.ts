/**
 * A LoRA run's exports through the model worker's own path (src/worker/api.ts → src/worker/exports.ts), in Node
 * on the CPU backend with a tiny random model: the checkpoint zip holds the merged policy as model.safetensors at
 * its top, which loads as a plain model and computes what the trained policy computes, and PEFT's pairs in
 * adapter/ and value_adapter/ (adapter_config.json + adapter_model.safetensors in PEFT names; none at the top,
 * where transformers + peft would apply them again on the merged weights); the zip imports back and the run
 * continues, and a zip of an earlier version (the pairs at the top) imports too; the TRL config export carries
 * peft_config.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { nodeWorkerApi, TINY_WORKER_RUN } from './helpers/worker';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { unzipFolder, zipFolder } from '../src/common/checkpoint-zip';
import { loadLM, memoryFiles } from '../src/core/model/folder';
import { readSafetensors } from '../src/core/model/safetensors';
import type { ConfigPatch, ModelWorkerApi, TrainerEvent } from '../src/worker/protocol';

(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

let dir: string;
let api: ModelWorkerApi;
const events: TrainerEvent[] = [];

/** Two LoRA PPO steps on the tiny model. */
const LORA_RUN: ConfigPatch = {
  ...TINY_WORKER_RUN,
  // A dense reward (0 at 20 characters, negative away from it): a random model's responses all score
  // differently from 0, so the first update moves the adapters.
  reward: 'length',
  lora: 4,
  loraAlpha: 8,
  loraTargets: ['c_attn', 'mlp.c_proj'],
  learningRate: 0.05,
};
/** A prompt's ids and mask, for comparing logits. */
const ids = [[72, 101, 108, 108, 111, 32]];
const mask = [[1, 1, 1, 1, 1, 1]];

beforeAll(async () => {
  await useCpu();
  dir = await makeTinyFolder({ n_layer: 2, n_embd: 16, n_head: 2 });
  api = await nodeWorkerApi({ tinyDir: dir });
  await api.init('cpu');
  await api.subscribe((e) => void events.push(e));
});

describe('a LoRA run exported through the worker', () => {
  it('the zip holds the merged model.safetensors at the top and adapter/adapter_config.json + adapter/adapter_model.safetensors', async () => {
    await api.configure(LORA_RUN);
    await api.stepOnce();
    await api.stepOnce();
    const steps = events.flatMap((e) => (e.type === 'step' ? [e.metrics] : []));
    expect(steps.map((m) => m.step)).toEqual([1, 2]);
    expect(steps[0].kl).toBe(0);
    // The worker's estimate of this run: adapters on c_attn (16 → 48) and mlp.c_proj (64 → 16), r = 4, 2 layers.
    const estimate = await api.estimateMemory();
    expect(estimate.policyTrainableParams).toBe(2 * (4 * (16 + 48) + 4 * (64 + 16)));
    expect(estimate.parts.reference).toBe(0);

    const zip = await api.exportCheckpoint();
    expect(zip.name).toBe('ppo-playground-step-2.zip');
    const files = unzipFolder(zip.bytes, 'export');
    for (const f of [
      'adapter/adapter_config.json',
      'adapter/adapter_model.safetensors',
      'value_adapter/adapter_config.json',
      'value_adapter/adapter_model.safetensors',
      'model.safetensors',
      'config.json',
    ])
      expect(files.has(f), f).toBe(true);
    const top = [...files.keys()].filter((n) => !n.includes('/'));
    expect(top.filter((n) => n.includes('adapter'))).toEqual([]);
    const adapterConfig = JSON.parse(new TextDecoder().decode(files.get('adapter/adapter_config.json')!));
    expect(adapterConfig).toMatchObject({
      peft_type: 'LORA',
      r: 4,
      lora_alpha: 8,
      target_modules: ['c_attn', 'mlp.c_proj'],
      fan_in_fan_out: true,
    });
    const names = [
      ...readSafetensors(files.get('adapter/adapter_model.safetensors')!, 'adapters').tensors.keys(),
    ];
    expect(names).toContain('base_model.model.transformer.h.0.attn.c_attn.lora_A.weight');
    expect(names).toContain('base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight');
    expect(names).toHaveLength(2 * 2 * 2); // layers × targets × (A, B)

    // The merged model is a plain GPT-2 folder that computes the trained policy's logits.
    const trained = await api.forwardLogits(ids, mask);
    const merged = await loadLM(memoryFiles('merged', files), { trainable: false });
    const base = await loadLM(nodeFiles(dir), { trainable: false });
    const logits = async (m: typeof merged.model) => {
      const t = tf.tidy(() =>
        m.logits(tf.tensor2d(ids, undefined, 'int32'), tf.tensor2d(mask, undefined, 'int32')),
      );
      const out = (await t.array()) as number[][][];
      t.dispose();
      return out.flat(2);
    };
    const [m, b, want] = [await logits(merged.model), await logits(base.model), trained.flat(2)];
    merged.model.dispose();
    base.model.dispose();
    const maxDiff = (x: number[], y: number[]) => Math.max(...x.map((v, i) => Math.abs(v - y[i])));
    expect(maxDiff(m, want)).toBeLessThanOrEqual(1e-5);
    // …and is not the base: two updates moved the adapters' B away from 0.
    expect(maxDiff(b, want)).toBeGreaterThan(1e-4);

    // A zip of an earlier version (the pairs at the top: adapter_*, value_adapter_*) imports as the same run.
    const rename: Record<string, string> = {
      'adapter/adapter_config.json': 'adapter_config.json',
      'adapter/adapter_model.safetensors': 'adapter_model.safetensors',
      'value_adapter/adapter_config.json': 'value_adapter_config.json',
      'value_adapter/adapter_model.safetensors': 'value_adapter_model.safetensors',
    };
    const old = new Map([...files].map(([n, b]) => [rename[n] ?? n, b]));
    expect([...old.keys()].filter((n) => n.includes('/'))).toEqual([]);
    const oldSummary = await api.importCheckpoint(zipFolder(old, 'ppo-playground-step-2'));
    expect(oldSummary).toMatchObject({ step: 2, historyLength: 2 });
    expect(await api.forwardLogits(ids, mask)).toEqual(trained);

    // The zip imports back as the same run, paused at step 2, and goes on.
    const summary = await api.importCheckpoint(zip.bytes);
    expect(summary).toMatchObject({ step: 2, historyLength: 2 });
    expect(summary.config).toMatchObject({ lora: 4, loraTargets: ['c_attn', 'mlp.c_proj'] });
    expect(await api.forwardLogits(ids, mask)).toEqual(trained);
    await api.stepOnce();
    expect(events.flatMap((e) => (e.type === 'step' ? [e.metrics.step] : [])).at(-1)).toBe(3);
  });

  it('the autosave holds the base (written once per run) and the adapters, not the merged policy; another worker resumes it exactly', async () => {
    const store = new Map<string, unknown>();
    const a = await nodeWorkerApi({ tinyDir: dir, autosave: store });
    await a.init('cpu');
    await a.configure(LORA_RUN);
    const entries = (file: string) => [...store.keys()].filter((k) => k.endsWith(`:${file}`)).sort();
    await a.stepOnce();
    const base1 = entries('ref_model.safetensors');
    const adapters1 = entries('adapter/adapter_model.safetensors');
    expect(base1).toHaveLength(1);
    // The frozen base is shared by the step-2 save (the same entry), the adapters are written anew.
    const baseBytes = store.get(base1[0]);
    await a.stepOnce();
    expect(entries('ref_model.safetensors')).toEqual(base1);
    expect(store.get(base1[0])).toBe(baseBytes);
    expect(entries('adapter/adapter_model.safetensors')).toHaveLength(1);
    expect(entries('adapter/adapter_model.safetensors')).not.toEqual(adapters1);
    expect(await a.autosaveInfo()).toMatchObject({ step: 2, historyLength: 2 });
    // The files of the save in force (src/services/autosave.ts keys: save:<slot>/<save id>:<file>).
    const saved = [...store.keys()]
      .filter((k) => k.startsWith('save:'))
      .map((k) => k.slice(k.lastIndexOf(':') + 1));
    expect(saved).toContain('ref_model.safetensors');
    expect(saved).toContain('adapter/adapter_model.safetensors');
    expect(saved).toContain('value_adapter/adapter_model.safetensors');
    expect(saved.filter((f) => f.startsWith('model.safetensors'))).toEqual([]);
    const trained = await a.forwardLogits(ids, mask);

    const b = await nodeWorkerApi({ tinyDir: dir, autosave: store });
    await b.init('cpu');
    expect(await b.resumeAutosave()).toMatchObject({ step: 2 });
    expect(await b.forwardLogits(ids, mask)).toEqual(trained);
    const seen: number[] = [];
    await b.subscribe((e) => void (e.type === 'step' && seen.push(e.metrics.step)));
    await b.stepOnce();
    expect(seen).toEqual([3]);
    // b's first save (its own slot) writes the base of its own, and the save it resumed is gone with a's copy.
    expect(entries('ref_model.safetensors')).toHaveLength(1);
    expect(entries('ref_model.safetensors')).not.toEqual(base1);
  });

  it('the TRL config export writes peft_config beside the PPOConfig', async () => {
    const trl = JSON.parse(await api.exportTrlConfig());
    expect(trl.peft_config).toMatchObject({ r: 4, lora_alpha: 8, target_modules: ['c_attn', 'mlp.c_proj'] });
  });
});
