/**
 * What reading a model folder's weights holds on the host at its peak: the process's peak resident memory
 * (VmHWM) while `readWeights` (core/model/folder.ts) decodes every tensor, by ranges (the folder's `open`, as the
 * CLI and picked Files read) or with the file read whole first (a source without `open`, as before 2026-11-30).
 * Run each mode in its own process (the peak is per process):
 *
 *   npx tsx scripts/weights-read-memory.ts DIR ranged|whole [--half]
 *
 * --half packs the large matrices to f16 words as the f16 base does (docs/models.md, "The frozen base in f16").
 * Prints one JSON line: {mode, half, fileBytes, decodedBytes, baselineRss, peakRss, peakOverDecoded}.
 */
import { readFileSync, statSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { readWeights, type ModelFiles } from '../src/core/model/folder';
import { HalfArray, isF16Matrix } from '../src/core/model/f16-base';
import { nodeFiles } from '../src/cli/files-node';

const [dir, mode] = process.argv.slice(2);
const half = process.argv.includes('--half');
if (!dir || (mode !== 'ranged' && mode !== 'whole')) {
  console.error('usage: tsx scripts/weights-read-memory.ts DIR ranged|whole [--half]');
  process.exit(2);
}

/** Kilobytes of a /proc/self/status field, as bytes. */
function status(field: 'VmHWM' | 'VmRSS'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

const disk = nodeFiles(dir);
// "whole": the same folder without `open`, so the weights file is read whole before it is decoded.
const files: ModelFiles = mode === 'ranged' ? disk : { label: disk.label, read: disk.read, has: disk.has };
const fileBytes = readdirSync(dir)
  .filter((n) => n === 'model.safetensors' || /^model-\d+-of-\d+\.safetensors$/.test(n))
  .reduce((s, n) => s + statSync(path.join(dir, n)).size, 0);

const baselineRss = status('VmRSS');
const { file } = await readWeights(
  files,
  'model.safetensors',
  'model.safetensors',
  half ? (name) => isF16Matrix(name.startsWith('model.') ? name.slice('model.'.length) : name) : undefined,
);
let decodedBytes = 0;
for (const t of file.tensors.values())
  decodedBytes += t.data instanceof HalfArray ? t.data.words.byteLength : t.data.byteLength;
const peakRss = status('VmHWM');
console.log(
  JSON.stringify({
    mode,
    half,
    fileBytes,
    decodedBytes,
    baselineRss,
    peakRss,
    peakOverDecoded: peakRss - baselineRss - decodedBytes,
  }),
);
