import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { useCpu } from './helpers/backend';
import {
  checkRepoId,
  downloadHubFile,
  hubFileUrl,
  hubFiles,
  HUB_BASE,
  isHubRepoId,
  type HubCache,
  type HubFetch,
  type HubProgress,
} from '../src/services/hub';
import { checkTrainingMemory, paramCount } from '../src/core/model/size';
import { loadLM, memoryFiles, readConfig } from '../src/core/model/folder';
import { isUserError } from '../src/common/errors';
import { shardSafetensors } from '../scripts/shard-safetensors';
import type { RangedFile } from '../src/core/model/safetensors';

const FIXTURE = fileURLToPath(new URL('./fixtures/parity/tiny-plain/', import.meta.url));
const files: Record<string, Buffer> = {
  'config.json': readFileSync(`${FIXTURE}config.json`),
  'model.safetensors': readFileSync(`${FIXTURE}model.safetensors`),
};
/** A Qwen2 folder as the Hub serves one: the model and its tokenizer files (no chat_template.jinja: a 404). */
const QWEN = fileURLToPath(new URL('./fixtures/parity-llama/qwen2-tiny/', import.meta.url));
const qwenFiles: Record<string, Buffer> = Object.fromEntries(
  [
    'config.json',
    'model.safetensors',
    'tokenizer.json',
    'tokenizer_config.json',
    'generation_config.json',
  ].map((n) => [n, readFileSync(`${QWEN}${n}`)]),
);

/** The same Qwen2 folder sharded as Qwen3-1.7B is on the Hub: model.safetensors.index.json and two shards. */
const shardedFiles: Record<string, Buffer> = {
  ...Object.fromEntries(Object.entries(qwenFiles).filter(([n]) => n !== 'model.safetensors')),
  ...Object.fromEntries(
    [...shardSafetensors(new Uint8Array(qwenFiles['model.safetensors']), 2)].map(([n, b]) => [
      n,
      Buffer.from(b),
    ]),
  ),
};

/** A Hub-shaped server: /{org}/{name}/resolve/{rev}/{file}. Counts hits per path; some paths misbehave on purpose. */
let server: Server;
let base: string;
const hits = new Map<string, number>();
beforeAll(async () => {
  await useCpu();
  server = createServer((req, res) => {
    const url = req.url ?? '';
    hits.set(url, (hits.get(url) ?? 0) + 1);
    const m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url);
    if (!m) return void res.writeHead(404).end();
    const [, repo, , file] = m;
    if (repo === 'org/gated') return void res.writeHead(401).end();
    if (repo === 'org/huge' && file === 'model.safetensors') {
      res.writeHead(200, { 'content-length': String(3 * 1024 ** 3) });
      return void res.write(new Uint8Array(1024)); // never ends; the client must not wait for it
    }
    if (repo === 'org/cut' && file === 'model.safetensors') {
      // Says the whole file, sends half, then hangs up.
      const b = qwenFiles['model.safetensors'];
      res.writeHead(200, { 'content-length': String(b.length) });
      return void res.write(b.subarray(0, b.length >> 1), () => res.destroy());
    }
    if (repo === 'org/chunked' && files[file]) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' }); // no content-length: chunked
      const b = files[file];
      res.write(b.subarray(0, 1000));
      return void setTimeout(() => res.end(b.subarray(1000)), 5);
    }
    const served =
      repo === 'org/tiny'
        ? files
        : repo === 'org/qwen'
          ? qwenFiles
          : repo === 'org/sharded'
            ? shardedFiles
            : repo === 'org/cut'
              ? qwenFiles
              : {};
    if (!served[file]) return void res.writeHead(404).end();
    res.writeHead(200, {
      'content-length': String(served[file].length),
      'content-type': 'application/octet-stream',
    });
    // Two writes so the client sees more than one chunk.
    const b = served[file];
    res.write(b.subarray(0, b.length >> 1));
    setTimeout(() => res.end(b.subarray(b.length >> 1)), 5);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const nodeFetch: HubFetch = (url) => fetch(url) as unknown as ReturnType<HubFetch>;
function mapCache(): HubCache & { map: Map<string, Uint8Array> } {
  const map = new Map<string, Uint8Array>();
  return { map, get: async (k) => map.get(k) ?? null, put: async (k, v) => void map.set(k, v) };
}
/**
 * A cache that stores weights as their chunks arrive (as the worker's Cache Storage does, here Blobs of the chunks)
 * and opens them for reads by ranges, recording the largest chunk and every range read.
 */
function streamingCache(): ReturnType<typeof mapCache> & {
  blobs: Map<string, Blob>;
  chunks: number;
  ranges: number[];
} {
  const bytes = mapCache();
  const c = {
    ...bytes,
    blobs: new Map<string, Blob>(),
    chunks: 0,
    ranges: [] as number[],
    async putChunks(key: string, chunks: AsyncIterable<Uint8Array>) {
      const parts: BlobPart[] = [];
      for await (const chunk of chunks) {
        c.chunks++;
        parts.push(chunk.slice() as BlobPart);
      }
      c.blobs.set(key, new Blob(parts)); // stored only once every chunk came: a source that throws stores nothing
    },
    async open(key: string): Promise<RangedFile | null> {
      const blob = c.blobs.get(key);
      if (!blob) return null;
      return {
        size: blob.size,
        read: async (s: number, e: number) => {
          c.ranges.push(e - s);
          return new Uint8Array(await blob.slice(s, e).arrayBuffer());
        },
      };
    },
  };
  return c;
}

async function userError(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(isUserError(e), String(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}

describe('Hub ids and URLs', () => {
  it('builds huggingface.co resolve URLs and refuses odd ids', () => {
    expect(hubFileUrl('openai-community/gpt2', 'config.json')).toBe(
      'https://huggingface.co/openai-community/gpt2/resolve/main/config.json',
    );
    expect(hubFileUrl('distilbert/distilgpt2', 'model.safetensors', 'refs/pr/1')).toBe(
      `${HUB_BASE}/distilbert/distilgpt2/resolve/refs%2Fpr%2F1/model.safetensors`,
    );
    for (const ok of ['openai-community/gpt2', 'a/b.c', 'Org_1/name-2'])
      expect(isHubRepoId(ok), ok).toBe(true);
    for (const bad of ['gpt2', 'a/b/c', '../x', 'a/..', 'https://x/y', '/a/b', 'a b/c'])
      expect(isHubRepoId(bad), bad).toBe(false);
    expect(() => checkRepoId('gpt2')).toThrow(
      /"gpt2" is not a Hugging Face model id; it looks like "organisation\/name"/,
    );
    expect(() => checkRepoId('a/b', '../x')).toThrow(/not a revision/);
  });

  it('never asks for pickle or other files', async () => {
    const asked: string[] = [];
    const f = hubFiles('org/tiny', { fetch: async (u) => (asked.push(u), nodeFetch(u)), hubBase: base });
    expect(await f.read('pytorch_model.bin')).toBeNull();
    expect(await f.read('vocab.json')).toBeNull();
    expect(await f.read('tokenizer.model')).toBeNull();
    expect(asked).toEqual([]);
    expect(await userError(downloadHubFile('org/tiny', 'pytorch_model.bin', { fetch: nodeFetch }))).toMatch(
      /Only config\.json, model\.safetensors, model\.safetensors\.index\.json, tokenizer\.json, tokenizer_config\.json, generation_config\.json and chat_template\.jinja \(and a sharded model's model-0000K-of-0000N\.safetensors\) are read from the Hub, not pytorch_model\.bin/,
    );
  });
});

describe('Hub download against a local Hub-shaped server', () => {
  it('a Qwen2 repo loads with its tokenizer files: chat template and stop ids; the missing chat_template.jinja is a 404', async () => {
    const asked: string[] = [];
    const fetchLogged: HubFetch = (u) => (asked.push(u.slice(base.length)), nodeFetch(u));
    const lm = await loadLM(hubFiles('org/qwen', { fetch: fetchLogged, hubBase: base }), {
      trainable: false,
    });
    try {
      expect(lm.config.model_type).toBe('qwen2');
      expect(lm.tokenizer.kind).toBe('hf');
      expect(lm.tokenizer.chatPrompt?.('hi')).toBe(
        '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
      );
      expect(lm.tokenizer.stopIds).toEqual([511, 509]);
      expect(asked.map((u) => u.replace('/org/qwen/resolve/main/', '')).sort()).toEqual(
        [
          'chat_template.jinja',
          'config.json',
          'generation_config.json',
          'model.safetensors',
          'tokenizer.json',
          'tokenizer_config.json',
        ].sort(),
      );
    } finally {
      lm.model.dispose();
    }
  });

  it('a cached Qwen2 repo loads again with no network, its missing chat_template.jinja included', async () => {
    const cache = mapCache();
    const asked: string[] = [];
    const fetchLogged: HubFetch = (u) => (asked.push(u), nodeFetch(u));
    const first = await loadLM(hubFiles('org/qwen', { fetch: fetchLogged, cache, hubBase: base }), {
      trainable: false,
    });
    first.model.dispose();
    expect(asked.length).toBe(6);
    const offline: HubFetch = () => Promise.reject(new Error('offline'));
    const again = await loadLM(hubFiles('org/qwen', { fetch: offline, cache, hubBase: base }), {
      trainable: false,
    });
    expect(again.tokenizer.chatPrompt?.('hi')).toContain('<|im_start|>assistant\n');
    again.model.dispose();
  });

  it('streams with progress, caches, and a second load needs no network', async () => {
    const cache = mapCache();
    const progress: HubProgress[] = [];
    const opts = { fetch: nodeFetch, cache, hubBase: base, onProgress: (p: HubProgress) => progress.push(p) };
    const lm = await loadLM(hubFiles('org/tiny', opts), { trainable: false });
    expect(lm.config.n_embd).toBe(24);
    lm.model.dispose();
    const modelHits = () => hits.get('/org/tiny/resolve/main/model.safetensors') ?? 0;
    expect(modelHits()).toBe(1);
    const weights = progress.filter((p) => p.file === 'model.safetensors');
    expect(weights[0]).toMatchObject({ loaded: 0, fraction: 0, total: files['model.safetensors'].length });
    expect(weights.some((p) => p.fraction !== null && p.fraction > 0 && p.fraction < 1)).toBe(true);
    expect(weights.at(-1)).toMatchObject({ fraction: 1, done: true, fromCache: false });
    expect([...cache.map.keys()].sort()).toEqual([
      `${base}/org/tiny/resolve/main/config.json`,
      `${base}/org/tiny/resolve/main/model.safetensors`,
    ]);

    progress.length = 0;
    const again = await loadLM(
      hubFiles('org/tiny', {
        ...opts,
        fetch: async () => {
          throw new Error('offline');
        },
      }),
      { trainable: false },
    );
    again.model.dispose();
    expect(modelHits()).toBe(1);
    // Both files reported their progress from the cache, and every report is a whole file from the cache.
    expect(new Set(progress.map((p) => p.file))).toEqual(new Set(['config.json', 'model.safetensors']));
    expect(progress.every((p) => p.fromCache && p.fraction === 1)).toBe(true);
  });

  it('a sharded repo streams its shards into the cache and loads them by ranges; the second load asks nothing', async () => {
    const cache = streamingCache();
    const asked: string[] = [];
    const progress: HubProgress[] = [];
    const opts = {
      fetch: ((u: string) => (asked.push(u.slice(base.length)), nodeFetch(u))) as HubFetch,
      hubBase: base,
      cache,
      onProgress: (p: HubProgress) => progress.push(p),
    };
    const { model } = await loadLM(hubFiles('org/sharded', opts), { trainable: false });
    const { model: whole } = await loadLM(
      memoryFiles('qwen', new Map(Object.entries(qwenFiles).map(([n, b]) => [n, new Uint8Array(b)]))),
      { trainable: false },
    );
    try {
      expect(await model.toArrays()).toEqual(await whole.toArrays());
    } finally {
      model.dispose();
      whole.dispose();
    }
    const shards = Object.keys(shardedFiles).filter((n) => /^model-.*\.safetensors$/.test(n));
    expect(shards).toHaveLength(2);
    // model.safetensors is a 404 (remembered), then the index and both shards; the shards never as bytes.
    expect(asked.filter((a) => a.includes('safetensors'))).toEqual([
      '/org/sharded/resolve/main/model.safetensors',
      '/org/sharded/resolve/main/model.safetensors.index.json',
      ...shards.map((n) => `/org/sharded/resolve/main/${n}`),
    ]);
    expect([...cache.blobs.keys()].map((k) => k.slice(base.length))).toEqual(
      shards.map((n) => `/org/sharded/resolve/main/${n}`),
    );
    expect(cache.map.has(`${base}/org/sharded/resolve/main/${shards[0]}`)).toBe(false);
    expect(cache.chunks).toBeGreaterThanOrEqual(4); // two writes a shard from the server
    // Progress in between for a shard, and the reads no bigger than a shard's largest tensor.
    expect(progress.some((p) => p.file === shards[0] && p.fraction! > 0 && p.fraction! < 1)).toBe(true);
    expect(Math.max(...cache.ranges)).toBeLessThan(Math.min(...shards.map((n) => shardedFiles[n].length)));

    asked.length = 0;
    const { model: again } = await loadLM(
      hubFiles('org/sharded', { ...opts, fetch: async () => Promise.reject(new Error('offline')) }),
      { trainable: false },
    );
    again.dispose();
    expect(asked).toEqual([]);
  });

  it('a cache that cannot take the weights (full): downloaded again whole, as without one', async () => {
    const cache = streamingCache();
    cache.putChunks = async () => {
      throw new Error('QuotaExceededError');
    };
    const before = hits.get('/org/qwen/resolve/main/model.safetensors') ?? 0;
    const { model } = await loadLM(hubFiles('org/qwen', { fetch: nodeFetch, hubBase: base, cache }), {
      trainable: false,
    });
    model.dispose();
    expect(hits.get('/org/qwen/resolve/main/model.safetensors')! - before).toBe(2);
    expect(cache.map.has(`${base}/org/qwen/resolve/main/model.safetensors`)).toBe(true);
  });

  it('a weights download cut short is a clear error and stores nothing', async () => {
    const cache = streamingCache();
    const msg = await userError(
      loadLM(hubFiles('org/cut', { fetch: nodeFetch, hubBase: base, cache }), { trainable: false }),
    );
    expect(msg).toMatch(
      /^org\/cut\/model\.safetensors: the download (broke off at [\d.]+ MB \(.*\)|stopped at [\d.]+ MB of [\d.]+ MB); try again\.$/,
    );
    expect(cache.blobs.size).toBe(0);
  });

  it('reads a body without Content-Length (progress unknown)', async () => {
    const progress: HubProgress[] = [];
    const bytes = await downloadHubFile('org/chunked', 'model.safetensors', {
      fetch: nodeFetch,
      hubBase: base,
      onProgress: (p) => progress.push(p),
    });
    expect(Buffer.from(bytes!).equals(files['model.safetensors'])).toBe(true);
    expect(progress[0].fraction).toBeNull();
    expect(progress.at(-1)!.fraction).toBe(1);
  });

  it('refuses a file over the limit before reading it, with a clear message', async () => {
    const started = Date.now();
    const msg = await userError(
      downloadHubFile('org/huge', 'model.safetensors', { fetch: nodeFetch, hubBase: base }),
    );
    expect(msg).toBe(
      'org/huge/model.safetensors is 3.0 GB, over the 2.0 GB limit for one file in the browser; choose a smaller model.',
    );
    expect(Date.now() - started).toBeLessThan(5000);
    // A server that lies about (or omits) the length is stopped once it passes the limit.
    const streamed = await userError(
      downloadHubFile('org/chunked', 'model.safetensors', {
        fetch: nodeFetch,
        hubBase: base,
        maxFileBytes: 2000,
      }),
    );
    expect(streamed).toMatch(/^org\/chunked\/model\.safetensors is .* GB, over the .* GB limit/);
  });

  it('missing files, gated repos and a dead server are clear errors', async () => {
    expect(await downloadHubFile('org/none', 'config.json', { fetch: nodeFetch, hubBase: base })).toBeNull();
    expect(await userError(readConfig(hubFiles('org/none', { fetch: nodeFetch, hubBase: base })))).toMatch(
      /^org\/none: config\.json is missing/,
    );
    expect(
      await userError(downloadHubFile('org/gated', 'config.json', { fetch: nodeFetch, hubBase: base })),
    ).toMatch(/private or gated .*\(401\)/);
    expect(
      await userError(
        downloadHubFile('org/tiny', 'config.json', { fetch: nodeFetch, hubBase: 'http://127.0.0.1:1' }),
      ),
    ).toMatch(/could not be downloaded .*check the connection/);
  });
});

describe('memory estimate', () => {
  it('counts GPT-2 small at 124.4 M parameters and refuses over budget', async () => {
    const gpt2 = {
      model_type: 'gpt2',
      vocab_size: 50257,
      n_positions: 1024,
      n_embd: 768,
      n_layer: 12,
      n_head: 12,
    } as const;
    const cfg = {
      ...gpt2,
      layer_norm_epsilon: 1e-5,
      activation_function: 'gelu_new',
      bos_token_id: 50256,
      eos_token_id: 50256,
      tokenizer: 'gpt2-bpe',
    } as const;
    expect(paramCount(cfg)).toBe(124_439_808);
    // Policy P, reference P, value model S = P + 768 (its score head), Adam 2·(P + S), gradients P + S.
    const P = 124_439_808;
    const S = P + 768;
    expect(checkTrainingMemory(cfg, 'openai-community/gpt2', 8 * 1024 ** 3).bytes).toBe((5 * P + 4 * S) * 4);
    expect(() => checkTrainingMemory(cfg, 'openai-community/gpt2', 2 * 1024 ** 3)).toThrow(
      /^openai-community\/gpt2 has 124\.4 M parameters; training it needs ≈ 4\.5 GB of weights, gradients and optimiser state \(policy 0\.50, reference 0\.50, value 0\.50, Adam 1\.99, gradients 1\.00 GB\), over the 2\.1 GB budget here\. Choose a smaller model/,
    );
  });
});
