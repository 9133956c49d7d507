/**
 * The model worker's API in Node (src/worker/api.ts createWorkerApi), as the worker tests drive it: autosave in
 * memory (in `autosave` where one is given, a map two workers can share), tasks read from disk, and the model
 * name "tiny-test" read from `tinyDir` (a folder made by tests/helpers/tiny.ts) where one is given. Call it after
 * the test's backend is set (useCpu).
 */
import type { ModelFiles } from '../../src/core/model/folder';
import { nodeFiles } from '../../src/cli/files-node';
import { loadTaskNode } from '../../src/cli/tasks-node';
import { memoryAutosaveStore } from '../../src/services/autosave';
import { TabAutosave } from '../../src/services/autosave-tabs';
import type { ConfigPatch, ModelWorkerApi } from '../../src/worker/protocol';

/** The worker tests' run: the tiny model on the sentiment task, 2 samples × 4 tokens, one update a step. */
export const TINY_WORKER_RUN = {
  model: 'tiny-test',
  task: 'sentiment',
  batchSize: 2,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: 4,
  seed: 5,
  saveEvery: 0,
} satisfies ConfigPatch;

export async function nodeWorkerApi(
  o: { tinyDir?: string; autosave?: Map<string, unknown> } = {},
): Promise<ModelWorkerApi> {
  // The worker's modules read `self` and `navigator` when they load.
  (globalThis as { self?: unknown }).self ??= globalThis;
  (globalThis as { navigator?: unknown }).navigator ??= {};
  const { createWorkerApi } = await import('../../src/worker/api');
  const { ModelSources } = await import('../../src/worker/sources');
  class DiskSources extends ModelSources {
    override files(name: string): ModelFiles {
      return o.tinyDir !== undefined && name === 'tiny-test' ? nodeFiles(o.tinyDir) : super.files(name);
    }
    override loadTask = loadTaskNode;
  }
  return createWorkerApi({
    autosave: new TabAutosave(memoryAutosaveStore(o.autosave), null),
    sources: (progress, opts) => new DiskSources(progress, opts),
  });
}
