/**
 * Dawn's instance options from the environment (src/cli/backend-webgpu-node.ts dawnCreateOptions): the toggles a
 * GPU timing run passes to every device of the process (docs/gpu.md, "Dawn toggles"), and a clear error for a
 * malformed list.
 */
import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnAsync } from './helpers/spawn';
import {
  adapterLabel,
  applyFastTiles,
  applyHeadRows,
  applyVecRows,
  dawnCreateOptions,
  fileTuneStore,
  tuneSetting,
  tuneStorePath,
} from '../src/cli/backend-webgpu-node';
import {
  setWebGpuHeadRows,
  setWebGpuLinearFastTiles,
  setWebGpuLinearVecRows,
  webGpuHeadRows,
  webGpuLinearFastTiles,
  webGpuLinearVecRows,
} from '../src/core/kernels/webgpu-linear';
import { isUserError } from '../src/common/errors';

describe('Dawn toggles from the environment', () => {
  it('none by default; PPO_DAWN_TOGGLES turns toggles on, PPO_DAWN_DISABLE off', () => {
    expect(dawnCreateOptions({})).toEqual([]);
    expect(dawnCreateOptions({ PPO_DAWN_TOGGLES: '  ' })).toEqual([]);
    expect(dawnCreateOptions({ PPO_DAWN_TOGGLES: 'disable_robustness,disable_workgroup_init' })).toEqual([
      'enable-dawn-features=disable_robustness,disable_workgroup_init',
    ]);
    expect(
      dawnCreateOptions({
        PPO_DAWN_TOGGLES: 'disable_robustness',
        PPO_DAWN_DISABLE: 'timestamp_quantization',
      }),
    ).toEqual(['enable-dawn-features=disable_robustness', 'disable-dawn-features=timestamp_quantization']);
  });

  it('a malformed list is refused in words, naming the variable and the form it takes', () => {
    for (const bad of ['disable robustness', 'a,,b', 'Disable_Robustness', 'a;b']) {
      let err: unknown = null;
      try {
        dawnCreateOptions({ PPO_DAWN_DISABLE: bad });
      } catch (e) {
        err = e;
      }
      expect(isUserError(err), bad).toBe(true);
      expect((err as Error).message).toBe(
        `PPO_DAWN_DISABLE must be Dawn toggle names separated by commas (such as "disable_robustness,disable_workgroup_init"), got "${bad}".`,
      );
    }
  });
});

describe("the adapter's record names the Dawn toggles it runs under", () => {
  const adapter = { vendor: 'nvidia', architecture: 'hopper', device: '', description: '', software: false };
  it('in the label, after the storage buffers; nothing for the defaults', () => {
    const base = { ...adapter, vulkan: 'system' as const, maxStorageBufferBindingSize: 1, maxBufferSize: 1 };
    expect(adapterLabel({ ...base, storageBuffersPerProgram: 10, dawnOptions: [] })).toBe(
      'nvidia / hopper (Vulkan: system, 10 storage buffers a program)',
    );
    expect(
      adapterLabel({
        ...base,
        storageBuffersPerProgram: 10,
        dawnOptions: ['enable-dawn-features=disable_resource_suballocation'],
      }),
    ).toBe(
      'nvidia / hopper (Vulkan: system, 10 storage buffers a program, Dawn enable-dawn-features=disable_resource_suballocation)',
    );
  });

  it('a process started with PPO_DAWN_TOGGLES keeps them on its adapter (a child process, as the lease runs it)', async () => {
    const code = `import('./src/cli/backend-webgpu-node.ts').then(async (m) => {
      try { const a = await m.initNodeWebGpu(); console.log(JSON.stringify({ options: a.dawnOptions, label: m.adapterLabel(a) })); }
      catch (e) { console.log(JSON.stringify({ error: e.message })); }
      process.exit(0);
    });`;
    const run = async (env: Record<string, string>) => {
      const r = await spawnAsync(process.execPath, ['--import', 'tsx', '-e', code], {
        env: { ...process.env, PPO_DAWN_TOGGLES: '', PPO_DAWN_DISABLE: '', ...env },
        timeout: 60_000,
      });
      const line = r.stdout.trim().split('\n').pop() ?? '';
      return JSON.parse(line || '{}') as { options?: string[]; label?: string; error?: string };
    };
    const toggled = await run({ PPO_DAWN_TOGGLES: 'disable_resource_suballocation' });
    if (toggled.error) return expect(toggled.error).toMatch(/WebGPU|Vulkan|adapter/); // no adapter here: said so
    expect(toggled.options).toEqual(['enable-dawn-features=disable_resource_suballocation']);
    expect(toggled.label).toContain(', Dawn enable-dawn-features=disable_resource_suballocation)');
    const plain = await run({});
    expect(plain.options).toEqual([]);
    expect(plain.label).not.toContain('Dawn');
  }, 120_000);
});

describe("PPO_WEBGPU_VEC_ROWS: the few-rows program's vector loads for a timing run", () => {
  it('unset or blank leaves the default; 1 turns them on, 0 off; anything else is refused in words', () => {
    try {
      expect(applyVecRows(undefined)).toBeNull();
      expect(applyVecRows(' ')).toBeNull();
      expect(webGpuLinearVecRows()).toBeNull();
      expect(applyVecRows('1')).toBe(true);
      expect(webGpuLinearVecRows()).toBe(true);
      expect(applyVecRows('0')).toBe(false);
      expect(webGpuLinearVecRows()).toBe(false);
      expect(() => applyVecRows('yes')).toThrow(
        'PPO_WEBGPU_VEC_ROWS must be 1 (vector loads on) or 0 (off), got "yes".',
      );
      expect(webGpuLinearVecRows()).toBe(false);
    } finally {
      setWebGpuLinearVecRows(null);
    }
  });
});

describe('PPO_WEBGPU_HEAD_ROWS: the f32 LM head at decode for a timing run', () => {
  it('unset or blank leaves the default; 1 the few-rows program, 0 tfjs’s matMul; anything else is refused in words', () => {
    try {
      expect(applyHeadRows(undefined)).toBeNull();
      expect(applyHeadRows('')).toBeNull();
      expect(webGpuHeadRows()).toBeNull();
      expect(applyHeadRows('1')).toBe(true);
      expect(webGpuHeadRows()).toBe(true);
      expect(applyHeadRows('0')).toBe(false);
      expect(webGpuHeadRows()).toBe(false);
      let thrown: unknown = null;
      try {
        applyHeadRows('on');
      } catch (e) {
        thrown = e;
      }
      expect(isUserError(thrown)).toBe(true);
      expect((thrown as Error).message).toBe(
        'PPO_WEBGPU_HEAD_ROWS must be 1 (the f32 LM head at decode through the few-rows program) or 0 (tfjs\'s matMul), got "on".',
      );
      expect(webGpuHeadRows()).toBe(false);
    } finally {
      setWebGpuHeadRows(null);
    }
  });
});

describe("PPO_WEBGPU_LINEAR_TILES: the fused linear's tiles for a timing run", () => {
  it('unset or blank leaves the default; fast turns the tile kernel on, classic off; anything else is refused in words', () => {
    try {
      expect(applyFastTiles(undefined)).toBeNull();
      expect(applyFastTiles(' ')).toBeNull();
      expect(webGpuLinearFastTiles()).toBeNull();
      expect(applyFastTiles('fast')).toBe(true);
      expect(webGpuLinearFastTiles()).toBe(true);
      expect(applyFastTiles('classic')).toBe(false);
      expect(webGpuLinearFastTiles()).toBe(false);
      let err: unknown = null;
      try {
        applyFastTiles('1');
      } catch (e) {
        err = e;
      }
      expect(isUserError(err)).toBe(true);
      expect((err as Error).message).toBe(
        'PPO_WEBGPU_LINEAR_TILES must be "fast" (the tile kernel\'s 128 × 128 tiles) or "classic" (64 × 64), got "1".',
      );
      expect(webGpuLinearFastTiles()).toBe(false);
    } finally {
      setWebGpuLinearFastTiles(null);
    }
  });
});

describe("PPO_WEBGPU_TUNE: timing the fused linear's kernels when the backend starts", () => {
  it('unset: the default (hardware adapters only); 0 skips; 1 times everywhere; anything else is refused in words', () => {
    expect(tuneSetting(undefined)).toBeNull();
    expect(tuneSetting('')).toBeNull();
    expect(tuneSetting('0')).toBe(false);
    expect(tuneSetting(' 1 ')).toBe(true);
    let err: unknown = null;
    try {
      tuneSetting('yes');
    } catch (e) {
      err = e;
    }
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toBe(
      'PPO_WEBGPU_TUNE must be 0 (do not time the kernels) or 1 (time them again, even on a software adapter), got "yes".',
    );
  });
});

describe("the kernels' timings kept by adapter in a file", () => {
  it("lives under PPO_CACHE_DIR, else XDG_CACHE_HOME, else ~/.cache; keeps each adapter's entry; a bad file reads as empty", async () => {
    expect(tuneStorePath({ PPO_CACHE_DIR: '/c' })).toBe('/c/webgpu-kernels.json');
    expect(tuneStorePath({ XDG_CACHE_HOME: '/x' })).toBe('/x/ppo-playground/webgpu-kernels.json');
    expect(tuneStorePath({})).toBe(
      path.join(os.homedir(), '.cache', 'ppo-playground', 'webgpu-kernels.json'),
    );
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tune-store-'));
    try {
      const file = path.join(dir, 'sub', 'webgpu-kernels.json');
      const store = fileTuneStore(file);
      expect(await store.get('a')).toBeNull();
      const entry = {
        at: '2026-12-01T06:00:00.000Z',
        vecRows: { on: true, how: 'timed' as const, why: 'w', offMs: 2, onMs: 1, relDiff: 0 },
      };
      await store.set('a', entry);
      await store.set('b', { ...entry, at: '2026-12-02T00:00:00.000Z' });
      expect(await store.get('a')).toEqual(entry);
      expect((await fileTuneStore(file).get('b'))?.at).toBe('2026-12-02T00:00:00.000Z');
      fs.writeFileSync(file, 'not json');
      expect(await store.get('a')).toBeNull();
      await store.set('c', entry);
      expect(Object.keys(JSON.parse(fs.readFileSync(file, 'utf8')))).toEqual(['c']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
