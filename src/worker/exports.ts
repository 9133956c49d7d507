/**
 * What leaves and enters the worker as files: checkpoint zips (docs/formats.md §2 layout under one top folder),
 * metrics as CSV / JSON and the TRL config. The zip / CSV helpers are pure and live in core
 * (src/core/checkpoint-zip.ts, src/core/trl.ts); this file ties them to the run.
 */
import { TrainingSession } from '../core/session';
import {
  checkpointFolderName,
  checkpointZipName,
  metricsToCsv,
  metricsToJson,
  unzipFolder,
  zipFolder,
} from '../core/checkpoint-zip';
import { memoryFiles } from '../core/model/folder';
import { trlConfigJson } from '../core/trl';
import { UserError } from '../core/errors';
import type { Run } from './run-loop';
import type { ModelSources } from './sources';
import type { CheckpointSummary } from './protocol';

/** The run as a checkpoint zip; a run that has not stepped yet is built first (a step-0 checkpoint). */
export async function exportCheckpoint(run: Run): Promise<{ name: string; bytes: Uint8Array }> {
  const { step, files } = await run.checkpoint();
  return { name: checkpointZipName(step), bytes: zipFolder(files, checkpointFolderName(step)) };
}

/**
 * Resume from a checkpoint zip. The new run is restored before the old one is dropped, so a bad file leaves
 * the current run as it was.
 */
export async function importCheckpoint(
  run: Run,
  sources: ModelSources,
  bytes: Uint8Array,
): Promise<CheckpointSummary> {
  const files = unzipFolder(bytes, 'The chosen file');
  if (!files.has('trainer_state.json')) {
    const what = files.has('config.json') ? 'a model folder' : 'something else';
    throw new UserError(
      `This zip has no trainer_state.json, so it is not a PPO Playground checkpoint (it looks like ${what}). ` +
        (files.has('config.json')
          ? 'Load it as a model instead.'
          : 'Choose a zip exported with "Export checkpoint".'),
    );
  }
  run.pause();
  const label = 'checkpoint';
  const session = await TrainingSession.restore(memoryFiles(label, files), sources.resources());
  run.resumeFrom(session, `${label} at step ${session.step}`);
  run.emitStatus();
  return {
    step: session.step,
    historyLength: session.history.length,
    config: JSON.parse(JSON.stringify(session.cfg)) as CheckpointSummary['config'],
  };
}

export function exportMetrics(run: Run, format: 'csv' | 'json'): string {
  const history = run.trainer?.history ?? [];
  if (format === 'csv') return metricsToCsv(history);
  if (format === 'json') return metricsToJson(history);
  throw new UserError(`exportMetrics: format must be "csv" or "json", got ${JSON.stringify(format)}.`);
}

export function exportTrlConfig(run: Run): string {
  return trlConfigJson(run.cfg);
}
