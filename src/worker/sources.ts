/**
 * Where models and tasks come from, in the browser. A config's `model` string names a model:
 *   "tiny"                       the built-in model (public/models/tiny, served at models/tiny/)
 *   "org/name" or "org/name@rev" a Hugging Face Hub repo (config.json + model.safetensors, and a Llama-family
 *                                folder's tokenizer files, over https from huggingface.co only, cached in Cache
 *                                Storage: src/services/hub.ts HUB_FILES)
 *   "http(s)://…", "/…", "./…"   a folder served over HTTP
 *   "uploaded:NAME"              files the person picked (held in memory by this worker)
 *   "preference-reward-model"    the reward model trained from a preference file (held in memory)
 *   "sft-model"                  the weights of the app's SFT warm start (held in memory; docs/sft.md)
 */
import type { ModelFiles } from '../core/model/folder';
import { isShardFile, readConfig, shardIndexName } from '../core/model/folder';
import type { LMConfig } from '../core/model/config';
import { bytesFile, type RangedFile } from '../core/model/safetensors';
import { resolvePrompts, type Resources } from '../core/ppo/setup';
import { bucket, vocabChunking } from '../core/ppo/trainer';
import type { TrainConfig } from '../common/config';
import type { BaseDtype } from '../common/config/fields';
import { encodePrompt, HF_TOKENIZER_FILES, tokenizerForFolder } from '../core/tokenizer';
import { parseTask, taskUrl, type Task } from '../core/tasks';
import {
  checkRepoId,
  hubFiles,
  isHubRepoId,
  MAX_HUB_FILE_BYTES,
  type HubCache,
  type HubProgress,
} from '../services/hub';
import {
  checkTrainingMemory,
  deviceFallbackFloor,
  runShapeOf,
  type RunMemoryOptions,
  WEBGPU_MEMORY_OPTIONS,
} from '../core/model/size';
import { describePlan, plannedInForce } from '../core/ppo/gpu-plan';
import { checkBaseDtype } from '../core/model/f16-base';
import { UserError } from '../common/errors';
import { builtinModelUrl, fetchFiles } from './files-web';
import {
  checkDeviceLimits,
  generateBaseDtype,
  loadMemoryProblem,
  memoryBudget,
  modelFit,
  planDeviceOf,
  rewardIsModel,
  runMemoryCheck,
  runMemoryOptions,
  webgpuBindingBytes,
  type DeviceLimits,
  type RunMemoryCheck,
} from './device-limits';
import type { MemoryEstimateReport, ModelFit, ModelSource, UploadedFile } from './protocol';
import { LLAMA_SHAPES, parseLlamaConfig } from '../core/model/llama-config';
import { wasmFusedBlocksHere } from '../core/kernels/wasm-activations';

export const BUILTIN_MODELS = ['tiny'] as const;
/** The `reward: {model}` name of the reward model trained from preferences. */
export const PREFERENCE_REWARD_MODEL = 'preference-reward-model';
/** The weights of the playground's SFT warm start, held in memory: "Continue with …" trains from them. */
export const SFT_MODEL = 'sft-model';
/** The weights of a DPO job in the app, when an RL run continues from them (held in memory, like SFT_MODEL). */
export const DPO_MODEL = 'dpo-model';
const HUB_CACHE_NAME = 'ppo-playground-hub-v1';

/**
 * Hub files in Cache Storage, keyed by URL (a second load of a repo needs no network). Where the page has Cache
 * Storage, weights are stored as their chunks arrive and read back by ranges (hub.ts openHubFile); where it has none
 * (a page over plain http from another host) there is no cache, and files are downloaded whole as before.
 */
export const cacheStorageHubCache: HubCache = {
  async get(key) {
    if (typeof caches === 'undefined') return null;
    const hit = await (await caches.open(HUB_CACHE_NAME)).match(key);
    return hit ? new Uint8Array(await hit.arrayBuffer()) : null;
  },
  async put(key, bytes) {
    if (typeof caches === 'undefined') return;
    const headers = { 'content-type': 'application/octet-stream', 'content-length': String(bytes.length) };
    await (
      await caches.open(HUB_CACHE_NAME)
    ).put(key, new Response(bytes as Uint8Array<ArrayBuffer>, { headers }));
  },
};

/**
 * Weights through Cache Storage (where the page has it): the download's chunks go to disk as they arrive (a Response
 * made from a stream), and a stored file is read back by ranges from its Blob (which the browser keeps on disk).
 */
export function cacheStorageChunks(
  store: CacheStorage,
  name = HUB_CACHE_NAME,
): Pick<HubCache, 'putChunks' | 'open'> {
  return {
    async putChunks(key, chunks, length) {
      const it = chunks[Symbol.asyncIterator]();
      const body = new ReadableStream<Uint8Array>({
        async pull(ctl) {
          const next = await it.next();
          if (next.done) ctl.close();
          else ctl.enqueue(next.value);
        },
        async cancel() {
          await it.return?.();
        },
      });
      const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
      if (length !== null) headers['content-length'] = String(length);
      await (await store.open(name)).put(key, new Response(body, { headers }));
    },
    async open(key) {
      const hit = await (await store.open(name)).match(key);
      return hit ? blobFile(await hit.blob(), `${key} (stored in Cache Storage)`) : null;
    },
  };
}
if (typeof caches !== 'undefined') Object.assign(cacheStorageHubCache, cacheStorageChunks(caches));

/** A test-only Hub base must be a loopback http(s) origin; the app itself always uses https://huggingface.co. */
function checkTestHubBase(base: string): string {
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    throw new UserError(`hubBase "${base}" is not a URL.`);
  }
  if (!/^https?:$/.test(url.protocol) || !['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)) {
    throw new UserError(
      `hubBase is for tests only and must be a loopback address (http://127.0.0.1:PORT), got "${base}".`,
    );
  }
  return url.origin + url.pathname.replace(/\/+$/, '');
}

/**
 * The files of a picked folder that are read: the model, and the tokenizer files of a Llama / Qwen2 / Qwen3 folder
 * (tokenizer.json, tokenizer_config.json with the chat template, generation_config.json, chat_template.jinja;
 * src/core/tokenizer/hf.ts). Everything else (pickles, READMEs) is dropped unread.
 */
export const UPLOAD_FILES: readonly string[] = [
  'config.json',
  'model.safetensors',
  shardIndexName('model.safetensors'),
  ...HF_TOKENIZER_FILES,
];

/** Whether a picked file is one the worker reads (UPLOAD_FILES or a shard). */
export function isUploadFile(name: string): boolean {
  return UPLOAD_FILES.includes(name) || isShardFile(name);
}

/**
 * A file held by the worker: bytes, or a picked File (a Blob: the browser keeps its bytes on disk, and weights
 * are read from it one tensor at a time, never whole — so a 3 GB Qwen2.5-1.5B model.safetensors loads).
 */
export type HeldFile = Uint8Array | Blob;

const heldSize = (f: HeldFile): number => (f instanceof Uint8Array ? f.length : f.size);

/**
 * A picked File (or a Blob from Cache Storage) read by ranges: Blob.slice reads only those bytes. A File changed or
 * removed on disk since it was picked cannot be read (NotReadableError): said in words.
 */
export function blobFile(blob: Blob, label = 'the picked file'): RangedFile {
  return {
    size: blob.size,
    read: async (start, end) => {
      try {
        return new Uint8Array(await blob.slice(start, end).arrayBuffer());
      } catch (e) {
        throw new UserError(
          `${(blob as { name?: string }).name ?? label} could not be read (${(e as Error).message}); it may have ` +
            'changed or moved since it was picked. Pick the folder again.',
        );
      }
    },
  };
}

/** Files held in memory as a ModelFiles: bytes read as they are, Blobs read whole or by ranges. */
export function heldFiles(label: string, files: Map<string, HeldFile>): ModelFiles {
  return {
    label,
    has: async (name) => files.has(name),
    read: async (name) => {
      const f = files.get(name);
      if (f === undefined) return null;
      return f instanceof Uint8Array ? f : new Uint8Array(await f.arrayBuffer());
    },
    open: async (name) => {
      const f = files.get(name);
      if (f === undefined) return null;
      return f instanceof Uint8Array ? bytesFile(f) : blobFile(f);
    },
  };
}

const isUrlLike = (s: string) => /^(https?:\/\/|\/|\.\.?\/)/.test(s);

function basename(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** The default training-memory budget: 60% of what the browser says the device has (at least 4 GB assumed). */
export function defaultMemoryBudget(): number {
  const nav = (globalThis as { navigator?: Navigator & { deviceMemory?: number } }).navigator;
  const deviceGb = nav?.deviceMemory;
  return Math.max(deviceGb ?? 8, 4) * 1024 ** 3 * 0.6;
}

export interface ProgressSink {
  (task: string, fraction: number | null, message: string): void;
}

/** What the sources are told of the device (api.ts), besides where progress goes. */
export interface SourcesOptions {
  /** What the current backend can hold (read at each check; it changes with each backend choice); null = unknown. */
  deviceLimits?: () => DeviceLimits | null;
  /** The training-memory budget to start with (default: defaultMemoryBudget()). */
  memoryBudgetBytes?: number;
}

export class ModelSources {
  private readonly held = new Map<string, Map<string, HeldFile>>();
  private readonly hubBases = new Map<string, string>();
  private readonly tasks = new Map<string, Task>();
  private budgetBytes: number;
  private readonly limits: () => DeviceLimits | null;

  constructor(
    private readonly progress: ProgressSink,
    opts: SourcesOptions = {},
  ) {
    this.budgetBytes = opts.memoryBudgetBytes ?? defaultMemoryBudget();
    this.limits = opts.deviceLimits ?? (() => null);
  }

  /** What the current backend can hold; null = no limits known. */
  get deviceLimits(): DeviceLimits | null {
    return this.limits();
  }

  /** The training-memory budget a model is held to (loadModel's memoryBudgetBytes, else 60% of the device's). */
  get memoryBudgetBytes(): number {
    return this.budgetBytes;
  }

  /** loadModel's memoryBudgetBytes: the budget from now on. */
  setMemoryBudget(bytes: number): void {
    this.budgetBytes = bytes;
  }

  /** Keep files in memory under `name` (uploads, the trained reward model). */
  hold(name: string, files: Map<string, HeldFile>): void {
    this.held.set(name, files);
  }

  /** The config `model` name for a source; uploaded files are checked and held. */
  nameFor(source: ModelSource): string {
    switch (source.kind) {
      case 'builtin':
        if (!(BUILTIN_MODELS as readonly string[]).includes(source.name)) {
          throw new UserError(`There is no built-in model "${source.name}"; the built-in model is "tiny".`);
        }
        return source.name;
      case 'url':
        return source.baseUrl;
      case 'hub': {
        checkRepoId(source.repo, source.revision ?? 'main');
        const name =
          source.revision && source.revision !== 'main' ? `${source.repo}@${source.revision}` : source.repo;
        if (source.hubBase !== undefined) this.hubBases.set(name, checkTestHubBase(source.hubBase));
        else this.hubBases.delete(name);
        return name;
      }
      case 'files':
        return this.holdUpload(source.files);
    }
  }

  /**
   * Run `job` with `source` named; uploaded files replace the ones held under the same name only when `job`
   * succeeds, so a bad upload leaves the model in use (and a reset of its run) as they were.
   */
  async tentatively<T>(source: ModelSource, job: (name: string) => Promise<T>): Promise<T> {
    if (source.kind !== 'files') return job(this.nameFor(source));
    const { name, files } = this.checkUpload(source.files);
    const before = this.held.get(name);
    this.held.set(name, files);
    try {
      return await job(name);
    } catch (e) {
      if (before) this.held.set(name, before);
      else this.held.delete(name);
      throw e;
    }
  }

  private holdUpload(list: UploadedFile[]): string {
    const { name, files } = this.checkUpload(list);
    this.held.set(name, files);
    return name;
  }

  private checkUpload(list: UploadedFile[]): {
    name: string;
    files: Map<string, HeldFile>;
  } {
    if (!Array.isArray(list) || list.length === 0) {
      throw new UserError(
        'No files were chosen; pick a model folder with config.json and model.safetensors.',
      );
    }
    const files = new Map<string, HeldFile>();
    for (const f of list) {
      const body = f?.blob ?? f?.bytes;
      if (
        typeof f?.name !== 'string' ||
        !(body instanceof Uint8Array || (typeof Blob !== 'undefined' && body instanceof Blob))
      ) {
        throw new UserError(
          'loadModel: each file must be {name: string, bytes: Uint8Array} or {name, blob: Blob}.',
        );
      }
      const name = basename(f.name);
      if (!isUploadFile(name)) continue; // never pickle or anything else
      // Weights are read by ranges from a picked File; any other file (or weights as bytes) is read whole.
      if (!(body instanceof Uint8Array) && !name.endsWith('.safetensors')) {
        throw new UserError(
          `loadModel: ${name} must come as bytes; only .safetensors files may come as a Blob (read by ranges).`,
        );
      }
      if (body instanceof Uint8Array && body.length > MAX_HUB_FILE_BYTES) {
        throw new UserError(
          `${name} is ${(heldSize(body) / 1024 ** 3).toFixed(1)} GB, over the 2.0 GB limit for one file in the browser.`,
        );
      }
      files.set(name, body);
    }
    const pickles = list
      .map((f) => basename(f.name))
      .filter((n) => /\.(bin|pt|pth|ckpt|pkl|pickle)$/i.test(n));
    const weights = files.has('model.safetensors')
      ? 'model.safetensors'
      : shardIndexName('model.safetensors');
    for (const need of ['config.json', weights]) {
      if (!files.has(need)) {
        const pickleNote =
          need === weights && pickles.length > 0
            ? `. ${pickles[0]} is a PyTorch pickle, which can run code when loaded, so it is never read: only ` +
              'safetensors weights are supported. Convert it in Python with ' +
              '`GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)`.'
            : ' (pytorch_model.bin is not read: it can run code).';
        throw new UserError(
          `The chosen files have no ${need === weights ? 'model.safetensors' : need}; pick a model folder with config.json and model.safetensors${pickleNote}`,
        );
      }
    }
    const first = list.find((f) => f.name.includes('/'));
    // Loose files (not a folder) are named from their config.json: "gpt2-4x160", not "model" (issue #33).
    const folder = first
      ? first.name.split('/').slice(-2, -1)[0]
      : nameFromConfig(files.get('config.json') as Uint8Array);
    return { name: `uploaded:${folder}`, files };
  }

  /** Open a model by its config name. */
  files(name: string): ModelFiles {
    const held = this.held.get(name);
    if (held)
      return heldFiles(
        name === PREFERENCE_REWARD_MODEL
          ? 'reward model from preferences'
          : name === SFT_MODEL
            ? 'SFT result'
            : name === DPO_MODEL
              ? 'DPO result'
              : name,
        held,
      );
    if ((BUILTIN_MODELS as readonly string[]).includes(name))
      return fetchFiles(builtinModelUrl(name), `built-in ${name}`);
    if (isUrlLike(name)) return fetchFiles(name);
    const [repo, revision] = name.split('@');
    if (isHubRepoId(repo)) {
      return hubFiles(repo, {
        fetch: (url) => fetch(url),
        cache: cacheStorageHubCache,
        revision,
        hubBase: this.hubBases.get(name),
        onProgress: this.hubProgress(),
      });
    }
    if (name.startsWith('uploaded:')) {
      throw new UserError(
        `The uploaded model "${name.slice(9)}" is no longer in memory; pick its files again.`,
      );
    }
    throw new UserError(
      `model "${name}" is not the built-in "tiny", a Hugging Face id like "openai-community/gpt2", or a folder URL.`,
    );
  }

  /**
   * Refuse a model that would not fit (reads config.json only, and for a run the task's prompts). `load`: its
   * weights against the WebGPU buffer limits, the WASM heap and the memory budget, stored as generate would hold
   * them for `cfg` (generateBaseDtype: f16 where the run's "baseDtype" asks for it and it applies; f32 without a
   * config). `train` with the run's config: what that run holds (runEstimate) against the backend's budget, and its
   * tensors against the WebGPU limits. `train` without a config (a reward model trained from preferences): full
   * copies' weights and state.
   */
  async checkMemory(
    name: string,
    purpose: 'train' | 'load' = 'train',
    cfg?: TrainConfig,
  ): Promise<RunMemoryCheck | null> {
    if (purpose === 'train' && cfg) {
      const check = await this.runEstimate({ ...cfg, model: name });
      if (check.problem) throw new UserError(check.problem);
      return check;
    }
    if (purpose === 'load') {
      await this.checkLoad(name, cfg);
      return null;
    }
    const files = this.files(name);
    const config = await readConfig(files);
    checkDeviceLimits(config, files.label, this.deviceLimits, purpose);
    checkTrainingMemory(config, files.label, this.memoryBudgetBytes);
    return null;
  }

  /**
   * How to load `name` for generate outside a run ("Try the policy"; Run.loadModel, Run.generator), checked first
   * (checkMemory 'load'): the binding limit on WebGPU, and the base in f16 where `cfg` asks for it and it applies.
   */
  async generateLoadOptions(
    name: string,
    cfg: TrainConfig,
  ): Promise<{ maxBindingBytes?: number; baseDtype?: 'f16' }> {
    const baseDtype = await this.checkLoad(name, cfg);
    return { ...this.modelOptions(), ...(baseDtype === 'f16' ? { baseDtype } : {}) };
  }

  /** How generate holds a model of `family` under `cfg` here (device-limits.ts generateBaseDtype). */
  generateBaseDtype(cfg: Pick<TrainConfig, 'baseDtype'> | undefined, family: string): BaseDtype {
    return generateBaseDtype(cfg?.baseDtype, family, this.deviceLimits?.backend);
  }

  /**
   * The size of `name`'s model.safetensors (or its shards) when held here (picked files), else null: loading counts
   * the file it decodes from (device-limits.ts loadMemory), estimated when unknown at 2 bytes a parameter for the
   * Llama families (bf16) and 4 for GPT-2 (f32).
   */
  weightsFileBytes(name: string): number | null {
    const files = this.held.get(name);
    if (!files) return null;
    const whole = files.get('model.safetensors');
    if (whole !== undefined) return heldSize(whole);
    let shards = 0;
    for (const [n, f] of files) if (isShardFile(n)) shards += heldSize(f);
    return shards > 0 ? shards : null;
  }

  /**
   * Whether `name`'s weights are read a tensor at a time at load: picked Files (Blobs) and a Hub model's (through
   * Cache Storage) are; bytes held in memory and a URL's files are read whole.
   */
  readsWeightsByRanges(name: string): boolean {
    const files = this.held.get(name);
    // A Hub model's weights are downloaded into Cache Storage and read from it by ranges.
    if (!files) return isHubRepoId(name.split('@')[0]) && typeof caches !== 'undefined';
    const weights = [...files].filter(([n]) => n === 'model.safetensors' || isShardFile(n));
    return weights.length > 0 && weights.every(([, f]) => !(f instanceof Uint8Array));
  }

  /** The load check (checkMemory 'load'); returns the storage generate would load the model in. */
  private async checkLoad(name: string, cfg?: TrainConfig): Promise<BaseDtype> {
    const files = this.files(name);
    const config = await readConfig(files);
    checkDeviceLimits(config, files.label, this.deviceLimits, 'load');
    const baseDtype = this.generateBaseDtype(cfg, config.model_type);
    // Without a run's config (a DPO / SFT job's model) there is no f16 base to offer.
    const problem = this.loadProblem(name, config, baseDtype, cfg?.lora ?? 0, cfg !== undefined);
    if (problem) throw new UserError(problem);
    return baseDtype;
  }

  /**
   * Why loading `name` (its config `config`) with the base in `baseDtype` would not fit the budget, or null: the
   * weights and what the load holds on the way in, counted from the files as they are held here
   * (device-limits.ts loadMemoryProblem).
   */
  private loadProblem(
    name: string,
    config: LMConfig,
    baseDtype: BaseDtype,
    lora: number,
    offerF16 = true,
  ): string | null {
    return loadMemoryProblem(config, this.files(name).label, {
      baseDtype,
      lora,
      backend: this.deviceLimits?.backend ?? null,
      budgetBytes: this.memoryBudgetBytes,
      fileBytes: this.weightsFileBytes(name),
      ranged: this.readsWeightsByRanges(name),
      offerF16,
    });
  }

  /**
   * What a run of `cfg` would hold at its peak, from the model's config.json, the task's prompts and the config
   * (nothing is loaded): the estimate, the policy's trainable parameters, the backend's budget, and why Start
   * would refuse it (`problem`; also the WebGPU buffer limits and the WASM heap). Throws only when config.json
   * or the task cannot be read.
   */
  async runEstimate(cfg: TrainConfig): Promise<RunMemoryCheck> {
    const files = this.files(cfg.model);
    const config = await readConfig(files);
    // The prompts set the query length (the trainer pads them to a multiple of 8); the tokenizer needs no weights.
    const { prompts, taskReward } = await resolvePrompts(cfg, this.resources());
    const tok = await tokenizerForFolder(files, config);
    const longest = Math.max(1, ...prompts.map((p) => encodePrompt(tok, p, cfg.chatTemplate).length));
    const promptLength = bucket(longest, Math.max(1, config.n_positions - cfg.responseLength));
    const backend = this.deviceLimits?.backend ?? 'cpu';
    // "baseDtype" "f16" where the run cannot have it (another backend than WebGPU, GPT-2) is refused in the words
    // the build would use (checkBaseDtype), and the estimate counts the f32 base that backend holds.
    let f16Refusal: string | null = null;
    try {
      checkBaseDtype(cfg.baseDtype, { trainable: cfg.lora === 0, family: config.model_type, backend });
    } catch (e) {
      f16Refusal = (e as Error).message;
    }
    const { baseDtype, ...asked } = runMemoryOptions(cfg, rewardIsModel(cfg, taskReward));
    // On WASM the estimate counts what the heap will reach (shared tape copies, XNNPACK's packed weights).
    const opts: RunMemoryOptions = {
      ...asked,
      ...(baseDtype && !f16Refusal ? { baseDtype } : {}),
      ...(backend === 'wasm' ? { heap: 'wasm' as const, fusedBlocks: wasmFusedBlocksHere() } : {}),
      ...(backend === 'webgpu' ? WEBGPU_MEMORY_OPTIONS : {}),
    };
    const budget = memoryBudget(this.deviceLimits, this.memoryBudgetBytes);
    const vocabChunk = vocabChunking(config.vocab_size, backend);
    // The shape the trainer will run: its micro-batch and recompute (model/size.ts runShapeOf); on WebGPU the
    // device's plan (the whole minibatch, smaller only when the device runs out: core/ppo/gpu-plan.ts).
    const device = planDeviceOf(this.deviceLimits);
    const shape = runShapeOf(config, cfg, promptLength, opts, vocabChunk, device);
    // That plan falls back to smaller micro-batches when the device runs out: refused only if even the smallest
    // (one sample, recompute) would not fit.
    const floor = device ? deviceFallbackFloor(shape, cfg) : undefined;
    const check = runMemoryCheck(
      config,
      files.label,
      shape,
      opts,
      budget,
      this.deviceLimits?.backend ?? null,
      floor,
    );
    check.plan = describePlan(plannedInForce(shape, cfg, backend, device));
    if (!check.problem) {
      try {
        checkDeviceLimits(config, files.label, this.deviceLimits, 'train', opts);
      } catch (e) {
        check.problem = (e as Error).message;
      }
    }
    // On WebGPU the run first loads its policy a weight at a time, whose peak (the weights, the largest weight's host
    // copy and its bytes in the file: loadMemory) can be over the run's own count when the batch is small; the
    // picker's verdicts count it the same way (modelFit).
    if (!check.problem && backend === 'webgpu') {
      check.problem = this.loadProblem(cfg.model, config, opts.baseDtype ?? 'f32', cfg.lora);
    }
    if (f16Refusal) check.problem = check.problem ? `${f16Refusal} ${check.problem}` : f16Refusal;
    return check;
  }

  /**
   * The model picker's verdicts (device-limits.ts modelFit) for the known Llama / Qwen shapes (LLAMA_SHAPES), keyed
   * by shape name, on this backend and budget for `cfg` (its LoRA rank and targets, algorithm and "baseDtype").
   */
  modelFits(cfg: TrainConfig): Record<string, ModelFit> {
    const out: Record<string, ModelFit> = {};
    for (const [shape, json] of Object.entries(LLAMA_SHAPES)) {
      const config = parseLlamaConfig({ ...json }, shape);
      out[shape] = modelFit(config, cfg, this.deviceLimits, this.memoryBudgetBytes);
    }
    return out;
  }

  /** runEstimate as the worker sends it to the UI. */
  async estimateReport(cfg: TrainConfig): Promise<MemoryEstimateReport> {
    const c = await this.runEstimate(cfg);
    return {
      model: this.files(cfg.model).label,
      params: c.params,
      policyTrainableParams: c.policyTrainableParams,
      trainableParams: c.estimate.trainableParams,
      lora: cfg.lora,
      bytes: c.estimate.total,
      parts: { ...c.estimate.parts },
      budgetBytes: c.budget.bytes,
      budget: c.budget.what,
      problem: c.problem,
      ...(c.plan ? { plan: c.plan } : {}),
      ...(c.estimate.baseDtype ? { baseDtype: c.estimate.baseDtype } : {}),
    };
  }

  async loadTask(name: string): Promise<Task> {
    const known = this.tasks.get(name);
    if (known) return known;
    const url = new URL(`${import.meta.env.BASE_URL}${taskUrl(name)}`, self.location.origin);
    let json: unknown;
    try {
      const res = await fetch(url, { headers: { Accept: 'application/json' } });
      if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
      json = await res.json();
    } catch (e) {
      throw new UserError(`task "${name}": ${url.pathname} could not be read (${(e as Error).message}).`);
    }
    const task = parseTask(json, `tasks/${name}.json`);
    this.tasks.set(name, task);
    return task;
  }

  /**
   * How core opens models and tasks here. On WebGPU, models are built with the device's binding limit, so
   * GPT-2's wte is held as vocabulary chunks that each fit one binding (device-limits.ts webgpuBindingBytes).
   */
  resources(): Resources {
    const maxBindingBytes = webgpuBindingBytes(this.deviceLimits);
    return {
      modelFiles: (n) => this.files(n),
      loadTask: (n) => this.loadTask(n),
      ...(maxBindingBytes !== undefined ? { maxBindingBytes } : {}),
    };
  }

  /** Model options for loading outside a run (generate): the binding limit on WebGPU. */
  modelOptions(): { maxBindingBytes?: number } {
    const maxBindingBytes = webgpuBindingBytes(this.deviceLimits);
    return maxBindingBytes !== undefined ? { maxBindingBytes } : {};
  }

  /** Progress events for Hub downloads, at most one per percent. */
  private hubProgress(): (p: HubProgress) => void {
    let last = -1;
    return (p) => {
      if (p.fromCache) {
        this.progress('download', 1, `${p.repo} ${p.file}: from the browser cache`);
        return;
      }
      const pct = p.fraction === null ? null : Math.floor(p.fraction * 100);
      if (!p.done && pct !== null && pct === last) return;
      last = p.done ? -1 : (pct ?? last);
      const amount = `${(p.loaded / 1024 ** 2).toFixed(1)}${p.total ? ` / ${(p.total / 1024 ** 2).toFixed(1)}` : ''} MB`;
      this.progress('download', p.fraction, `Downloading ${p.repo} ${p.file}: ${amount}`);
    };
  }
}

/**
 * A short name for picked files from their config.json: its `_name_or_path`'s last part when it has one, else
 * the model type with layers × width ("gpt2-4x160", "qwen2-24x896"); "model" when the file says neither.
 */
export function nameFromConfig(bytes: Uint8Array): string {
  let c: Record<string, unknown>;
  try {
    c = JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
  } catch {
    return 'model';
  }
  const safe = (x: string) => x.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '');
  const path = typeof c._name_or_path === 'string' ? safe(c._name_or_path.split('/').pop() ?? '') : '';
  if (path) return path;
  const type = typeof c.model_type === 'string' ? safe(c.model_type) : '';
  const layers = c.n_layer ?? c.num_hidden_layers;
  const width = c.n_embd ?? c.hidden_size;
  if (!type) return 'model';
  return typeof layers === 'number' && typeof width === 'number' ? `${type}-${layers}x${width}` : type;
}
