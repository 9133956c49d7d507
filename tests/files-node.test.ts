/** The CLI's folder writer with a streamed file (a checkpoint's weights, written one tensor at a time). */
import { describe, it, expect } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { readWhole, writeFolder } from '../src/cli/files-node';
import { safetensorsStream, writeSafetensors, type FileBody } from '../src/core/model/safetensors';

describe('writeFolder', () => {
  it('writes bytes and ByteSources (streamed chunk by chunk) into files and subfolders', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ppo-files-'));
    try {
      const tensors = [
        { name: 'w', shape: [3, 2], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
        { name: 'b', shape: [2], data: new Float32Array([0.5, -0.5]) },
      ];
      const lazy = tensors.map((t) => ({ ...t, data: async () => t.data }));
      await writeFolder(
        dir,
        new Map<string, FileBody>([
          ['config.json', new TextEncoder().encode('{}\n')],
          ['adapter/model.safetensors', safetensorsStream(lazy, { format: 'pt' })],
        ]),
      );
      expect(readFileSync(path.join(dir, 'config.json'), 'utf8')).toBe('{}\n');
      const got = readFileSync(path.join(dir, 'adapter/model.safetensors'));
      expect(Array.from(got)).toEqual(Array.from(writeSafetensors(tensors, { format: 'pt' })));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a source that yields fewer bytes than it announced is an error, not a short file taken as whole', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ppo-files-'));
    try {
      const short = {
        byteLength: 8,
        async *chunks() {
          yield new Uint8Array(4);
        },
      };
      await expect(writeFolder(dir, new Map([['x.bin', short]]))).rejects.toThrow(
        /4 bytes where 8 were announced/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('readWhole', () => {
  it('reads a file in pieces (as files over 2 GiB are read) to exactly its bytes', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'read-whole-'));
    try {
      const bytes = Uint8Array.from({ length: 1000 }, (_, i) => (i * 37 + 11) % 256);
      const p = path.join(dir, 'f.bin');
      writeFileSync(p, bytes);
      for (const piece of [7, 999, 1000, 2 ** 30]) expect(await readWhole(p, 1000, piece)).toEqual(bytes);
      // A file shorter than asked (it changed while being read) is an error naming it, not zeros.
      await expect(readWhole(p, 1200, 512)).rejects.toThrow(/ended at byte 1000 of 1200/);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });
});
