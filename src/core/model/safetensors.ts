/**
 * A safetensors reader and writer (https://github.com/huggingface/safetensors), without tfjs.
 *
 * Format: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON
 * `{ "__metadata__"?: {str: str}, name: {dtype, shape, data_offsets: [begin, end]} }`,
 * then the data buffer; offsets are relative to the data buffer's start.
 *
 * The reader accepts F32, F16 and BF16 (both converted to f32) and validates everything, throwing a
 * UserError that starts with the file name and names the tensor. The writer writes F32 in the Rust
 * library's layout (names ascending, `__metadata__` first, header padded with spaces to 8 bytes).
 */
import { HalfArray, type WeightData } from './f16-base';
import { f16BitsOfF32Bits } from '../kernels/webgpu-f16';
import { UserError } from '../../common/errors';

// tsconfig.core.json's lib is ES2022 alone, which lacks these; every runtime we target (browsers,
// workers, Node) has them as globals. Module-scoped declarations, so no clash where DOM types exist.
declare const TextEncoder: { new (): { encode(s: string): Uint8Array } };
declare const TextDecoder: {
  new (label?: string, opts?: { fatal?: boolean; ignoreBOM?: boolean }): { decode(b: Uint8Array): string };
};

export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/** A read file: its tensors' data as f32 (D = Float32Array), or packed f16 for those asked (D = WeightData). */
export interface SafetensorsFile<D = Float32Array> {
  tensors: Map<string, { dtype: string; shape: number[]; data: D }>;
  metadata: Record<string, string> | null;
}

export interface ReadSafetensorsOptions {
  maxHeaderBytes?: number;
}

/**
 * With `half`: the tensors it names (and that have an even number of values) are decoded straight to packed f16
 * words (HalfArray; model/f16-base.ts), F32, BF16 and F16 alike, value by value: no f32 copy of them is ever made
 * (baseDtype "f16", docs/models.md, "The frozen base in f16"). A finite value beyond f16's range (|v| > 65504) is refused in words.
 */
export interface ReadHalfOptions extends ReadSafetensorsOptions {
  half: (name: string, shape: number[]) => boolean;
}

/** Largest header the reader accepts by default (the Rust library's limit too). */
export const DEFAULT_MAX_HEADER_BYTES = 100_000_000;

const SUPPORTED = 'F32, F16 and BF16 are supported';

/** Byte sizes of the dtypes safetensors defines; only F32/F16/BF16 can be read. */
const DTYPE_SIZES: Record<string, number> = {
  F32: 4,
  F16: 2,
  BF16: 2,
  F64: 8,
  I64: 8,
  U64: 8,
  I32: 4,
  U32: 4,
  I16: 2,
  U16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function fmtShape(shape: readonly unknown[]): string {
  return `[${shape.map((d) => String(d)).join(', ')}]`;
}

function isNonNegInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  try {
    const s = JSON.stringify(v);
    return s.length > 80 ? `${s.slice(0, 77)}...` : s;
  } catch {
    return typeof v;
  }
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversion

let f16Table: Float32Array | null = null;

/** f16 bit pattern → f32, exact for every value (subnormals, ±0, ±Inf; NaN stays NaN). */
export function f16BitsToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac === 0 ? sign * Infinity : NaN;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function getF16Table(): Float32Array {
  if (f16Table === null) {
    const t = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) t[h] = f16BitsToFloat(h);
    f16Table = t;
  }
  return f16Table;
}

// ---------------------------------------------------------------------------------------------
// Reader

interface Entry {
  name: string;
  dtype: string;
  shape: number[];
  begin: number;
  end: number;
}

/**
 * A file read by byte ranges: a file on disk (cli/files-node.ts), a picked File (worker/sources.ts) or bytes in
 * memory (bytesFile). `read(start, end)` returns the bytes [start, end) — a view or a fresh copy, never to be
 * written to; `close`, when given, is called once the reader is done with it.
 */
export interface RangedFile {
  readonly size: number;
  read(start: number, end: number): Promise<Uint8Array>;
  close?(): Promise<void>;
}

/** Bytes in memory as a RangedFile (reads are views: no copy). */
export function bytesFile(bytes: Uint8Array): RangedFile {
  return { size: bytes.length, read: async (start, end) => bytes.subarray(start, end) };
}

/** A parsed header: the tensors' entries (offsets relative to the data buffer), metadata, where data starts. */
interface Header {
  entries: Entry[];
  metadata: Record<string, string> | null;
  dataStart: number;
}

/** The header's byte length from a file's first 8 bytes, checked against the file's size and the limit. */
function headerLength(first8: Uint8Array, fileSize: number, fileName: string, maxHeader: number): number {
  const fail: (msg: string) => never = (msg) => {
    throw new UserError(`${fileName}: ${msg}`);
  };
  if (fileSize < 8) {
    fail(
      `not a safetensors file: it is ${fileSize} bytes long, shorter than the 8-byte header length ` +
        `that starts every safetensors file.`,
    );
  }
  const view = new DataView(first8.buffer, first8.byteOffset, 8);
  const lo = view.getUint32(0, true);
  const hi = view.getUint32(4, true);
  const headerLen = hi * 2 ** 32 + lo;
  if (hi !== 0 || headerLen > maxHeader) {
    fail(
      `not a safetensors file: the header length field says ${headerLen} bytes, more than the ` +
        `${maxHeader}-byte limit for a safetensors header.`,
    );
  }
  if (8 + headerLen > fileSize) {
    fail(
      `the header length field says ${headerLen} bytes but the file has only ${fileSize - 8} bytes ` +
        `after it; the file is truncated or not a safetensors file.`,
    );
  }
  return headerLen;
}

/** Parse and check the JSON header (its `headerLen` bytes after the length field) of a file of `fileSize` bytes. */
function parseHeader(json: Uint8Array, fileSize: number, fileName: string): Header {
  const fail: (msg: string) => never = (msg) => {
    throw new UserError(`${fileName}: ${msg}`);
  };
  const headerLen = json.length;
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(json);
  } catch {
    return fail(`the ${headerLen}-byte header is not valid UTF-8; expected a JSON object.`);
  }
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (e) {
    return fail(`the header is not valid JSON (${(e as Error).message}); expected a JSON object.`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    return fail(
      `the header must be a JSON object of tensor entries, got ${Array.isArray(header) ? 'an array' : describe(header)}.`,
    );
  }

  const dataStart = 8 + headerLen;
  const dataLen = fileSize - dataStart;
  let metadata: Record<string, string> | null = null;
  const entries: Entry[] = [];
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
        fail(`"__metadata__" must be an object of string values, got ${describe(raw)}.`);
      }
      const md: Record<string, string> = {};
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== 'string') fail(`"__metadata__" entry "${k}" must be a string, got ${describe(v)}.`);
        md[k] = v as string;
      }
      metadata = md;
      continue;
    }
    const t = `tensor "${name}"`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      fail(`${t}: expected an object {dtype, shape, data_offsets}, got ${describe(raw)}.`);
    }
    const r = raw as Record<string, unknown>;
    const { dtype, shape, data_offsets: offsets } = r;
    if (dtype === undefined) fail(`${t}: missing "dtype" (expected a string such as "F32").`);
    if (typeof dtype !== 'string')
      fail(`${t}: "dtype" must be a string such as "F32", got ${describe(dtype)}.`);
    if (shape === undefined) fail(`${t}: missing "shape" (expected an array of non-negative integers).`);
    if (!Array.isArray(shape))
      fail(`${t}: "shape" must be an array of non-negative integers, got ${describe(shape)}.`);
    const dims = shape as unknown[];
    for (const d of dims) {
      if (!isNonNegInt(d)) {
        fail(`${t}: "shape" must contain non-negative integers, got ${describe(shape)}.`);
      }
    }
    if (offsets === undefined) fail(`${t}: missing "data_offsets" (expected [begin, end]).`);
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !isNonNegInt(offsets[0]) ||
      !isNonNegInt(offsets[1])
    ) {
      fail(`${t}: "data_offsets" must be two non-negative integers [begin, end], got ${describe(offsets)}.`);
    }
    const dt = dtype as string;
    const size = DTYPE_SIZES[dt];
    if (dt !== 'F32' && dt !== 'F16' && dt !== 'BF16') {
      fail(
        `${t} has dtype ${dt}${size === undefined ? ' (not a safetensors dtype)' : ''}, which cannot be read; ` +
          `only ${SUPPORTED}. Convert the model to float32 or float16 first.`,
      );
    }
    const [begin, end] = offsets as [number, number];
    if (end < begin) {
      fail(`${t}: "data_offsets" [${begin}, ${end}] end before they begin; expected begin <= end.`);
    }
    if (end > dataLen) {
      fail(
        `${t}: "data_offsets" [${begin}, ${end}] go past the end of the data buffer (${dataLen} bytes); ` +
          `the file is truncated or its header is wrong.`,
      );
    }
    let count = 1;
    for (const d of dims as number[]) count *= d;
    const expectedBytes = count * size;
    if (end - begin !== expectedBytes) {
      fail(
        `${t}: "data_offsets" [${begin}, ${end}] span ${end - begin} bytes but shape ${fmtShape(dims)} of ` +
          `${dt} needs ${expectedBytes} bytes (${count} elements x ${size}).`,
      );
    }
    entries.push({ name, dtype: dt, shape: (dims as number[]).slice(), begin, end });
  }

  // Overlapping byte ranges (empty tensors take no space and never overlap).
  const ranged = entries.filter((e) => e.end > e.begin).sort((a, b) => a.begin - b.begin || a.end - b.end);
  for (let i = 1; i < ranged.length; i++) {
    const prev = ranged[i - 1];
    const cur = ranged[i];
    if (cur.begin < prev.end) {
      fail(
        `tensor "${cur.name}" (bytes [${cur.begin}, ${cur.end}]) overlaps tensor "${prev.name}" ` +
          `(bytes [${prev.begin}, ${prev.end}]); tensors must occupy disjoint byte ranges.`,
      );
    }
  }

  return { entries, metadata, dataStart };
}

/** Options of the readers: `half` as ReadHalfOptions; `want` (ranged reads): only the tensors it names are read. */
type ReadOptions = ReadSafetensorsOptions & {
  half?: ReadHalfOptions['half'];
  want?: (name: string) => boolean;
};

/** An entry's values decoded from `bytes`, which hold the data buffer from byte `dataStart` on. */
function decodeEntry(
  bytes: Uint8Array,
  dataStart: number,
  e: Entry,
  fileName: string,
  opts: ReadOptions,
): WeightData {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = e.dtype === 'F32' ? (e.end - e.begin) / 4 : (e.end - e.begin) / 2;
  const half = opts.half && n % 2 === 0 && opts.half(e.name, e.shape);
  return half ? decodeHalf(view, dataStart, e, fileName) : decode(bytes, view, dataStart, e);
}

// The plain overload last: ReturnType<typeof readSafetensors> (checkpoint code) means it.
export function readSafetensors(
  bytes: Uint8Array,
  fileName: string,
  opts: ReadHalfOptions,
): SafetensorsFile<WeightData>;
export function readSafetensors(
  bytes: Uint8Array,
  fileName: string,
  opts?: ReadSafetensorsOptions,
): SafetensorsFile;
export function readSafetensors(
  bytes: Uint8Array,
  fileName: string,
  opts: ReadOptions = {},
): SafetensorsFile<WeightData> {
  const headerLen = headerLength(
    bytes.subarray(0, 8),
    bytes.length,
    fileName,
    opts.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES,
  );
  const { entries, metadata, dataStart } = parseHeader(
    bytes.subarray(8, 8 + headerLen),
    bytes.length,
    fileName,
  );
  const tensors: SafetensorsFile<WeightData>['tensors'] = new Map();
  for (const e of entries) {
    tensors.set(e.name, {
      dtype: e.dtype,
      shape: e.shape,
      data: decodeEntry(bytes, dataStart, e, fileName, opts),
    });
  }
  return { tensors, metadata };
}

/**
 * readSafetensors over a RangedFile: the header first, then each tensor's bytes by themselves (only those `want`
 * names, when given), decoded and let go before the next is read. A 3 GB model file is never in memory whole:
 * what loading holds beyond the decoded tensors is one tensor's bytes (docs/models.md, "Reading a weights file").
 * The same checks and messages as readSafetensors; the file is closed when done.
 */
export async function readSafetensorsRanged(
  file: RangedFile,
  fileName: string,
  opts: ReadOptions = {},
): Promise<SafetensorsFile<WeightData>> {
  const opened = await openSafetensorsRanged(file, fileName, opts);
  let ok = false;
  try {
    const tensors: SafetensorsFile<WeightData>['tensors'] = new Map();
    for (const e of opened.entries) {
      if (opts.want && !opts.want(e.name)) continue;
      tensors.set(e.name, { dtype: e.dtype, shape: e.shape, data: await opened.read(e.name) });
    }
    ok = true;
    return { tensors, metadata: opened.metadata };
  } finally {
    await opened.close(ok);
  }
}

/** A safetensors file whose header is read and checked, its tensors read one at a time on request. */
export interface OpenedSafetensors {
  /** The tensors the header lists, in its order (name, dtype, shape). */
  entries: { name: string; dtype: string; shape: number[] }[];
  metadata: Record<string, string> | null;
  /** One tensor's values, read by its byte range and decoded (to packed f16 where `half` says so). */
  read(name: string): Promise<WeightData>;
  /** Bytes [from, to) of one tensor's data as stored (to compare tensors without decoding them). */
  bytes(name: string, from: number, to: number): Promise<Uint8Array>;
  /** The byte length of one tensor's data as stored. */
  byteLength(name: string): number;
  /**
   * Close the file. `ok` false (the caller is leaving on an error): a failure to close is swallowed, so that it
   * never hides the error that stopped the read.
   */
  close(ok?: boolean): Promise<void>;
}

/**
 * Open a safetensors file over a RangedFile: read and check its length and header now (the file is closed when
 * they fail), its tensors later, each by its own byte range (`read`), so that a caller can let one tensor go before
 * it reads the next. The same checks and messages as readSafetensors.
 */
export async function openSafetensorsRanged(
  file: RangedFile,
  fileName: string,
  opts: ReadOptions = {},
): Promise<OpenedSafetensors> {
  let header: ReturnType<typeof parseHeader>;
  try {
    const size = file.size;
    const first = size >= 8 ? await readExactly(file, 0, 8, fileName) : new Uint8Array(0);
    const headerLen = headerLength(first, size, fileName, opts.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES);
    header = parseHeader(await readExactly(file, 8, 8 + headerLen, fileName), size, fileName);
  } catch (e) {
    await file.close?.().catch(() => undefined);
    throw e;
  }
  const byName = new Map(header.entries.map((e) => [e.name, e]));
  const { dataStart } = header;
  const entry = (name: string) => {
    const e = byName.get(name);
    if (!e) throw new Error(`${fileName}: no tensor "${name}" in its header.`);
    return e;
  };
  return {
    entries: header.entries.map((e) => ({ name: e.name, dtype: e.dtype, shape: e.shape })),
    metadata: header.metadata,
    async read(name) {
      const e = entry(name);
      const bytes = await readExactly(file, dataStart + e.begin, dataStart + e.end, fileName);
      return decodeEntry(bytes, 0, { ...e, begin: 0, end: e.end - e.begin }, fileName, opts);
    },
    async bytes(name, from, to) {
      const e = entry(name);
      if (from < 0 || to < from || e.begin + to > e.end)
        throw new Error(`${fileName}: bytes [${from}, ${to}) are outside tensor "${name}".`);
      return readExactly(file, dataStart + e.begin + from, dataStart + e.begin + to, fileName);
    },
    byteLength: (name) => entry(name).end - entry(name).begin,
    async close(ok = true) {
      await file.close?.().catch((err: unknown) => {
        if (ok) throw err;
      });
    },
  };
}

async function readExactly(
  file: RangedFile,
  start: number,
  end: number,
  fileName: string,
): Promise<Uint8Array> {
  const bytes = await file.read(start, end);
  if (bytes.length !== end - start) {
    throw new UserError(
      `${fileName}: reading bytes [${start}, ${end}) gave ${bytes.length} bytes; the file changed or is cut short.`,
    );
  }
  return bytes;
}

/**
 * A tensor's values as packed f16 words (element 2j in the low half of word j), converted one at a time from the
 * file's bytes: F16 as stored, BF16 and F32 rounded to nearest even (BF16's 8-bit mantissa fits f16's 10 bits, so
 * only values outside f16's exponent range change).
 */
function decodeHalf(view: DataView, dataStart: number, e: Entry, fileName: string): HalfArray {
  const start = dataStart + e.begin;
  const width = e.dtype === 'F32' ? 4 : 2;
  const n = (e.end - e.begin) / width;
  const words = new Int32Array(n / 2);
  if (e.dtype === 'F16') {
    for (let j = 0; j < words.length; j++) words[j] = view.getInt32(start + 4 * j, true);
    return new HalfArray(words);
  }
  const bitsAt =
    e.dtype === 'BF16'
      ? (i: number) => view.getUint16(start + 2 * i, true) << 16
      : (i: number) => view.getUint32(start + 4 * i, true);
  const half = (i: number): number => {
    const x = bitsAt(i) >>> 0;
    const h = f16BitsOfF32Bits(x);
    // Overflow to ±Inf from a finite value: not representable; say so rather than train on infinities.
    if ((h & 0x7fff) === 0x7c00 && ((x >>> 23) & 0xff) !== 0xff) {
      throw new UserError(
        `${fileName}: tensor "${e.name}" holds ${new Float32Array(new Uint32Array([x]).buffer)[0]} at index ${i}, ` +
          'beyond the range of f16 (±65504), so it cannot be stored in f16; set "baseDtype" to "f32".',
      );
    }
    return h;
  };
  for (let j = 0; j < words.length; j++) words[j] = half(2 * j) | (half(2 * j + 1) << 16);
  return new HalfArray(words);
}

function decode(bytes: Uint8Array, view: DataView, dataStart: number, e: Entry): Float32Array {
  const start = dataStart + e.begin;
  if (e.dtype === 'F32') {
    const n = (e.end - e.begin) / 4;
    // No copy where the values are 4-byte aligned in memory (the Rust library and our writer align them): a
    // view of the file's bytes. Loading GPT-2 medium then holds its 1.4 GB file once, not twice. The views keep
    // the file's buffer alive while any of them lives, and must not be written to.
    if (LITTLE_ENDIAN_HOST && (bytes.byteOffset + start) % 4 === 0) {
      return new Float32Array(bytes.buffer, bytes.byteOffset + start, n);
    }
    const out = new Float32Array(n);
    if (LITTLE_ENDIAN_HOST) {
      // One copy; the fresh buffer is aligned whatever the file offset was.
      new Uint8Array(out.buffer).set(bytes.subarray(start, start + n * 4));
    } else {
      for (let i = 0; i < n; i++) out[i] = view.getFloat32(start + 4 * i, true);
    }
    return out;
  }
  const n = (e.end - e.begin) / 2;
  const out = new Float32Array(n);
  if (e.dtype === 'BF16') {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) bits[i] = view.getUint16(start + 2 * i, true) << 16;
    return out;
  }
  const table = getF16Table();
  for (let i = 0; i < n; i++) out[i] = table[view.getUint16(start + 2 * i, true)];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writer

/** Compare strings by code point, i.e. by their UTF-8 bytes (Rust's `String` ordering). */
function compareCodePoints(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done) return y.done ? 0 : -1;
    if (y.done) return 1;
    const cx = x.value.codePointAt(0)!;
    const cy = y.value.codePointAt(0)!;
    if (cx !== cy) return cx - cy;
  }
}

/**
 * A tensor whose F32 values are read only when its bytes are written (safetensorsStream): all at once (`data`),
 * or, for a large one, as consecutive pieces in order (`pieces`, which then takes precedence). A weight stored in
 * f16 (a packed frozen base) also offers its f16 values as they are stored (`halfWords`: the packed words in
 * order, two values per word, the even one in the low half), which a stream asked to keep f16 writes as F16.
 */
export interface LazyTensor {
  name: string;
  shape: number[];
  data: () => Promise<Float32Array>;
  /**
   * `scratch(n)`: an array of n values the stream reuses for every piece it writes (tensorPieces copies a WASM
   * tensor's pieces into it); a yielded piece is valid until the generator is resumed.
   */
  pieces?: (scratch: (n: number) => Float32Array) => AsyncGenerator<Float32Array>;
  halfWords?: () => AsyncGenerator<Int32Array>;
}

/**
 * File contents made piece by piece: `byteLength` known up front, `chunks()` yielding the bytes in order. A
 * checkpoint's weights are written this way, one tensor at a time, so writing a 0.5 GB safetensors file holds one
 * tensor's bytes in memory, not the file's. A chunk is valid until the next is asked for (a stream may reuse its
 * memory): a consumer writes or copies it first (writeFolder, the autosave's parts, collectBytes).
 */
export interface ByteSource {
  readonly byteLength: number;
  chunks(): AsyncGenerator<Uint8Array>;
}

/** A file's contents: bytes, or a ByteSource made as it is written. */
export type FileBody = Uint8Array | ByteSource;

export function isByteSource(b: FileBody): b is ByteSource {
  return !(b instanceof Uint8Array);
}

/** All of a file's bytes (a ByteSource's chunks concatenated). */
export async function collectBytes(b: FileBody): Promise<Uint8Array> {
  if (!isByteSource(b)) return b;
  const out = new Uint8Array(b.byteLength);
  let pos = 0;
  for await (const c of b.chunks()) {
    if (pos + c.length > out.length)
      throw new Error(`collectBytes: more than the ${b.byteLength} bytes announced.`);
    out.set(c, pos);
    pos += c.length;
  }
  if (pos !== out.length) throw new Error(`collectBytes: ${pos} bytes where ${b.byteLength} were announced.`);
  return out;
}

/** Check a tensor's name and shape for writing; returns its element count. */
function checkedCount(name: unknown, shape: number[], seen: Set<string>): number {
  if (typeof name !== 'string' || name === '' || name === '__metadata__') {
    throw new UserError(`cannot write safetensors: invalid tensor name ${describe(name)}.`);
  }
  if (seen.has(name)) {
    throw new UserError(
      `cannot write safetensors: tensor "${name}" appears more than once; names must be unique.`,
    );
  }
  seen.add(name);
  let count = 1;
  for (const d of shape) {
    if (!isNonNegInt(d)) {
      throw new UserError(
        `cannot write safetensors: tensor "${name}" has shape ${fmtShape(shape)}; dimensions must be non-negative integers.`,
      );
    }
    count *= d;
  }
  return count;
}

function lengthMismatch(name: string, length: number, shape: number[], count: number): UserError {
  return new UserError(
    `cannot write safetensors: tensor "${name}" has ${length} values but shape ${fmtShape(shape)} needs ${count}.`,
  );
}

/**
 * The header (length prefix, JSON, padding) of F32 (or, `half`, F16) tensors with these names, shapes and element counts, in the
 * Rust library's layout, and the names' order in the data buffer (ascending code points).
 */
function safetensorsHeader(
  tensors: { name: string; shape: number[]; count: number; half?: boolean }[],
  metadata?: Record<string, string>,
): { header: Uint8Array; order: number[]; dataBytes: number } {
  const order = tensors.map((_, i) => i).sort((a, b) => compareCodePoints(tensors[a].name, tensors[b].name));
  const parts: string[] = [];
  if (metadata !== undefined) {
    const keys = Object.keys(metadata).sort(compareCodePoints);
    const md: Record<string, string> = {};
    for (const k of keys) {
      if (typeof metadata[k] !== 'string') {
        throw new UserError(
          `cannot write safetensors: metadata "${k}" must be a string, got ${describe(metadata[k])}.`,
        );
      }
      md[k] = metadata[k];
    }
    parts.push(`"__metadata__":${JSON.stringify(md)}`);
  }
  let offset = 0;
  for (const i of order) {
    const t = tensors[i];
    const end = offset + t.count * (t.half ? 2 : 4);
    parts.push(
      `${JSON.stringify(t.name)}:{"dtype":"${t.half ? 'F16' : 'F32'}","shape":[${t.shape.join(',')}],"data_offsets":[${offset},${end}]}`,
    );
    offset = end;
  }
  const json = new TextEncoder().encode(`{${parts.join(',')}}`);
  const headerLen = Math.ceil(json.length / 8) * 8;
  const header = new Uint8Array(8 + headerLen);
  const view = new DataView(header.buffer);
  view.setUint32(0, headerLen % 2 ** 32, true);
  view.setUint32(4, Math.floor(headerLen / 2 ** 32), true);
  header.set(json, 8);
  header.fill(0x20, 8 + json.length, 8 + headerLen);
  return { header, order, dataBytes: offset };
}

/** Little-endian bytes of `data` written at `pos` of `out`. */
function putF32(out: Uint8Array, pos: number, data: Float32Array): void {
  if (LITTLE_ENDIAN_HOST) {
    out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), pos);
  } else {
    const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
    for (let i = 0; i < data.length; i++) view.setFloat32(pos + 4 * i, data[i], true);
  }
}

export function writeSafetensors(tensors: NamedTensor[], metadata?: Record<string, string>): Uint8Array {
  const seen = new Set<string>();
  const counts = tensors.map((t) => {
    const count = checkedCount(t.name, t.shape, seen);
    if (t.data.length !== count) throw lengthMismatch(t.name, t.data.length, t.shape, count);
    return { name: t.name, shape: t.shape, count };
  });
  const { header, order, dataBytes } = safetensorsHeader(counts, metadata);
  const out = new Uint8Array(header.length + dataBytes);
  out.set(header, 0);
  let pos = header.length;
  for (const i of order) {
    putF32(out, pos, tensors[i].data);
    pos += tensors[i].data.length * 4;
  }
  return out;
}

/**
 * The same bytes as writeSafetensors, made one tensor at a time: each tensor's `data()` (or `pieces()`) is called
 * when its bytes are due (in the file's order) and let go after, so at most one tensor's (or piece's) values are
 * held. Names and shapes are
 * checked up front; a tensor whose data does not match its shape fails the stream with the same error.
 */
export function safetensorsStream(
  tensors: LazyTensor[],
  metadata?: Record<string, string>,
  /** Write the tensors that offer `halfWords` as F16, their stored values (half the bytes), not widened to F32. */
  opts: { keepF16?: boolean } = {},
): ByteSource {
  const seen = new Set<string>();
  const counts = tensors.map((t) => ({
    name: t.name,
    shape: t.shape.slice(),
    count: checkedCount(t.name, t.shape, seen),
    half: !!opts.keepF16 && t.halfWords !== undefined,
  }));
  const { header, order, dataBytes } = safetensorsHeader(counts, metadata);
  return {
    byteLength: header.length + dataBytes,
    async *chunks() {
      yield header.slice();
      // One array for the pieces of every tensor of this stream, grown to the largest piece asked for.
      let held = new Float32Array(0);
      const scratch = (n: number): Float32Array => {
        if (held.length < n) held = new Float32Array(n);
        return held.subarray(0, n);
      };
      const asBytes = (data: Float32Array | Int32Array): Uint8Array => {
        if (LITTLE_ENDIAN_HOST) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
        const bytes = new Uint8Array(data.length * 4);
        if (data instanceof Float32Array) putF32(bytes, 0, data);
        else {
          const view = new DataView(bytes.buffer);
          for (let i = 0; i < data.length; i++) view.setUint32(4 * i, data[i] >>> 0, true); // even value first
        }
        return bytes;
      };
      for (const i of order) {
        const t = tensors[i];
        let length = 0;
        if (counts[i].half) {
          for await (const words of t.halfWords!()) {
            length += words.length * 2;
            if (length > counts[i].count) break;
            yield asBytes(words);
          }
        } else if (t.pieces) {
          for await (const piece of t.pieces(scratch)) {
            length += piece.length;
            if (length > counts[i].count) break;
            yield asBytes(piece);
          }
        } else {
          const data = await t.data();
          length = data.length;
          if (length === counts[i].count) yield asBytes(data);
        }
        if (length !== counts[i].count) {
          throw lengthMismatch(counts[i].name, length, counts[i].shape, counts[i].count);
        }
      }
    },
  };
}
