import { describe, it, expect, beforeAll } from 'vitest';
import { zipSync, unzipSync, strToU8 } from 'fflate';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { validateConfig } from '../src/common/config';
import { buildTrainer, type Resources } from '../src/core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../src/core/run/checkpoint';
import { memoryFiles } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import {
  checkpointFolderName,
  checkpointZipName,
  metricColumns,
  metricsToCsv,
  metricsToJson,
  unzipFolder,
  zipFolder,
} from '../src/common/checkpoint-zip';
import { REQUIRED_METRICS } from '../src/common/metrics';
import { isUserError } from '../src/common/errors';

const bytes = (s: string) => new TextEncoder().encode(s);

function userErrorOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(isUserError(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('expected a UserError');
}

describe('checkpoint zip', () => {
  it('puts every file under one top folder and reads it back without it', () => {
    const files = new Map([
      ['config.json', bytes('{"a":1}')],
      ['model.safetensors', new Uint8Array([1, 2, 3, 4, 5])],
      ['trainer_state.json', bytes('{}')],
    ]);
    const zip = zipFolder(files, checkpointFolderName(12));
    expect(checkpointZipName(12)).toBe('ppo-playground-step-12.zip');
    const raw = unzipSync(zip);
    expect(Object.keys(raw).sort()).toEqual([
      'ppo-playground-step-12/config.json',
      'ppo-playground-step-12/model.safetensors',
      'ppo-playground-step-12/trainer_state.json',
    ]);
    const back = unzipFolder(zip, 'ckpt.zip');
    expect([...back.keys()].sort()).toEqual(['config.json', 'model.safetensors', 'trainer_state.json']);
    expect(back.get('model.safetensors')).toEqual(new Uint8Array([1, 2, 3, 4, 5]));
    // Same files, same bytes (fixed timestamps).
    expect(zipFolder(files, 'x')).toEqual(zipFolder(files, 'x'));
  });

  it('reads flat zips, skips folder entries and OS junk, keeps nested paths', () => {
    const flat = zipSync({
      'config.json': strToU8('{}'),
      'sub/a.txt': strToU8('a'),
      '__MACOSX/._config.json': strToU8('x'),
      '.DS_Store': strToU8('x'),
    });
    expect([...unzipFolder(flat, 'f.zip').keys()].sort()).toEqual(['config.json', 'sub/a.txt']);
    const nested = zipSync({
      'top/': new Uint8Array(0),
      'top/config.json': strToU8('{}'),
      'top/sub/a.txt': strToU8('a'),
    });
    expect([...unzipFolder(nested, 'n.zip').keys()].sort()).toEqual(['config.json', 'sub/a.txt']);
  });

  it('refuses what is not a zip, a broken zip and an oversized entry with a clear UserError', () => {
    expect(userErrorOf(() => unzipFolder(bytes('{"not":"a zip"}'), 'model.json'))).toBe(
      'model.json is not a zip file; choose a checkpoint .zip exported by PPO Playground.',
    );
    const zip = zipFolder(new Map([['a.json', bytes('x'.repeat(5000))]]), 'top');
    expect(userErrorOf(() => unzipFolder(zip.slice(0, 60), 'cut.zip'))).toMatch(
      /^cut\.zip is not a readable zip \(.+\); was the download cut short\?$/,
    );
    expect(userErrorOf(() => unzipFolder(zip, 'big.zip', 1000))).toMatch(
      /^big\.zip: top\/a\.json is .* GB unpacked, over the .* GB limit/,
    );
  });
});

describe('metrics export', () => {
  const history = [
    Object.fromEntries([
      ...REQUIRED_METRICS.map((k, i) => [k, i + 0.5]),
      ['learningRate', 1e-4],
      ['custom', 7],
    ]),
    Object.fromEntries([
      ...REQUIRED_METRICS.map((k) => [k, 1]),
      ['explainedVariance', NaN],
      ['learningRate', 2e-4],
    ]),
  ] as Record<string, number>[];

  it('CSV: header = metric names (contract first), one row per step', () => {
    const csv = metricsToCsv(history);
    const lines = csv.trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    const header = lines[0].split(',');
    expect(header.slice(0, REQUIRED_METRICS.length)).toEqual([...REQUIRED_METRICS]);
    expect(header.slice(REQUIRED_METRICS.length)).toEqual(['learningRate', 'custom']);
    expect(lines[1].split(',')[0]).toBe('0.5');
    const row2 = lines[2].split(',');
    expect(row2[header.indexOf('explainedVariance')]).toBe('NaN');
    expect(row2[header.indexOf('custom')]).toBe('');
    expect(metricColumns([])).toEqual([...REQUIRED_METRICS]);
    expect(metricsToCsv([])).toBe(`${REQUIRED_METRICS.join(',')}\n`);
  });

  it('JSON: an array of step objects, non-finite as null', () => {
    const parsed = JSON.parse(metricsToJson(history)) as Record<string, number | null>[];
    expect(parsed).toHaveLength(2);
    expect(parsed[0].custom).toBe(7);
    expect(parsed[1].explainedVariance).toBeNull();
  });
});

describe('checkpoint zip round trip through restoreTrainer', () => {
  let dir: string;
  beforeAll(async () => {
    await useCpu();
    dir = await makeTinyFolder();
  });

  it('a zipped checkpoint resumes at its step with its history', async () => {
    const res: Resources = {
      modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p),
      loadTask: loadTaskNode,
    };
    const cfg = validateConfig({
      model: 'tiny-test',
      task: 'sentiment',
      seed: 2,
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
    });
    const t = await buildTrainer(cfg, res);
    await t.trainStep();
    await t.trainStep();
    const zip = zipFolder(await checkpointFiles(t), checkpointFolderName(t.step));
    const files = unzipFolder(zip, 'ckpt.zip');
    for (const f of [
      'config.json',
      'model.safetensors',
      'value_model.safetensors',
      'ref_model.safetensors',
      'optimizer.safetensors',
      'trainer_state.json',
    ]) {
      expect(files.has(f), f).toBe(true);
    }
    const r = await restoreTrainer(memoryFiles('ckpt.zip', files), res);
    expect(r.step).toBe(2);
    expect(r.history).toEqual(t.history);
    const a = await t.trainStep();
    const b = await r.trainStep();
    expect(b.metrics.step).toBe(3);
    expect(b.rollout.responses).toEqual(a.rollout.responses);
    for (const tr of [t, r]) {
      tr.disposeOptimizers();
      tr.models.policy.dispose();
      tr.models.ref.dispose();
      tr.models.value?.dispose();
    }
  });
});
