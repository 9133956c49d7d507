/** The UI's autosave helpers (src/ui/lib/autosave.ts): the words, and a resume folded into the store. */
import { describe, expect, it } from 'vitest';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';
import {
  ago,
  describeAutosave,
  resumeAutosaveIntoStore,
  type ReliabilityWorker,
} from '../src/ui/lib/autosave';
import { validateConfig } from '../src/common/config';
import type { AutosaveInfoWire, RunStatus } from '../src/worker/protocol';

const NOW = Date.UTC(2025, 0, 1, 12);

describe('autosave in the UI', () => {
  it('describes an autosave in one line', () => {
    const info: AutosaveInfoWire = {
      step: 12,
      savedAt: NOW - 5 * 60_000,
      config: validateConfig({ steps: 100 }) as unknown as Record<string, unknown>,
      label: 'built-in tiny',
      historyLength: 12,
      bytes: 36.4 * 1024 ** 2,
      current: false,
    };
    expect(describeAutosave(info, NOW)).toBe(
      'step 12 of 100 · built-in tiny · task sentiment · saved 5 minutes ago · 36.4 MB',
    );
    expect(ago(NOW - 10_000, NOW)).toBe('just now');
    expect(ago(NOW - 3 * 3600_000, NOW)).toBe('3 hours ago');
  });

  it('a resumed run shows its step, config and metric history; the link follows its config', async () => {
    const fake = createFakeWorker();
    const hashes: string[] = [];
    const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
      hash: '',
      writeHash: (h) => hashes.push(h),
      sendDelayMs: 0,
    });
    const config = validateConfig({ steps: 40, klCoef: 0.2 });
    const status: RunStatus = { state: 'paused', phase: 'idle', step: 2, steps: 40, config: { ...config } };
    const api = {
      resumeAutosave: async () => status,
      history: async () => [
        { step: 1, reward: 0.1 },
        { step: 2, reward: 0.2 },
      ],
    } as unknown as ReliabilityWorker;
    store.setState({ metrics: [{ step: 7, reward: 9 }], error: 'old' });
    await resumeAutosaveIntoStore(api, store);
    const s = store.getState();
    expect(s.runStatus).toMatchObject({ state: 'paused', step: 2 });
    expect(s.metrics.map((m) => m.step)).toEqual([1, 2]);
    expect(s.editedConfig.klCoef).toBe(0.2);
    expect(s.configProblem).toBeNull();
    expect(s.error).toBeNull();
    expect(hashes).toEqual(['steps=40&klCoef=0.2']);
  });
});

describe('picked files are refused before they are read whole', () => {
  /** A File-like object whose bytes are never produced when it is too big. */
  const fakeFile = (name: string, size: number) =>
    ({
      name,
      webkitRelativePath: `my-model/${name}`,
      size,
      arrayBuffer: async () => {
        if (size > 1024) throw new Error('read whole!');
        return new Uint8Array(size).buffer;
      },
    }) as unknown as File;

  it('a 5 GB tokenizer.json or zip is a UserError; weights go unread; a pickle is named, not read', async () => {
    const { readModelPick, readZipPick } = await import('../src/ui/lib/pick');
    const err = await readModelPick([
      fakeFile('config.json', 10),
      fakeFile('tokenizer.json', 5 * 1024 ** 3),
    ]).catch((e: Error) => e);
    expect(err).toMatchObject({
      name: 'UserError',
      message: expect.stringMatching(/^my-model\/tokenizer\.json is 5\.0 GB/),
    });
    // Weights over 2 GB (Qwen2.5-1.5B's 3.1 GB file, a sharded model's shards) go as the Files themselves: the
    // worker reads them a tensor at a time (fakeFile throws if read whole).
    const big = fakeFile('model.safetensors', 5 * 1024 ** 3);
    const shard = fakeFile('model-00001-of-00002.safetensors', 4 * 1024 ** 3);
    const weights = await readModelPick([fakeFile('config.json', 10), big, shard]);
    expect(weights).toEqual([
      { name: 'my-model/config.json', bytes: new Uint8Array(10) },
      { name: 'my-model/model.safetensors', blob: big },
      { name: 'my-model/model-00001-of-00002.safetensors', blob: shard },
    ]);
    const picked = await readModelPick([
      fakeFile('config.json', 10),
      fakeFile('pytorch_model.bin', 3 * 1024 ** 3),
    ]);
    expect(picked.map((p) => [p.name, p.bytes?.length])).toEqual([
      ['my-model/config.json', 10],
      ['my-model/pytorch_model.bin', 0],
    ]);
    const zipErr = await readZipPick(fakeFile('run.zip', 5 * 1024 ** 3)).catch((e: Error) => e);
    expect(zipErr).toMatchObject({
      name: 'UserError',
      message: expect.stringMatching(/^run\.zip is 5\.0 GB/),
    });
  });
});
