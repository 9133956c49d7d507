/**
 * The register-blocked GEMM (src/core/kernels/gemm.wat → gemm-wasm.ts, loaded by gemm-wasm-api.ts), both builds —
 * relaxed SIMD (f32x4.relaxed_madd) and plain SIMD (mul then add) — against plain loops, for every shape class the
 * engine uses: square, tall, the 8-row decode products, Aᵀ·B and A·Bᵀ (the backward's two products), odd sizes
 * that are multiples of neither tile dimension (4 rows, 8 columns), an empty K, and a C with a row stride wider
 * than N. Also: the committed bytes are what scripts/build-wasm-kernels.ts assembles, relaxed SIMD is detected,
 * and the shared-memory builds give the same bits.
 *
 * Tolerances. The plain build computes each C element as the float32 loop does (products rounded, then added
 * k = 0..K−1, each sum rounded), so it must equal a float32 plain loop bit for bit. The relaxed build lets the
 * engine fuse each multiply-add (one rounding instead of two: x64 with FMA3 does), so its bits may differ from
 * that loop's in the last places; it is held to the standard forward-error bound of a recursive float32 dot
 * product against the float64 loop, |ĉ − c| ≤ γ_K · Σ_k |a_ik·b_kj| with γ_K = K·u/(1 − K·u), u = 2⁻²⁴, which
 * holds for fused and unfused steps alike (each step rounds at most as often as the unfused one). With small
 * integer inputs every product and partial sum is exact in float32, fused or not, so both builds must then equal
 * the float64 loop exactly — that checks the packing and indexing independently of rounding.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
import {
  GEMM_NT_MAX_ROWS,
  gemmNtStats,
  gemmStats,
  registerWasmExtraKernels,
  setWasmGemm,
  swappedStats,
  wasmGemmEnabled,
  whileGenerating,
} from '../src/core/kernels/wasm-extra';
import { readFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { gemmModule, GEMM, GEMM_VARIANTS, plainSimdVariant } from '../scripts/build-wasm-kernels';
import {
  enableRelaxedSimd,
  gemmFor,
  packedABytes,
  packedBBytes,
  relaxedSimdSupported,
  type Gemm,
} from '../src/core/kernels/gemm-wasm-api';
import {
  GEMM_RELAXED_SHARED_WASM,
  GEMM_RELAXED_WASM,
  GEMM_SHARED_WASM,
  GEMM_WASM,
} from '../src/core/kernels/gemm-wasm';

interface Case {
  label: string;
  M: number;
  K: number;
  N: number;
  /** A stored transposed (K×M) / B stored transposed (N×K). */
  ta?: boolean;
  tb?: boolean;
  /** C's row stride (≥ N). */
  ldc?: number;
}

const CASES: Case[] = [
  { label: 'square 64³', M: 64, K: 64, N: 64 },
  { label: 'square 96 (K not a power of two)', M: 96, K: 96, N: 96 },
  { label: 'tall 301×40×24', M: 301, K: 40, N: 24 },
  { label: 'wide 12×24×520', M: 12, K: 24, N: 520 },
  { label: '8-row decode 8×768×3072', M: 8, K: 768, N: 3072 },
  { label: '8-row decode, odd N 8×160×483', M: 8, K: 160, N: 483 },
  { label: 'Aᵀ·B (Xᵀ·dY) 40×33×56', M: 40, K: 33, N: 56, ta: true },
  { label: 'Aᵀ·B ragged 13×20×31', M: 13, K: 20, N: 31, ta: true },
  { label: 'A·Bᵀ (dY·Wᵀ) 37×72×44', M: 37, K: 72, N: 44, tb: true },
  { label: 'A·Bᵀ ragged 7×19×23', M: 7, K: 19, N: 23, tb: true },
  { label: 'Aᵀ·Bᵀ 12×16×9', M: 12, K: 16, N: 9, ta: true, tb: true },
  // Bᵀ's full panels are packed four k at a time (a 4 × 4 transpose in registers), the k past them one by one.
  { label: 'A·Bᵀ, K ≡ 1 (mod 4), two full panels and a part 6×13×17', M: 6, K: 13, N: 17, tb: true },
  { label: 'odd 1×1×1', M: 1, K: 1, N: 1 },
  { label: 'odd 5×7×9', M: 5, K: 7, N: 9 },
  { label: 'odd 3×129×7', M: 3, K: 129, N: 7 },
  { label: 'odd 33×1×3', M: 33, K: 1, N: 3 },
  { label: 'K = 0 (C is zeros)', M: 6, K: 0, N: 10 },
  { label: 'ldc > N: 9×11×13 into a C of row stride 20', M: 9, K: 11, N: 13, ldc: 20 },
  // More panels than one L2 block holds (≈512 KB of packed B: 2048 × 32 B per panel → 8 panels per block).
  { label: 'several blocks of panels 6×2048×100', M: 6, K: 2048, N: 100 },
];

/** Deterministic values in [−1, 1), or small integers in [−3, 3] with `ints`. */
function values(n: number, seed: number, ints = false): Float32Array {
  let x = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return ints ? (x >>> 29) - 3 : x / 2 ** 31 - 1;
  });
}

/** Element [i, k] of A and [k, j] of B as stored (row-major, transposed or not). */
const aAt = (A: Float32Array, c: Case, i: number, k: number): number =>
  c.ta ? A[k * c.M + i] : A[i * c.K + k];
const bAt = (B: Float32Array, c: Case, k: number, j: number): number =>
  c.tb ? B[j * c.K + k] : B[k * c.N + j];

/** The float64 loop: C and Σ|a·b| per element. */
function reference64(A: Float32Array, B: Float32Array, c: Case): { C: Float64Array; abs: Float64Array } {
  const C = new Float64Array(c.M * c.N);
  const abs = new Float64Array(c.M * c.N);
  for (let i = 0; i < c.M; i++)
    for (let j = 0; j < c.N; j++) {
      let s = 0;
      let t = 0;
      for (let k = 0; k < c.K; k++) {
        const p = aAt(A, c, i, k) * bAt(B, c, k, j);
        s += p;
        t += Math.abs(p);
      }
      C[i * c.N + j] = s;
      abs[i * c.N + j] = t;
    }
  return { C, abs };
}

/** The float32 loop: each product rounded, then each sum, k in increasing order. */
function reference32(A: Float32Array, B: Float32Array, c: Case): Float32Array {
  const C = new Float32Array(c.M * c.N);
  for (let i = 0; i < c.M; i++)
    for (let j = 0; j < c.N; j++) {
      let s = 0;
      for (let k = 0; k < c.K; k++) s = Math.fround(s + Math.fround(aAt(A, c, i, k) * bAt(B, c, k, j)));
      C[i * c.N + j] = s;
    }
  return C;
}

const SENTINEL = -12345.5;

/** C's M×N elements (row stride ldc) from cLen floats at pC, and whether every sentinel around them survived. */
function readGuarded(mem: WebAssembly.Memory, pC: number, cLen: number, ldc: number, M: number, N: number) {
  const all = new Float32Array(mem.buffer, pC, cLen);
  const out = new Float32Array(M * N);
  let guardsIntact = true;
  for (let i = 0; i < all.length; i++) {
    const row = Math.floor(i / ldc);
    const col = i % ldc;
    if (row < M && col < N) out[row * N + col] = all[i];
    else if (all[i] !== SENTINEL) guardsIntact = false;
  }
  return { out, guardsIntact };
}

/**
 * Lay A, B and C out in `mem` (C filled with a sentinel, gaps included, plus a guard row after it), pack both
 * operands from their stored strides, run the product; return C's M×N elements and whether every sentinel
 * outside them survived.
 */
function runGemm(g: Gemm, mem: WebAssembly.Memory, A: Float32Array, B: Float32Array, c: Case) {
  const ldc = c.ldc ?? c.N;
  const cLen = c.M * ldc + 16; // a guard past the last row
  const pA = 64; // not at 0, so a stray write to address 0 would not go unseen
  const pB = pA + 4 * A.length;
  const pC = pB + 4 * B.length;
  const pPA = pC + 4 * cLen;
  const pPB = pPA + packedABytes(c.M, c.K);
  const need = pPB + packedBBytes(c.K, c.N);
  if (need > mem.buffer.byteLength) mem.grow(Math.ceil((need - mem.buffer.byteLength) / 65536));
  new Float32Array(mem.buffer, pA, A.length).set(A);
  new Float32Array(mem.buffer, pB, B.length).set(B);
  new Float32Array(mem.buffer, pC, cLen).fill(SENTINEL);
  g.packA(pA, c.ta ? 1 : c.K, c.ta ? c.M : 1, c.M, c.K, pPA);
  g.packB(pB, c.tb ? 1 : c.N, c.tb ? c.K : 1, c.K, c.N, pPB);
  g.gemm(pPA, pPB, pC, ldc, c.M, c.K, c.N);
  return readGuarded(mem, pC, cLen, ldc, c.M, c.N);
}

const U = 2 ** -24;

describe('register-blocked GEMM on WebAssembly (gemm.wat)', () => {
  let relaxedOn = false;
  const mem = new WebAssembly.Memory({ initial: 16 });
  const builds: { name: string; relaxed: boolean }[] = [
    { name: 'relaxed SIMD', relaxed: true },
    { name: 'plain SIMD', relaxed: false },
  ];

  beforeAll(() => {
    relaxedOn = enableRelaxedSimd();
  });

  it('the committed module is what gemm.wat assembles to, in four builds', async () => {
    const { source, bytes } = await gemmModule();
    expect(await readFile(GEMM.out, 'utf8')).toBe(source);
    expect(GEMM_VARIANTS.map((v) => v.constName)).toEqual([
      'GEMM_RELAXED_WASM',
      'GEMM_RELAXED_SHARED_WASM',
      'GEMM_WASM',
      'GEMM_SHARED_WASM',
    ]);
    expect(bytes.GEMM_RELAXED_WASM).toEqual(GEMM_RELAXED_WASM);
    expect(bytes.GEMM_WASM).toEqual(GEMM_WASM);
    expect(bytes.GEMM_RELAXED_SHARED_WASM).toEqual(GEMM_RELAXED_SHARED_WASM);
    expect(bytes.GEMM_SHARED_WASM).toEqual(GEMM_SHARED_WASM);
  });

  it('the plain build has no relaxed instruction left, and an unrewritable one is refused', async () => {
    const text = await readFile(GEMM.wat, 'utf8');
    expect(text).toMatch(/f32x4\.relaxed_madd/);
    const plain = plainSimdVariant(text);
    expect(plain.split('\n').filter((l) => !l.trim().startsWith(';;') && /relaxed/.test(l))).toEqual([]);
    expect(plain).toMatch(/f32x4\.add \(f32x4\.mul/);
    expect(() =>
      plainSimdVariant('(f32x4.relaxed_madd (f32x4.splat (local.get $x)) (local.get $y) (local.get $z))'),
    ).toThrow(/cannot rewrite/);
  });

  it('relaxed SIMD is detected: on here after enableRelaxedSimd (Node 20 with the flag set at run time)', () => {
    expect(relaxedOn).toBe(true);
    expect(relaxedSimdSupported()).toBe(true);
    expect(WebAssembly.validate(GEMM_RELAXED_WASM)).toBe(true);
    const r = gemmFor(mem, { relaxed: true });
    const p = gemmFor(mem, { relaxed: false });
    expect(r?.relaxed).toBe(true);
    expect(p?.relaxed).toBe(false);
    expect(gemmFor(mem)).toBe(r); // the best build by default, one instance per memory and build
  });

  it('where relaxed SIMD is missing (Node 20 without the flag), the default is the plain build', () => {
    const script =
      "import { gemmFor, relaxedSimdSupported } from './src/core/kernels/gemm-wasm-api.ts';" +
      'const m = new WebAssembly.Memory({ initial: 1 });' +
      'console.log(JSON.stringify({ supported: relaxedSimdSupported(), best: gemmFor(m)?.relaxed,' +
      ' forced: gemmFor(m, { relaxed: true })?.relaxed ?? null, plain: gemmFor(m, { relaxed: false })?.relaxed }));';
    const major = Number(process.versions.node.split('.')[0]);
    const out = JSON.parse(
      execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        encoding: 'utf8',
      }).trim(),
    );
    // Node 22+ has relaxed SIMD on by default; Node 20 needs the flag this child does not get.
    if (major < 22) expect(out).toEqual({ supported: false, best: false, forced: null, plain: false });
    else expect(out).toEqual({ supported: true, best: true, forced: true, plain: false });
  });

  for (const c of CASES) {
    for (const b of builds) {
      it(`${b.name}: ${c.label} — within the float32 bound of the float64 loop${b.relaxed ? '' : ', and bit-equal to the float32 loop'}`, () => {
        const g = gemmFor(mem, { relaxed: b.relaxed })!;
        expect(g.relaxed).toBe(b.relaxed);
        const A = values(c.M * c.K, 7 + c.M + c.K);
        const B = values(c.K * c.N, 11 + c.N);
        const { out, guardsIntact } = runGemm(g, mem, A, B, c);
        expect(guardsIntact, 'wrote outside C').toBe(true);
        const { C, abs } = reference64(A, B, c);
        const gamma = (c.K * U) / (1 - c.K * U);
        let worst = 0; // the largest error as a fraction of its bound
        for (let i = 0; i < out.length; i++) {
          const err = Math.abs(out[i] - C[i]);
          // K = 0: the bound is 0 and C must be exactly 0
          const bound = gamma * abs[i];
          if (err > bound) worst = Infinity;
          else if (bound > 0) worst = Math.max(worst, err / bound);
        }
        expect(worst).toBeLessThanOrEqual(1);
        if (!b.relaxed) expect(Array.from(out)).toEqual(Array.from(reference32(A, B, c)));
      });
    }
  }

  for (const c of CASES.filter((x) => x.K <= 768)) {
    it(`both builds: ${c.label} with small integers — exact, equal to the float64 loop`, () => {
      const A = values(c.M * c.K, 3 + c.M, true);
      const B = values(c.K * c.N, 5 + c.N, true);
      const ref = Array.from(reference64(A, B, c).C);
      for (const b of builds) {
        const { out, guardsIntact } = runGemm(gemmFor(mem, { relaxed: b.relaxed })!, mem, A, B, c);
        expect(guardsIntact).toBe(true);
        expect(Array.from(out), b.name).toEqual(ref);
      }
    });
  }

  it('the shared-memory builds (tfjs’s threaded heap) give the same bits as the plain-memory ones', () => {
    const shared = new WebAssembly.Memory({ initial: 16, maximum: 65536, shared: true });
    for (const b of builds) {
      const gs = gemmFor(shared, { relaxed: b.relaxed })!;
      const gp = gemmFor(mem, { relaxed: b.relaxed })!;
      expect(gs).not.toBe(gp);
      for (const c of [CASES[2], CASES[6], CASES[9], CASES[12]]) {
        const A = values(c.M * c.K, 1);
        const B = values(c.K * c.N, 2);
        const s = runGemm(gs, shared, A, B, c);
        const p = runGemm(gp, mem, A, B, c);
        expect(s.guardsIntact).toBe(true);
        expect(Array.from(s.out), `${b.name} ${c.label}`).toEqual(Array.from(p.out));
      }
    }
  });

  it("pack_b's layout, B stored as is or transposed (full panels four k at a time), from any column stride", () => {
    const g = gemmFor(mem, { relaxed: false })!;
    const SENT = -12345.5;
    for (const tb of [false, true])
      for (const K of [1, 3, 4, 5, 8, 19])
        for (const N of [1, 8, 9, 16, 23])
          for (const pad of [0, 3]) {
            // B as stored: K×N row-major (row stride N + pad) or, transposed, N×K (row stride K + pad).
            const ld = (tb ? K : N) + pad;
            const stored = values((tb ? N : K) * ld, 13 + K + N);
            const at = (k: number, j: number) => (tb ? stored[j * ld + k] : stored[k * ld + j]);
            const panels = Math.ceil(N / 8);
            const want = new Float32Array(panels * K * 8);
            for (let p = 0; p < panels; p++)
              for (let k = 0; k < K; k++)
                for (let t = 0; t < 8; t++) want[(p * K + k) * 8 + t] = 8 * p + t < N ? at(k, 8 * p + t) : 0;
            const pB = 64;
            const pP = pB + 4 * stored.length + 64;
            new Float32Array(mem.buffer, pB, stored.length).set(stored);
            new Float32Array(mem.buffer, pP, want.length + 16).fill(SENT);
            g.packB(pB, tb ? 1 : ld, tb ? ld : 1, K, N, pP);
            const got = new Float32Array(mem.buffer, pP, want.length + 16);
            const label = `${tb ? 'Bᵀ' : 'B'} K ${K} N ${N} pad ${pad}`;
            expect(Array.from(got.subarray(0, want.length)), label).toEqual(Array.from(want));
            expect(Array.from(got.subarray(want.length)), `${label}: wrote past the panels`).toEqual(
              new Array(16).fill(SENT),
            );
          }
  });

  it('packing B once and reusing it (a frozen weight) gives the same C as packing per call', () => {
    const g = gemmFor(mem, { relaxed: true })!;
    const c: Case = { label: '', M: 8, K: 40, N: 52 };
    const B = values(c.K * c.N, 9);
    const A1 = values(c.M * c.K, 4);
    const A2 = values(c.M * c.K, 5);
    const first = runGemm(g, mem, A1, B, c).out;
    const second = runGemm(g, mem, A2, B, c).out;
    // Reuse B's packed panels from the second run with A1 repacked: the layout of runGemm is the same each time.
    const pA = 64;
    const pB = pA + 4 * A1.length;
    const pC = pB + 4 * B.length;
    const pPA = pC + 4 * (c.M * c.N + 16);
    const pPB = pPA + packedABytes(c.M, c.K);
    new Float32Array(mem.buffer, pA, A1.length).set(A1);
    g.packA(pA, c.K, 1, c.M, c.K, pPA);
    g.gemm(pPA, pPB, pC, c.N, c.M, c.K, c.N);
    expect(Array.from(new Float32Array(mem.buffer, pC, c.M * c.N))).toEqual(Array.from(first));
    expect(Array.from(second)).not.toEqual(Array.from(first));
  });
});

/**
 * gemm_nt (C = A·Bᵀ, both read in place, for decoding's few rows of A): per C element four lane sums over
 * k ≡ 0, 1, 2, 3 (mod 4), each in increasing k, added as (s0 + s1) + (s2 + s3). The plain build must equal that
 * order computed in float32 here bit for bit; both builds are held to the float32 bound against the float64 loop
 * (the bound of a recursive sum holds for any order of the same K products), and with small integers both must
 * equal the float64 loop exactly. Row strides wider than K and than N check the indexing; a sentinel around C
 * checks that nothing outside it is written.
 */
interface NtCase {
  label: string;
  M: number;
  K: number;
  N: number;
  lda?: number;
  ldb?: number;
  ldc?: number;
}
const NT_CASES: NtCase[] = [
  { label: 'one row 1×768×2304 (decoding at batch 1)', M: 1, K: 768, N: 2304 },
  { label: 'two rows 2×896×40', M: 2, K: 896, N: 40 },
  { label: 'three rows (an odd last row) 3×64×12', M: 3, K: 64, N: 12 },
  { label: 'four rows 4×160×258 (the tiny model’s LM head)', M: 4, K: 160, N: 258 },
  { label: 'N not a multiple of 4: 4×20×7', M: 4, K: 20, N: 7 },
  { label: 'N < 4: 1×8×3', M: 1, K: 8, N: 3 },
  { label: 'five rows 5×12×9', M: 5, K: 12, N: 9 },
  { label: 'K = 4: 2×4×5', M: 2, K: 4, N: 5 },
  { label: 'K = 0 (C is zeros)', M: 3, K: 0, N: 6 },
  {
    label: 'row strides wider than K and N: 3×16×10, lda 20, ldb 24, ldc 13',
    M: 3,
    K: 16,
    N: 10,
    lda: 20,
    ldb: 24,
    ldc: 13,
  },
];

/** A (M×lda) and B (N×ldb) as stored, with the padding past K filled with values that must not be read. */
function ntOperands(c: NtCase, seed: number, ints = false) {
  const lda = c.lda ?? c.K;
  const ldb = c.ldb ?? c.K;
  const A = values(c.M * lda, seed, ints);
  const B = values(c.N * ldb, seed + 1, ints);
  for (let i = 0; i < c.M; i++) for (let k = c.K; k < lda; k++) A[i * lda + k] = 1e30;
  for (let j = 0; j < c.N; j++) for (let k = c.K; k < ldb; k++) B[j * ldb + k] = 1e30;
  return { A, B, lda, ldb };
}

function runGemmNt(g: Gemm, mem: WebAssembly.Memory, c: NtCase, A: Float32Array, B: Float32Array) {
  const lda = c.lda ?? c.K;
  const ldb = c.ldb ?? c.K;
  const ldc = c.ldc ?? c.N;
  const cLen = c.M * ldc + 16;
  const pA = 64;
  const pB = pA + 4 * A.length;
  const pC = pB + 4 * B.length;
  const need = pC + 4 * cLen;
  if (need > mem.buffer.byteLength) mem.grow(Math.ceil((need - mem.buffer.byteLength) / 65536));
  new Float32Array(mem.buffer, pA, A.length).set(A);
  new Float32Array(mem.buffer, pB, B.length).set(B);
  new Float32Array(mem.buffer, pC, cLen).fill(SENTINEL);
  g.gemmNT(pA, lda, pB, ldb, pC, ldc, c.M, c.K, c.N);
  return readGuarded(mem, pC, cLen, ldc, c.M, c.N);
}

/** gemm_nt's order in float32 (four lane sums, then (s0 + s1) + (s2 + s3)), and the float64 loop with Σ|a·b|. */
function ntReferences(c: NtCase, A: Float32Array, B: Float32Array, lda: number, ldb: number) {
  const f = Math.fround;
  const lanes = new Float32Array(c.M * c.N);
  const C64 = new Float64Array(c.M * c.N);
  const abs = new Float64Array(c.M * c.N);
  for (let i = 0; i < c.M; i++)
    for (let j = 0; j < c.N; j++) {
      const s = [0, 0, 0, 0];
      let d = 0;
      let t = 0;
      for (let k = 0; k < c.K; k++) {
        const a = A[i * lda + k];
        const b = B[j * ldb + k];
        s[k % 4] = f(s[k % 4] + f(a * b));
        d += a * b;
        t += Math.abs(a * b);
      }
      lanes[i * c.N + j] = f(f(s[0] + s[1]) + f(s[2] + s[3]));
      C64[i * c.N + j] = d;
      abs[i * c.N + j] = t;
    }
  return { lanes, C64, abs };
}

describe('gemm_nt: A·Bᵀ for a few rows of A, read in place (gemm.wat)', () => {
  const mem = new WebAssembly.Memory({ initial: 16 });
  beforeAll(() => {
    enableRelaxedSimd();
  });
  for (const c of NT_CASES) {
    for (const relaxed of [true, false]) {
      it(`${relaxed ? 'relaxed' : 'plain'} SIMD: ${c.label} — within the float32 bound${relaxed ? '' : ', and bit-equal to its order in float32'}`, () => {
        const g = gemmFor(mem, { relaxed })!;
        const { A, B, lda, ldb } = ntOperands(c, 21 + c.M + c.N);
        const { out, guardsIntact } = runGemmNt(g, mem, c, A, B);
        expect(guardsIntact, 'wrote outside C').toBe(true);
        const { lanes, C64, abs } = ntReferences(c, A, B, lda, ldb);
        const gamma = (c.K * U) / (1 - c.K * U);
        for (let i = 0; i < out.length; i++) {
          expect(Math.abs(out[i] - C64[i]), `element ${i}`).toBeLessThanOrEqual(gamma * abs[i]);
        }
        if (!relaxed) expect(Array.from(out)).toEqual(Array.from(lanes));
      });
    }
    it(`both builds: ${c.label} with small integers — exact`, () => {
      const { A, B, lda, ldb } = ntOperands(c, 5 + c.K, true);
      const ref = Array.from(ntReferences(c, A, B, lda, ldb).C64);
      for (const relaxed of [true, false]) {
        const { out, guardsIntact } = runGemmNt(gemmFor(mem, { relaxed })!, mem, c, A, B);
        expect(guardsIntact).toBe(true);
        expect(Array.from(out), relaxed ? 'relaxed' : 'plain').toEqual(ref);
      }
    });
  }
});

describe('the gemm route of the WASM BatchMatMul (setWasmGemm)', () => {
  const buffers = (): number => (tf.backend() as unknown as { numDataIds(): number }).numDataIds();
  beforeAll(async () => {
    registerWasmExtraKernels();
    await tf.setBackend('wasm');
    await tf.ready();
  });
  // The route as this worker had it: the fast tier runs files after this one in the same worker, and one that
  // trains on WASM must get the default route (gemm.wat on), not the one the last case here left.
  let before = false;
  beforeAll(() => {
    before = wasmGemmEnabled();
  });
  afterAll(() => setWasmGemm(before));

  /** op(A)·op(B) on WASM with the route on, and on the CPU backend. */
  async function both(sa: number[], sb: number[], ta: boolean, tb: boolean) {
    const av = values(
      sa.reduce((x, y) => x * y, 1),
      13,
    );
    const bv = values(
      sb.reduce((x, y) => x * y, 1),
      17,
    );
    const run = () => tf.tidy(() => tf.matMul(tf.tensor(av, sa), tf.tensor(bv, sb), ta, tb));
    setWasmGemm(true);
    const calls = gemmStats.calls;
    const w = run();
    const routed = gemmStats.calls - calls;
    const got = { shape: w.shape, data: await w.data() };
    w.dispose();
    await tf.setBackend('cpu');
    const c = run();
    const ref = { shape: c.shape, data: await c.data() };
    c.dispose();
    await tf.setBackend('wasm');
    return { got, ref, routed };
  }

  for (const [sa, sb, ta, tb] of [
    [[37, 29], [29, 45], false, false],
    [[29, 37], [29, 45], true, false], // Xᵀ·dY
    [[37, 29], [45, 29], false, true], // dY·Wᵀ (A has enough rows: not the LM-head swap)
    [[29, 37], [45, 29], true, true],
    [[1, 8, 64], [1, 64, 20], false, false], // rank 3, batch 1
  ] as [number[], number[], boolean, boolean][]) {
    it(`${JSON.stringify(sa)}${ta ? 'ᵀ' : ''}·${JSON.stringify(sb)}${tb ? 'ᵀ' : ''} runs on gemm.wat and matches the CPU backend`, async () => {
      const before = tf.memory().numTensors;
      const b0 = buffers();
      const { got, ref, routed } = await both(sa, sb, ta, tb);
      expect(routed).toBe(1);
      expect(got.shape).toEqual(ref.shape);
      let worst = 0;
      for (let i = 0; i < ref.data.length; i++) worst = Math.max(worst, Math.abs(got.data[i] - ref.data[i]));
      expect(worst).toBeLessThan(1e-5); // sums of ≤ 64 products in [−1, 1]
      expect(tf.memory().numTensors).toBe(before);
      expect(buffers()).toBe(b0); // scratch freed
    });
  }

  it('few rows · a tall Bᵀ (the LM head) while generating: < 64 rows on gemm_nt; otherwise through (B·Aᵀ)ᵀ', async () => {
    expect(GEMM_NT_MAX_ROWS).toBe(63);
    for (const rows of [1, 3, 8, 63]) {
      const nt = gemmNtStats.calls;
      const sw = swappedStats.calls;
      const b0 = buffers();
      const { routed, got, ref } = await whileGenerating(() => both([rows, 16], [300, 16], false, true));
      expect(routed, `${rows} rows`).toBe(0);
      expect(gemmNtStats.calls - nt, `${rows} rows`).toBe(1);
      expect(swappedStats.calls - sw).toBe(0);
      expect(got.shape).toEqual([rows, 300]);
      expect(Array.from(got.data).every((x, i) => Math.abs(x - ref.data[i]) < 1e-5)).toBe(true);
      expect(buffers()).toBe(b0);
    }
    // rank 3 with batch 1, as decoding's [1, rows, C] can come
    const nt3 = gemmNtStats.calls;
    const r3 = await whileGenerating(() => both([1, 2, 16], [1, 30, 16], false, true));
    expect(gemmNtStats.calls - nt3).toBe(1);
    expect(r3.got.shape).toEqual([1, 2, 30]);
    expect(Array.from(r3.got.data).every((x, i) => Math.abs(x - r3.ref.data[i]) < 1e-5)).toBe(true);
    // Not generating (training's products), or K not a multiple of 4: the swap (from 64 rows: gemm.wat with Bᵀ
    // packed per call, tests/wasm-gemm-default.test.ts)
    for (const [sa, sb, gen] of [
      [[3, 16], [300, 16], false],
      [[5, 18], [300, 18], true],
      [[2, 30], [300, 30], true],
    ] as [number[], number[], boolean][]) {
      const nt = gemmNtStats.calls;
      const sw = swappedStats.calls;
      const run = () => both(sa, sb, false, true);
      const { routed, got, ref } = gen ? await whileGenerating(run) : await run();
      expect(routed).toBe(0);
      expect(gemmNtStats.calls - nt).toBe(0);
      expect(swappedStats.calls - sw).toBe(1);
      expect(Array.from(got.data).every((x, i) => Math.abs(x - ref.data[i]) < 1e-5)).toBe(true);
    }
    const batched = await both([4, 6, 8], [4, 8, 5], false, false);
    expect(batched.routed).toBe(0);
  });

  it('a B used again keeps its packed panels until its data is freed; a changed weight is packed anew', async () => {
    setWasmGemm(true);
    const init = tf.tensor2d(values(24 * 40, 3), [24, 40]);
    const w = tf.variable(init);
    init.dispose(); // the variable holds the data alone
    const x = tf.tensor2d(values(8 * 24, 4), [8, 24]);
    const b0 = buffers();
    const s0 = { ...gemmStats };
    const y1 = tf.matMul(x, w); // first sight: packed into scratch
    expect(buffers()).toBe(b0 + 1);
    const y2 = tf.matMul(x, w); // second: packed and kept
    expect(buffers()).toBe(b0 + 3);
    const y3 = tf.matMul(x, w); // reused
    expect(buffers()).toBe(b0 + 4);
    expect(gemmStats.packedKept - s0.packedKept).toBe(1);
    expect(gemmStats.packedReused - s0.packedReused).toBe(1);
    expect(Array.from(await y3.data())).toEqual(Array.from(await y1.data()));
    expect(Array.from(await y2.data())).toEqual(Array.from(await y1.data()));
    // An update gives the variable new data: the kept panels go with the old data, and the new values are used.
    const doubled = tf.tidy(() => tf.mul(w, 2) as tf.Tensor2D);
    w.assign(doubled);
    doubled.dispose();
    expect(buffers()).toBe(b0 + 3); // old data and its panels freed, new data in
    const y4 = tf.matMul(x, w);
    const d1 = await y1.data();
    const d4 = await y4.data();
    for (let i = 0; i < d1.length; i++) expect(d4[i]).toBeCloseTo(2 * d1[i], 5);
    tf.dispose([y1, y2, y3, y4, x, w]);
    expect(buffers()).toBe(b0 - 2);
  });
});
