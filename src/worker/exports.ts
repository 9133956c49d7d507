/**
 * What leaves and enters the worker as files: checkpoint zips (docs/formats.md §2 layout under one top folder),
 * metrics as CSV / JSON and the TRL config. The zip / CSV helpers are pure and live in core
 * (src/common/checkpoint-zip.ts, src/common/exports/trl.ts); this file ties them to the run.
 */
import {
  checkpointFolderName,
  checkpointZipName,
  metricsToCsv,
  metricsToJson,
  unzipFolder,
  zipFolder,
} from '../common/checkpoint-zip';
import { DPO_STATE_FILE } from '../core/dpo/trainer';
import { unzipSync } from 'fflate';
import { dpoConfigJson, trlConfigJson } from '../common/exports/trl';
import { UserError } from '../common/errors';
import type { Run } from './run';
import type { CheckpointSummary } from './protocol';

/** The run as a checkpoint zip; a run that has not stepped yet is built first (a step-0 checkpoint). */
export async function exportCheckpoint(run: Run): Promise<{ name: string; bytes: Uint8Array }> {
  const { step, files } = await run.checkpoint();
  return { name: checkpointZipName(step), bytes: zipFolder(files, checkpointFolderName(step)) };
}

/**
 * Resume from a checkpoint zip (core's one restore, src/core/run/restore.ts). The new run is restored before the
 * old one is dropped, so a bad file leaves the current run as it was.
 */
export async function importCheckpoint(run: Run, bytes: Uint8Array): Promise<CheckpointSummary> {
  run.pause();
  const label = 'checkpoint';
  // A DPO job's checkpoint (dpo_state.json; docs/dpo.md "In the app") resumes as that job.
  if (holdsDpoState(bytes)) {
    const files = unzipFolder(bytes, 'The chosen file');
    const { step, historyLength } = await run.restoreDpo(files, label);
    run.emitStatus();
    return {
      step,
      historyLength,
      config: JSON.parse(JSON.stringify(run.cfg)) as CheckpointSummary['config'],
    };
  }
  const session = await run.restore({ kind: 'zip', bytes, label }, (s) => `${label} at step ${s.step}`);
  run.emitStatus();
  return {
    step: session.step,
    historyLength: session.history.length,
    config: JSON.parse(JSON.stringify(session.cfg)) as CheckpointSummary['config'],
  };
}

/**
 * Whether a zip holds a DPO checkpoint's dpo_state.json (only that entry is inflated; a zip that cannot be read is
 * left to the checkpoint restore, which says what is wrong).
 */
function holdsDpoState(bytes: Uint8Array): boolean {
  try {
    const found = unzipSync(bytes, {
      filter: (f) => f.name === DPO_STATE_FILE || f.name.endsWith(`/${DPO_STATE_FILE}`),
    });
    return Object.keys(found).length > 0;
  } catch {
    return false;
  }
}

export function exportMetrics(run: Run, format: 'csv' | 'json'): string {
  const history = run.historyNow();
  if (format === 'csv') return metricsToCsv(history);
  if (format === 'json') return metricsToJson(history);
  throw new UserError(`exportMetrics: format must be "csv" or "json", got ${JSON.stringify(format)}.`);
}

export function exportTrlConfig(run: Run): string {
  if (run.status().job?.kind === 'sft')
    throw new UserError(
      'The SFT warm start has no TRL config here; continue with PPO, GRPO or DPO and export that run.',
    );
  const dpo = run.dpoConfig();
  if (dpo) return dpoConfigJson(dpo); // TRL's DPOConfig (docs/dpo.md "Export")
  return trlConfigJson(run.cfg);
}
