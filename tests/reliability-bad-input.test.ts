/**
 * Bad input, through the entry points a person reaches (model folders, safetensors, config.json, the training
 * config, the URL hash, preference files, checkpoint zips, the CLI): ONE table. Every case must fail with a
 * UserError whose message names the thing and says what would be right, quickly, with no stack trace.
 * The app path (a bad upload leaves the loaded model and the run intact) is e2e/reliability-worker.spec.ts.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, closeSync, openSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { zipSync, strToU8 } from 'fflate';
import { setNodeBackend } from '../src/cli/backend-node';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';
import { exportLM, loadLM, loadScalar, memoryFiles } from '../src/core/model/folder';
import { configFromHash, validateConfig } from '../src/common/config';
import { loadPreferences } from '../src/core/reward/preferences';
import { unzipFolder, zipFolder } from '../src/common/checkpoint-zip';
import { restoreTrainer, CHECKPOINT_FORMAT } from '../src/core/run/checkpoint';
import type { Resources } from '../src/core/ppo/setup';
import { loadTaskNode } from '../src/cli/tasks-node';
import { isUserError, UserError } from '../src/common/errors';

/** Wall time a case may take (the check itself; the CLI's process start is measured apart). */
/**
 * A hang guard, not a speed test (speed is for benchmarks): a case that read a multi-gigabyte file whole or
 * waited on something would blow far past this even on a loaded 2-core machine; a clear error takes < 1 s.
 */
const BUDGET_MS = 30_000;

const enc = (s: string) => new TextEncoder().encode(s);
const json = (v: unknown) => enc(JSON.stringify(v));

const TINY_CONFIG = {
  model_type: 'gpt2',
  vocab_size: 258,
  n_positions: 32,
  n_embd: 16,
  n_layer: 1,
  n_head: 2,
  tokenizer: 'bytes',
  bos_token_id: 256,
  eos_token_id: 256,
  pad_token_id: 257,
};

let good: Map<string, Uint8Array>; // config.json + model.safetensors of a valid tiny model
let tmp: string;
let cliStartMs = 0;

/** A folder = the good files with some replaced (undefined = removed). */
function folder(changes: Record<string, Uint8Array | undefined>, label = 'my-model') {
  const files = new Map(good);
  for (const [k, v] of Object.entries(changes)) {
    if (v === undefined) files.delete(k);
    else files.set(k, v);
  }
  return memoryFiles(label, files);
}

/** A safetensors file from a header object and a data buffer, as written by anything (lies included). */
function rawSafetensors(header: unknown, data: Uint8Array = new Uint8Array(0)): Uint8Array {
  const h = enc(JSON.stringify(header));
  const out = new Uint8Array(8 + h.length + data.length);
  new DataView(out.buffer).setUint32(0, h.length, true);
  out.set(h, 8);
  out.set(data, 8 + h.length);
  return out;
}

function withConfig(patch: Record<string, unknown>) {
  return folder({ 'config.json': json({ ...TINY_CONFIG, ...patch }) });
}

const resources = (): Resources => ({
  modelFiles: () => {
    throw new UserError('no model folders in this test');
  },
  loadTask: loadTaskNode,
});

/** A checkpoint folder with a tampered trainer_state.json. */
function checkpointWith(state: unknown) {
  return folder({ 'trainer_state.json': typeof state === 'string' ? enc(state) : json(state) }, 'ckpt');
}

const GOOD_STATE = {
  format: CHECKPOINT_FORMAT,
  step: 3,
  config: { model: 'tiny', task: 'sentiment', batchSize: 2, miniBatches: 1 },
  kl: { kind: 'fixed', value: 0.05 },
  rng: [1, 2, 3, 4],
  promptOrder: [0, 1],
  promptCursor: 0,
  files: { ref: false, reward: false },
  history: [],
};

/** The CLI as a person runs it; exit 1 with "error: …" becomes a UserError, anything else a plain Error. */
function cli(args: string[]): void {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  const stderr = r.stderr.trim();
  if (r.status === 1 && stderr.startsWith('error: ') && !/\n\s+at /.test(stderr)) {
    throw new UserError(stderr.slice('error: '.length));
  }
  throw new Error(`exit ${r.status}: ${stderr || r.stdout}`);
}

interface Case {
  name: string;
  run: () => unknown;
  /** Every pattern must match the message. */
  expect: RegExp[];
  cli?: boolean;
}

const CASES: Case[] = [
  // ---- safetensors that are broken or lie ----
  {
    name: 'truncated safetensors (download cut short)',
    run: () => loadLM(folder({ 'model.safetensors': good.get('model.safetensors')!.subarray(0, 2000) })),
    expect: [/my-model\/model\.safetensors/, /truncated/],
  },
  {
    name: 'garbled safetensors (a PNG renamed)',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0]),
        }),
      ),
    expect: [/model\.safetensors: not a safetensors file/, /header length/],
  },
  {
    name: 'safetensors shorter than its 8-byte header length',
    run: () => loadLM(folder({ 'model.safetensors': new Uint8Array([1, 2, 3]) })),
    expect: [/model\.safetensors: not a safetensors file: it is 3 bytes long/],
  },
  {
    name: 'safetensors header that is not JSON',
    run: () => {
      const b = rawSafetensors({});
      b.set(enc('{x'), 8);
      return loadLM(folder({ 'model.safetensors': b }));
    },
    expect: [/model\.safetensors: the header is not valid JSON/, /expected a JSON object/],
  },
  {
    name: 'header offsets past the end of the file',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': rawSafetensors(
            { a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } },
            new Uint8Array(8),
          ),
        }),
      ),
    expect: [/tensor "a"/, /go past the end of the data buffer \(8 bytes\)/],
  },
  {
    name: 'overlapping byte ranges',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': rawSafetensors(
            {
              a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
              b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
            },
            new Uint8Array(12),
          ),
        }),
      ),
    expect: [/tensor "b" .* overlaps tensor "a"/, /disjoint/],
  },
  {
    name: 'shape that does not match the bytes',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': rawSafetensors(
            { a: { dtype: 'F32', shape: [3, 3], data_offsets: [0, 16] } },
            new Uint8Array(16),
          ),
        }),
      ),
    expect: [/tensor "a"/, /span 16 bytes but shape \[3, 3\] of F32 needs 36 bytes/],
  },
  {
    name: 'absurd sizes in the header',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': rawSafetensors(
            { a: { dtype: 'F32', shape: [1e12, 1e12], data_offsets: [0, 16] } },
            new Uint8Array(16),
          ),
        }),
      ),
    expect: [/tensor "a"/, /needs 4e\+24 bytes/],
  },
  {
    name: 'absurd header length field (8 EB)',
    run: () => {
      const b = new Uint8Array(16);
      b.fill(0xff, 0, 8);
      return loadLM(folder({ 'model.safetensors': b }));
    },
    expect: [/not a safetensors file/, /limit for a safetensors header/],
  },
  {
    name: 'unsupported dtype (I64)',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': rawSafetensors(
            { a: { dtype: 'I64', shape: [1], data_offsets: [0, 8] } },
            new Uint8Array(8),
          ),
        }),
      ),
    expect: [/tensor "a" has dtype I64/, /only F32, F16 and BF16 are supported/],
  },
  {
    name: 'unknown dtype (Q4_K)',
    run: () =>
      loadLM(
        folder({
          'model.safetensors': rawSafetensors(
            { a: { dtype: 'Q4_K', shape: [1], data_offsets: [0, 1] } },
            new Uint8Array(1),
          ),
        }),
      ),
    expect: [/dtype Q4_K \(not a safetensors dtype\)/, /Convert the model to float32/],
  },
  // ---- tensors vs the config ----
  {
    name: 'a tensor missing for the config',
    run: () => loadLM(withConfig({ n_layer: 2 })),
    expect: [/missing tensor "transformer\.h\.1\./, /expected shape/],
  },
  {
    name: 'tensors mis-shaped for the config',
    run: () => loadLM(withConfig({ n_positions: 64 })),
    expect: [/tensor "transformer\.wpe\.weight" has shape \[32, 16\], expected \[64, 16\]/, /config\.json/],
  },
  {
    name: 'scalar model file that is a plain LM (no score head)',
    run: () => loadScalar(folder({}), 'model.safetensors'),
    expect: [/missing tensor "score\.weight"/],
  },
  // ---- config.json ----
  {
    name: 'config.json missing',
    run: () => loadLM(folder({ 'config.json': undefined })),
    expect: [/my-model: config\.json is missing/, /needs config\.json/],
  },
  {
    name: 'config.json not JSON',
    run: () => loadLM(folder({ 'config.json': enc('{"vocab_size": 258,') })),
    expect: [/my-model\/config\.json is not valid JSON/],
  },
  {
    name: 'config.json an array',
    run: () => loadLM(folder({ 'config.json': enc('[1, 2]') })),
    expect: [/config\.json: expected a JSON object with GPT-2 fields, got an array/],
  },
  {
    name: 'config.json: heads do not divide the width',
    run: () => loadLM(withConfig({ n_head: 3 })),
    expect: [/"n_head" \(3\) must divide "n_embd" \(16\)/],
  },
  {
    name: 'config.json: negative size',
    run: () => loadLM(withConfig({ n_layer: -2 })),
    expect: [/"n_layer" must be an integer from 1 to 256, got -2/],
  },
  {
    name: 'config.json: enormous size',
    run: () => loadLM(withConfig({ n_embd: 1e9 })),
    expect: [/"n_embd" must be an integer from 1 to 16384, got 1000000000/],
  },
  {
    name: 'config.json of another architecture',
    run: () => loadLM(withConfig({ model_type: 'mistral' })),
    expect: [/"model_type" must be "gpt2", "llama", "qwen2" or "qwen3", got "mistral"/],
  },
  {
    name: 'a Llama config.json with GPT-2 field names',
    run: () => loadLM(withConfig({ model_type: 'llama' })),
    expect: [/"hidden_size" must be an integer from 1 to 16384; it is missing/],
  },
  {
    name: 'weights only as pytorch_model.bin (pickle)',
    run: () =>
      loadLM(folder({ 'model.safetensors': undefined, 'pytorch_model.bin': new Uint8Array([0x80, 2]) })),
    expect: [/model\.safetensors is missing/, /pytorch_model\.bin/, /only safetensors/],
  },
  // ---- the training config ----
  {
    name: 'config: unknown key',
    run: () => validateConfig({ learning_rate: 1e-4 }, 'my-run.json'),
    expect: [/my-run\.json: unknown key "learning_rate"\. Did you mean "learningRate"/],
  },
  {
    name: 'config: out-of-range value',
    run: () => validateConfig({ clipRange: 7 }, 'my-run.json'),
    expect: [/"clipRange" must be/, /got 7/],
  },
  {
    name: 'config: wrong type',
    run: () => validateConfig({ steps: 'ten' }, 'my-run.json'),
    expect: [/"steps" must be an integer/, /got "ten"/],
  },
  {
    name: 'config: batchSize not divisible by miniBatches',
    run: () => validateConfig({ batchSize: 6, miniBatches: 4 }, 'my-run.json'),
    expect: [/"batchSize" \(6\) must be divisible by "miniBatches" \(4\)/, /1, 2, 3, 6/],
  },
  {
    name: 'config: empty prompt list',
    run: () => validateConfig({ task: null, prompts: [] }, 'my-run.json'),
    expect: [/"prompts" must be/, /got \[\]/],
  },
  {
    name: 'config: an empty prompt in the list',
    run: () => validateConfig({ prompts: ['Hi', ''] }, 'my-run.json'),
    expect: [/prompts\[1\] is ""/],
  },
  // ---- the URL hash ----
  {
    name: 'URL hash: unknown key',
    run: () => configFromHash('#steps=10&evil=<script>'),
    expect: [/URL hash: unknown key "evil"/],
  },
  {
    name: 'URL hash: broken %-escape',
    run: () => configFromHash('#task=%E0%A4%A'),
    expect: [/URL hash: "task" has a broken %-escape/],
  },
  {
    name: 'URL hash: a number that is not one',
    run: () => configFromHash('#learningRate=1e-4x'),
    expect: [/URL hash: "learningRate" must be/, /got "1e-4x"/],
  },
  {
    name: 'URL hash: out of range',
    run: () => configFromHash('#batchSize=100000000'),
    expect: [/URL hash: "batchSize" must be/],
  },
  // ---- preference files ----
  {
    name: 'preference JSONL with bad lines',
    run: () =>
      loadPreferences(
        [
          '{"prompt":"a","chosen":"b","rejected":"c"}',
          '{"prompt":"a"',
          '',
          '{"prompt":"a","chosen":1,"rejected":"c"}',
        ].join('\n'),
        'prefs.jsonl',
      ),
    expect: [
      /prefs\.jsonl: 2 bad lines: line 2: not valid JSON/,
      /line 4: "chosen" must be a string, got number/,
    ],
  },
  {
    name: 'preference file without pairs',
    run: () => loadPreferences('\n\n', 'prefs.jsonl'),
    expect: [/prefs\.jsonl: no preference pairs/, /one \{"prompt"/],
  },
  // ---- checkpoint zips ----
  {
    name: 'not a zip',
    run: () => unzipFolder(new Uint8Array([0x89, 0x50, 0x4e, 0x47, 1, 2, 3, 4]), 'run.zip'),
    expect: [/run\.zip is not a zip file/, /checkpoint \.zip/],
  },
  {
    name: 'truncated zip',
    run: () => {
      const z = zipFolder(good, 'ckpt');
      return unzipFolder(z.subarray(0, Math.floor(z.length / 2)), 'run.zip');
    },
    expect: [/run\.zip is not a readable zip/, /cut short/],
  },
  {
    name: 'zip whose entry escapes the folder',
    run: () => unzipFolder(zipSync({ '../evil.txt': strToU8('x') }), 'run.zip'),
    expect: [/run\.zip: the entry "\.\.\/evil\.txt" points outside the folder/],
  },
  {
    name: 'a zip from another program',
    run: () =>
      restoreTrainer(
        memoryFiles(
          'photos.zip',
          unzipFolder(
            zipSync({ 'holiday/a.jpg': new Uint8Array([1, 2]), 'holiday/b.txt': strToU8('hi') }),
            'photos.zip',
          ),
        ),
        resources(),
      ),
    expect: [/photos\.zip: trainer_state\.json is missing/, /not a PPO Playground checkpoint/],
  },
  {
    name: 'a model folder given as a checkpoint',
    run: () => restoreTrainer(folder({}, 'gpt2-folder'), resources()),
    expect: [/gpt2-folder: trainer_state\.json is missing/, /model folder, not a training checkpoint/],
  },
  {
    name: 'trainer_state.json of another format',
    run: () => restoreTrainer(checkpointWith({ ...GOOD_STATE, format: 'other/2' }), resources()),
    expect: [/ckpt\/trainer_state\.json: format is "other\/2", expected "ppo-playground-checkpoint\/1"/],
  },
  {
    name: 'trainer_state.json not JSON',
    run: () => restoreTrainer(checkpointWith('{"step": 3,'), resources()),
    expect: [/ckpt\/trainer_state\.json is not valid JSON/],
  },
  {
    name: 'trainer_state.json tampered (fields missing)',
    run: () => restoreTrainer(checkpointWith({ format: CHECKPOINT_FORMAT, step: 3 }), resources()),
    expect: [/ckpt\/trainer_state\.json/, /"files"|"kl"|"rng"|"config"/, /re-export/],
  },
  {
    name: 'trainer_state.json tampered (negative step)',
    run: () => restoreTrainer(checkpointWith({ ...GOOD_STATE, step: -4 }), resources()),
    expect: [/ckpt\/trainer_state\.json: "step" must be a whole number of 0 or more, got -4/],
  },
  {
    name: 'trainer_state.json tampered (config out of range)',
    run: () => restoreTrainer(checkpointWith({ ...GOOD_STATE, config: { batchSize: -1 } }), resources()),
    expect: [/trainer_state\.json config: "batchSize" must be/],
  },
  // ---- the CLI ----
  {
    name: 'CLI: an empty folder as the model',
    cli: true,
    run: () => cli(['generate', '--model', path.join(tmp, 'empty'), '--prompt', 'x', '--backend', 'cpu']),
    expect: [/empty: config\.json is missing/],
  },
  {
    name: 'CLI: a folder where model.safetensors should be',
    cli: true,
    run: () =>
      cli(['generate', '--model', path.join(tmp, 'dir-as-file'), '--prompt', 'x', '--backend', 'cpu']),
    expect: [/dir-as-file\/model\.safetensors is a folder; expected the file model\.safetensors/],
  },
  {
    // Weights are read a tensor at a time (docs/models.md, "Reading a weights file"): a 5 GB file is not refused
    // for its size, nor read whole; its header (8 zero bytes: an empty one) is what is wrong, and said at once.
    name: 'CLI: a multi-gigabyte safetensors file is not read whole: its bad header is named at once',
    cli: true,
    run: () => cli(['generate', '--model', path.join(tmp, 'huge'), '--prompt', 'x', '--backend', 'cpu']),
    expect: [/huge\/model\.safetensors: the header is not valid JSON .*; expected a JSON object\./],
  },
  {
    name: 'CLI: a folder with only pytorch_model.bin',
    cli: true,
    run: () => cli(['generate', '--model', path.join(tmp, 'pickle'), '--prompt', 'x', '--backend', 'cpu']),
    expect: [/model\.safetensors is missing/, /pytorch_model\.bin/, /only safetensors/],
  },
  {
    name: 'CLI: a config file that is a folder',
    cli: true,
    run: () =>
      cli(['train', '--config', path.join(tmp, 'empty'), '--out', path.join(tmp, 'out'), '--backend', 'cpu']),
    expect: [/config .*empty is a folder; expected a JSON file/],
  },
  {
    name: 'CLI: a training config with an unknown key',
    cli: true,
    run: () =>
      cli([
        'train',
        '--config',
        path.join(tmp, 'bad-config.json'),
        '--out',
        path.join(tmp, 'out'),
        '--backend',
        'cpu',
      ]),
    expect: [/bad-config\.json: unknown key "batch_size"\. Did you mean "batchSize"\?/],
  },
];

beforeAll(async () => {
  await setNodeBackend('wasm');
  const config = parseGPT2Config(TINY_CONFIG);
  const m = GPT2.random(config, 3);
  good = await exportLM(m);
  m.dispose();

  tmp = mkdtempSync(path.join(tmpdir(), 'ppo-bad-input-'));
  mkdirSync(path.join(tmp, 'empty'));
  mkdirSync(path.join(tmp, 'dir-as-file', 'model.safetensors'), { recursive: true });
  writeFileSync(path.join(tmp, 'dir-as-file', 'config.json'), good.get('config.json')!);
  mkdirSync(path.join(tmp, 'huge'));
  writeFileSync(path.join(tmp, 'huge', 'config.json'), good.get('config.json')!);
  // A sparse 5 GB file: takes no disk space, but stat says 5 GB.
  const fd = openSync(path.join(tmp, 'huge', 'model.safetensors'), 'w');
  ftruncateSync(fd, 5 * 1024 ** 3);
  closeSync(fd);
  mkdirSync(path.join(tmp, 'pickle'));
  writeFileSync(path.join(tmp, 'pickle', 'config.json'), good.get('config.json')!);
  writeFileSync(path.join(tmp, 'pickle', 'pytorch_model.bin'), new Uint8Array([0x80, 2, 0x7d]));
  writeFileSync(path.join(tmp, 'bad-config.json'), JSON.stringify({ model: 'tiny', batch_size: 4 }));

  // What starting the CLI costs on this machine, measured apart from the checks.
  const t0 = performance.now();
  spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'generate', '--help'], {
    encoding: 'utf8',
  });
  cliStartMs = performance.now() - t0;
});

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/**
 * The fast tier (vitest.fast.config.ts sets PPO_TEST_TIER=fast) keeps two CLI cases as smoke tests and skips the
 * other CLI cases, each of which starts a Node process; `npm test` runs them all.
 */
const CLI_SMOKE = new Set([
  'CLI: an empty folder as the model',
  'CLI: a training config with an unknown key',
]);
const deferred = (c: Case) => process.env.PPO_TEST_TIER === 'fast' && !!c.cli && !CLI_SMOKE.has(c.name);

describe('bad input: a clear UserError, quickly, no stack trace', () => {
  it('has at least 25 cases with distinct names', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(25);
    expect(new Set(CASES.map((c) => c.name)).size).toBe(CASES.length);
  });

  it('the CLI smoke cases of the fast tier are cases of the table', () => {
    for (const name of CLI_SMOKE) expect(CASES.find((c) => c.name === name)?.cli, name).toBe(true);
  });

  it.skip.each(CASES.filter(deferred).map((c) => [c.name, c] as const))('%s', () => {});

  it.each(CASES.filter((c) => !deferred(c)).map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    const t0 = performance.now();
    let error: unknown = null;
    try {
      await c.run();
    } catch (e) {
      error = e;
    }
    const ms = performance.now() - t0 - (c.cli ? cliStartMs : 0);
    expect(error, 'it must fail').not.toBeNull();
    expect(isUserError(error), `a UserError, got ${String((error as Error)?.stack ?? error)}`).toBe(true);
    const message = (error as Error).message;
    for (const re of c.expect) expect(message).toMatch(re);
    expect(message).not.toMatch(/\n\s+at /); // no stack trace in the words
    expect(message).not.toMatch(/undefined|\[object Object\]/);
    expect(ms, `${c.name} took ${ms.toFixed(0)} ms`).toBeLessThan(BUDGET_MS);
  });
});
