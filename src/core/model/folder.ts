/**
 * Model folders in Hugging Face layout (docs/formats.md §2): config.json + model.safetensors, and for the
 * scalar models GPT2ForSequenceClassification names. Core never touches a file system: callers hand in a
 * `ModelFiles` (Node reads a directory, the browser reads Files, a zip, Cache Storage or fetch).
 */
import { checkBaseDtype, isF16Matrix, type BaseDtype, type WeightData } from './f16-base';
import { isLlamaConfig, modelConfigToJson, parseModelConfig, type LMConfig } from './config';
import type { GPT2Options } from './gpt2';
import { lmFromReader, lmParamSpecs, type CausalLM } from './causal-lm';
import { ScalarModel } from './heads';
import {
  bytesFile,
  openSafetensorsRanged,
  type OpenedSafetensors,
  safetensorsStream,
  writeSafetensors,
  type ByteSource,
  type RangedFile,
  type SafetensorsFile,
} from './safetensors';
import {
  checkHfScoreBias,
  hfLmHeadDiffers,
  planHfTensors,
  sameBits,
  tiedHeadDiffers,
  hfTensorName,
  llamaTensorName,
  mapHfTensors,
  mapLlamaTensors,
  planLlamaTensors,
  toHfTensors,
} from './hfnames';
import { scoreHeadSpecs, type ParamSpec } from './specs';
import { tokenizerForFolder } from '../tokenizer';
import type { Tokenizer } from '../tokenizer/types';
import { UserError } from '../../common/errors';

/** A read-only view of a model folder. `read` returns null when the file does not exist. */
export interface ModelFiles {
  /** How to name the folder in messages (a path, a Hub id, "uploaded files"). */
  label: string;
  read(name: string): Promise<Uint8Array | null>;
  /** Whether a file exists, without reading it (optional: only used to word error messages). */
  has?(name: string): Promise<boolean>;
  /**
   * A file to read by byte ranges (null when it does not exist), where the source can (a folder on disk, picked
   * Files): weights files are then read one tensor at a time, never whole (readWeights). Without it they are read.
   */
  open?(name: string): Promise<RangedFile | null>;
}

/** A folder held in memory: file name → bytes (also what an export produces). */
export function memoryFiles(label: string, files: Map<string, Uint8Array>): ModelFiles {
  return { label, read: async (name) => files.get(name) ?? null, has: async (name) => files.has(name) };
}

/** Weight files in PyTorch's pickle format: never read (unpickling can run code). */
const PICKLE_WEIGHTS = ['pytorch_model.bin', 'model.bin', 'model.pt', 'model.pth', 'model.ckpt'];

/** Why `name` is missing from a folder, in words (a pickle beside it is named: it is never read). */
async function missingMessage(files: ModelFiles, name: string, what: string): Promise<string> {
  let more = '';
  if (name.endsWith('.safetensors')) {
    let pickle: string | undefined;
    for (const p of PICKLE_WEIGHTS) {
      if (await files.has?.(p).catch(() => false)) {
        pickle = p;
        break;
      }
    }
    more = pickle
      ? ` This folder has ${pickle}, a PyTorch pickle: loading one can run code, so only safetensors weights ` +
        'are supported. Convert it once in Python: ' +
        'GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True).'
      : ' Only safetensors weights are read (never pytorch_model.bin pickles, which can run code).';
  }
  return `${files.label}: ${name} is missing; a model folder needs ${what}.${more}`;
}

async function mustRead(files: ModelFiles, name: string, what: string): Promise<Uint8Array> {
  const bytes = await files.read(name);
  if (bytes) return bytes;
  throw new UserError(await missingMessage(files, name, what));
}

/** A file of the folder to read by ranges: through `open` where the source has it, else its bytes read whole. */
async function openFile(files: ModelFiles, name: string): Promise<RangedFile | null> {
  if (files.open) return files.open(name);
  const bytes = await files.read(name);
  return bytes ? bytesFile(bytes) : null;
}

/** The index Hugging Face writes beside sharded weights (`save_pretrained` over max_shard_size). */
export function shardIndexName(file: string): string {
  return `${file}.index.json`;
}

/** A shard's file name as an index may give it: a plain .safetensors name in the same folder. */
const SHARD_NAME = /^[A-Za-z0-9_.-]+\.safetensors$/;

/** A JSON file's bytes parsed (UTF-8, strictly), or a UserError naming `path` and why. */
export function parseJsonFile(bytes: Uint8Array, path: string): unknown {
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (e) {
    throw new UserError(`${path} is not valid JSON (${(e as Error).message}).`);
  }
}

/**
 * A shard of Hugging Face's sharded layout by its name (`model-00001-of-00002.safetensors`): what a folder pick
 * (worker/sources.ts) and the Hub (services/hub.ts) may hand over besides the index; the index itself may name any
 * plain .safetensors file of the folder (SHARD_NAME).
 */
export function isShardFile(name: string): boolean {
  return /^model-\d+-of-\d+\.safetensors$/.test(name);
}

/** An index's weight_map, checked: tensor name → shard file. */
function parseShardIndex(bytes: Uint8Array, path: string): Map<string, string> {
  const raw = parseJsonFile(bytes, path);
  const map = (raw as { weight_map?: unknown } | null)?.weight_map;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) {
    throw new UserError(
      `${path} has no "weight_map" object; a sharded model's index maps each tensor name to its shard file ` +
        '(e.g. {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}).',
    );
  }
  const out = new Map<string, string>();
  for (const [name, shard] of Object.entries(map as Record<string, unknown>)) {
    if (typeof shard !== 'string' || !SHARD_NAME.test(shard) || shard.startsWith('.')) {
      throw new UserError(
        `${path}: tensor "${name}" is mapped to ${JSON.stringify(shard)}; expected the name of a .safetensors ` +
          'file in the same folder, such as "model-00001-of-00002.safetensors".',
      );
    }
    out.set(name, shard);
  }
  if (out.size === 0) throw new UserError(`${path}: "weight_map" is empty; it names no tensor.`);
  return out;
}

/**
 * A weights file opened to be read a tensor at a time: its tensors' shapes (from the header, or the headers of the
 * shards an index names), each tensor's values on request, and `close` for the files it holds open.
 */
export interface WeightsReader {
  /** The path to name in messages: the file, or the shards' index. */
  path: string;
  /** Tensor name → its dtype in the file and shape, in the file's (or the index's shards') order. */
  tensors: Map<string, { dtype: string; shape: number[] }>;
  /** One tensor's values, read by its byte range and decoded (packed f16 where `half` says so). */
  read(name: string): Promise<WeightData>;
  /** Bytes [from, to) of one tensor's data as stored (OpenedSafetensors.bytes). */
  bytes(name: string, from: number, to: number): Promise<Uint8Array>;
  /** The byte length of one tensor's data as stored. */
  byteLength(name: string): number;
  /** Close every file it opened; `ok` false: on the way out of an error, whose message a close never hides. */
  close(ok?: boolean): Promise<void>;
}

/**
 * Open a weights file, `file` or — where the folder has no `file` but `${file}.index.json` — the shards that index
 * names (Hugging Face's sharded layout: Qwen3-1.7B is model-00001-of-00002.safetensors and
 * model-00002-of-00002.safetensors). Headers are read and checked now; each tensor is read when asked, by ranges
 * where the source reads ranges (`open`), so a caller can let one tensor go before it reads the next.
 */
export async function openWeights(
  files: ModelFiles,
  file: string,
  what: string,
  half?: (name: string, shape: number[]) => boolean,
): Promise<WeightsReader> {
  const opts = half ? { half } : {};
  const whole = await openFile(files, file);
  if (whole) {
    const path = `${files.label}/${file}`;
    const opened = await openSafetensorsRanged(whole, path, opts);
    return {
      path,
      tensors: new Map(opened.entries.map((e) => [e.name, { dtype: e.dtype, shape: e.shape }])),
      read: (name) => opened.read(name),
      bytes: (name, from, to) => opened.bytes(name, from, to),
      byteLength: (name) => opened.byteLength(name),
      close: (ok) => opened.close(ok),
    };
  }
  const indexName = shardIndexName(file);
  const index = await files.read(indexName);
  if (!index) {
    const sharded =
      file === 'model.safetensors'
        ? ` (A sharded model has ${indexName} and the shards it names instead.)`
        : '';
    throw new UserError((await missingMessage(files, file, what)) + sharded);
  }
  const path = `${files.label}/${indexName}`;
  const byShard = new Map<string, Set<string>>();
  for (const [name, shard] of parseShardIndex(index, path)) {
    if (!byShard.has(shard)) byShard.set(shard, new Set());
    byShard.get(shard)!.add(name);
  }
  const opened: OpenedSafetensors[] = [];
  const where = new Map<string, OpenedSafetensors>();
  const tensors = new Map<string, { dtype: string; shape: number[] }>();
  const closeAll = async (ok = true) => {
    let first: unknown = null;
    for (const o of opened) {
      await o.close(ok).catch((e: unknown) => {
        first ??= e;
      });
    }
    if (first !== null) throw first;
  };
  try {
    for (const [shard, names] of [...byShard].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      const f = await openFile(files, shard);
      if (!f) {
        throw new UserError(
          `${files.label}: ${shard} is missing; ${indexName} places ${names.size} tensors in it ` +
            `(e.g. "${[...names][0]}"). Pick the whole folder, every shard with its index.`,
        );
      }
      const part = await openSafetensorsRanged(f, `${files.label}/${shard}`, opts);
      opened.push(part);
      const inShard = new Map(part.entries.map((e) => [e.name, e]));
      for (const name of names) {
        const entry = inShard.get(name);
        if (!entry) {
          throw new UserError(
            `${files.label}/${shard} has no tensor "${name}", which ${indexName} places there; the shards and ` +
              'their index do not belong together.',
          );
        }
        tensors.set(name, { dtype: entry.dtype, shape: entry.shape });
        where.set(name, part);
      }
    }
  } catch (e) {
    await closeAll(false);
    throw e;
  }
  const shardOf = (name: string) => {
    const part = where.get(name);
    if (!part) throw new Error(`${path}: no tensor "${name}" in its shards.`);
    return part;
  };
  return {
    path,
    tensors,
    read: (name) => shardOf(name).read(name),
    bytes: (name, from, to) => shardOf(name).bytes(name, from, to),
    byteLength: (name) => shardOf(name).byteLength(name),
    close: closeAll,
  };
}

/**
 * The tensors of a weights file or its shards (openWeights), every one read and decoded. Returns the tensors and
 * the path to name in messages.
 */
export async function readWeights(
  files: ModelFiles,
  file: string,
  what: string,
  half?: (name: string, shape: number[]) => boolean,
): Promise<{ file: SafetensorsFile<WeightData>; path: string }> {
  const reader = await openWeights(files, file, what, half);
  let ok = false;
  try {
    const tensors: SafetensorsFile<WeightData>['tensors'] = new Map();
    for (const [name, t] of reader.tensors) tensors.set(name, { ...t, data: await reader.read(name) });
    ok = true;
    return { file: { tensors, metadata: null }, path: reader.path };
  } finally {
    await reader.close(ok);
  }
}

export async function readConfig(files: ModelFiles): Promise<LMConfig> {
  const bytes = await mustRead(
    files,
    'config.json',
    'config.json (a GPT-2, Llama, Qwen2 or Qwen3 config with Hugging Face field names)',
  );
  const path = `${files.label}/config.json`;
  return parseModelConfig(parseJsonFile(bytes, path), path);
}

export interface LoadedLM {
  config: LMConfig;
  tokenizer: Tokenizer;
  model: CausalLM;
}

/** A weights file's tensors by spec name, in the family's HF names. */
export function mapFamilyTensors(
  config: LMConfig,
  file: SafetensorsFile,
  specs: ParamSpec[],
  path: string,
): Map<string, Float32Array> {
  return isLlamaConfig(config)
    ? mapLlamaTensors(file, specs, path, { tied: config.tie_word_embeddings })
    : mapHfTensors(file, specs, path);
}

/** Bytes compared at a time when a file repeats its embedding as a head (sameStoredBytes). */
const COMPARE_CHUNK = 16 << 20;

/**
 * Whether two tensors of a weights file hold the same bits: compared as stored, a chunk of each at a time, so that
 * the check never holds the two whole. Stored in different dtypes, they are decoded and compared as the model would
 * hold them (`decoded`).
 */
async function sameStoredBytes(
  reader: WeightsReader,
  a: string,
  b: string,
  decoded: (a: WeightData, b: WeightData) => boolean,
): Promise<boolean> {
  const n = reader.byteLength(a);
  if (reader.tensors.get(a)!.dtype !== reader.tensors.get(b)!.dtype || n !== reader.byteLength(b))
    return decoded(await reader.read(a), await reader.read(b));
  for (let at = 0; at < n; at += COMPARE_CHUNK) {
    const to = Math.min(n, at + COMPARE_CHUNK);
    const x = await reader.bytes(a, at, to);
    const y = await reader.bytes(b, at, to);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  }
  return true;
}

/** Which of a Llama-family file's tensors the f16 base packs (its large matrices), by file name. */
function halfMatrix(name: string): boolean {
  return isF16Matrix(name.startsWith('model.') ? name.slice('model.'.length) : name);
}

/**
 * A model's weights read a weight at a time (openWeights; planLlamaTensors or planHfTensors): the header checked
 * against `specs` first, and what needs data besides (a head that repeats the embedding, GPT-2's `score.bias`),
 * then `build` asks for each weight's values in turn, so that it can place one on the device and let its host copy
 * go before the next is read (Llama.fromReader, GPT2.fromReader). With `baseDtype` "f16" a Llama-family file's
 * large matrices are decoded straight to packed f16. The files are closed when done; a close that fails after the
 * model was built disposes it before the error goes on (nothing is left on the device).
 */
async function streamWeights<T extends { dispose(): void }>(
  config: LMConfig,
  files: ModelFiles,
  fileName: string,
  what: string,
  specs: ParamSpec[],
  baseDtype: BaseDtype | undefined,
  build: (read: (spec: ParamSpec) => Promise<WeightData>) => Promise<T>,
): Promise<T> {
  const llama = isLlamaConfig(config);
  const half = llama && baseDtype === 'f16' ? halfMatrix : undefined;
  const reader = await openWeights(files, fileName, what, half);
  let out: T;
  try {
    let keys: Map<string, string>;
    if (isLlamaConfig(config)) {
      const plan = planLlamaTensors(reader.tensors, specs, reader.path, { tied: config.tie_word_embeddings });
      keys = plan.keys;
      const emb = keys.get('embed_tokens.weight')!;
      if (plan.tiedHead) {
        const head = plan.tiedHead;
        if (!(await sameStoredBytes(reader, head, emb, sameBits))) tiedHeadDiffers(reader.path, emb);
      }
    } else {
      const plan = planHfTensors(reader.tensors, specs, reader.path);
      keys = plan.keys;
      if (plan.lmHead !== null && plan.wte !== null) {
        const lm = plan.lmHead;
        const wte = plan.wte;
        const shape = reader.tensors.get(wte)!.shape;
        if (!(await sameStoredBytes(reader, lm, wte, sameBits)))
          hfLmHeadDiffers(reader.path, reader.tensors.get(lm)!.shape, { key: wte, shape });
      }
      if (plan.scoreBias !== null) checkHfScoreBias(await reader.read(plan.scoreBias), reader.path);
    }
    out = await build(async (spec) => {
      const key = keys.get(spec.name);
      if (key === undefined) throw new Error(`streamWeights: no tensor planned for "${spec.name}".`);
      return reader.read(key);
    });
  } catch (e) {
    await reader.close(false);
    throw e;
  }
  try {
    await reader.close(true);
  } catch (e) {
    out.dispose();
    throw e;
  }
  return out;
}

/** The file name of a parameter, as the family's *ForCausalLM / *ForSequenceClassification saves it. */
export function familyTensorName(config: LMConfig, name: string): string {
  return isLlamaConfig(config) ? llamaTensorName(name) : hfTensorName(name, { prefix: true });
}

/** How to load a model: trainable variables or not, a label for their names, and the in-memory layout. */
export interface ModelLoadOptions extends GPT2Options {
  trainable?: boolean;
  label?: string;
}

/**
 * Load the policy (GPT2LMHeadModel weights) of a model folder. `maxBindingBytes` (GPT2Options): hold `wte` as
 * vocabulary chunks that each fit one buffer binding (the worker sets it on WebGPU; docs/tfjs.md trap 8).
 */
export async function loadLM(
  files: ModelFiles,
  opts: ModelLoadOptions & { file?: string } = {},
): Promise<LoadedLM> {
  const config = await readConfig(files);
  const tokenizer = await tokenizerForFolder(files, config);
  const file = opts.file ?? 'model.safetensors';
  // Refused before anything is decoded where f16 cannot apply (model/f16-base.ts checkBaseDtype).
  checkBaseDtype(opts.baseDtype, { trainable: opts.trainable ?? true, family: config.model_type });
  const what = `${file} (the *ForCausalLM weights)`;
  const trainable = opts.trainable ?? true;
  const label = opts.label ?? 'policy';
  const modelOpts = {
    maxBindingBytes: opts.maxBindingBytes,
    ...(opts.baseDtype ? { baseDtype: opts.baseDtype } : {}),
  };
  const specs = lmParamSpecs(config);
  // A weight at a time onto the device (docs/models.md, "Reading a weights file").
  const model = await streamWeights(config, files, file, what, specs, opts.baseDtype, (read) =>
    lmFromReader(config, read, trainable, label, modelOpts),
  );
  return { config, tokenizer, model };
}

/**
 * Load a scalar-head model (value or reward) from `file` in a folder whose config.json describes it. With
 * `baseDtype` "f16" a frozen model of the Llama families holds its large matrices packed in f16 as the policy's
 * base does (its head stays f32); a GPT-2-family one stays f32, since its kernels read f32 weights (the estimate,
 * size.ts, counts it the same way).
 */
export async function loadScalar(
  files: ModelFiles,
  file: string,
  opts: ModelLoadOptions & { config?: LMConfig } = {},
): Promise<ScalarModel> {
  const config = opts.config ?? (await readConfig(files));
  const trainable = opts.trainable ?? true;
  const baseDtype = opts.baseDtype === 'f16' && !isLlamaConfig(config) ? undefined : opts.baseDtype;
  checkBaseDtype(baseDtype, { trainable, family: config.model_type });
  const specs = [...lmParamSpecs(config), ...scoreHeadSpecs(config)];
  const what = `${file} (*ForSequenceClassification weights)`;
  const label = opts.label ?? 'scalar';
  const modelOpts = {
    maxBindingBytes: opts.maxBindingBytes,
    ...(baseDtype ? { baseDtype } : {}),
  };
  // A weight at a time, as loadLM: the trunk, then the head.
  return streamWeights(config, files, file, what, specs, baseDtype, async (read) => {
    const trunk = await lmFromReader(config, read, trainable, label, modelOpts);
    let head: WeightData;
    try {
      head = await read(scoreHeadSpecs(config)[0]);
    } catch (e) {
      trunk.dispose();
      throw e;
    }
    return ScalarModel.withHead(trunk, head, trainable);
  });
}

export function configBytes(config: LMConfig): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(modelConfigToJson(config), null, 2) + '\n');
}

/** HF-named tensors of a model's (or scalar model's) arrays, in its family's file names. */
function familyTensors(config: LMConfig, arrays: Map<string, Float32Array>, specs: ParamSpec[]) {
  return toHfTensors(arrays, specs, { prefix: false }).map((t) => ({
    ...t,
    name: familyTensorName(config, t.name),
  }));
}

/**
 * safetensors bytes of an LM in its family's *ForCausalLM names (GPT-2: `transformer.` prefix, tied head omitted;
 * Llama: `model.` prefix, `lm_head.weight` when untied), F32.
 */
export async function lmSafetensors(model: CausalLM): Promise<Uint8Array> {
  return writeSafetensors(familyTensors(model.config, await model.toArrays(), lmParamSpecs(model.config)), {
    format: 'pt',
  });
}

/**
 * lmSafetensors as a ByteSource: the same bytes, made one weight at a time as they are written (a checkpoint of
 * GPT-2 124M then holds one weight's values in memory, not two copies of the 0.5 GB file). `keepF16`: the weights
 * of a base packed in f16 go in as F16, the values it holds, in half the bytes (a checkpoint's frozen base; a
 * model for other tools stays F32).
 */
export function lmSafetensorsStream(model: CausalLM, opts: { keepF16?: boolean } = {}): ByteSource {
  return safetensorsStream(
    model.lazyArrays().map((t) => ({ ...t, name: familyTensorName(model.config, t.name) })),
    { format: 'pt' },
    opts,
  );
}

/** safetensors bytes of a scalar model in its family's *ForSequenceClassification names. */
export async function scalarSafetensors(model: ScalarModel): Promise<Uint8Array> {
  const specs = [...lmParamSpecs(model.config), ...scoreHeadSpecs(model.config)];
  return writeSafetensors(familyTensors(model.config, await model.toArrays(), specs), { format: 'pt' });
}

/**
 * The files of an exported LM folder that `transformers` loads: config.json + model.safetensors, and for a model
 * with a Hugging Face tokenizer its files (tokenizer.json, tokenizer_config.json, generation_config.json).
 */
export async function exportLM(model: CausalLM, tokenizer?: Tokenizer): Promise<Map<string, Uint8Array>> {
  return new Map([
    ['config.json', configBytes(model.config)],
    ['model.safetensors', await lmSafetensors(model)],
    ...(tokenizer?.files?.() ?? []),
  ]);
}
