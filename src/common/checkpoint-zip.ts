/**
 * What a run exports as files, kept pure so Node tests cover it: a checkpoint folder (docs/formats.md §2, the map
 * that `checkpointFiles` returns) as a zip with one top folder, the zip back into a file map, and the metric
 * history as CSV or JSON (docs/formats.md §3 names as the header).
 *
 * Zips are made and read with fflate. Safetensors are stored uncompressed (float weights barely deflate and
 * storing is ~free); JSON is deflated.
 */
import { unzipSync, zipSync, type Zippable } from 'fflate';
import { UserError } from './errors';
import { EXTRA_METRICS, REQUIRED_METRICS } from './metrics';

/** The checkpoint's top folder inside the zip, and the zip's file name, for a run at `step`. */
export function checkpointFolderName(step: number): string {
  return `ppo-playground-step-${step}`;
}
export function checkpointZipName(step: number): string {
  return `${checkpointFolderName(step)}.zip`;
}

/** Largest single file (uncompressed) a zip may hold: a guard against zip bombs and files that cannot load. */
export const MAX_ZIP_ENTRY_BYTES = 2 * 1024 ** 3;

/** A zip holding every file of `files` under `folder/` (no folder when `folder` is empty). */
export function zipFolder(files: Map<string, Uint8Array>, folder: string): Uint8Array {
  const prefix = folder ? `${folder.replace(/\/+$/, '')}/` : '';
  const tree: Zippable = {};
  for (const [name, bytes] of files) {
    if (name === '' || name.startsWith('/') || name.split('/').includes('..')) {
      throw new Error(`zipFolder: bad file name ${JSON.stringify(name)}`);
    }
    tree[prefix + name] = [bytes, { level: name.endsWith('.safetensors') ? 0 : 6 }];
  }
  // A fixed timestamp keeps the bytes of the same files the same (fflate refuses dates before 1980).
  return zipSync(tree, { mtime: new Date('2000-01-01T00:00:00Z') });
}

/** Files macOS / Windows zip tools add that are not part of the folder. */
function isJunk(path: string): boolean {
  return path.startsWith('__MACOSX/') || /(^|\/)(\.DS_Store|Thumbs\.db|desktop\.ini)$/.test(path);
}

const isZip = (b: Uint8Array): boolean =>
  b.length >= 4 &&
  b[0] === 0x50 &&
  b[1] === 0x4b &&
  (b[2] === 0x03 || b[2] === 0x05) &&
  (b[3] === 0x04 || b[3] === 0x06);

/**
 * The files of a zip as a folder map. When every file sits under one top folder (how `zipFolder` and "compress
 * this folder" tools write it), that folder is stripped. Not a zip, a broken zip, an entry over
 * `maxEntryBytes` or an entry that escapes the folder (`../`) is a UserError naming `label`.
 */
export function unzipFolder(
  bytes: Uint8Array,
  label: string,
  maxEntryBytes = MAX_ZIP_ENTRY_BYTES,
): Map<string, Uint8Array> {
  if (!isZip(bytes)) {
    throw new UserError(`${label} is not a zip file; choose a checkpoint .zip exported by PPO Playground.`);
  }
  let raw: Record<string, Uint8Array>;
  try {
    raw = unzipSync(bytes, {
      filter: (f) => {
        if (f.originalSize > maxEntryBytes) {
          throw new UserError(
            `${label}: ${f.name} is ${(f.originalSize / 1024 ** 3).toFixed(1)} GB unpacked, over the ` +
              `${(maxEntryBytes / 1024 ** 3).toFixed(1)} GB limit for one file.`,
          );
        }
        return !f.name.endsWith('/') && !isJunk(f.name);
      },
    });
  } catch (e) {
    if (e instanceof UserError) throw e;
    throw new UserError(
      `${label} is not a readable zip (${(e as Error).message}); was the download cut short?`,
    );
  }
  const paths = Object.keys(raw);
  for (const p of paths) {
    if (p.startsWith('/') || p.split('/').includes('..')) {
      throw new UserError(
        `${label}: the entry ${JSON.stringify(p)} points outside the folder; refusing this zip.`,
      );
    }
  }
  const tops = new Set(paths.map((p) => (p.includes('/') ? p.slice(0, p.indexOf('/')) : '')));
  const strip = tops.size === 1 && !tops.has('') ? `${[...tops][0]}/` : '';
  const out = new Map<string, Uint8Array>();
  for (const p of paths) out.set(p.slice(strip.length), raw[p]);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Metrics history as CSV / JSON

/** The columns for a history: every contract name, then the extras present, then anything else as first seen. */
export function metricColumns(history: Record<string, number | null>[]): string[] {
  const seen = new Set<string>();
  for (const row of history) for (const k of Object.keys(row)) seen.add(k);
  const known: string[] = [...REQUIRED_METRICS, ...EXTRA_METRICS];
  const rest = [...seen].filter((k) => !known.includes(k));
  return [...REQUIRED_METRICS, ...EXTRA_METRICS.filter((k) => seen.has(k)), ...rest];
}

/** CSV with a header of metric names, one row per step; NaN / ±Infinity written as such, missing as empty. */
export function metricsToCsv(history: Record<string, number | null>[]): string {
  const cols = metricColumns(history);
  const lines = [cols.join(',')];
  for (const row of history) {
    lines.push(cols.map((c) => (row[c] === undefined || row[c] === null ? '' : String(row[c]))).join(','));
  }
  return lines.join('\n') + '\n';
}

/** A JSON array of per-step objects (non-finite numbers become null, as in the CLI's metrics.jsonl). */
export function metricsToJson(history: Record<string, number | null>[]): string {
  return JSON.stringify(history, null, 1) + '\n';
}
