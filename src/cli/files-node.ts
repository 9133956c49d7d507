import { open, readFile, stat, mkdir, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { ModelFiles } from '../core/model/folder';
import { isByteSource, type FileBody, type RangedFile } from '../core/model/safetensors';
import { UserError } from '../common/errors';

/** Files larger than this are refused before they are read whole. */
export const MAX_FILE_BYTES = 4 * 1024 ** 3;

/** A model folder on disk as a ModelFiles. */
export function nodeFiles(dir: string): ModelFiles {
  return {
    label: dir,
    async has(name: string): Promise<boolean> {
      try {
        return (await stat(path.join(dir, name))).isFile();
      } catch {
        return false;
      }
    },
    async read(name: string): Promise<Uint8Array | null> {
      const st = await fileStat(dir, name);
      if (!st) return null;
      const { p } = st;
      if (st.size > MAX_FILE_BYTES) {
        throw new UserError(
          `${p} is ${(st.size / 1024 ** 3).toFixed(1)} GB; files above ${MAX_FILE_BYTES / 1024 ** 3} GB are refused.`,
        );
      }
      return readWhole(p, st.size);
    },
    // Weights are read a tensor at a time (core/model/folder.ts readWeights): no size limit, no whole copy.
    async open(name: string): Promise<RangedFile | null> {
      const st = await fileStat(dir, name);
      return st ? rangedFile(st.p, st.size) : null;
    },
  };
}

/** A folder's file: its path and size; null when it does not exist; a folder in its place is refused. */
async function fileStat(dir: string, name: string): Promise<{ p: string; size: number } | null> {
  const p = path.join(dir, name);
  let st;
  try {
    st = await stat(p);
  } catch {
    return null;
  }
  if (st.isDirectory()) throw new UserError(`${p} is a folder; expected the file ${name}.`);
  return { p, size: st.size };
}

/** A file on disk as a RangedFile: one handle, opened at the first read and closed by `close`. */
export function rangedFile(p: string, size: number): RangedFile {
  let fh: Promise<FileHandle> | null = null;
  let closed = false;
  return {
    size,
    async read(start: number, end: number): Promise<Uint8Array> {
      if (closed) throw new Error(`${p}: read after close.`);
      fh ??= open(p, 'r');
      const out = new Uint8Array(end - start);
      await readInto(await fh, p, out, start, size);
      return out;
    },
    async close(): Promise<void> {
      closed = true;
      const h = fh;
      fh = null;
      if (h) await (await h).close();
    },
  };
}

/** Fill `out` from the file's byte `start` on, in pieces of at most `piece` bytes (fs reads stop at 2 GiB). */
async function readInto(
  fh: FileHandle,
  p: string,
  out: Uint8Array,
  start: number,
  size: number,
  piece = 2 ** 30,
): Promise<void> {
  for (let at = 0; at < out.length;) {
    const { bytesRead } = await fh.read(out, at, Math.min(piece, out.length - at), start + at);
    if (bytesRead === 0) throw new UserError(`${p} ended at byte ${start + at} of ${size} while being read.`);
    at += bytesRead;
  }
}

/**
 * A file's bytes through a file handle, in pieces of at most 1 GiB: `readFile` refuses files over 2 GiB
 * (ERR_FS_FILE_TOO_LARGE), and a Qwen3-0.6B model.safetensors in F32 is 2.4 GB.
 */
export async function readWhole(p: string, size: number, piece = 2 ** 30): Promise<Uint8Array> {
  const out = new Uint8Array(size);
  const fh = await open(p, 'r');
  try {
    await readInto(fh, p, out, 0, size, piece);
  } finally {
    await fh.close();
  }
  return out;
}

/** Check that `dir` exists and is a folder, with a clear error otherwise. */
export async function assertFolder(dir: string, what = 'model folder'): Promise<void> {
  let st;
  try {
    st = await stat(dir);
  } catch {
    throw new UserError(
      `${what} ${dir} does not exist; pass a folder holding config.json and model.safetensors.`,
    );
  }
  if (!st.isDirectory()) throw new UserError(`${what} ${dir} is a file; pass the folder that holds it.`);
}

/**
 * Write `files` into `dir`; a name with a '/' (a LoRA checkpoint's adapter/…) goes into that subfolder. A
 * ByteSource is written chunk by chunk as it is made (a checkpoint's weights, one tensor at a time).
 */
export async function writeFolder(dir: string, files: Map<string, FileBody>): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const [name, body] of files) {
    const p = path.join(dir, name);
    if (name.includes('/')) await mkdir(path.dirname(p), { recursive: true });
    if (!isByteSource(body)) {
      await writeFile(p, body);
      continue;
    }
    const fh = await open(p, 'w');
    try {
      let written = 0;
      for await (const chunk of body.chunks()) {
        for (let at = 0; at < chunk.length;) {
          const { bytesWritten } = await fh.write(chunk, at, chunk.length - at);
          at += bytesWritten;
        }
        written += chunk.length;
      }
      if (written !== body.byteLength) {
        throw new Error(`writing ${p}: ${written} bytes where ${body.byteLength} were announced.`);
      }
    } finally {
      await fh.close();
    }
  }
}

/** A JSON file read and parsed, with errors that say which file (`what`: "config", …) and why. */
export async function readJsonFile(file: string, what: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EISDIR') throw new UserError(`${what} ${file} is a folder; expected a JSON file.`);
    if (code === 'ENOENT') throw new UserError(`${what} ${file} does not exist; expected a JSON file.`);
    throw new UserError(`cannot read ${what} ${file}: ${code ?? (e as Error).message}.`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UserError(`${what} ${file} is not valid JSON: ${(e as Error).message}.`);
  }
}
