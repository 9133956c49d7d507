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
import { UserError } from '../errors';

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

export interface SafetensorsFile {
  tensors: Map<string, { dtype: string; shape: number[]; data: Float32Array }>;
  metadata: Record<string, string> | null;
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

export function readSafetensors(
  bytes: Uint8Array,
  fileName: string,
  opts: { maxHeaderBytes?: number } = {},
): SafetensorsFile {
  const maxHeader = opts.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
  const fail: (msg: string) => never = (msg) => {
    throw new UserError(`${fileName}: ${msg}`);
  };
  if (bytes.length < 8) {
    fail(
      `not a safetensors file: it is ${bytes.length} bytes long, shorter than the 8-byte header length ` +
        `that starts every safetensors file.`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const lo = view.getUint32(0, true);
  const hi = view.getUint32(4, true);
  const headerLen = hi * 2 ** 32 + lo;
  if (hi !== 0 || headerLen > maxHeader) {
    fail(
      `not a safetensors file: the header length field says ${headerLen} bytes, more than the ` +
        `${maxHeader}-byte limit for a safetensors header.`,
    );
  }
  if (8 + headerLen > bytes.length) {
    fail(
      `the header length field says ${headerLen} bytes but the file has only ${bytes.length - 8} bytes ` +
        `after it; the file is truncated or not a safetensors file.`,
    );
  }

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(
      bytes.subarray(8, 8 + headerLen),
    );
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
  const dataLen = bytes.length - dataStart;
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

  const tensors: SafetensorsFile['tensors'] = new Map();
  for (const e of entries) {
    tensors.set(e.name, { dtype: e.dtype, shape: e.shape, data: decode(bytes, view, dataStart, e) });
  }
  return { tensors, metadata };
}

function decode(bytes: Uint8Array, view: DataView, dataStart: number, e: Entry): Float32Array {
  const start = dataStart + e.begin;
  if (e.dtype === 'F32') {
    const n = (e.end - e.begin) / 4;
    const out = new Float32Array(n);
    if (LITTLE_ENDIAN_HOST) {
      // Fast path: one copy; the fresh buffer is aligned whatever the file offset was.
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

export function writeSafetensors(tensors: NamedTensor[], metadata?: Record<string, string>): Uint8Array {
  const seen = new Set<string>();
  for (const t of tensors) {
    if (typeof t.name !== 'string' || t.name === '' || t.name === '__metadata__') {
      throw new UserError(`cannot write safetensors: invalid tensor name ${describe(t.name)}.`);
    }
    if (seen.has(t.name)) {
      throw new UserError(
        `cannot write safetensors: tensor "${t.name}" appears more than once; names must be unique.`,
      );
    }
    seen.add(t.name);
    let count = 1;
    for (const d of t.shape) {
      if (!isNonNegInt(d)) {
        throw new UserError(
          `cannot write safetensors: tensor "${t.name}" has shape ${fmtShape(t.shape)}; dimensions must be non-negative integers.`,
        );
      }
      count *= d;
    }
    if (t.data.length !== count) {
      throw new UserError(
        `cannot write safetensors: tensor "${t.name}" has ${t.data.length} values but shape ${fmtShape(t.shape)} needs ${count}.`,
      );
    }
  }
  const sorted = tensors.slice().sort((a, b) => compareCodePoints(a.name, b.name));

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
  for (const t of sorted) {
    const end = offset + t.data.length * 4;
    parts.push(
      `${JSON.stringify(t.name)}:{"dtype":"F32","shape":[${t.shape.join(',')}],"data_offsets":[${offset},${end}]}`,
    );
    offset = end;
  }
  const json = new TextEncoder().encode(`{${parts.join(',')}}`);
  const headerLen = Math.ceil(json.length / 8) * 8;
  const out = new Uint8Array(8 + headerLen + offset);
  const view = new DataView(out.buffer);
  view.setUint32(0, headerLen % 2 ** 32, true);
  view.setUint32(4, Math.floor(headerLen / 2 ** 32), true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + headerLen);

  let pos = 8 + headerLen;
  for (const t of sorted) {
    if (LITTLE_ENDIAN_HOST) {
      out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), pos);
    } else {
      for (let i = 0; i < t.data.length; i++) view.setFloat32(pos + 4 * i, t.data[i], true);
    }
    pos += t.data.length * 4;
  }
  return out;
}
