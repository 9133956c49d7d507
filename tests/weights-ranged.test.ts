/**
 * Weights read a tensor at a time, and sharded folders (docs/models.md, "Reading a weights file"): a model's
 * safetensors file is read by byte ranges where the source can (a folder on disk, picked Files), so loading holds
 * one tensor's bytes beside the decoded weights, never the whole file (Qwen2.5-1.5B's is 3.1 GB; a browser cannot
 * read one over 2 GB at once); a folder in Hugging Face's sharded layout (model.safetensors.index.json and the
 * shards it names, as Qwen3-1.7B ships) loads to the same weights as the single file.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import {
  bytesFile,
  readSafetensors,
  readSafetensorsRanged,
  type RangedFile,
} from '../src/core/model/safetensors';
import { loadLM, memoryFiles, readWeights, type ModelFiles } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { shardSafetensors } from '../scripts/shard-safetensors';
import { refusal } from './helpers/qwen3-config-only';

const FIXTURE = path.resolve(import.meta.dirname, 'fixtures/parity-llama/qwen3-tiny');

/** A RangedFile over bytes that records every read and whether it was closed. */
function recording(bytes: Uint8Array): RangedFile & { reads: [number, number][]; closed: boolean } {
  const f = {
    size: bytes.length,
    reads: [] as [number, number][],
    closed: false,
    read: async (start: number, end: number) => {
      f.reads.push([start, end]);
      return bytes.slice(start, end); // a fresh copy, as a file on disk or a Blob gives
    },
    close: async () => {
      f.closed = true;
    },
  };
  return f;
}

/** A folder in memory whose weights can only be read by ranges (`read` of a .safetensors file fails the test). */
function rangedOnly(label: string, files: Map<string, Uint8Array>, log: string[] = []): ModelFiles {
  return {
    label,
    has: async (n) => files.has(n),
    read: async (n) => {
      if (n.endsWith('.safetensors')) throw new Error(`${n} read whole`);
      return files.get(n) ?? null;
    },
    open: async (n) => {
      const b = files.get(n);
      if (!b) return null;
      log.push(n);
      return recording(b);
    },
  };
}

let folder: Map<string, Uint8Array>;
let weights: Uint8Array;

beforeAll(async () => {
  await tf.setBackend('cpu');
  folder = new Map();
  for (const n of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']) {
    try {
      folder.set(n, new Uint8Array(readFileSync(path.join(FIXTURE, n))));
    } catch {
      // optional tokenizer files
    }
  }
  weights = folder.get('model.safetensors')!;
});

describe('readSafetensorsRanged', () => {
  it('gives readSafetensors’s tensors, reading the header and then each tensor by itself', async () => {
    const f = recording(weights);
    const ranged = await readSafetensorsRanged(f, 'w.safetensors');
    const whole = readSafetensors(weights, 'w.safetensors');
    expect([...ranged.tensors.keys()]).toEqual([...whole.tensors.keys()]);
    for (const [n, t] of whole.tensors) {
      expect(ranged.tensors.get(n)!.shape).toEqual(t.shape);
      expect(ranged.tensors.get(n)!.data).toEqual(t.data);
    }
    expect(ranged.metadata).toEqual(whole.metadata);
    // The length field, the header, then one read per tensor, none bigger than the largest tensor.
    const headerLen = new DataView(weights.buffer, weights.byteOffset).getUint32(0, true);
    expect(f.reads.slice(0, 2)).toEqual([
      [0, 8],
      [8, 8 + headerLen],
    ]);
    expect(f.reads.length).toBe(2 + whole.tensors.size);
    const largest = Math.max(
      ...[...whole.tensors.values()].map((t) => t.data.length * (t.dtype === 'F32' ? 4 : 2)),
    );
    expect(Math.max(...f.reads.slice(2).map(([s, e]) => e - s))).toBe(largest);
    expect(f.closed).toBe(true);
  });

  it('reads only the tensors `want` names; `half` packs as readSafetensors does', async () => {
    const whole = readSafetensors(weights, 'w', { half: (n) => n.includes('mlp') });
    const f = recording(weights);
    const some = await readSafetensorsRanged(f, 'w', {
      half: (n) => n.includes('mlp'),
      want: (n) => n.includes('layers.0.'),
    });
    const wanted = [...whole.tensors.keys()].filter((n) => n.includes('layers.0.'));
    expect(wanted.length).toBeGreaterThan(3);
    expect([...some.tensors.keys()]).toEqual(wanted);
    for (const n of wanted) expect(some.tensors.get(n)!.data).toEqual(whole.tensors.get(n)!.data);
    expect(f.reads.length).toBe(2 + wanted.length);
  });

  it('a bad file gets readSafetensors’s message, and is closed', async () => {
    const cut = weights.slice(0, weights.length - 10);
    const f = recording(cut);
    const ranged = await refusal(() => readSafetensorsRanged(f, 'cut.safetensors'));
    expect(ranged).toMatch(/^cut\.safetensors: tensor ".*": "data_offsets" .* go past the end/);
    expect(() => readSafetensors(cut, 'cut.safetensors')).toThrow(ranged);
    expect(f.closed).toBe(true);
    expect(await refusal(() => readSafetensorsRanged(bytesFile(new Uint8Array(5)), 'tiny'))).toBe(
      'tiny: not a safetensors file: it is 5 bytes long, shorter than the 8-byte header length that starts every ' +
        'safetensors file.',
    );
    // A source that hands back fewer bytes than asked (a file changed while read) is named.
    const short: RangedFile = {
      size: weights.length,
      read: async (s, e) => weights.slice(s, Math.min(e, 100)),
    };
    expect(await refusal(() => readSafetensorsRanged(short, 'short'))).toMatch(
      /^short: reading bytes \[8, \d+\) gave 92 bytes; the file changed or is cut short\.$/,
    );
  });
});

describe('a model folder read by ranges, whole or sharded', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'ppo-ranged-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const arraysOf = async (files: ModelFiles) => {
    const { model } = await loadLM(files, { trainable: false });
    try {
      return await model.toArrays();
    } finally {
      model.dispose();
    }
  };

  it('the same weights from the file read whole, by ranges, and from 3 shards (memory and disk)', async () => {
    const expected = await arraysOf(memoryFiles('whole', folder));
    const log: string[] = [];
    expect(await arraysOf(rangedOnly('ranged', folder, log))).toEqual(expected);
    expect(log).toEqual(['model.safetensors']);

    const sharded = new Map(folder);
    sharded.delete('model.safetensors');
    const parts = shardSafetensors(weights, 3);
    for (const [n, b] of parts) sharded.set(n, b);
    expect([...parts.keys()]).toEqual([
      'model-00001-of-00003.safetensors',
      'model-00002-of-00003.safetensors',
      'model-00003-of-00003.safetensors',
      'model.safetensors.index.json',
    ]);
    const shardLog: string[] = [];
    expect(await arraysOf(rangedOnly('sharded', sharded, shardLog))).toEqual(expected);
    expect(shardLog).toEqual([...parts.keys()].slice(0, 3));
    // Read whole (a source without `open`: the Hub, a URL), the shards load the same.
    expect(await arraysOf(memoryFiles('sharded', sharded))).toEqual(expected);

    // On disk, through the CLI's files (their `open` reads ranges with one file handle a file; `read` of a weights
    // file fails the test).
    for (const [n, b] of sharded) writeFileSync(path.join(dir, n), b);
    const disk = nodeFiles(dir);
    const noWhole: ModelFiles = {
      ...disk,
      read: async (n) => {
        if (n.endsWith('.safetensors')) throw new Error(`${n} read whole`);
        return disk.read(n);
      },
    };
    expect(await arraysOf(noWhole)).toEqual(expected);
  });

  it('a shard missing, a tensor not where the index says, a bad index: each named', async () => {
    const sharded = new Map(folder);
    sharded.delete('model.safetensors');
    const parts = shardSafetensors(weights, 2);
    for (const [n, b] of parts) sharded.set(n, b);
    const index = JSON.parse(new TextDecoder().decode(parts.get('model.safetensors.index.json')!)) as {
      weight_map: Record<string, string>;
    };
    const inSecond = Object.keys(index.weight_map).filter(
      (n) => index.weight_map[n] === 'model-00002-of-00002.safetensors',
    );

    const noShard = new Map(sharded);
    noShard.delete('model-00002-of-00002.safetensors');
    expect(await refusal(() => readWeights(memoryFiles('q', noShard), 'model.safetensors', 'w'))).toBe(
      `q: model-00002-of-00002.safetensors is missing; model.safetensors.index.json places ${inSecond.length} ` +
        `tensors in it (e.g. "${inSecond[0]}"). Pick the whole folder, every shard with its index.`,
    );

    const moved = new Map(sharded);
    const wrong = {
      ...index,
      weight_map: { ...index.weight_map, [inSecond[0]]: 'model-00001-of-00002.safetensors' },
    };
    moved.set('model.safetensors.index.json', new TextEncoder().encode(JSON.stringify(wrong)));
    expect(await refusal(() => readWeights(memoryFiles('q', moved), 'model.safetensors', 'w'))).toBe(
      `q/model-00001-of-00002.safetensors has no tensor "${inSecond[0]}", which model.safetensors.index.json ` +
        'places there; the shards and their index do not belong together.',
    );

    const outside = new Map(sharded);
    outside.set(
      'model.safetensors.index.json',
      new TextEncoder().encode(JSON.stringify({ weight_map: { 'model.norm.weight': '../x.safetensors' } })),
    );
    expect(await refusal(() => readWeights(memoryFiles('q', outside), 'model.safetensors', 'w'))).toBe(
      'q/model.safetensors.index.json: tensor "model.norm.weight" is mapped to "../x.safetensors"; expected the ' +
        'name of a .safetensors file in the same folder, such as "model-00001-of-00002.safetensors".',
    );
    const noMap = new Map(sharded);
    noMap.set('model.safetensors.index.json', new TextEncoder().encode('{"metadata": {}}'));
    expect(await refusal(() => readWeights(memoryFiles('q', noMap), 'model.safetensors', 'w'))).toMatch(
      /^q\/model\.safetensors\.index\.json has no "weight_map" object; a sharded model's index maps each tensor/,
    );

    // Neither the file nor an index: the folder's message, which names the sharded layout too.
    const none = new Map(folder);
    none.delete('model.safetensors');
    expect(await refusal(() => loadLM(memoryFiles('q', none)))).toBe(
      'q: model.safetensors is missing; a model folder needs model.safetensors (the *ForCausalLM weights). Only ' +
        'safetensors weights are read (never pytorch_model.bin pickles, which can run code). (A sharded model has ' +
        'model.safetensors.index.json and the shards it names instead.)',
    );
  });
});

describe('scripts/weights-read-memory.ts', () => {
  it('reads a folder by ranges and whole, and says what it decoded', () => {
    for (const mode of ['ranged', 'whole']) {
      const r = spawnSync(
        process.execPath,
        ['--import', 'tsx', 'scripts/weights-read-memory.ts', FIXTURE, mode, '--half'],
        { encoding: 'utf8', timeout: 60_000 },
      );
      expect(r.status, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
      expect(out).toMatchObject({ mode, half: true, fileBytes: weights.length });
      expect(out.decodedBytes).toBeGreaterThan(0);
      expect(out.peakRss).toBeGreaterThan(out.baselineRss as number);
    }
  });
});

describe('the worker’s files: picked Files and Cache Storage read by ranges', () => {
  /** A Blob that refuses to be read whole (its slices read as any Blob's). */
  class NoWhole extends Blob {
    override async arrayBuffer(): Promise<ArrayBuffer> {
      throw new Error('read whole');
    }
  }
  const worker = async () => {
    (globalThis as { self?: unknown }).self ??= globalThis;
    (globalThis as { navigator?: unknown }).navigator ??= {};
    return import('../src/worker/sources');
  };

  it('held Files are read by slices; a File that can no longer be read is named', async () => {
    const { heldFiles, blobFile, ModelSources } = await worker();
    const files = new Map<string, Uint8Array | Blob>(folder);
    files.set('model.safetensors', new NoWhole([weights as BlobPart]));
    const { model } = await loadLM(heldFiles('picked', files), { trainable: false });
    const { model: whole } = await loadLM(memoryFiles('whole', folder), { trainable: false });
    try {
      expect(await model.toArrays()).toEqual(await whole.toArrays());
    } finally {
      model.dispose();
      whole.dispose();
    }
    const gone = { size: 100, name: 'model.safetensors', slice: () => new NoWhole([]) } as unknown as Blob;
    expect(await refusal(() => blobFile(gone).read(0, 8))).toBe(
      'model.safetensors could not be read (read whole); it may have changed or moved since it was picked. Pick ' +
        'the folder again.',
    );
    // What the load check is told: picked Files are read by ranges, bytes held in memory are not; a Hub model is
    // where the page has Cache Storage (Node has none).
    const sources = new ModelSources(() => {});
    sources.hold('files', files);
    sources.hold('bytes', new Map(folder));
    expect(sources.readsWeightsByRanges('files')).toBe(true);
    expect(sources.readsWeightsByRanges('bytes')).toBe(false);
    expect(sources.readsWeightsByRanges('Qwen/Qwen3-1.7B@main')).toBe(typeof caches !== 'undefined');
  });

  it('Cache Storage: chunks stored as they come, read back by ranges; a failed body stores nothing', async () => {
    const { cacheStorageChunks } = await worker();
    // A CacheStorage as the browser's behaves for these calls: put reads the Response's body to its end (a body
    // that errors rejects the put and stores nothing), match answers a Response of what was stored.
    const stored = new Map<string, Blob>();
    const store = {
      open: async () => ({
        put: async (k: string, r: Response) => void stored.set(k, await r.blob()),
        match: async (k: string) => (stored.has(k) ? new Response(stored.get(k)) : undefined),
      }),
    } as unknown as CacheStorage;
    const cache = cacheStorageChunks(store);
    async function* pieces(fail = false) {
      for (let at = 0; at < weights.length; at += 10_000) {
        if (fail && at > 20_000) throw new Error('network gone');
        yield weights.slice(at, at + 10_000);
      }
    }
    await cache.putChunks!('u', pieces(), weights.length);
    const f = (await cache.open!('u'))!;
    expect(f.size).toBe(weights.length);
    expect(await f.read(100, 5000)).toEqual(weights.slice(100, 5000));
    const read = await readSafetensorsRanged(f, 'u');
    expect([...read.tensors.keys()]).toEqual([...readSafetensors(weights, 'u').tensors.keys()]);
    await expect(cache.putChunks!('v', pieces(true), weights.length)).rejects.toThrow('network gone');
    expect(await cache.open!('v')).toBeNull();
  });
});
