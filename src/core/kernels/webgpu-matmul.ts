/**
 * A register-blocked fp32 matmul for tfjs's WebGPU backend: C = op(A)·op(B) (op: transpose or not, as tf.matMul
 * has), rank 2 or rank 3 with a batch (one side may have batch 1 and is then broadcast), any M, N, K. Issue #22,
 * item 3; docs/gpu.md, "A faster matmul".
 *
 * Why: tfjs-backend-webgpu 4.22's matmul measured 10.8 TFLOP/s at 2048² on an H100 (docs/gpu.md), a sixth of the
 * card's fp32 peak, and the matmuls are most of a PPO update's FLOPs. This kernel is the classic SGEMM layout:
 * - one workgroup of 256 threads (16 × 16) computes a TM × TN tile of C, TM, TN ∈ {64, 128}: each thread keeps
 *   (TM/16) × (TN/16) outputs in registers (8 × 8 at 128 × 128; 4 × 4 at 64 × 64) as vec4 accumulators, at rows
 *   g·64 + ty·4 + i and columns h·64 + tx·4 + [0, 4) (g, h < 2), so that its reads of workgroup memory are whole
 *   vec4s and a warp's 16 column threads read 64 neighbouring floats;
 * - K goes through workgroup memory in slices of BK (8, or 16 for 64 × 64), both tiles stored k-major
 *   (As[k][m], Bs[k][n]) as vec4 arrays, in two buffers: slice t + 1 is read from global memory into registers
 *   before slice t is multiplied, and stored into the other buffer after it, so one barrier per slice and the
 *   global loads' latency overlaps the FMAs. 2·BK·(TM + TN)·4 bytes: 16 KB at 128 × 128, WebGPU's default limit;
 * - global loads are vec4 (A, B, C bound as array<vec4<f32>>) where the operand's contiguous dimension is a
 *   multiple of 4 (K for A and for Bᵀ, M for Aᵀ, N for B; N for the store); otherwise that operand reads four
 *   bounds-checked scalars per quad (the same tile, a different shader). Out-of-range rows, columns and k read 0
 *   and are not stored, so any shape works;
 * - the tile per shape (matMulFastPlan): 128 × 128 unless that gives fewer than `minGroups` workgroups (default
 *   128, about one per SM of an H100), then the tile halved on the smaller side of C, then 64 × 64 — a decode
 *   step's few rows or GPT-2's [512, 3072]·[3072, 768] would otherwise leave most of the GPU idle.
 *   setWebGpuMatMulFastTiles forces a tile or changes the bound (for the GPU bench to sweep).
 *
 * Generated variants (issue #31; MATMUL_FAST_VARIANTS, forced one at a time with setWebGpuMatMulFastVariant, timed
 * together by scripts/matmul-sweep.ts; none is chosen by default and none was timed on a GPU yet). The tile
 * kernel above measured 9.68 TFLOP/s at 2048² on an H200 (tfjs: 7.92); each variant tests one guess at why:
 * - the inner product over the K slice fully unrolled (constant offsets into workgroup memory, named vec4
 *   registers a_g / b_h and accumulators acc_g_i_h, no loop variable in any index), in case the SPIR-V compiler
 *   keeps the slice loop rolled (address arithmetic and robustness clamps per read) — v128x128k8r8x8db is the
 *   tile kernel's 128 × 128 / 8 layout with only this and the next change;
 * - no bounds check at all where M, N, K are multiples of the tile and of the K slice and all loads are vec4
 *   (plan.checked false; vec4 indices computed without division), a checked shader otherwise;
 * - longer K slices (bk 16, 32: fewer barriers and loads per FMA), single- ('sb', two barriers per slice) or
 *   double-buffered ('db'); those above 16 KB of workgroup memory need the device's limit (tfjs asks the
 *   adapter's maxComputeWorkgroupStorageSize; matMulFastVariantFits, and the sweep skips what does not fit);
 * - 'p': each k row of workgroup memory padded by a vec4 (bank conflicts of the transposing scalar stores);
 * - 'ar': A kept row-major in workgroup memory (As[m][k], vec4 along k) when A is not transposed, so its vec4
 *   loads are stored as they come instead of as four scalar stores, and a thread reads one vec4 per row per 4 k;
 * - other shapes of work: 128 × 64 and 64 × 128 with 8 × 4 / 4 × 8 per thread, 64 × 128 with 128 threads of
 *   8 × 8, 64 × 64 with 4 × 4 and bk 16 / 32 (more workgroups for GPT-2's 512-row products).
 * All are checked against a float64 loop on SwiftShader (tests/webgpu-matmul.test.ts, those within its 32 KB).
 *
 * Not done: subgroup operations and shader-f16 storage (core/backend/webgpu-device.ts asks for tfjs's features only,
 * and their `enable` directive would have to precede tfjs's shader prefix); split-K for a small M·N with a
 * long K. It was checked for correctness only (tests/webgpu-matmul.test.ts on SwiftShader, scripts/gpu-checks.ts
 * on whatever adapter exists); its speed on a GPU was not measured yet, so nothing routes to it by default
 * (setWebGpuMatMulFast / matMulRouted).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';

export const MATMUL_FAST = 'PerfMatMulFast';

/** Threads per workgroup side (16 × 16 = 256). */
const TS = 16;
const THREADS = TS * TS;
/** Workgroups per dispatch dimension that WebGPU guarantees. */
const MAX_GROUPS = 65535;

/** A workgroup's output tile (rows × columns of C) and its K slice. */
export interface MatMulFastTile {
  tm: 64 | 128;
  tn: 64 | 128;
  bk: 8 | 16;
}

/** How one product is dispatched. */
export interface MatMulFastPlan extends MatMulFastTile {
  /** Workgroups in x (column tiles), y (row tiles), z (batch). */
  groups: [number, number, number];
  /** vec4 loads of A, of B, and vec4 stores of C (each where its contiguous dimension is a multiple of 4). */
  vecA: boolean;
  vecB: boolean;
  vecC: boolean;
  /** A forced generated variant (MATMUL_FAST_VARIANTS, by name), or null: the tile kernel above. */
  variant: string | null;
  /**
   * Variants only: whether the shader needs bounds checks (false where M, N, K are multiples of the tile and the
   * K slice and every operand takes vec4 loads: the unchecked fast path).
   */
  checked: boolean;
}

/** Default of the workgroup count below which the tile shrinks (about one workgroup per SM of an H100: 132). */
export const MATMUL_FAST_MIN_GROUPS_DEFAULT = 128;
let minGroups = MATMUL_FAST_MIN_GROUPS_DEFAULT;
let forcedTile: MatMulFastTile | null = null;
let forcedVariant: MatMulFastVariant | null = null;

const TILES: readonly MatMulFastTile[] = [
  { tm: 128, tn: 128, bk: 8 },
  { tm: 64, tn: 128, bk: 8 },
  { tm: 128, tn: 64, bk: 8 },
  { tm: 64, tn: 64, bk: 16 },
];

/**
 * Force a tile (null: choose per shape) and set the workgroup count below which the per-shape choice shrinks
 * the tile. Returns the previous settings, to put back. For tests and the GPU bench's sweeps.
 */
export function setWebGpuMatMulFastTiles(o: { tile?: MatMulFastTile | null; minGroups?: number }): {
  tile: MatMulFastTile | null;
  minGroups: number;
} {
  const was = { tile: forcedTile, minGroups };
  if (o.tile !== undefined) {
    if (o.tile && !TILES.some((t) => t.tm === o.tile!.tm && t.tn === o.tile!.tn && t.bk === o.tile!.bk))
      throw new Error(
        `setWebGpuMatMulFastTiles: tile must be one of ${TILES.map((t) => `${t.tm}×${t.tn}/${t.bk}`).join(', ')}, got ${JSON.stringify(o.tile)}.`,
      );
    forcedTile = o.tile;
  }
  if (o.minGroups !== undefined) {
    if (!Number.isInteger(o.minGroups) || o.minGroups < 1)
      throw new Error(`setWebGpuMatMulFastTiles: minGroups must be an integer ≥ 1, got ${o.minGroups}.`);
    minGroups = o.minGroups;
  }
  return was;
}

/**
 * The tile kernel's tile for C [batch, M, N] (the forced one, else the largest that still gives `minGroups`
 * workgroups; 64 × 128 before 128 × 64 when C has fewer rows than columns): matMulFastPlan's choice, and the fused
 * linear's where it runs this kernel (kernels/webgpu-linear.ts, setWebGpuLinearFastTiles).
 */
export function matMulFastTile(M: number, N: number, batch = 1): MatMulFastTile {
  if (forcedTile) return forcedTile;
  const count = (t: MatMulFastTile) => Math.ceil(N / t.tn) * Math.ceil(M / t.tm) * batch;
  const order = M <= N ? [TILES[0], TILES[1], TILES[2], TILES[3]] : [TILES[0], TILES[2], TILES[1], TILES[3]];
  return order.find((t) => count(t) >= minGroups) ?? TILES[3];
}

/**
 * The tile, workgroups and load widths for C [batch, M, N] = op(A)·op(B) with inner size K (pure: the tests
 * and the bench print it). The largest tile that still gives `minGroups` workgroups; 64 × 128 before 128 × 64
 * when C has fewer rows than columns (the shrink goes to the smaller side).
 */
export function matMulFastPlan(
  M: number,
  N: number,
  K: number,
  o: { batch?: number; transA?: boolean; transB?: boolean } = {},
): MatMulFastPlan {
  const batch = o.batch ?? 1;
  const groupsOf = (t: MatMulFastTile): [number, number, number] => [
    Math.ceil(N / t.tn),
    Math.ceil(M / t.tm),
    batch,
  ];
  if (forcedVariant) {
    const v = forcedVariant;
    const vecA = (o.transA ? M : K) % 4 === 0;
    const vecB = (o.transB ? K : N) % 4 === 0;
    const vecC = N % 4 === 0;
    return {
      tm: v.tm as 64 | 128,
      tn: v.tn as 64 | 128,
      bk: v.bk as 8 | 16,
      groups: [Math.ceil(N / v.tn), Math.ceil(M / v.tm), batch],
      vecA,
      vecB,
      vecC,
      variant: v.name,
      checked: !(vecA && vecB && vecC && M % v.tm === 0 && N % v.tn === 0 && K % v.bk === 0),
    };
  }
  const tile = matMulFastTile(M, N, batch);
  return {
    ...tile,
    groups: groupsOf(tile),
    vecA: (o.transA ? M : K) % 4 === 0,
    vecB: (o.transB ? K : N) % 4 === 0,
    vecC: N % 4 === 0,
    variant: null,
    checked: true,
  };
}

export interface ProgramOptions extends MatMulFastPlan {
  transA: boolean;
  transB: boolean;
}

/**
 * How an operand is read when its binding is not plain f32 (the fused linear's packed-f16 weights): `quad(base)`
 * is the vec4<f32> of elements base … base + 3 (base a multiple of 4: the operand's contiguous dimension is), and
 * `elem(i)` one element, both by flat element index.
 */
export interface TileReads {
  quad: (base: string) => string;
  elem: (i: string) => string;
}

/** What a user of the tile kernel's WGSL (fastTileWgsl) changes: the fused linear's epilogues and packed B. */
export interface TileHooks {
  /** WGSL declared before main (the epilogue's functions, B's unpacking). */
  decls?: string;
  /** B's reads (packed f16); A is always plain f32. */
  bReads?: TileReads;
  /**
   * The store of one output, one element at a time: WGSL reading `r`, `c` (its row and column), `o` (its flat
   * index r·N + c) and `acc` (the dot product) that writes result[o]. Absent: result[o] = acc, vec4 where vecC.
   */
  epilogue?: string;
  /** A batch through workgroup z with uniforms strideA and strideB (matMulFast's rank 3); false: one product. */
  batched?: boolean;
}

/**
 * WGSL that loads this thread's quads of one operand's K slice into registers `${reg}${l}` (vec4), reading 0
 * outside the matrix. `kMajor`: the operand's contiguous dimension is K (A, or B transposed), quads run along k;
 * otherwise along its M or N dimension. `dim`: that M or N (uniform name), `o0`: the tile's first row/column.
 */
function loadCode(o: {
  name: 'A' | 'B';
  reg: string;
  T: number;
  BK: number;
  kMajor: boolean;
  vec: boolean;
  dim: string;
  o0: string;
  off: string;
  /** The operand's reads when it is not a plain f32 binding (TileReads). */
  reads?: TileReads;
}): { decl: string; load: string; store: (buf: string) => string } {
  const { name, reg, T, BK, kMajor, vec, dim, o0, off } = o;
  const quad = o.reads?.quad ?? ((base: string) => `${name}[(${base}) / 4]`);
  const elem = o.reads?.elem ?? ((i: string) => `${name}[${i}]`);
  const T4 = T / 4;
  const count = kMajor ? T * (BK / 4) : BK * T4;
  const L = Math.ceil(count / THREADS);
  const decl = Array.from({ length: L }, (_, l) => `var ${reg}${l} = vec4<f32>(0.0);`).join('\n        ');
  const loads: string[] = [];
  const stores: string[] = [];
  for (let l = 0; l < L; l++) {
    const guard = count % THREADS === 0 || (l + 1) * THREADS <= count ? '' : `if (f < ${count}) `;
    // Coordinates of the quad: `outer` (row of A / column of B) and `k`, and the quad's direction.
    const coords = kMajor
      ? `let t = f / ${BK / 4}; let q = f % ${BK / 4}; let outer = ${o0} + t; let k = k0 + q * 4;`
      : `let kk = f / ${T4}; let q = f % ${T4}; let outer = ${o0} + q * 4; let k = k0 + kk;`;
    // Flat index of the quad's first element; the next three follow (+1 each).
    const base = kMajor ? `${off} + outer * K + k` : `${off} + k * ${dim} + outer`;
    let read: string;
    if (vec) {
      // The contiguous dimension is a multiple of 4, so a quad is wholly inside or wholly outside.
      const ok = kMajor ? `outer < ${dim} && k < K` : `k < K && outer < ${dim}`;
      read = `if (${ok}) { ${reg}${l} = ${quad(base)}; }`;
    } else {
      const each = [0, 1, 2, 3].map((c) => {
        const ok = kMajor ? `outer < ${dim} && k + ${c} < K` : `k < K && outer + ${c} < ${dim}`;
        return `if (${ok}) { ${reg}${l}[${c}] = ${elem(`${base} + ${c}`)}; }`;
      });
      read = each.join(' ');
    }
    loads.push(`{
          let f = tid + ${l * THREADS};
          ${reg}${l} = vec4<f32>(0.0);
          ${guard}{ ${coords} ${read} }
        }`);
    // Into workgroup memory S[buf][k][T/4] (vec4 along M or N): a k-major quad scatters to four k rows.
    const S = name === 'A' ? 'As' : 'Bs';
    stores.push(
      kMajor
        ? `{
          let f = tid + ${l * THREADS};
          ${guard}{ let t = f / ${BK / 4}; let q = f % ${BK / 4};
            let s0 = BUF + (q * 4) * ${T4} + t / 4; let e = t % 4;
            ${[0, 1, 2, 3].map((c) => `${S}[s0 + ${c * T4}][e] = ${reg}${l}[${c}];`).join(' ')}
          }
        }`
        : `{
          let f = tid + ${l * THREADS};
          ${guard}{ ${S}[BUF + f] = ${reg}${l}; }
        }`,
    );
  }
  return {
    decl,
    load: loads.join('\n        '),
    store: (buf: string) => stores.join('\n        ').replaceAll('BUF', `(${buf}) * ${BK * T4}`),
  };
}

/** The tfjs WebGPUProgram (the backend adds bindings, uniforms and the entry point). */
class MatMulFastProgram {
  readonly variableNames = ['A', 'B'];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [TS, TS, 1];
  readonly uniforms = 'dimM : i32, dimN : i32, dimK : i32, strideA : i32, strideB : i32,';
  readonly variableComponents: number[];
  outputComponent: number;
  private readonly o: ProgramOptions;

  constructor(o: ProgramOptions, outShape: number[]) {
    this.o = o;
    this.outputShape = outShape;
    this.dispatch = o.groups;
    this.variableComponents = [o.vecA ? 4 : 1, o.vecB ? 4 : 1];
    this.outputComponent = o.vecC ? 4 : 1;
    this.shaderKey = `perfMatMulFast_${o.tm}x${o.tn}x${o.bk}_${+o.transA}${+o.transB}_${+o.vecA}${+o.vecB}${+o.vecC}`;
  }

  getUserCode(): string {
    return fastTileWgsl(this.o);
  }
}

/**
 * WGSL of the tile kernel (the class comment above) for one plan: MatMulFastProgram's, and the fused linear's
 * (kernels/webgpu-linear.ts LinearTileProgram) with its epilogue, packed-f16 B and no batch through `hooks`.
 */
export function fastTileWgsl(o: ProgramOptions, hooks: TileHooks = {}): string {
  const { tm: TM, tn: TN, bk: BK, transA, transB, vecA, vecB, vecC } = o;
  const batched = hooks.batched ?? true;
  const TM4 = TM / 4;
  const TN4 = TN / 4;
  const RG = TM / 64; // row groups of 64 per thread (each 4 rows)
  const CG = TN / 64; // column groups of 64 per thread (each a vec4)
  const a = loadCode({
    name: 'A',
    reg: 'ra',
    T: TM,
    BK,
    kMajor: !transA,
    vec: vecA,
    dim: 'M',
    o0: 'row0',
    off: 'aOff',
  });
  const b = loadCode({
    name: 'B',
    reg: 'rb',
    T: TN,
    BK,
    kMajor: transB,
    vec: vecB,
    dim: 'N',
    o0: 'col0',
    off: 'bOff',
    reads: hooks.bReads,
  });
  const acc = (g: number, i: number, h: number) => `acc${g}${i}${h}`;
  const accDecl: string[] = [];
  const fmas: string[] = [];
  const stores: string[] = [];
  for (let g = 0; g < RG; g++)
    for (let i = 0; i < 4; i++)
      for (let h = 0; h < CG; h++) {
        accDecl.push(`var ${acc(g, i, h)} = vec4<f32>(0.0);`);
        fmas.push(`${acc(g, i, h)} = fma(vec4<f32>(a${g}[${i}]), b${h}, ${acc(g, i, h)});`);
      }
  const aRegs = Array.from({ length: RG }, (_, g) => `let a${g} = As[aS + kk * ${TM4} + ${g * 16} + ty];`);
  const bRegs = Array.from({ length: CG }, (_, h) => `let b${h} = Bs[bS + kk * ${TN4} + ${h * 16} + tx];`);
  for (let g = 0; g < RG; g++)
    for (let i = 0; i < 4; i++) {
      const inner = Array.from({ length: CG }, (_, h) => {
        const v = acc(g, i, h);
        if (hooks.epilogue)
          return [0, 1, 2, 3]
            .map(
              (e) => `{ let c = col0 + ${h * 64} + tx * 4 + ${e};
                if (c < N) { let o = cOff + r * N + c; let acc = ${v}[${e}]; ${hooks.epilogue} } }`,
            )
            .join(' ');
        return vecC
          ? `{ let c = col0 + ${h * 64} + tx * 4; if (c < N) { result[(cOff + r * N + c) / 4] = ${v}; } }`
          : `{ let c = col0 + ${h * 64} + tx * 4;
              ${[0, 1, 2, 3].map((e) => `if (c + ${e} < N) { result[cOff + r * N + c + ${e}] = ${v}[${e}]; }`).join(' ')} }`;
      });
      stores.push(`{ let r = row0 + ${g * 64} + ty * 4 + ${i}; if (r < M) { ${inner.join(' ')} } }`);
    }
  return `
    var<workgroup> As : array<vec4<f32>, ${2 * BK * TM4}>;
    var<workgroup> Bs : array<vec4<f32>, ${2 * BK * TN4}>;
    ${hooks.decls ?? ''}

    fn main(index : i32) {
      let M = uniforms.dimM;
      let N = uniforms.dimN;
      let K = uniforms.dimK;
      let tx = i32(localId.x);
      let ty = i32(localId.y);
      let tid = ty * ${TS} + tx;
      let row0 = i32(workgroupId.y) * ${TM};
      let col0 = i32(workgroupId.x) * ${TN};
      ${
        batched
          ? `let batch = i32(workgroupId.z);
      let aOff = batch * uniforms.strideA;
      let bOff = batch * uniforms.strideB;
      let cOff = batch * M * N;`
          : 'let aOff = 0; let bOff = 0; let cOff = 0;'
      }
      ${accDecl.join('\n        ')}
      ${a.decl}
      ${b.decl}
      let tiles = (K + ${BK - 1}) / ${BK};
      // Slice 0 into buffer 0; then per slice t: slice t + 1 into registers, multiply buffer t % 2, registers
      // into the other buffer (read by nobody since the last barrier), one barrier.
      var k0 = 0;
      ${a.load}
      ${b.load}
      ${a.store('0')}
      ${b.store('0')}
      workgroupBarrier();
      for (var t = 0; t < tiles; t = t + 1) {
        let cur = t % 2;
        let more = t + 1 < tiles;
        if (more) {
          k0 = (t + 1) * ${BK};
          ${a.load}
          ${b.load}
        }
        let aS = cur * ${BK * TM4};
        let bS = cur * ${BK * TN4};
        for (var kk = 0; kk < ${BK}; kk = kk + 1) {
          ${aRegs.join('\n            ')}
          ${bRegs.join('\n            ')}
          ${fmas.join('\n            ')}
        }
        if (more) {
          ${a.store('1 - cur')}
          ${b.store('1 - cur')}
        }
        workgroupBarrier();
      }
      ${stores.join('\n        ')}
    }`;
}

/**
 * A generated variant of the kernel (issue #31): fully unrolled inner product over the K slice with named vec4
 * registers (no array indexed in a loop, no bounds check in the hot loop), and a shader without any bounds
 * check where the shape is a multiple of the tile (`checked` in the plan). Threads: (tn / rn) × (tm / rm), each
 * computing rm × rn outputs at rows g·(4·threadsY) + ty·4 + [0, 4) and columns h·(4·threadsX) + tx·4 + [0, 4).
 */
export interface MatMulFastVariant {
  name: string;
  tm: number;
  tn: number;
  /** K slice per workgroup-memory stage (a multiple of 4). */
  bk: number;
  /** Outputs per thread: rows and columns (multiples of 4). */
  rm: number;
  rn: number;
  /** 2: double-buffered workgroup memory (one barrier per slice); 1: one buffer, two barriers per slice. */
  buffers: 1 | 2;
  /** Pad each k row of workgroup memory by one vec4 (fewer bank conflicts on the transposing stores). */
  pad: boolean;
  /**
   * Keep A row-major in workgroup memory (As[m][k], vec4 along k) where A is not transposed: its global loads are
   * stored as they come (no transposing scalar stores), and a thread reads one vec4 per row per 4 k.
   */
  aRowMajor: boolean;
}

const variant = (
  tm: number,
  tn: number,
  bk: number,
  rm: number,
  rn: number,
  buffers: 1 | 2,
  extra: { pad?: boolean; aRowMajor?: boolean } = {},
): MatMulFastVariant => ({
  name: `v${tm}x${tn}k${bk}r${rm}x${rn}${buffers === 2 ? 'db' : 'sb'}${extra.pad ? 'p' : ''}${extra.aRowMajor ? 'ar' : ''}`,
  tm,
  tn,
  bk,
  rm,
  rn,
  buffers,
  pad: !!extra.pad,
  aRowMajor: !!extra.aRowMajor,
});

/**
 * The variants the GPU sweep (scripts/matmul-sweep.ts) times; none is chosen by default. Workgroup memory:
 * buffers · bk · (tm + tn) · 4 bytes (+ padding); those over the device's maxComputeWorkgroupStorageSize
 * (16 KB by default, often 48 KB on NVIDIA under Vulkan) are skipped by the sweep (matMulFastVariantFits).
 */
export const MATMUL_FAST_VARIANTS: readonly MatMulFastVariant[] = [
  // The tile kernel's layout, unrolled and unchecked: isolates the code generation.
  variant(128, 128, 8, 8, 8, 2),
  variant(128, 128, 8, 8, 8, 2, { pad: true }),
  variant(128, 128, 8, 8, 8, 2, { aRowMajor: true }),
  // Longer K slices (fewer barriers per FMA), 32 KB: needs the larger limit.
  variant(128, 128, 16, 8, 8, 2),
  variant(128, 128, 16, 8, 8, 2, { aRowMajor: true }),
  variant(128, 128, 16, 8, 8, 1),
  variant(128, 128, 16, 8, 8, 1, { aRowMajor: true }),
  variant(128, 128, 32, 8, 8, 1, { aRowMajor: true }),
  variant(128, 128, 32, 8, 8, 1, { pad: true }),
  // Rectangular tiles, 8 × 4 / 4 × 8 per thread (256 threads), for the GPT-2 shapes with few rows.
  variant(128, 64, 16, 8, 4, 2),
  variant(64, 128, 16, 4, 8, 2),
  // 128 threads with 8 × 8 each on 64 × 128 (more workgroups per SM).
  variant(64, 128, 16, 8, 8, 2),
  variant(64, 64, 16, 4, 4, 2),
  variant(64, 64, 32, 4, 4, 2),
  // 128 threads with 8 × 16 each on 128 × 128 (twice the multiply-adds per workgroup-memory read of 8 × 8: the
  // warp-tiled layout of Simon Boehm's SGEMM_CUDA; docs/gpu.md, "Dawn toggles", point 3), and 16 × 8.
  variant(128, 128, 16, 8, 16, 2),
  variant(128, 128, 16, 16, 8, 2),
  variant(128, 128, 8, 8, 16, 2),
];

export interface MatMulFastLimits {
  maxComputeWorkgroupStorageSize: number;
  maxComputeInvocationsPerWorkgroup: number;
}

const padOf = (v: MatMulFastVariant) => (v.pad ? 1 : 0);
/** vec4s per k row of As (k-major) or per m row (row-major), and per k row of Bs. */
const strideA = (v: MatMulFastVariant, rowMajor: boolean) => (rowMajor ? v.bk / 4 : v.tm / 4) + padOf(v);
const strideB = (v: MatMulFastVariant) => v.tn / 4 + padOf(v);
const sizeA = (v: MatMulFastVariant, rowMajor: boolean) => (rowMajor ? v.tm : v.bk) * strideA(v, rowMajor);
const sizeB = (v: MatMulFastVariant) => v.bk * strideB(v);

/** Workgroup memory of a variant in bytes (the larger of its two A layouts). */
export function matMulFastVariantBytes(v: MatMulFastVariant): number {
  return v.buffers * 16 * (Math.max(sizeA(v, false), sizeA(v, v.aRowMajor)) + sizeB(v));
}
export const matMulFastVariantThreads = (v: MatMulFastVariant): number => (v.tm / v.rm) * (v.tn / v.rn);

/** Whether a variant fits the device's limits (workgroup memory and threads per workgroup). */
export function matMulFastVariantFits(v: MatMulFastVariant, limits: MatMulFastLimits): boolean {
  return (
    matMulFastVariantBytes(v) <= limits.maxComputeWorkgroupStorageSize &&
    matMulFastVariantThreads(v) <= limits.maxComputeInvocationsPerWorkgroup
  );
}

/**
 * Force a generated variant by name (null: back to the tile kernel and its per-shape choice). Returns the
 * previous name. For the sweep and tests; nothing routes to matMulFast by default either way.
 */
export function setWebGpuMatMulFastVariant(name: string | null): string | null {
  const was = forcedVariant?.name ?? null;
  if (name === null) forcedVariant = null;
  else {
    const v = MATMUL_FAST_VARIANTS.find((x) => x.name === name);
    if (!v)
      throw new Error(
        `setWebGpuMatMulFastVariant: unknown variant ${name}; one of ${MATMUL_FAST_VARIANTS.map((x) => x.name).join(', ')}.`,
      );
    forcedVariant = v;
  }
  return was;
}

/**
 * WGSL for one operand's K slice of a variant: global loads into registers `${reg}${l}` and their stores into
 * workgroup memory. Indices of vec4 loads are in vec4 units (no division); `checked` adds the range tests.
 */
function variantLoad(o: {
  name: 'A' | 'B';
  reg: string;
  T: number;
  BK: number;
  threads: number;
  /** The operand's contiguous dimension is K (A, or B transposed). */
  kMajor: boolean;
  /** Keep it in workgroup memory as it is stored ([outer][k]); only with kMajor. */
  rowMajor: boolean;
  vec: boolean;
  checked: boolean;
  dim: 'M' | 'N';
  o0: 'row0' | 'col0';
  off: string;
  S: 'As' | 'Bs';
  /** vec4s per row of S. */
  stride: number;
  /** vec4s of one buffer of S. */
  size: number;
}): { decl: string; load: string; store: (buf: string) => string } {
  const { name, reg, T, BK, threads, kMajor, rowMajor, vec, checked, dim, o0, off, S, stride, size } = o;
  const T4 = T / 4;
  const BK4 = BK / 4;
  const count = T * BK4;
  const L = Math.ceil(count / threads);
  const decl = Array.from({ length: L }, (_, l) => `var ${reg}${l} = vec4<f32>(0.0);`).join('\n        ');
  const loads: string[] = [];
  const stores: string[] = [];
  for (let l = 0; l < L; l++) {
    const guard = (l + 1) * threads <= count ? '' : `if (f < ${count}) `;
    const f = `let f = tid + ${l * threads};`;
    let body: string;
    if (kMajor) {
      const coords = `let t = f / ${BK4}; let q = f % ${BK4}; let outer = ${o0} + t;`;
      if (vec) {
        const idx = `${off}4 + outer * K4 + kq + q`;
        body = checked
          ? `${coords} if (outer < ${dim} && kq + q < K4) { ${reg}${l} = ${name}[${idx}]; }`
          : `${coords} ${reg}${l} = ${name}[${idx}];`;
      } else {
        body = `${coords} let k = kq * 4 + q * 4; let base = ${off} + outer * K + k; ${[0, 1, 2, 3]
          .map((c) => `if (outer < ${dim} && k + ${c} < K) { ${reg}${l}[${c}] = ${name}[base + ${c}]; }`)
          .join(' ')}`;
      }
    } else {
      const coords = `let kk = f / ${T4}; let q = f % ${T4}; let k = kq * 4 + kk;`;
      if (vec) {
        const idx = `${off}4 + k * ${dim}4 + ${o0} / 4 + q`;
        body = checked
          ? `${coords} if (k < K && ${o0} / 4 + q < ${dim}4) { ${reg}${l} = ${name}[${idx}]; }`
          : `${coords} ${reg}${l} = ${name}[${idx}];`;
      } else {
        body = `${coords} let o = ${o0} + q * 4; let base = ${off} + k * ${dim} + o; ${[0, 1, 2, 3]
          .map((c) => `if (k < K && o + ${c} < ${dim}) { ${reg}${l}[${c}] = ${name}[base + ${c}]; }`)
          .join(' ')}`;
      }
    }
    loads.push(`{ ${f} ${checked ? `${reg}${l} = vec4<f32>(0.0); ` : ''}${guard}{ ${body} } }`);
    if (kMajor && rowMajor)
      stores.push(
        `{ ${f} ${guard}{ let t = f / ${BK4}; let q = f % ${BK4}; ${S}[BUF + t * ${stride} + q] = ${reg}${l}; } }`,
      );
    else if (kMajor)
      stores.push(
        `{ ${f} ${guard}{ let t = f / ${BK4}; let q = f % ${BK4}; let s0 = BUF + q * ${4 * stride} + t / 4; let e = t % 4; ${[
          0, 1, 2, 3,
        ]
          .map((c) => `${S}[s0 + ${c * stride}][e] = ${reg}${l}[${c}];`)
          .join(' ')} } }`,
      );
    else
      stores.push(
        `{ ${f} ${guard}{ let kk = f / ${T4}; let q = f % ${T4}; ${S}[BUF + kk * ${stride} + q] = ${reg}${l}; } }`,
      );
  }
  return {
    decl,
    load: loads.join('\n          '),
    store: (buf: string) => stores.join('\n          ').replaceAll('BUF', `(${buf}) * ${size}`),
  };
}

/** A variant's WGSL (the user code tfjs wraps), to read what the generator emits. */
export function matMulFastVariantWgsl(
  name: string,
  o: { M: number; N: number; K: number; transA?: boolean; transB?: boolean },
): string {
  const v = MATMUL_FAST_VARIANTS.find((x) => x.name === name);
  if (!v) throw new Error(`matMulFastVariantWgsl: unknown variant ${name}.`);
  const was = forcedVariant;
  forcedVariant = v;
  try {
    const plan = matMulFastPlan(o.M, o.N, o.K, { transA: o.transA, transB: o.transB });
    return new MatMulVariantProgram(v, { ...plan, transA: !!o.transA, transB: !!o.transB }, [
      o.M,
      o.N,
    ]).getUserCode();
  } finally {
    forcedVariant = was;
  }
}

/** The tfjs WebGPUProgram of a variant. */
class MatMulVariantProgram {
  readonly variableNames = ['A', 'B'];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number];
  readonly uniforms = 'dimM : i32, dimN : i32, dimK : i32, strideA : i32, strideB : i32,';
  readonly variableComponents: number[];
  outputComponent: number;
  private readonly v: MatMulFastVariant;
  private readonly o: ProgramOptions;

  constructor(v: MatMulFastVariant, o: ProgramOptions, outShape: number[]) {
    this.v = v;
    this.o = o;
    this.outputShape = outShape;
    this.dispatch = o.groups;
    this.workgroupSize = [v.tn / v.rn, v.tm / v.rm, 1];
    this.variableComponents = [o.vecA ? 4 : 1, o.vecB ? 4 : 1];
    this.outputComponent = o.vecC ? 4 : 1;
    this.shaderKey = `perfMatMulVar_${v.name}_${+o.transA}${+o.transB}_${+o.vecA}${+o.vecB}${+o.vecC}${+o.checked}`;
  }

  getUserCode(): string {
    const v = this.v;
    const { transA, transB, vecA, vecB, vecC, checked } = this.o;
    const { tm: TM, tn: TN, bk: BK, rm: RM, rn: RN } = v;
    const TX = TN / RN;
    const TY = TM / RM;
    const threads = TX * TY;
    const RG = RM / 4;
    const CG = RN / 4;
    const aRow = v.aRowMajor && !transA;
    const STA = strideA(v, aRow);
    const STB = strideB(v);
    const SZA = sizeA(v, aRow);
    const SZB = sizeB(v);
    const a = variantLoad({
      name: 'A',
      reg: 'ra',
      T: TM,
      BK,
      threads,
      kMajor: !transA,
      rowMajor: aRow,
      vec: vecA,
      checked,
      dim: 'M',
      o0: 'row0',
      off: 'aOff',
      S: 'As',
      stride: STA,
      size: SZA,
    });
    const b = variantLoad({
      name: 'B',
      reg: 'rb',
      T: TN,
      BK,
      threads,
      kMajor: transB,
      rowMajor: false,
      vec: vecB,
      checked,
      dim: 'N',
      o0: 'col0',
      off: 'bOff',
      S: 'Bs',
      stride: STB,
      size: SZB,
    });
    const acc = (g: number, i: number, h: number) => `acc_${g}_${i}_${h}`;
    const accDecl: string[] = [];
    for (let g = 0; g < RG; g++)
      for (let i = 0; i < 4; i++)
        for (let h = 0; h < CG; h++) accDecl.push(`var ${acc(g, i, h)} = vec4<f32>(0.0);`);
    const comp = 'xyzw';
    // The inner product over one buffer, fully unrolled; aB / bB: this thread's first vec4 in the buffer.
    const inner: string[] = [];
    if (aRow) {
      for (let kq = 0; kq < BK / 4; kq++) {
        const lines: string[] = [];
        for (let g = 0; g < RG; g++)
          for (let i = 0; i < 4; i++)
            lines.push(`let a_${g}_${i} = As[aB + ${(g * TY * 4 + i) * STA + kq}];`);
        for (let kk = 0; kk < 4; kk++) {
          const sub: string[] = [];
          for (let h = 0; h < CG; h++) sub.push(`let b_${h} = Bs[bB + ${(kq * 4 + kk) * STB + h * TX}];`);
          for (let g = 0; g < RG; g++)
            for (let i = 0; i < 4; i++)
              for (let h = 0; h < CG; h++)
                sub.push(
                  `${acc(g, i, h)} = fma(vec4<f32>(a_${g}_${i}.${comp[kk]}), b_${h}, ${acc(g, i, h)});`,
                );
          lines.push(`{ ${sub.join(' ')} }`);
        }
        inner.push(`{\n            ${lines.join('\n            ')}\n          }`);
      }
    } else {
      for (let kk = 0; kk < BK; kk++) {
        const lines: string[] = [];
        for (let g = 0; g < RG; g++) lines.push(`let a_${g} = As[aB + ${kk * STA + g * TY}];`);
        for (let h = 0; h < CG; h++) lines.push(`let b_${h} = Bs[bB + ${kk * STB + h * TX}];`);
        for (let g = 0; g < RG; g++)
          for (let i = 0; i < 4; i++)
            for (let h = 0; h < CG; h++)
              lines.push(`${acc(g, i, h)} = fma(vec4<f32>(a_${g}.${comp[i]}), b_${h}, ${acc(g, i, h)});`);
        inner.push(`{ ${lines.join(' ')} }`);
      }
    }
    const aFirst = aRow ? `ty * ${4 * STA}` : 'ty';
    const stores: string[] = [];
    for (let g = 0; g < RG; g++)
      for (let i = 0; i < 4; i++) {
        const parts = Array.from({ length: CG }, (_, h) => {
          const x = acc(g, i, h);
          if (vecC) {
            const st = `result[cOff4 + r * N4 + col0 / 4 + ${h * TX} + tx] = ${x};`;
            return checked ? `if (col0 / 4 + ${h * TX} + tx < N4) { ${st} }` : st;
          }
          return `{ let c = col0 + ${h * TX * 4} + tx * 4; ${[0, 1, 2, 3]
            .map((e) => `if (c + ${e} < N) { result[cOff + r * N + c + ${e}] = ${x}.${comp[e]}; }`)
            .join(' ')} }`;
        });
        const r = `let r = row0 + ${g * TY * 4 + i} + ty * 4;`;
        stores.push(checked ? `{ ${r} if (r < M) { ${parts.join(' ')} } }` : `{ ${r} ${parts.join(' ')} }`);
      }
    const compute = (buf: string) => `{
          let aB = (${buf}) * ${SZA} + ${aFirst};
          let bB = (${buf}) * ${SZB} + tx;
          ${inner.join('\n          ')}
        }`;
    const loop =
      v.buffers === 2
        ? `
        // Slice 0 into buffer 0; then per slice t: slice t + 1 into registers, multiply buffer t % 2, registers
        // into the other buffer, one barrier.
        ${a.load}
        ${b.load}
        ${a.store('0')}
        ${b.store('0')}
        workgroupBarrier();
        for (var t = 0; t < tiles; t = t + 1) {
          let cur = t % 2;
          let more = t + 1 < tiles;
          if (more) {
            kq = (t + 1) * ${BK / 4};
            ${a.load}
            ${b.load}
          }
          ${compute('cur')}
          if (more) {
            ${a.store('1 - cur')}
            ${b.store('1 - cur')}
          }
          workgroupBarrier();
        }`
        : `
        // One buffer: slice t stored, barrier, slice t + 1 loaded into registers, slice t multiplied, barrier.
        ${a.load}
        ${b.load}
        for (var t = 0; t < tiles; t = t + 1) {
          ${a.store('0')}
          ${b.store('0')}
          workgroupBarrier();
          if (t + 1 < tiles) {
            kq = (t + 1) * ${BK / 4};
            ${a.load}
            ${b.load}
          }
          ${compute('0')}
          workgroupBarrier();
        }`;
    return `
      var<workgroup> As : array<vec4<f32>, ${v.buffers * SZA}>;
      var<workgroup> Bs : array<vec4<f32>, ${v.buffers * SZB}>;

      fn main(index : i32) {
        let M = uniforms.dimM;
        let N = uniforms.dimN;
        let K = uniforms.dimK;
        let M4 = M / 4;
        let N4 = N / 4;
        let K4 = K / 4;
        let tx = i32(localId.x);
        let ty = i32(localId.y);
        let tid = ty * ${TX} + tx;
        let row0 = i32(workgroupId.y) * ${TM};
        let col0 = i32(workgroupId.x) * ${TN};
        let batch = i32(workgroupId.z);
        let aOff = batch * uniforms.strideA;
        let bOff = batch * uniforms.strideB;
        let cOff = batch * M * N;
        let aOff4 = aOff / 4;
        let bOff4 = bOff / 4;
        let cOff4 = cOff / 4;
        ${accDecl.join('\n        ')}
        ${a.decl}
        ${b.decl}
        let tiles = (K + ${BK - 1}) / ${BK};
        var kq = 0; // first k of the slice being loaded, / 4
        ${loop}
        ${stores.join('\n        ')}
      }`;
  }
}

/** [batch, rows, cols] of a rank-2 or rank-3 operand (batch 1 for rank 2). */
const dims3 = (s: number[]): [number, number, number] =>
  s.length === 3 ? [s[0], s[1], s[2]] : [1, s[0], s[1]];

const KERNELS: Record<string, KernelFn<tf.TensorInfo>> = {
  [MATMUL_FAST]: ({ inputs, backend, attrs }) => {
    const { a, b } = inputs as Record<'a' | 'b', tf.TensorInfo>;
    const transA = !!attrs?.transA;
    const transB = !!attrs?.transB;
    const [ba, ra, ca] = dims3(a.shape);
    const [bb, rb, cb] = dims3(b.shape);
    const [M, K] = transA ? [ca, ra] : [ra, ca];
    const N = transB ? rb : cb;
    const batch = Math.max(ba, bb);
    const plan = matMulFastPlan(M, N, K, { batch, transA, transB });
    const outShape = a.shape.length === 3 ? [batch, M, N] : [M, N];
    let program: MatMulFastProgram | MatMulVariantProgram;
    if (plan.variant) {
      const v = MATMUL_FAST_VARIANTS.find((x) => x.name === plan.variant)!;
      const limits = (backend as unknown as { device: { limits: MatMulFastLimits } }).device.limits;
      if (!matMulFastVariantFits(v, limits))
        throw new Error(
          `matMulFast variant ${v.name} needs ${matMulFastVariantBytes(v)} bytes of workgroup memory and ${matMulFastVariantThreads(v)} threads; this device allows ${limits.maxComputeWorkgroupStorageSize} and ${limits.maxComputeInvocationsPerWorkgroup}.`,
        );
      program = new MatMulVariantProgram(v, { ...plan, transA, transB }, outShape);
    } else program = new MatMulFastProgram({ ...plan, transA, transB }, outShape);
    return (backend as WebGpuBackendLike).runWebGPUProgram(program, [a, b], 'float32', [
      { type: 'int32', data: [M] },
      { type: 'int32', data: [N] },
      { type: 'int32', data: [K] },
      { type: 'int32', data: [ba === 1 ? 0 : M * K] },
      { type: 'int32', data: [bb === 1 ? 0 : K * N] },
    ]);
  },
};

/** Register the kernel for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuMatMulFast(): void {
  registerWebGpuKernels(KERNELS);
}

/**
 * Whether matMulFast runs its kernel for these operands: the webgpu backend is current, both float32, both rank
 * 2 or both rank 3 (batches equal, or one of them 1), the inner sizes agree, no size is 0, and the workgroups
 * fit one dispatch. Otherwise matMulFast is tf.matMul.
 */
export function webGpuMatMulFastApplies(a: tf.Tensor, b: tf.Tensor, transA = false, transB = false): boolean {
  if (tf.getBackend() !== 'webgpu') return false;
  if (a.dtype !== 'float32' || b.dtype !== 'float32') return false;
  if (a.rank !== b.rank || (a.rank !== 2 && a.rank !== 3)) return false;
  const [ba, ra, ca] = dims3(a.shape);
  const [bb, rb, cb] = dims3(b.shape);
  if (ba !== bb && ba !== 1 && bb !== 1) return false;
  const [M, K] = transA ? [ca, ra] : [ra, ca];
  const [K2, N] = transB ? [cb, rb] : [rb, cb];
  if (K !== K2 || M === 0 || N === 0 || K === 0) return false;
  const plan = matMulFastPlan(M, N, K, { batch: Math.max(ba, bb), transA, transB });
  return plan.groups.every((g) => g <= MAX_GROUPS);
}

/** Sum a broadcast operand's gradient back to batch 1 (rank 3 only). */
const unbroadcast = (g: tf.Tensor, like: tf.Tensor): tf.Tensor =>
  like.rank === 3 && like.shape[0] === 1 && g.shape[0] !== 1 ? tf.sum(g, 0, true) : g;

/**
 * C = op(a)·op(b) through the register-blocked kernel on WebGPU (webGpuMatMulFastApplies), with its gradient
 * (tf.matMul's formulas, each a matMulFast); tf.matMul where it does not apply.
 */
export function matMulFast<T extends tf.Tensor>(a: T, b: T, transposeA = false, transposeB = false): T {
  if (!webGpuMatMulFastApplies(a, b, transposeA, transposeB)) return tf.matMul(a, b, transposeA, transposeB);
  registerWebGpuMatMulFast();
  const attrs = { transA: transposeA, transB: transposeB };
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [x, y] = args as tf.Tensor[];
    (args[2] as tf.GradSaveFunc)([x, y]);
    const value = tf.engine().runKernel(MATMUL_FAST, { a: x, b: y }, attrs) as tf.Tensor;
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [xa, yb] = saved;
        const mm = (p: tf.Tensor, q: tf.Tensor, tp: boolean, tq: boolean) => matMulFast(p, q, tp, tq);
        let da: tf.Tensor;
        let db: tf.Tensor;
        if (!transposeA && !transposeB) {
          da = mm(dy, yb, false, true);
          db = mm(xa, dy, true, false);
        } else if (!transposeA) {
          da = mm(dy, yb, false, false);
          db = mm(dy, xa, true, false);
        } else if (!transposeB) {
          da = mm(yb, dy, false, true);
          db = mm(xa, dy, false, false);
        } else {
          da = mm(yb, dy, true, true);
          db = mm(dy, xa, true, true);
        }
        return [unbroadcast(da, xa), unbroadcast(db, yb)];
      },
    };
  });
  return f(a, b) as T;
}

let routed = false;

/**
 * Route matMulRouted to matMulFast (off by default: the kernel has not been timed on a GPU; docs/gpu.md).
 * Returns the previous setting, to put back.
 */
export function setWebGpuMatMulFast(on: boolean): boolean {
  const was = routed;
  routed = on;
  return was;
}

/** tf.matMul, or matMulFast when setWebGpuMatMulFast(true) was called (for callers that want the switch). */
export function matMulRouted<T extends tf.Tensor>(a: T, b: T, transposeA = false, transposeB = false): T {
  return routed ? matMulFast(a, b, transposeA, transposeB) : tf.matMul(a, b, transposeA, transposeB);
}
