import { describe, it, expect } from 'vitest';
import { UserError } from '../src/common/errors';
import {
  readSafetensors,
  writeSafetensors,
  safetensorsStream,
  collectBytes,
  type NamedTensor,
  type SafetensorsFile,
} from '../src/core/model/safetensors';

const FILE = 'weights/model.safetensors';

/** Build a file from a header object (or raw header text) and a data buffer, like the Rust library would. */
function build(header: unknown, data: Uint8Array = new Uint8Array(0), pad = true): Uint8Array {
  let json = typeof header === 'string' ? header : JSON.stringify(header);
  if (pad) while (json.length % 8 !== 0) json += ' ';
  const h = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + h.length + data.length);
  new DataView(out.buffer).setUint32(0, h.length, true);
  out.set(h, 8);
  out.set(data, 8 + h.length);
  return out;
}

function f32Bytes(values: number[]): Uint8Array {
  const b = new Uint8Array(values.length * 4);
  const dv = new DataView(b.buffer);
  values.forEach((v, i) => dv.setFloat32(4 * i, v, true));
  return b;
}

function u16Bytes(values: number[]): Uint8Array {
  const b = new Uint8Array(values.length * 2);
  const dv = new DataView(b.buffer);
  values.forEach((v, i) => dv.setUint16(2 * i, v, true));
  return b;
}

function toNamed(f: SafetensorsFile): NamedTensor[] {
  return [...f.tensors].map(([name, t]) => ({ name, shape: t.shape, data: t.data }));
}

function bits(a: Float32Array): number[] {
  return [...new Uint32Array(a.buffer, a.byteOffset, a.length)];
}

function userError(fn: () => unknown): UserError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return e as UserError;
  }
  throw new Error('expected a UserError');
}

describe('writeSafetensors / readSafetensors round trip', () => {
  const special = new Float32Array([
    0,
    -0,
    Infinity,
    -Infinity,
    1.4e-45,
    -1.17549421e-38,
    3.4028235e38,
    Math.PI,
  ]);
  const tensors: NamedTensor[] = [
    { name: 'zeta', shape: [2, 4], data: special },
    { name: 'alpha', shape: [3], data: new Float32Array([1, 2, 3]) },
    { name: 'scalar', shape: [], data: new Float32Array([42]) },
    { name: 'empty', shape: [0, 5], data: new Float32Array(0) },
    { name: 'h.10.x', shape: [1], data: new Float32Array([7]) },
    { name: 'h.2.x', shape: [1], data: new Float32Array([8]) },
    { name: 'ünïcode "quoted"\n', shape: [1], data: new Float32Array([9]) },
  ];

  it('is byte-exact and bit-exact', () => {
    const md = { format: 'pt', b: 'x"y' };
    const a = writeSafetensors(tensors, md);
    const f = readSafetensors(a, FILE);
    expect(f.metadata).toEqual(md);
    const b = writeSafetensors(toNamed(f), f.metadata ?? undefined);
    expect(b).toEqual(a);
    expect(b.length).toBe(a.length);
    expect(b.every((v, i) => v === a[i])).toBe(true);
    for (const t of tensors) {
      const got = f.tensors.get(t.name)!;
      expect(got.dtype).toBe('F32');
      expect(got.shape).toEqual(t.shape);
      expect(bits(got.data)).toEqual(bits(t.data));
    }
    expect(Object.is(f.tensors.get('zeta')!.data[1], -0)).toBe(true);
    // Without metadata too.
    const c = writeSafetensors(tensors);
    const fc = readSafetensors(c, FILE);
    expect(fc.metadata).toBeNull();
    expect(writeSafetensors(toNamed(fc))).toEqual(c);
  });

  it('writes the Rust layout: sorted names, metadata first, space padding to 8, contiguous data', () => {
    const out = writeSafetensors(
      [
        { name: 'b', shape: [2], data: new Float32Array([1, 2]) },
        { name: 'a', shape: [1, 1], data: new Float32Array([3]) },
      ],
      { format: 'pt' },
    );
    const dv = new DataView(out.buffer, out.byteOffset);
    const n = dv.getUint32(0, true);
    expect(dv.getUint32(4, true)).toBe(0);
    expect(n % 8).toBe(0);
    const header = new TextDecoder().decode(out.subarray(8, 8 + n));
    const json =
      '{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]},' +
      '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}';
    expect(header.trimEnd()).toBe(json);
    expect(header.slice(json.length)).toMatch(/^ *$/);
    expect(header.length - json.length).toBeLessThan(8);
    expect(out.length).toBe(8 + n + 12);
    expect([...new Float32Array(out.slice(8 + n).buffer)]).toEqual([3, 1, 2]);
  });

  it('reads an unaligned view into a larger buffer', () => {
    const file = writeSafetensors([{ name: 'w', shape: [3], data: new Float32Array([1.5, -2, 1e-40]) }]);
    const big = new Uint8Array(file.length + 3);
    big.set(file, 1);
    const f = readSafetensors(big.subarray(1, 1 + file.length), FILE);
    expect(bits(f.tensors.get('w')!.data)).toEqual(bits(new Float32Array([1.5, -2, 1e-40])));
  });

  it('rejects bad writer input', () => {
    expect(
      userError(() => writeSafetensors([{ name: 'w', shape: [2, 2], data: new Float32Array(3) }])).message,
    ).toContain('"w"');
    const dup = userError(() =>
      writeSafetensors([
        { name: 'w', shape: [1], data: new Float32Array(1) },
        { name: 'w', shape: [1], data: new Float32Array(1) },
      ]),
    );
    expect(dup.message).toContain('"w"');
    expect(dup.message).toMatch(/unique/);
  });
});

describe('readSafetensors decoding', () => {
  it('parses a hand-built file in the Rust layout (metadata, unaligned offsets, gaps allowed)', () => {
    // A 2-byte F16 tensor first leaves the following F32 at an offset that is not a multiple of 4.
    const data = new Uint8Array([...u16Bytes([0x3c00]), ...f32Bytes([0.5, -3])]);
    const header =
      '{"__metadata__":{"format":"pt"},"a.half":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},' +
      '"b.float":{"dtype":"F32","shape":[1,2],"data_offsets":[2,10]}}';
    const f = readSafetensors(build(header, data), FILE);
    expect(f.metadata).toEqual({ format: 'pt' });
    expect([...f.tensors.keys()]).toEqual(['a.half', 'b.float']);
    expect([...f.tensors.get('a.half')!.data]).toEqual([1]);
    expect(f.tensors.get('b.float')!.shape).toEqual([1, 2]);
    expect([...f.tensors.get('b.float')!.data]).toEqual([0.5, -3]);
  });

  it('decodes F16 against hand-worked values', () => {
    const h = [
      0x3c00, 0xc000, 0x7c00, 0xfc00, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x8000, 0x3555, 0x0000, 0x7e00,
    ];
    const want = [
      1,
      -2,
      Infinity,
      -Infinity,
      2 ** -24,
      1023 * 2 ** -24,
      2 ** -14,
      65504,
      -0,
      0.333251953125,
      0,
    ];
    const f = readSafetensors(
      build({ x: { dtype: 'F16', shape: [12], data_offsets: [0, 24] } }, u16Bytes(h)),
      FILE,
    );
    const d = f.tensors.get('x')!.data;
    for (let i = 0; i < want.length; i++) expect(Object.is(d[i], want[i])).toBe(true);
    expect(Number.isNaN(d[11])).toBe(true);
  });

  it('decodes BF16 against hand-worked values', () => {
    const h = [0x3f80, 0xc000, 0x7f80, 0xff80, 0x8000, 0x0001, 0x4049, 0x7fc0];
    const want = [1, -2, Infinity, -Infinity, -0, 2 ** -133, 3.140625];
    const f = readSafetensors(
      build({ x: { dtype: 'BF16', shape: [2, 4], data_offsets: [0, 16] } }, u16Bytes(h)),
      FILE,
    );
    const d = f.tensors.get('x')!.data;
    expect(f.tensors.get('x')!.dtype).toBe('BF16');
    for (let i = 0; i < want.length; i++) expect(Object.is(d[i], want[i])).toBe(true);
    expect(Number.isNaN(d[7])).toBe(true);
  });
});

describe('readSafetensors errors', () => {
  const ok = f32Bytes([1, 2, 3, 4]);
  const T = 'h.0.attn.c_attn.weight';
  const entry = (e: Record<string, unknown>) => ({ [T]: e });
  const cases: [string, Uint8Array][] = [
    ['unsupported dtype F64', build(entry({ dtype: 'F64', shape: [2], data_offsets: [0, 16] }), ok)],
    ['unsupported dtype I64', build(entry({ dtype: 'I64', shape: [2], data_offsets: [0, 16] }), ok)],
    ['unknown dtype', build(entry({ dtype: 'Q4', shape: [2], data_offsets: [0, 8] }), ok)],
    ['entry not an object', build({ [T]: [1, 2] }, ok)],
    ['missing dtype', build(entry({ shape: [4], data_offsets: [0, 16] }), ok)],
    ['dtype not a string', build(entry({ dtype: 7, shape: [4], data_offsets: [0, 16] }), ok)],
    ['missing shape', build(entry({ dtype: 'F32', data_offsets: [0, 16] }), ok)],
    ['shape not an array', build(entry({ dtype: 'F32', shape: '4', data_offsets: [0, 16] }), ok)],
    ['negative dim', build(entry({ dtype: 'F32', shape: [-4], data_offsets: [0, 16] }), ok)],
    ['non-integer dim', build(entry({ dtype: 'F32', shape: [2.5], data_offsets: [0, 16] }), ok)],
    ['missing data_offsets', build(entry({ dtype: 'F32', shape: [4] }), ok)],
    ['data_offsets wrong length', build(entry({ dtype: 'F32', shape: [4], data_offsets: [0] }), ok)],
    ['data_offsets negative', build(entry({ dtype: 'F32', shape: [4], data_offsets: [-4, 12] }), ok)],
    ['data_offsets past the end', build(entry({ dtype: 'F32', shape: [4], data_offsets: [16, 32] }), ok)],
    ['end before begin', build(entry({ dtype: 'F32', shape: [0], data_offsets: [8, 4] }), ok)],
    ['byte length != shape', build(entry({ dtype: 'F32', shape: [3], data_offsets: [0, 16] }), ok)],
    ['byte length != shape for F16', build(entry({ dtype: 'F16', shape: [4], data_offsets: [0, 16] }), ok)],
    [
      'overlapping ranges',
      build(
        {
          aaa: { dtype: 'F32', shape: [3], data_offsets: [0, 12] },
          [T]: { dtype: 'F32', shape: [2], data_offsets: [8, 16] },
        },
        ok,
      ),
    ],
    ['truncated file', build(entry({ dtype: 'F32', shape: [4], data_offsets: [0, 16] }), ok).subarray(0, -3)],
  ];
  for (const [label, bytes] of cases) {
    it(`${label}: UserError naming the file and the tensor`, () => {
      const e = userError(() => readSafetensors(bytes, FILE));
      expect(e.message.startsWith(FILE)).toBe(true);
      expect(e.message).toContain(T);
    });
  }

  it('names the dtype and the supported ones', () => {
    const e = userError(() => readSafetensors(cases[0][1], FILE));
    expect(e.message).toContain('F64');
    expect(e.message).toContain('F32, F16 and BF16');
  });

  it('says what the shape needs', () => {
    const e = userError(() => readSafetensors(cases[15][1], FILE));
    expect(e.message).toContain('[3]');
    expect(e.message).toContain('12 bytes');
  });

  const fileCases: [string, Uint8Array][] = [
    ['shorter than 8 bytes', new Uint8Array([1, 0, 0])],
    ['empty file', new Uint8Array(0)],
    [
      'header longer than the file',
      (() => {
        const b = build({});
        new DataView(b.buffer).setUint32(0, 1000, true);
        return b;
      })(),
    ],
    [
      'absurd header length (high word)',
      (() => {
        const b = new Uint8Array(16);
        new DataView(b.buffer).setUint32(4, 1, true);
        return b;
      })(),
    ],
    [
      'absurd header length (> limit)',
      (() => {
        const b = new Uint8Array(16);
        new DataView(b.buffer).setUint32(0, 200_000_000, true);
        return b;
      })(),
    ],
    [
      'header not UTF-8',
      (() => {
        const b = build('{"a":1}x');
        b[14] = 0xff;
        return b;
      })(),
    ],
    ['header not JSON', build('{"a": ')],
    ['header is an array', build('[1,2,3]')],
    ['header is null', build('null')],
    ['metadata not an object', build({ __metadata__: 'pt' })],
    ['metadata value not a string', build({ __metadata__: { format: 1 } })],
  ];
  for (const [label, bytes] of fileCases) {
    it(`${label}: UserError naming the file`, () => {
      const e = userError(() => readSafetensors(bytes, FILE));
      expect(e.message.startsWith(`${FILE}:`)).toBe(true);
    });
  }

  it('honours maxHeaderBytes', () => {
    const file = writeSafetensors([{ name: 'w', shape: [1], data: new Float32Array(1) }]);
    expect(() => readSafetensors(file, FILE)).not.toThrow();
    const e = userError(() => readSafetensors(file, FILE, { maxHeaderBytes: 16 }));
    expect(e.message).toContain('16-byte limit');
  });

  it('accepts empty tensors anywhere and a header of only metadata', () => {
    const f = readSafetensors(
      build(
        {
          e: { dtype: 'F32', shape: [0, 3], data_offsets: [4, 4] },
          w: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
        },
        f32Bytes([1, 2]),
      ),
      FILE,
    );
    expect(f.tensors.get('e')!.data.length).toBe(0);
    expect(readSafetensors(build({ __metadata__: {} }), FILE).tensors.size).toBe(0);
  });
});

describe('safetensorsStream (a file made one tensor at a time)', () => {
  const tensors = [
    { name: 'b.weight', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
    { name: 'a.bias', shape: [3], data: new Float32Array([-1.5, 0, 7.25]) },
    { name: 'c', shape: [0], data: new Float32Array([]) },
  ];

  it('gives the same bytes as writeSafetensors, reading each tensor once, in file order', async () => {
    const reads: string[] = [];
    const lazy = tensors.map((t) => ({
      name: t.name,
      shape: t.shape,
      data: async () => {
        reads.push(t.name);
        return t.data;
      },
    }));
    const stream = safetensorsStream(lazy, { format: 'pt' });
    expect(reads).toEqual([]); // nothing read before the bytes are asked for
    const whole = writeSafetensors(tensors, { format: 'pt' });
    expect(stream.byteLength).toBe(whole.length);
    const got = await collectBytes(stream);
    expect(Array.from(got)).toEqual(Array.from(whole));
    expect(reads).toEqual(['a.bias', 'b.weight', 'c']);
    // The bytes read back.
    const back = readSafetensors(got, 'stream.safetensors');
    expect(Array.from(back.tensors.get('b.weight')!.data)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('checks names and shapes up front, and a tensor whose data misses its shape when it is due', async () => {
    const ok = async () => new Float32Array(1);
    expect(() =>
      safetensorsStream([
        { name: 'x', shape: [1], data: ok },
        { name: 'x', shape: [1], data: ok },
      ]),
    ).toThrow(/tensor "x" appears more than once/);
    expect(() => safetensorsStream([{ name: 'x', shape: [1.5], data: ok }])).toThrow(/non-negative integers/);
    const bad = safetensorsStream([{ name: 'x', shape: [2], data: ok }]);
    await expect(collectBytes(bad)).rejects.toThrow(/tensor "x" has 1 values but shape \[2\] needs 2/);
  });
});

describe('readSafetensors: F32 values without a copy', () => {
  const tensors = [
    { name: 'a', shape: [2, 2], data: new Float32Array([1, 2, 3, 4]) },
    { name: 'b', shape: [3], data: new Float32Array([5, 6, 7]) },
  ];

  it('aligned values are views of the file (no second copy of a large file in memory)', () => {
    const bytes = writeSafetensors(tensors);
    const file = readSafetensors(bytes, 'x.safetensors');
    for (const t of tensors) {
      const got = file.tensors.get(t.name)!.data;
      expect(Array.from(got)).toEqual(Array.from(t.data));
      expect(got.buffer).toBe(bytes.buffer);
    }
  });

  it('unaligned values (bytes at an odd offset of their buffer) are copied, with the same values', () => {
    const bytes = writeSafetensors(tensors);
    const shifted = new Uint8Array(bytes.length + 1);
    shifted.set(bytes, 1);
    const file = readSafetensors(shifted.subarray(1), 'x.safetensors');
    for (const t of tensors) {
      const got = file.tensors.get(t.name)!.data;
      expect(Array.from(got)).toEqual(Array.from(t.data));
      expect(got.buffer).not.toBe(shifted.buffer);
    }
  });
});

describe('safetensorsStream with a tensor in pieces', () => {
  it('pieces give the same bytes as the whole tensor; more or fewer values than the shape are an error', async () => {
    const whole = new Float32Array([1, 2, 3, 4, 5, 6, 7]);
    const pieces = (cut: number[]) =>
      async function* () {
        let at = 0;
        for (const n of cut) {
          yield Float32Array.from({ length: n }, (_, i) => at + i + 1); // 1, 2, … as `whole`
          at += n;
        }
      };
    const t = (cut: number[]) => [
      { name: 'w', shape: [7], data: async () => new Float32Array(0), pieces: pieces(cut) },
    ];
    const ref = writeSafetensors([{ name: 'w', shape: [7], data: whole }]);
    expect(Array.from(await collectBytes(safetensorsStream(t([3, 3, 1]))))).toEqual(Array.from(ref));
    await expect(collectBytes(safetensorsStream(t([3, 3])))).rejects.toThrow(/has 6 values but shape \[7\]/);
    await expect(collectBytes(safetensorsStream(t([3, 3, 3])))).rejects.toThrow(
      /has 9 values but shape \[7\]/,
    );
  });
});
