/**
 * A Qwen2 folder through the model worker's own path (src/worker/api.ts, sources.ts, run.ts), in Node on the CPU
 * backend with the tiny Qwen2 parity fixture (tests/fixtures/parity-llama/qwen2-tiny, a 512-id ChatML tokenizer):
 * picked files keep the tokenizer files (and drop pickles and anything else), the model card's summary names the
 * family, the tokenizer and its chat template, a LoRA GRPO step's samples carry the prompt as the model saw it in its
 * chat template (and none with chatTemplate off), and the exported zip holds the tokenizer files and imports back.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { nodeWorkerApi } from './helpers/worker';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { useCpu } from './helpers/backend';
import { loadTaskNode } from '../src/cli/tasks-node';
import { unzipFolder } from '../src/common/checkpoint-zip';
import { encodePrompt, tokenizerForFolder } from '../src/core/tokenizer';
import { memoryFiles, readConfig, type ModelFiles } from '../src/core/model/folder';
import { LLAMA_SHAPES } from '../src/core/model/llama-config';
import { validateConfig } from '../src/common/config';
import { shardSafetensors } from '../scripts/shard-safetensors';
import type { ModelWorkerApi, SampleView, TrainerEvent } from '../src/worker/protocol';

(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const FIXTURE = fileURLToPath(new URL('./fixtures/parity-llama/qwen2-tiny/', import.meta.url));
const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'];
const picked = (names: string[]) =>
  names.map((n) => ({ name: `qwen2-tiny/${n}`, bytes: new Uint8Array(readFileSync(`${FIXTURE}${n}`)) }));
const FOLDER = picked(['config.json', 'model.safetensors', ...TOKENIZER_FILES]);
const SYSTEM = '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n';

let api: ModelWorkerApi;
const events: TrainerEvent[] = [];
const samplesOf = (): SampleView[][] => events.flatMap((e) => (e.type === 'step' ? [e.samples] : []));

beforeAll(async () => {
  await useCpu();
  api = await nodeWorkerApi();
  await api.init('cpu');
  await api.subscribe((e) => void events.push(e));
});

describe('a Qwen2 folder picked in the app', () => {
  it('without tokenizer.json the pick is refused, naming the file', async () => {
    await expect(
      api.loadModel({ kind: 'files', files: picked(['config.json', 'model.safetensors']) }),
    ).rejects.toThrow(/tokenizer\.json/);
  });

  it('loads with its tokenizer files (pickles and other files dropped); the summary names family, tokenizer and template', async () => {
    const extra = [
      { name: 'qwen2-tiny/pytorch_model.bin', bytes: new Uint8Array([1, 2, 3]) },
      { name: 'qwen2-tiny/README.md', bytes: new Uint8Array([35]) },
    ];
    const summary = await api.loadModel({ kind: 'files', files: [...FOLDER, ...extra] });
    expect(summary).toEqual({
      label: 'uploaded:qwen2-tiny',
      family: 'qwen2',
      n_layer: 2,
      n_embd: 32,
      n_head: 4,
      vocab_size: 512,
      n_positions: 256,
      params: summary.params,
      tokenizer: 'hf',
      chatTemplate: true,
    });
    // 512 × 32 embedding (tied head) + 2 layers of q/k/v (with biases), o, gate/up/down and two norms + the final norm.
    const layer = 32 * 32 + 32 + 2 * (32 * 16 + 16) + 32 * 32 + 3 * 32 * 64 + 2 * 32;
    expect(summary.params).toBe(512 * 32 + 2 * layer + 32);
  });

  it('a sharded folder picked as Files loads the same model; a shard left out is named', async () => {
    // As the page sends a pick (src/ui/lib/pick.ts): the weights as Files (Blobs, read by ranges), the rest as bytes.
    const parts = shardSafetensors(new Uint8Array(readFileSync(`${FIXTURE}model.safetensors`)), 2);
    const asFiles = [...parts].map(([n, b]) =>
      n.endsWith('.safetensors')
        ? { name: `qwen2-tiny/${n}`, blob: new Blob([b as BlobPart]) }
        : { name: `qwen2-tiny/${n}`, bytes: b },
    );
    const rest = picked(['config.json', ...TOKENIZER_FILES]);
    const whole = await api.loadModel({ kind: 'files', files: FOLDER });
    expect(await api.loadModel({ kind: 'files', files: [...rest, ...asFiles] })).toEqual(whole);
    const missing = asFiles.filter((f) => !f.name.endsWith('00002-of-00002.safetensors'));
    await expect(api.loadModel({ kind: 'files', files: [...rest, ...missing] })).rejects.toThrow(
      /^uploaded:qwen2-tiny: model-00002-of-00002\.safetensors is missing; model\.safetensors\.index\.json places \d+ tensors in it/,
    );
    // A config.json as a Blob is refused in words (only weights are read by ranges).
    await expect(
      api.loadModel({
        kind: 'files',
        files: [{ name: 'qwen2-tiny/config.json', blob: new Blob([readFileSync(`${FIXTURE}config.json`)]) }],
      }),
    ).rejects.toThrow(
      'loadModel: config.json must come as bytes; only .safetensors files may come as a Blob',
    );
    await api.loadModel({ kind: 'files', files: FOLDER });
  });

  it('a LoRA GRPO step: the samples show each prompt in the chat template; KL 0 at step 1', async () => {
    await api.configure({
      algorithm: 'grpo',
      task: 'arithmetic-chat',
      batchSize: 4,
      groupSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
      seed: 3,
      saveEvery: 0,
      lora: 4,
      loraAlpha: 8,
      chatTemplate: true,
    });
    await api.stepOnce();
    const [samples] = samplesOf();
    expect(samples).toHaveLength(4);
    for (const s of samples) {
      expect(s.prompt).toMatch(/\d+ [+−-] \d+/);
      expect(s.chatPrompt).toBe(`${SYSTEM}<|im_start|>user\n${s.prompt}<|im_end|>\n<|im_start|>assistant\n`);
    }
    const step1 = events.flatMap((e) => (e.type === 'step' ? [e.metrics] : []))[0];
    expect(step1.kl).toBe(0);

    // The text shown is the text the trainer encoded: its ids are the rollout's query ids.
    const files = memoryFiles('fixture', new Map(FOLDER.map((f) => [f.name.split('/')[1], f.bytes])));
    const tok = await tokenizerForFolder(files, await readConfig(files));
    const s0 = samples[0];
    expect(tok.encodeWithSpecials!(s0.chatPrompt!)).toEqual(encodePrompt(tok, s0.prompt, true));
  });

  it('with chatTemplate off the samples carry no chat prompt', async () => {
    await api.configure({ chatTemplate: false });
    events.length = 0;
    await api.stepOnce();
    const [samples] = samplesOf();
    expect(samples.length).toBeGreaterThan(0);
    for (const s of samples) expect(s.chatPrompt).toBeUndefined();
    await api.configure({ chatTemplate: true });
  });

  it('the exported zip carries the tokenizer files and imports back at its step', async () => {
    events.length = 0;
    await api.stepOnce();
    await api.stepOnce();
    const zip = await api.exportCheckpoint();
    expect(zip.name).toBe('ppo-playground-step-2.zip');
    const files = unzipFolder(zip.bytes, 'export');
    for (const f of [...TOKENIZER_FILES, 'config.json', 'model.safetensors', 'adapter/adapter_config.json'])
      expect(files.has(f), f).toBe(true);
    expect(new TextDecoder().decode(files.get('tokenizer.json'))).toBe(
      readFileSync(`${FIXTURE}tokenizer.json`, 'utf8'),
    );
    await api.reset();
    const summary = await api.importCheckpoint(zip.bytes);
    expect(summary).toMatchObject({ step: 2, historyLength: 2 });
    expect(summary.config).toMatchObject({ algorithm: 'grpo', lora: 4, loraAlpha: 8, chatTemplate: true });
    const status = events.flatMap((e) => (e.type === 'status' ? [e.status] : [])).at(-1);
    expect(status?.model).toMatchObject({ family: 'qwen2', tokenizer: 'hf', chatTemplate: true });
    events.length = 0;
    await api.stepOnce();
    const [samples] = samplesOf();
    expect(samples[0].chatPrompt).toContain('<|im_start|>assistant\n');
  });
});

describe('the memory estimate of a Qwen2.5-0.5B-shaped folder (its config.json and tokenizer only)', () => {
  it('counts its 494 M parameters, the float32 base once with LoRA, and adapters on all seven layers', async () => {
    const { ModelSources } = await import('../src/worker/sources');
    const folder = new Map<string, Uint8Array>([
      ['config.json', new TextEncoder().encode(JSON.stringify(LLAMA_SHAPES['qwen2.5-0.5b']))],
      ...TOKENIZER_FILES.map(
        (n) => [n, new Uint8Array(readFileSync(`${FIXTURE}${n}`))] as [string, Uint8Array],
      ),
    ]);
    class Qwen05 extends ModelSources {
      override files(name: string): ModelFiles {
        return name === 'qwen05' ? memoryFiles('qwen05', folder) : super.files(name);
      }
      override loadTask = loadTaskNode;
    }
    const sources = new Qwen05(() => undefined);
    const cfg = validateConfig({
      model: 'qwen05',
      algorithm: 'grpo',
      task: 'arithmetic-chat',
      batchSize: 4,
      groupSize: 2,
      responseLength: 8,
      lora: 8,
      loraAlpha: 16,
    });
    const report = await sources.estimateReport(cfg);
    expect(report.params).toBe(494_032_768);
    expect(report.parts.base).toBe(494_032_768 * 4);
    expect(report.parts.reference).toBe(0);
    // r · (in + out) per adapted layer: q 896→896, k and v 896→128, o 896→896, gate and up 896→4864, down 4864→896.
    const perLayer = 8 * (2 * (896 + 896) + 2 * (896 + 128) + 3 * (896 + 4864));
    expect(report.policyTrainableParams).toBe(24 * perLayer);
    expect(report.bytes).toBeGreaterThan(report.parts.base);
  });
});
