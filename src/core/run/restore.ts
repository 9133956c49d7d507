/**
 * Restoring a run, written once. A checkpoint reaches a run in three packagings that hold the same files
 * (docs/formats.md §2): a folder (the CLI's checkpoint-N, `train --resume`), that folder as a zip (the app's
 * "Export checkpoint" / import), and the files an autosave keeps (src/services/autosave.ts, also what the worker
 * saves before a backend switch). `restoreSession` turns any of them into a TrainingSession continuing at the
 * saved step; the CLI and every worker path (import, autosave resume, backend switch, device recovery) call it.
 *
 * It validates before it builds (trainer_state.json first: its format, config and every field) and leaves nothing
 * half-loaded when it fails: whatever it built is freed (restoreTrainer), and it never touches the caller's
 * current run, which the caller replaces only once this returned.
 *
 * Platform-neutral (no node:*, no DOM): the folder comes as ModelFiles (the CLI passes nodeFiles).
 */
import { unzipFolder } from '../../common/checkpoint-zip';
import { memoryFiles, type ModelFiles } from '../model/folder';
import type { Resources } from '../ppo/setup';
import { TrainingSession, type SessionBuildOptions } from './session';
import { UserError } from '../../common/errors';

/** Where a checkpoint's files come from. */
export type CheckpointSource =
  /** A checkpoint folder (on disk in the CLI). */
  | { kind: 'folder'; files: ModelFiles }
  /**
   * A zip of a checkpoint folder. `label` names the run's files once unzipped; `name` the zip itself in the
   * errors about it (default "The chosen file", the app's import).
   */
  | { kind: 'zip'; bytes: Uint8Array; label: string; name?: string }
  /** The files themselves, in memory: an autosave, or a run's own checkpoint files (a backend switch). */
  | { kind: 'files'; files: Map<string, Uint8Array>; label: string };

/**
 * A zip's files, refused at once (before anything is built) when the zip is not a checkpoint: a model folder or
 * anything else zipped gets a message saying what to do instead.
 */
function zipFiles(bytes: Uint8Array, name: string): Map<string, Uint8Array> {
  const files = unzipFolder(bytes, name);
  if (!files.has('trainer_state.json')) {
    const isModel = files.has('config.json');
    throw new UserError(
      `This zip has no trainer_state.json, so it is not a PPO Playground checkpoint (it looks like ${
        isModel ? 'a model folder' : 'something else'
      }). ` + (isModel ? 'Load it as a model instead.' : 'Choose a zip exported with "Export checkpoint".'),
    );
  }
  return files;
}

/** The checkpoint's files as ModelFiles, whatever the packaging. */
export function sourceFiles(source: CheckpointSource): ModelFiles {
  switch (source.kind) {
    case 'folder':
      return source.files;
    case 'zip':
      return memoryFiles(source.label, zipFiles(source.bytes, source.name ?? 'The chosen file'));
    case 'files':
      return memoryFiles(source.label, source.files);
  }
}

/**
 * The run saved in `source`, as a session at the saved step with the saved weights, Adam moments, RNG, KL
 * controller, prompt order and history (so its next step is the one the saved run would have taken). `opts`: the
 * reward override and the session's collaborators (hooks, heap budget). Throws a UserError for a file that is
 * not a valid checkpoint, with nothing left loaded.
 */
export async function restoreSession(
  source: CheckpointSource,
  res: Resources,
  opts: SessionBuildOptions = {},
): Promise<TrainingSession> {
  return TrainingSession.restore(sourceFiles(source), res, opts);
}
