/**
 * The frozen base of a LoRA model stored in f16 on WebGPU (config `baseDtype: "f16"`; docs/models.md, "The frozen base in f16"): a weight
 * [rows, cols] is held as a tfjs int32 tensor [rows, cols / 2] whose every 32-bit word packs two IEEE binary16
 * values, element 2j in the low half and 2j + 1 in the high half (WGSL's `unpack2x16float` order, which every
 * adapter has, SwiftShader included; no `shader-f16` needed). The kernels here read those words, unpack to f32 and
 * accumulate in f32, so only the storage is half precision:
 * - `PerfF16MatMul`: y [M, N] = x [M, K] · Wᵀ (W [N, K] packed: nn.Linear's layout, the tied LM head) + bias, and
 *   with `transB` false dx [M, K'] = dy [M, N'] · W (W [N', K'] packed): the backward to the activations (the
 *   frozen weight itself never gets a gradient). 32×32 output tile per workgroup of 16×16 threads, 2×2 outputs
 *   each, K in slices of 16 through workgroup memory. Where the fused linear's programs apply (the usual case)
 *   both products run there instead, on the packed words (kernels/webgpu-linear.ts: mmNT, mmNN below); this
 *   program is the fallback (the fused path switched off, or a grid beyond its workgroup limit).
 * - `PerfF16Gather`: rows of a packed [V, C] table at int ids → f32 [N, C], zero where an id is outside the rows
 *   this chunk holds (`lo` … `lo + V − 1`), so the chunks of a vocabulary matrix sum to one gather.
 * Host side: packF16 / f16Bits round f32 → binary16 to nearest even (what torch's `.half()` does), and
 * unpackF16 goes back, for tests and export.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';
import {
  linearNtDecodeWebGpu,
  linearPackedNNWebGpu,
  webGpuLinearNtDecodeApplies,
  webGpuLinearPackedNNApplies,
} from './webgpu-linear';

export const F16_MM = 'PerfF16MatMul';
export const F16_GATHER = 'PerfF16Gather';
export const F16_ROWS = 'PerfF16Rows';

// ---------------------------------------------------------------------------------------------------------
// Host conversion

const f32Buf = new Float32Array(1);
const u32Buf = new Uint32Array(f32Buf.buffer);

/** The binary16 bits of `v` rounded to nearest, ties to even (overflow → ±Inf, NaN stays NaN). */
export function f16Bits(v: number): number {
  f32Buf[0] = v;
  return f16BitsOfF32Bits(u32Buf[0]);
}

/** binary16 bits of the float32 with bits `x` (round to nearest even). */
export function f16BitsOfF32Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // Inf / NaN
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow
  if (e <= 0) {
    // Subnormal half (or zero): shift the full mantissa (with its implicit 1) right, round to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (half + (rem > mid || (rem === mid && half & 1) ? 1 : 0));
  }
  const half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to Inf).
  return sign | (half + (rem > 0x1000 || (rem === 0x1000 && half & 1) ? 1 : 0));
}

/** float32 value of binary16 bits `h`. */
export function f16BitsToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/**
 * `v` rounded to the nearest binary16 value, as a float32 (torch's `.half().float()`). Where the result is a normal
 * half (float32 exponents 113 … 142), on the float32 bits: round the 13 dropped mantissa bits to nearest even (a
 * carry bumps the exponent; past 142 that is ±Inf), ~20× faster than through the half's bits (tests round ~100 M
 * weights), which the rest (zeros, subnormal halves, Inf, NaN) still takes: the same bits either way.
 */
export function roundToF16(v: Float32Array): Float32Array {
  const out = new Float32Array(v.length);
  const bits = new Uint32Array(v.buffer, v.byteOffset, v.length);
  const outBits = new Uint32Array(out.buffer);
  for (let i = 0; i < v.length; i++) {
    const x = bits[i];
    const exp = (x >>> 23) & 0xff;
    if (exp < 113 || exp > 142) {
      out[i] = f16BitsToF32(f16BitsOfF32Bits(x));
      continue;
    }
    const r = (x + 0xfff + ((x >>> 13) & 1)) & 0xffffe000;
    outBits[i] = ((r >>> 23) & 0xff) > 142 ? (x & 0x80000000) | 0x7f800000 : r;
  }
  return out;
}

/** Words of an even-length element count n: n / 2. Throws for an odd count (no packed tensor has one). */
function wordsOf(n: number): number {
  if (n % 2 !== 0) throw new Error(`f16 packing: ${n} values, an odd count (a packed row holds pairs)`);
  return n / 2;
}

/** Pack f32 values as binary16 pairs: word j = half(v[2j]) | half(v[2j + 1]) << 16. */
export function packF16(v: Float32Array): Int32Array {
  const out = new Int32Array(wordsOf(v.length));
  const bits = new Uint32Array(v.buffer, v.byteOffset, v.length);
  for (let j = 0; j < out.length; j++) {
    out[j] = f16BitsOfF32Bits(bits[2 * j]) | (f16BitsOfF32Bits(bits[2 * j + 1]) << 16);
  }
  return out;
}

/** The f32 values of packed words (2 per word). */
export function unpackF16(words: Int32Array): Float32Array {
  const out = new Float32Array(words.length * 2);
  for (let j = 0; j < words.length; j++) {
    out[2 * j] = f16BitsToF32(words[j] & 0xffff);
    out[2 * j + 1] = f16BitsToF32((words[j] >>> 16) & 0xffff);
  }
  return out;
}

/** Whether a tensor is a packed-f16 weight (int32 words; every other weight of a model is float32). */
export function isPackedF16(t: tf.TensorInfo): boolean {
  return t.dtype === 'int32';
}

/** The logical [rows, cols] of a packed weight [rows, cols / 2]. */
export function packedShape(t: tf.TensorInfo): [number, number] {
  if (t.shape.length !== 2) throw new Error(`packed f16 weight: expected rank 2, got [${t.shape}]`);
  return [t.shape[0], t.shape[1] * 2];
}

// ---------------------------------------------------------------------------------------------------------
// Programs

const TM = 32;
const TN = 32;
const TK = 16;
const TS = 16;
const MAX_GROUPS = 65535;

/** WGSL: element i of the packed weight W (flat index into its logical [rows, cols]). */
const W_AT = `
      fn wAt(i : i32) -> f32 {
        let u = unpack2x16float(bitcast<u32>(W[i >> 1u]));
        return select(u.x, u.y, (i & 1) == 1);
      }`;

/**
 * y [M, N] = x [M, K] · op(W) (+ Bias[N]): transB (W [N, K], x·Wᵀ) or not (W [K, N], dy·W), W packed f16.
 * Loads into workgroup memory as f32; FMAs in f32.
 */
class F16MatMulProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [TS, TS, 1];
  readonly uniforms = 'dimM : i32, dimN : i32, dimK : i32,';

  constructor(
    private readonly transB: boolean,
    private readonly bias: boolean,
    M: number,
    N: number,
  ) {
    this.variableNames = ['X', 'W', ...(bias ? ['Bias'] : [])];
    this.outputShape = [M, N];
    this.shaderKey = `perfF16MatMul_${+transB}${+bias}`;
    this.dispatch = [Math.ceil(N / TN), Math.ceil(M / TM), 1];
  }

  getUserCode(): string {
    const loads = (TM * TK) / (TS * TS); // 2
    // B tile Bs[k][n]: W [N, K] (transB): neighbouring threads neighbouring k (one row's words); W [K, N]: n.
    const loadB = this.transB
      ? `let kk = f % ${TK}; let nn = f / ${TK};
         let c = col0 + nn; let k = k0 + kk;
         var v = 0.0;
         if (c < N && k < K) { v = wAt(c * K + k); }`
      : `let nn = f % ${TN}; let kk = f / ${TN};
         let c = col0 + nn; let k = k0 + kk;
         var v = 0.0;
         if (c < N && k < K) { v = wAt(k * N + c); }`;
    const bias = this.bias ? ' + Bias[c]' : '';
    return `
      var<workgroup> As : array<f32, ${TM * TK}>;
      var<workgroup> Bs : array<f32, ${TN * TK}>;
      ${W_AT}
      fn main(index : i32) {
        let M = uniforms.dimM;
        let N = uniforms.dimN;
        let K = uniforms.dimK;
        let tx = i32(localId.x);
        let ty = i32(localId.y);
        let tid = ty * ${TS} + tx;
        let row0 = i32(workgroupId.y) * ${TM};
        let col0 = i32(workgroupId.x) * ${TN};
        var acc00 = 0.0; var acc01 = 0.0; var acc10 = 0.0; var acc11 = 0.0;
        for (var k0 = 0; k0 < K; k0 = k0 + ${TK}) {
          for (var l = 0; l < ${loads}; l = l + 1) {
            let f = tid + l * ${TS * TS};
            let kk = f % ${TK}; let mm = f / ${TK};
            let r = row0 + mm; let k = k0 + kk;
            var v = 0.0;
            if (r < M && k < K) { v = X[r * K + k]; }
            As[kk * ${TM} + mm] = v;
          }
          for (var l = 0; l < ${loads}; l = l + 1) {
            let f = tid + l * ${TS * TS};
            ${loadB}
            Bs[kk * ${TN} + nn] = v;
          }
          workgroupBarrier();
          for (var kk = 0; kk < ${TK}; kk = kk + 1) {
            let a0 = As[kk * ${TM} + ty];
            let a1 = As[kk * ${TM} + ty + ${TS}];
            let b0 = Bs[kk * ${TN} + tx];
            let b1 = Bs[kk * ${TN} + tx + ${TS}];
            acc00 = fma(a0, b0, acc00); acc01 = fma(a0, b1, acc01);
            acc10 = fma(a1, b0, acc10); acc11 = fma(a1, b1, acc11);
          }
          workgroupBarrier();
        }
        ${[0, 1]
          .flatMap((i) =>
            [0, 1].map(
              (j) => `{
          let r = row0 + ty + ${i * TS};
          let c = col0 + tx + ${j * TS};
          if (r < M && c < N) { result[r * N + c] = acc${i}${j}${bias}; }
        }`,
            ),
          )
          .join('\n        ')}
      }`;
  }
}

/** out [N, C] = W[ids[i] − lo] for ids in [lo, lo + V), else 0; W [V, C] packed. One thread per output. */
class F16GatherProgram {
  readonly variableNames = ['W', 'Ids'];
  readonly outputShape: number[];
  readonly shaderKey = 'perfF16Gather';
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [256, 1, 1];
  readonly uniforms = 'rows : i32, cols : i32, lo : i32, n : i32,';

  constructor(N: number, C: number) {
    this.outputShape = [N, C];
    const groups = Math.ceil((N * C) / 256);
    // A 2-D dispatch past WebGPU's 65535 per dimension (a 64k × 1.5k gather is ~390k groups).
    const x = Math.min(groups, MAX_GROUPS);
    this.dispatch = [x, Math.ceil(groups / x), 1];
  }

  getUserCode(): string {
    return `
      ${W_AT}
      fn main(index : i32) {
        let o = (i32(workgroupId.y) * i32(numWorkgroups.x) + i32(workgroupId.x)) * 256 + i32(localId.x);
        let C = uniforms.cols;
        if (o >= uniforms.n * C) { return; }
        let i = o / C;
        let c = o % C;
        let row = Ids[i] - uniforms.lo;
        var v = 0.0;
        if (row >= 0 && row < uniforms.rows) { v = wAt(row * C + c); }
        result[o] = v;
      }`;
  }
}

/**
 * out [n, Cw] = W[lo + i, :] for a packed W [rows, Cw]: the words copied as they are. tfjs's own slice reads int32
 * data through f32, which rounds words above 2^24 (most packed words): never slice a packed weight with tf.slice.
 */
class F16RowsProgram {
  readonly variableNames = ['W'];
  readonly outputShape: number[];
  readonly shaderKey = 'perfF16Rows';
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [256, 1, 1];
  readonly uniforms = 'lo : i32, words : i32,';

  constructor(n: number, Cw: number) {
    this.outputShape = [n, Cw];
    const groups = Math.ceil((n * Cw) / 256);
    const x = Math.min(groups, MAX_GROUPS);
    this.dispatch = [x, Math.ceil(groups / x), 1];
  }

  getUserCode(): string {
    return `
      fn main(index : i32) {
        let o = (i32(workgroupId.y) * i32(numWorkgroups.x) + i32(workgroupId.x)) * 256 + i32(localId.x);
        if (o >= uniforms.words) { return; }
        result[o] = W[uniforms.lo * ${this.outputShape[1]} + o];
      }`;
  }
}

const KERNELS: Record<string, KernelFn> = {
  [F16_ROWS]: ({ inputs, backend, attrs }) => {
    const { w } = inputs as Record<string, tf.TensorInfo>;
    const Cw = w.shape[1];
    const lo = attrs!.lo as number;
    const n = attrs!.n as number;
    return (backend as WebGpuBackendLike).runWebGPUProgram(new F16RowsProgram(n, Cw), [w], 'int32', [
      { type: 'int32', data: [lo] },
      { type: 'int32', data: [n * Cw] },
    ]);
  },
  [F16_MM]: ({ inputs, backend, attrs }) => {
    const { x, w, bias } = inputs as Record<string, tf.TensorInfo | undefined>;
    const transB = !!attrs?.transB;
    const [M, K] = x!.shape;
    const [wr, wc] = packedShape(w!);
    const N = transB ? wr : wc;
    const program = new F16MatMulProgram(transB, !!bias, M, N);
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      program,
      [x!, w!, ...(bias ? [bias] : [])],
      'float32',
      [
        { type: 'int32', data: [M] },
        { type: 'int32', data: [N] },
        { type: 'int32', data: [K] },
      ],
    );
  },
  [F16_GATHER]: ({ inputs, backend, attrs }) => {
    const { w, ids } = inputs as Record<string, tf.TensorInfo>;
    const [V, C] = packedShape(w);
    const N = ids.shape.reduce((a, b) => a * b, 1);
    return (backend as WebGpuBackendLike).runWebGPUProgram(new F16GatherProgram(N, C), [w, ids], 'float32', [
      { type: 'int32', data: [V] },
      { type: 'int32', data: [C] },
      { type: 'int32', data: [(attrs?.lo as number | undefined) ?? 0] },
      { type: 'int32', data: [N] },
    ]);
  },
};

/** Register the kernels for webgpu (idempotent). */
export function registerWebGpuF16(): void {
  registerWebGpuKernels(KERNELS);
}

function checkBackend(what: string): void {
  if (tf.getBackend() !== 'webgpu') {
    throw new Error(
      `${what}: a packed-f16 weight is read by WebGPU kernels only, but the backend is "${tf.getBackend()}" ` +
        '(baseDtype "f16" needs the webgpu backend).',
    );
  }
}

/**
 * x [M, K] · W(packed [N, K])ᵀ → [M, N], no gradient: through the fused linear's program (kernels/webgpu-linear.ts,
 * the f32 path's own: 64 × 64 tiles of 4 × 4 outputs a thread, or its few-rows program at a decode step's rows on a
 * hardware adapter) reading the packed words, where it applies; else PerfF16MatMul's 32 × 32 tiles.
 */
function mmNT(x: tf.Tensor, w: tf.Tensor, bias?: tf.Tensor | null): tf.Tensor2D {
  const o = { w: [w as tf.Tensor2D], ...(bias ? { bias: bias as tf.Tensor1D } : {}) };
  if (webGpuLinearNtDecodeApplies(x, o)) return linearNtDecodeWebGpu(x as tf.Tensor2D, o);
  return tf.engine().runKernel(F16_MM, { x, w, ...(bias ? { bias } : {}) }, { transB: true }) as tf.Tensor2D;
}

/**
 * dy [M, N] · W(packed [N, K]) → [M, K], no gradient: through the fused linear's product (the f32 backward's own
 * program, kernels/webgpu-linear.ts) reading the packed words, where it applies; else PerfF16MatMul's 32 × 32
 * tiles.
 */
function mmNN(dy: tf.Tensor, w: tf.Tensor): tf.Tensor2D {
  if (webGpuLinearPackedNNApplies(dy, w)) return linearPackedNNWebGpu(dy as tf.Tensor2D, w as tf.Tensor2D);
  return tf.engine().runKernel(F16_MM, { x: dy, w }, { transB: false }) as tf.Tensor2D;
}

/**
 * x [M, K] · Wᵀ (+ bias) with W [N, K] packed f16 and frozen: differentiable in x only (dx = dy · W through the
 * same packed read); the bias, when given, is a frozen f32 [N] folded into the store.
 */
export function f16LinearNT(x: tf.Tensor2D, w: tf.Tensor, bias?: tf.Tensor | null): tf.Tensor2D {
  checkBackend('f16LinearNT');
  registerWebGpuF16();
  const [N, K] = packedShape(w);
  if (x.rank !== 2 || x.shape[1] !== K || x.dtype !== 'float32') {
    throw new Error(`f16LinearNT: x must be float32 [M, ${K}] for a weight [${N}, ${K}], got [${x.shape}]`);
  }
  if (bias && (bias.rank !== 1 || bias.shape[0] !== N)) {
    throw new Error(`f16LinearNT: bias must be [${N}], got [${bias.shape}]`);
  }
  if (Math.ceil(N / TN) > MAX_GROUPS || Math.ceil(x.shape[0] / TM) > MAX_GROUPS) {
    throw new Error(
      `f16LinearNT: [${x.shape}] · [${N}, ${K}]ᵀ exceeds ${MAX_GROUPS} workgroups per dimension`,
    );
  }
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const xi = args[0] as tf.Tensor;
    return {
      value: mmNT(xi, w, bias),
      gradFunc: (dy: tf.Tensor) => mmNN(dy, w),
    };
  }) as (x: tf.Tensor) => tf.Tensor2D;
  return f(x);
}

/** dy [M, N] · W for W [N, K] packed f16 → [M, K] (no gradient: a backward pass's product). */
export function f16MatMulNN(dy: tf.Tensor2D, w: tf.Tensor): tf.Tensor2D {
  checkBackend('f16MatMulNN');
  registerWebGpuF16();
  const [N] = packedShape(w);
  if (dy.rank !== 2 || dy.shape[1] !== N) {
    throw new Error(`f16MatMulNN: dy must be [M, ${N}], got [${dy.shape}]`);
  }
  return mmNN(dy, w);
}

/** Rows of a packed [V, C] table at `ids` (any shape, flattened) minus `lo`; 0 outside the table. [N, C] f32. */
export function f16Gather(w: tf.Tensor, ids: tf.Tensor, lo = 0): tf.Tensor2D {
  checkBackend('f16Gather');
  registerWebGpuF16();
  const idx = ids.dtype === 'int32' ? ids : tf.cast(ids, 'int32');
  try {
    return tf.engine().runKernel(F16_GATHER, { w, ids: idx }, { lo }) as tf.Tensor2D;
  } finally {
    if (idx !== ids) idx.dispose();
  }
}

/** Rows [lo, lo + n) of a packed [rows, C] weight, still packed (its words copied exactly; never tf.slice). */
export function f16Rows(w: tf.Tensor, lo: number, n: number): tf.Tensor2D {
  checkBackend('f16Rows');
  registerWebGpuF16();
  const [rows] = packedShape(w);
  if (!Number.isInteger(lo) || !Number.isInteger(n) || lo < 0 || n < 1 || lo + n > rows) {
    throw new Error(`f16Rows: rows [${lo}, ${lo + n}) are not within the weight's ${rows} rows`);
  }
  return tf.engine().runKernel(F16_ROWS, { w }, { lo, n }) as tf.Tensor2D;
}
