/**
 * Models from the Hugging Face Hub, platform-neutral: the caller hands in a `fetch`-like function and a cache
 * (the worker: the browser's fetch and Cache Storage; tests: Node's fetch against a local server and a Map).
 *
 * Only `config.json`, `model.safetensors` (or a sharded model's `model.safetensors.index.json` and the
 * `model-0000K-of-0000N.safetensors` it names) and, for a Llama / Qwen2 / Qwen3 folder, its tokenizer files
 * (`tokenizer.json`, `tokenizer_config.json`, `generation_config.json`, `chat_template.jinja`; a missing optional
 * one is a 404, read as null) are ever requested, from `${hubBase}/${repo}/resolve/${revision}/${file}` — never
 * pickle (`pytorch_model.bin`) or other code-bearing files. `hubBase` is https://huggingface.co; tests point it at a local server.
 *
 * A download streams the body, reporting progress from Content-Length. Weights go straight into a cache that
 * stores chunks (the worker's Cache Storage) and are read back from it by ranges (openHubFile: any size); other
 * files are read whole, and one over `maxFileBytes` is refused before that. A file found in the cache needs no
 * network at all.
 *
 * The memory a model needs (checked from its config.json before these downloads) is src/core/model/size.ts.
 */
import { UserError } from '../common/errors';
import { isShardFile, type ModelFiles } from '../core/model/folder';
import { bytesFile, type RangedFile } from '../core/model/safetensors';
import { HF_TOKENIZER_FILES } from '../core/tokenizer/hf';

export const HUB_BASE = 'https://huggingface.co';
/**
 * The only files fetched from the Hub: the model, and the tokenizer files a Llama-family folder is read with
 * (src/core/tokenizer/hf.ts HF_TOKENIZER_FILES; GPT-2 folders never ask for them).
 */
export const HUB_FILES: readonly string[] = [
  'config.json',
  'model.safetensors',
  'model.safetensors.index.json',
  ...HF_TOKENIZER_FILES,
];
/** Whether this loader may ask the Hub for `name`: HUB_FILES, or a shard of a sharded model's weights. */
export function isHubFile(name: string): boolean {
  return HUB_FILES.includes(name) || isShardFile(name);
}
export const MAX_HUB_FILE_BYTES = 2 * 1024 ** 3;

/** The part of a fetch Response this module reads (core has no DOM types). */
export interface HubResponse {
  ok: boolean;
  status: number;
  statusText: string;
  headers: { get(name: string): string | null };
  body: { getReader(): HubReader } | null;
  arrayBuffer(): Promise<ArrayBuffer>;
}
export interface HubReader {
  read(): Promise<{ done: boolean; value?: Uint8Array }>;
  cancel(reason?: unknown): Promise<void>;
}
export type HubFetch = (url: string) => Promise<HubResponse>;

/** Bytes by URL. `get` returns null on a miss. */
export interface HubCache {
  get(key: string): Promise<Uint8Array | null>;
  put(key: string, bytes: Uint8Array): Promise<void>;
  /**
   * Both or neither (the worker's Cache Storage has both): store a body as its chunks arrive, never whole in memory,
   * and open a stored one for reads by byte ranges. With them a weights file of any size downloads and loads
   * (openHubFile); a chunk source that throws must leave nothing stored.
   */
  putChunks?(key: string, chunks: AsyncIterable<Uint8Array>, length: number | null): Promise<void>;
  open?(key: string): Promise<RangedFile | null>;
}

export interface HubProgress {
  repo: string;
  file: string;
  loaded: number;
  /** From Content-Length; null when the server did not say. */
  total: number | null;
  fraction: number | null;
  fromCache: boolean;
  done: boolean;
}

export interface HubOptions {
  fetch: HubFetch;
  cache?: HubCache;
  /** Default https://huggingface.co. Tests only. */
  hubBase?: string;
  /** Branch, tag or commit; default "main". */
  revision?: string;
  maxFileBytes?: number;
  onProgress?: (p: HubProgress) => void;
}

const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*\/[A-Za-z0-9_.-]+$/;
const REVISION = /^[A-Za-z0-9_.\-/]+$/;

export function isHubRepoId(s: string): boolean {
  return REPO_ID.test(s) && !s.split('/').some((p) => p === '.' || p === '..' || p.endsWith('.git'));
}

/** Check a repo id (`org/name`) and revision; the message shows what an id looks like. */
export function checkRepoId(repo: string, revision = 'main'): void {
  if (!isHubRepoId(repo)) {
    throw new UserError(
      `"${repo}" is not a Hugging Face model id; it looks like "organisation/name", e.g. "openai-community/gpt2".`,
    );
  }
  if (!REVISION.test(revision) || revision.split('/').includes('..')) {
    throw new UserError(`"${revision}" is not a revision; give a branch, tag or commit such as "main".`);
  }
}

/** `${base}/${repo}/resolve/${revision}/${file}` (the revision %-encoded, so "refs/pr/1" stays one segment). */
export function hubFileUrl(repo: string, file: string, revision = 'main', base = HUB_BASE): string {
  checkRepoId(repo, revision);
  return `${base.replace(/\/+$/, '')}/${repo}/resolve/${encodeURIComponent(revision)}/${file}`;
}

const mb = (n: number): string => `${(n / 1024 ** 2).toFixed(n < 10 * 1024 ** 2 ? 1 : 0)} MB`;
const gb = (n: number): string => `${(n / 1024 ** 3).toFixed(1)} GB`;

function tooBig(label: string, bytes: number, limit: number): UserError {
  return new UserError(
    `${label} is ${gb(bytes)}, over the ${gb(limit)} limit for one file in the browser; choose a smaller model.`,
  );
}

/** Read a response body in chunks, reporting progress; refuses to go past `limit`. */
async function readBody(
  res: HubResponse,
  total: number | null,
  label: string,
  limit: number,
  report: (loaded: number) => void,
): Promise<Uint8Array> {
  if (!res.body) {
    const whole = new Uint8Array(await res.arrayBuffer());
    if (whole.length > limit) throw tooBig(label, whole.length, limit);
    report(whole.length);
    return whole;
  }
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  // With a known length, write straight into one buffer (no second copy of a 500 MB file).
  const out = total !== null ? new Uint8Array(total) : null;
  let loaded = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (!value) continue;
    if (loaded + value.length > limit || (out && loaded + value.length > out.length)) {
      await reader.cancel().catch(() => undefined);
      if (out && loaded + value.length <= limit) {
        throw new UserError(
          `${label}: the server sent more bytes than its Content-Length (${total}); try again.`,
        );
      }
      throw tooBig(label, loaded + value.length, limit);
    }
    if (out) out.set(value, loaded);
    else chunks.push(value);
    loaded += value.length;
    report(loaded);
  }
  if (out) {
    if (loaded !== out.length)
      throw new UserError(`${label}: the download stopped at ${mb(loaded)} of ${mb(out.length)}; try again.`);
    return out;
  }
  const whole = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) {
    whole.set(c, at);
    at += c.length;
  }
  return whole;
}

/** The cache key that records a 404 for `url` (one byte; a miss is never cached as an empty file). */
const missingKey = (url: string) => `${url}?missing`;

function checkHubFile(file: string): void {
  if (!isHubFile(file)) {
    throw new UserError(
      `Only ${HUB_FILES.slice(0, -1).join(', ')} and ${HUB_FILES[HUB_FILES.length - 1]} (and a sharded model's ` +
        `model-0000K-of-0000N.safetensors) are read from the Hub, not ${file}.`,
    );
  }
}

/** What a download of one file needs: its URL, its label in messages, its progress reports. */
function target(repo: string, file: string, opts: HubOptions) {
  checkHubFile(file);
  const url = hubFileUrl(repo, file, opts.revision ?? 'main', opts.hubBase ?? HUB_BASE);
  const progress = (p: Omit<HubProgress, 'repo' | 'file'>) => opts.onProgress?.({ repo, file, ...p });
  return { url, label: `${repo}/${file}`, progress };
}

/** GET a Hub file: null on a 404 (remembered in the cache), else an ok response; other answers are UserErrors. */
async function fetchHub(url: string, repo: string, opts: HubOptions): Promise<HubResponse | null> {
  let res: HubResponse;
  try {
    res = await opts.fetch(url);
  } catch (e) {
    throw new UserError(
      `${url} could not be downloaded (${(e as Error).message}); check the connection and try again.`,
    );
  }
  if (res.status === 404) {
    await opts.cache?.put(missingKey(url), new Uint8Array([1])).catch(() => undefined);
    return null;
  }
  if (res.status === 401 || res.status === 403) {
    throw new UserError(
      `${repo} is private or gated on the Hugging Face Hub (${res.status}); only public models can be loaded here.`,
    );
  }
  if (!res.ok)
    throw new UserError(`${url}: the Hub answered ${res.status} ${res.statusText}; try again later.`);
  return res;
}

function contentLength(res: HubResponse): number | null {
  const header = res.headers.get('content-length');
  return header !== null && /^\d+$/.test(header.trim()) ? Number(header) : null;
}

/**
 * One Hub file: from the cache when there, else downloaded (streamed, with progress) and cached.
 * Returns null when the Hub has no such file (404; remembered in the cache, so a second load asks nothing).
 */
export async function downloadHubFile(
  repo: string,
  file: string,
  opts: HubOptions,
): Promise<Uint8Array | null> {
  const { url, label, progress } = target(repo, file, opts);
  const limit = opts.maxFileBytes ?? MAX_HUB_FILE_BYTES;

  const cached = opts.cache ? await opts.cache.get(url) : null;
  if (cached) {
    progress({ loaded: cached.length, total: cached.length, fraction: 1, fromCache: true, done: true });
    return cached;
  }
  // A file the repo lacks (an optional tokenizer file) is remembered too, so a cached model loads offline.
  if (opts.cache && (await opts.cache.get(missingKey(url)))) return null;
  const res = await fetchHub(url, repo, opts);
  if (!res) return null;
  const total = contentLength(res);
  if (total !== null && total > limit) {
    await res.body
      ?.getReader()
      .cancel()
      .catch(() => undefined);
    throw tooBig(label, total, limit);
  }
  progress({ loaded: 0, total, fraction: total ? 0 : null, fromCache: false, done: false });
  const bytes = await readBody(res, total, label, limit, (loaded) =>
    progress({ loaded, total, fraction: total ? loaded / total : null, fromCache: false, done: false }),
  );
  progress({ loaded: bytes.length, total: bytes.length, fraction: 1, fromCache: false, done: true });
  if (opts.cache) {
    try {
      await opts.cache.put(url, bytes);
    } catch {
      // A full or unavailable cache only costs a download next time.
    }
  }
  return bytes;
}

/**
 * A Hub weights file to read by ranges: from the cache when there, else downloaded straight into it (each chunk
 * passed on as it arrives, never the whole file in memory, so no 2 GB limit: Qwen2.5-1.5B's 3.1 GB
 * model.safetensors) and opened there. Without a cache that stores chunks (HubCache.putChunks / open), the file is
 * downloaded whole (downloadHubFile, with its limit). Null when the Hub has no such file.
 */
export async function openHubFile(repo: string, file: string, opts: HubOptions): Promise<RangedFile | null> {
  const cache = opts.cache;
  if (!cache?.putChunks || !cache.open) {
    const bytes = await downloadHubFile(repo, file, opts);
    return bytes ? bytesFile(bytes) : null;
  }
  const { url, label, progress } = target(repo, file, opts);
  const hit = await cache.open(url);
  if (hit) {
    progress({ loaded: hit.size, total: hit.size, fraction: 1, fromCache: true, done: true });
    return hit;
  }
  if (await cache.get(missingKey(url))) return null;
  const res = await fetchHub(url, repo, opts);
  if (!res) return null;
  const total = contentLength(res);
  progress({ loaded: 0, total, fraction: total ? 0 : null, fromCache: false, done: false });
  let loaded = 0;
  // What went wrong in the body (a cache wraps a source's error in its own words): reported as it was.
  let failed: unknown = null;
  const reader = res.body?.getReader() ?? null;
  let finished = false;
  async function* chunks(): AsyncGenerator<Uint8Array> {
    try {
      if (!reader) {
        const whole = new Uint8Array(await res!.arrayBuffer());
        loaded = whole.length;
        yield whole;
      } else {
        for (;;) {
          let next: { done: boolean; value?: Uint8Array };
          try {
            next = await reader.read();
          } catch (e) {
            throw new UserError(
              `${label}: the download broke off at ${mb(loaded)} (${(e as Error).message}); try again.`,
            );
          }
          const { done, value } = next;
          if (done) break;
          if (!value) continue;
          loaded += value.length;
          if (total !== null && loaded > total) {
            throw new UserError(
              `${label}: the server sent more bytes than its Content-Length (${total}); try again.`,
            );
          }
          progress({ loaded, total, fraction: total ? loaded / total : null, fromCache: false, done: false });
          yield value;
        }
      }
      if (total !== null && loaded !== total)
        throw new UserError(`${label}: the download stopped at ${mb(loaded)} of ${mb(total)}; try again.`);
      finished = true;
    } catch (e) {
      failed = e;
      throw e;
    } finally {
      // Stopped early (an error, or the cache cancelled the stream): stop the download too.
      if (!finished) await reader?.cancel().catch(() => undefined);
    }
  }
  try {
    await cache.putChunks(url, chunks(), total);
  } catch (e) {
    if (failed) throw failed;
    // The cache could not take it (full, or refused before the body was read): the body is let go, and a file
    // small enough to hold is downloaded again into memory, as a cache without chunks would (downloadHubFile).
    await reader?.cancel().catch(() => undefined);
    if (total !== null && total <= (opts.maxFileBytes ?? MAX_HUB_FILE_BYTES)) {
      const bytes = await downloadHubFile(repo, file, opts);
      if (bytes) return bytesFile(bytes);
    }
    throw new UserError(
      `${label} could not be stored in the browser's Cache Storage (${(e as Error).message}); free some disk ` +
        "space or clear this site's stored data, then load it again.",
    );
  }
  if (failed) throw failed;
  progress({ loaded, total: loaded, fraction: 1, fromCache: false, done: true });
  const stored = await cache.open(url);
  if (!stored)
    throw new UserError(
      `${label} was downloaded but the browser's Cache Storage did not keep it; try again.`,
    );
  return stored;
}

/** A Hub repo as a model folder (only HUB_FILES and shards exist in it; weights are opened by ranges). */
export function hubFiles(repo: string, opts: HubOptions): ModelFiles {
  checkRepoId(repo, opts.revision ?? 'main');
  const label = opts.revision && opts.revision !== 'main' ? `${repo}@${opts.revision}` : repo;
  return {
    label,
    read: async (name) => (isHubFile(name) ? downloadHubFile(repo, name, opts) : null),
    open: async (name) => {
      if (!isHubFile(name)) return null;
      if (name.endsWith('.safetensors')) return openHubFile(repo, name, opts);
      const bytes = await downloadHubFile(repo, name, opts);
      return bytes ? bytesFile(bytes) : null;
    },
  };
}
