/**
 * Restoring a run is written once (src/core/run/restore.ts restoreSession): the same checkpoint restored from a
 * folder on disk (the CLI's `--resume`), from its zip (the app's import) and from an autosave (the
 * src/services/autosave.ts format, on an in-memory store) gives the same run: the same weights, Adam moments, RNG
 * and KL state (the restored sessions write back byte-identical checkpoint files), and the same next step. A bad
 * checkpoint is refused with nothing left loaded.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles, writeFolder } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { validateConfig } from '../src/common/config';
import { TrainingSession } from '../src/core/run/session';
import { restoreSession, type CheckpointSource } from '../src/core/run/restore';
import { checkpointFolderName, zipFolder } from '../src/common/checkpoint-zip';
import { AutosaveSlot, memoryAutosaveStore } from '../src/services/autosave';
import type { Resources } from '../src/core/ppo/setup';
import type { StepMetrics } from '../src/common/metrics';

/** The metrics of a step without its timings (wall-clock, so never equal twice). */
function withoutTimes(m: StepMetrics): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(m).filter(([k]) => !k.startsWith('time') && k !== 'tokensPerSecond'),
  );
}

const STATE_FILES = [
  'model.safetensors',
  'ref_model.safetensors',
  'value_model.safetensors',
  'optimizer.safetensors',
  'trainer_state.json',
];

describe('one restore for a folder, its zip and an autosave (CPU, tiny model)', () => {
  let res: Resources;
  let files: Map<string, Uint8Array>;
  let folder: string;
  let expected: Record<string, unknown>;

  beforeAll(async () => {
    await useCpu();
    const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
    res = { modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p), loadTask: loadTaskNode };
    const cfg = validateConfig({
      model: 'tiny-test',
      task: 'sentiment',
      // Scores that differ from sample to sample, so the losses, advantages and updates are not all zero.
      reward: { mix: [{ name: 'length', weight: 1 }] },
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 2,
      responseLength: 4,
      steps: 10,
      adaptiveKl: true,
    });
    const s = await TrainingSession.build(cfg, res);
    try {
      await s.runStep();
      await s.runStep(); // Adam's moments, the RNG, the prompt order and the KL controller have all moved
      files = await s.checkpointFiles();
      expected = withoutTimes((await s.runStep()).result.metrics); // the step the saved run takes next
      expect(expected.policyLoss).not.toBe(0);
    } finally {
      s.dispose();
    }
    folder = path.join(await mkdtemp(path.join(os.tmpdir(), 'ppo-restore-')), 'checkpoint-2');
    await writeFolder(folder, files);
  }, 120_000);

  async function sources(): Promise<Record<string, CheckpointSource>> {
    const slot = new AutosaveSlot(memoryAutosaveStore());
    const saved = await slot.save(
      { step: 2, config: {}, label: 'tiny', runId: 'run-a', historyLength: 2 },
      async () => files,
    );
    expect(saved.ok).toBe(true);
    const autosave = await slot.load();
    expect(autosave!.info.step).toBe(2);
    return {
      folder: { kind: 'folder', files: nodeFiles(folder) },
      zip: { kind: 'zip', bytes: zipFolder(files, checkpointFolderName(2)), label: 'checkpoint' },
      autosave: { kind: 'files', files: autosave!.files, label: 'autosave (step 2)' },
    };
  }

  it('gives identical weights, Adam state, RNG and KL state, and the same next step', async () => {
    const before = tf.memory().numTensors;
    const rngs: number[][] = [];
    for (const [name, source] of Object.entries(await sources())) {
      const s = await restoreSession(source, res);
      try {
        expect({ name, step: s.step, history: s.history.length }).toEqual({ name, step: 2, history: 2 });
        const again = await s.checkpointFiles();
        for (const f of STATE_FILES) {
          expect({ name, f, same: Buffer.compare(again.get(f)!, files.get(f)!) === 0 }).toEqual({
            name,
            f,
            same: true,
          });
        }
        rngs.push(s.trainer.rng.state());
        const next = withoutTimes((await s.runStep()).result.metrics);
        expect({ name, next }).toEqual({ name, next: expected });
      } finally {
        s.dispose();
      }
    }
    expect(rngs[1]).toEqual(rngs[0]);
    expect(rngs[2]).toEqual(rngs[0]);
    expect(tf.memory().numTensors).toBe(before);
  }, 120_000);

  it('a damaged checkpoint is refused, and nothing of it stays loaded', async () => {
    const before = tf.memory().numTensors;
    // The policy and reference load, then the value model's file is not safetensors.
    const damaged = new Map(files);
    damaged.set('value_model.safetensors', new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9]));
    await expect(restoreSession({ kind: 'files', files: damaged, label: 'damaged' }, res)).rejects.toThrow(
      /value_model\.safetensors/,
    );
    expect(tf.memory().numTensors).toBe(before);
    // A zip that is not a checkpoint is refused before anything is built.
    const model = new Map([['config.json', files.get('config.json')!]]);
    await expect(
      restoreSession({ kind: 'zip', bytes: zipFolder(model, 'm'), label: 'checkpoint' }, res),
    ).rejects.toThrow(/no trainer_state\.json.*a model folder\)\. Load it as a model instead\./);
    expect(tf.memory().numTensors).toBe(before);
  }, 120_000);
});
