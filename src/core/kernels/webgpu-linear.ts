/**
 * GPT-2's Conv1D (x·W + b, then gelu_new, then + residual) on WebGPU as fused WGSL kernels, registered as tfjs
 * kernels for the webgpu backend and used by model/ops.ts's conv1d there (other backends keep their ops, bit for
 * bit).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). Through ops, mlp.c_fc is a matmul, a bias
 * add and gelu_new's seven elementwise kernels; each projection is a matmul and two adds. Here every Conv1D
 * forward is ONE dispatch, a tiled matmul whose store applies the epilogue:
 *   y = act(x·W + b + s·L) + residual        (act: identity or gelu_new; L, s: the LoRA term, see below)
 * - `PerfLinearFwd`: 64×64 output tile per workgroup of 16×16 threads (4×4 outputs each, strided so that
 *   neighbouring threads store neighbouring columns), K in slices of 16 through workgroup memory (8 KB), loads
 *   laid out so that neighbouring threads read neighbouring addresses in either operand layout.
 * - Few rows (the decode step: GPT-2's KV-cache generation runs every Conv1D on M = batch rows, e.g. 16): 64×64
 *   tiles leave the GPU idle there (M = 16, N = 768: 12 workgroups for a 132-SM H100, each looping over all of
 *   K), so up to 64 output rows (setWebGpuLinearSmallRows) `PerfLinearFwd` runs FewRowsMatMulProgram instead, a
 *   GEMV-like kernel in the same single dispatch with the same epilogue: each workgroup takes a block of ≤ 8 rows ×
 *   a strip of 8 columns (4 when 8 gives < 128 workgroups), its 256 threads split K into 32 (or 64) strided k
 *   lanes, and a workgroup-memory reduction adds the lanes' partial sums before the store. GPT-2 124M's decode
 *   shapes at 16 rows: c_attn [16,768]·[768,2304] 576 workgroups (36 on the tiles), c_fc ·[768,3072] 768 (48),
 *   attn c_proj ·[768,768] and mlp c_proj [16,3072]·[3072,768] 192 each (12). linearPlan() says which program
 *   and how many workgroups for a shape. The gelu_new dz kernel and dx = dz·Wᵀ take the same path at few rows
 *   (Wᵀ read along k, coalesced); dW = xᵀ·dz has `in` rows and stays on the tiles. Built for GPUs: on
 *   SwiftShader (a CPU) its many 256-thread workgroups run several times slower than the tiles, which says
 *   nothing about a GPU. Whether a bound above 64 rows pays on a given GPU (the tiles give 24 workgroups at
 *   128 × 768) is for the GPU bench to measure with setWebGpuLinearSmallRows.
 * - Few rows on a software adapter (SwiftShader, lavapipe: where the unit and end-to-end tests run WebGPU): up to
 *   16 rows, ColumnsMatMulProgram, one output column per thread over all of K, no workgroup memory in its loop,
 *   summing in the tiles' order: the tiles' outputs bit for bit at a fraction of their time there (a 64-row tile
 *   computes 64 rows whatever M is; [2, 2048]·[2048, 6144] 1.2 s → 0.08 s on SwiftShader, 2 cores).
 * - backward, with dz = dy ⊙ gelu'(pre) (dz = dy without gelu):
 *   `PerfLinearDz` (gelu only) recomputes pre = x·W + b + s·L in the same tiled matmul and stores dz directly;
 *   `PerfLinearMatMul` dx = dz·Wᵀ and dW = xᵀ·dz (the same program with transposed loads, no transpose kernel);
 *   `PerfLinearColSum` db = Σ_rows dz (32 columns × 8 row lanes per workgroup, then a workgroup sum);
 *   dresidual = dy and dL = s·dz (no dispatch for the first, one multiply for the second).
 *   So 1 dispatch forward; backward 3 (plain, residual) or 4 (gelu_new).
 * - the KV-cache decode step (forward only, no gradient; GPT2.decodeStep): `linearDecodeWebGpu` runs the layer norm
 *   before c_attn / c_fc in the matmul's prologue (`ln`: each workgroup computes its rows' mean and 1/√(σ² + ε) in
 *   PerfLayerNormFwd's order, then reads A normalised: bit-identical to the two dispatches) and a LoRA pair's
 *   up-projection in the epilogue (`loraR`: Σ_j Down[row, j]·LoraB[c, j], Down = LN(x)·Aᵀ from one `PerfLinearMatMul`
 *   with the same prologue): GPT-2's decode layer 9 → 7 dispatches, 17 → 11 under LoRA on all four Conv1Ds
 *   (tests/decode-dispatches.test.ts).
 * - the Llama/Qwen decode step (Llama.decodeBlock): `linearNtDecodeWebGpu` (kernel `PerfLinearNtDecode`), the same
 *   two programs on nn.Linear's W [out, in] (transB) with an RMSNorm prologue (PerfRmsNormFwd's order), no bias
 *   binding where the layer has none, up to 3 weights bound in parts along the output (q_proj | k_proj | v_proj
 *   as one matmul without a concatenated copy), SwiGLU in the epilogue (up_proj reading gate_proj's output), the
 *   LoRA up-projection per part, gate_proj | up_proj as one program (`pair`: both dot products per output, SwiGLU
 *   of the two): a Llama/Qwen decode layer 17 → 7 dispatches, 45 → 11 under LoRA on all seven linears (6 and 10
 *   with the slot writes in place: kernels/webgpu-inplace.ts) (tests/llama-decode-dispatches.test.ts,
 *   tests/webgpu-linear-pair.slow.test.ts).
 * Why recompute pre instead of saving it: a tfjs WebGPU program has exactly one output binding (inputs are
 * bound read-only, and tfjs-webgpu has no zero-copy slice), so the forward cannot also write pre. Saving it
 * would take a second forward dispatch (pre, then gelu as its own kernel): the same total dispatches for a
 * training step, one more for every inference forward (rollouts, scoring), and N×4C more floats kept alive.
 * Recomputing costs one more matmul's FLOPs in c_fc's backward only.
 *
 * Frozen weights: when W and b are tf.Variables with trainable = false (the base under LoRA; the reference
 * model), they are not inputs of the custom gradient at all, so its backward computes dx (and dL) only: tfjs
 * evaluates a customGrad's gradFunc eagerly for every input, needed or not, and would otherwise spend the dW
 * matmul and the db sum on gradients nobody reads. (tf.grads asked for such a frozen W explicitly gets none.)
 *
 * LoRA (docs/formats.md §6): conv1d passes L = (x·Aᵀ)·Bᵀ as an extra input with s = scaling; the kernel adds s·L
 * before the activation, so gelu_new and the residual apply to base + LoRA as in the plain path, and the
 * LoRA forward is 2 thin matmuls + this dispatch (the plain path multiplies by s as its own kernel).
 *
 * - the tiled products on matMulFast's tile kernel (setWebGpuLinearFastTiles; by default where timing on the device
 *   finds it faster, core/backend/webgpu-tune.ts):
 *   LinearTileProgram, 128 × 128 tiles of 8 × 8 outputs a thread with the same epilogues and packed-f16 B
 *   (docs/gpu.md, "The fused linear on the tile kernel"; tests/webgpu-linear-tile.test.ts).
 *
 * WGSL: gelu_new is x·σ(2·√(2/π)(x + 0.044715x³)) with σ(z) = 1/(1 + e^(−z)) (no tanh: docs/tfjs.md trap 7).
 * Within WebGPU's default limits: 256 threads, ≤ 9 KB of workgroup memory (16 KB on the tile kernel), ≤ 65535
 * workgroups per dimension (webGpuLinearApplies refuses bigger shapes; the plain ops run them; linearPlan falls
 * back to the tiles where the few-rows strips would exceed it).
 *
 * Tested against the plain ops and a float64 loop, values and gradients (x, W, b, residual, LoRA A and B), with
 * the dispatch counts, on WebGPU in Node (tests/webgpu-linear.test.ts); checkLinearOnCurrentBackend()
 * (src/core/backend/webgpu-fused.ts) runs the same comparison wherever the webgpu backend is current (a Chromium page).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { GELU_K } from './definitions';
import { type WebGpuBackendLike, registerWebGpuKernels, storageBuffersPerProgram } from './webgpu-common';
import { type ProgramOptions, fastTileWgsl, matMulFastTile } from './webgpu-matmul';

export const LIN_FWD = 'PerfLinearFwd';
export const LIN_DZ = 'PerfLinearDz';
export const LIN_MM = 'PerfLinearMatMul';
export const LIN_COLSUM = 'PerfLinearColSum';
export const LIN_NT = 'PerfLinearNtDecode';

/** Output tile (rows × columns) per workgroup, K slice, threads per side, outputs per thread per side. */
const TM = 64;
const TN = 64;
const TK = 16;
const TS = 16;
const PER = TM / TS; // 4
/** Workgroups per dispatch dimension that WebGPU guarantees. */
const MAX_GROUPS = 65535;
/** The uniforms of every fused matmul program (`dims` below fills them). */
const MATMUL_UNIFORMS =
  'dimM : i32, dimN : i32, dimK : i32, addScale : f32, lnEps : f32, n0 : i32, n1 : i32,';

type Mode = 'fwd' | 'dz' | 'mm';

interface MatMulOptions {
  mode: Mode;
  transA: boolean;
  transB: boolean;
  gelu: boolean;
  /** An extra [M, N] input added (times the `addScale` uniform) before the activation: LoRA's term. */
  hasExtra: boolean;
  /** A residual [M, N] added after the activation (forward only). */
  hasRes: boolean;
  /**
   * Layer norm of A's rows in the prologue (forward only, A not transposed): the matmul reads
   * (A[r, k] − μ_r)·ρ_r·LnG[k] + LnB[k], with μ_r, ρ_r = 1/√(σ²_r + ε) computed by the workgroup first, in
   * kernels/webgpu-layernorm.ts's order (64 strided lanes, then a tree of pairs), so the normalised values are
   * those of its PerfLayerNormFwd.
   */
  ln?: boolean;
  /**
   * LoRA's up-projection in the epilogue (forward only, instead of Extra): with Down = (x·Aᵀ) [M, r] and LoraB
   * [N, r] as inputs, the term added before the activation is addScale·Σ_j Down[row, j]·LoraB[c, j] (r = loraR).
   */
  loraR?: number;
  /**
   * With `ln`: the prologue is an RMSNorm (Llama/Qwen) instead of a layer norm: A[r, k]·ρ_r·LnG[k] with
   * ρ_r = 1/√(mean(A_r²) + ε), in kernels/webgpu-rmsnorm.ts's order (PerfRmsNormFwd's values to the bit); no LnB.
   */
  rms?: boolean;
  /** No Bias binding (nn.Linear without a bias: Llama's projections). */
  noBias?: boolean;
  /**
   * B given as 1–3 bindings (B, B1, B2) split along N at the uniforms n0 and n1: one matmul over q_proj | k_proj |
   * v_proj without concatenating their weights (transB only: nn.Linear's W [out, in]). With loraR, Down holds
   * parts·loraR columns (the parts' down-projections side by side) and LoraB their B's stacked [N, loraR] — or,
   * with `loraParts`, each part's B bound as it is (LoraB, LoraB1, LoraB2: [out_p, loraR]), no concat.
   */
  parts?: number;
  /** With parts > 1 and loraR (not the pair): the parts' LoRA B's as bindings of their own (see `parts`). */
  loraParts?: boolean;
  /** SwiGLU in the epilogue (forward only): result = silu(Gate[o])·pre, Gate [M, N] (gate_proj's output). */
  swiglu?: boolean;
  /**
   * gate_proj and up_proj in one program (forward only, transB, parts = 2 of equal rows, no bias, the few-rows and
   * column programs only): each output column c sums both B's row c (B: gate_proj, B1: up_proj) over the same
   * loads of A, and stores swigluOf(gate, up), each with its own LoRA term (Down's columns 0 … R − 1 and
   * R … 2R − 1 against LoraB and LoraB1): the values of the gate program then the up program's SwiGLU epilogue,
   * in one dispatch and without the gate's [M, N] in memory.
   */
  pair?: boolean;
  /**
   * B (and B1, B2) packed f16 (baseDtype "f16"; kernels/webgpu-f16.ts): int32 words, two binary16 values each, read
   * through `bAt*` (unpack2x16float) and multiplied in f32: transB for x·Wᵀ (nn.Linear's W [out, in]: the decode
   * and the f16 forward), not transB for dy·W (the backward to the activations, linearPackedNNWebGpu).
   */
  packedB?: boolean;
}

/**
 * WGSL: element i (flat, logical) of B / B1 / B2, through `bAt`, `bAt1`, `bAt2`: the f32 binding read as is, or a
 * packed-f16 one unpacked (element 2j in the low half of word j).
 */
function bAtDecl(o: MatMulOptions): string {
  return bNames(o)
    .map((name, p) => {
      const fn = p === 0 ? 'bAt' : `bAt${p}`;
      return o.packedB
        ? `
      fn ${fn}(i : i32) -> f32 {
        let u = unpack2x16float(bitcast<u32>(${name}[i >> 1u]));
        return select(u.x, u.y, (i & 1) == 1);
      }`
        : `
      fn ${fn}(i : i32) -> f32 { return ${name}[i]; }`;
    })
    .join('');
}

const f32 = (v: number): string => {
  const s = String(v);
  return s.includes('.') || s.includes('e') ? s : `${s}.0`;
};

/** gelu_new and its derivative in the sigmoid form (docs/tfjs.md trap 7: no tanh). */
const GELU_WGSL = `
      fn sigmoidStable(z : f32) -> f32 { return 1.0 / (1.0 + exp(-z)); }
      fn geluNew(x : f32) -> f32 {
        return x * sigmoidStable(${f32(GELU_K)} * (x + 0.044715 * x * x * x));
      }
      fn geluNewGrad(x : f32) -> f32 {
        let s = sigmoidStable(${f32(GELU_K)} * (x + 0.044715 * x * x * x));
        return s + x * s * (1.0 - s) * (${f32(GELU_K)} + ${f32(3 * 0.044715 * GELU_K)} * x * x);
      }`;

/**
 * The store of one output: WGSL that reads `acc` (the dot product), `c` (its column) and `o` (its flat index)
 * and writes result[o]: the plain product (mm), dz = dy·gelu'(pre) (dz), or act(pre) (+ residual) (fwd).
 */
function epilogueCode(o: MatMulOptions): string {
  const extra = o.hasExtra
    ? ' + uniforms.addScale * Extra[o]'
    : o.loraR
      ? ' + uniforms.addScale * loraUp(r, c)'
      : '';
  const bias = o.noBias ? '' : ' + Bias[c]';
  if (o.pair) {
    // The gate program's store, then the up program's with that gate (the same operations in the same order).
    const lora = (fn: string) => (o.loraR ? ` + uniforms.addScale * ${fn}(r, c)` : '');
    return `result[o] = swigluOf(acc${lora('loraUp')}, accU${lora('loraUp1')});`;
  }
  if (o.mode === 'mm') return 'result[o] = acc;';
  if (o.mode === 'dz') return `result[o] = DY[o] * geluNewGrad(acc${bias}${extra});`;
  const pre = `acc${bias}${extra}`;
  // SwiGLU as kernels/webgpu-swiglu.ts computes it: g·σ(g)·up, σ(g) = 1/(1 + e^(−g)).
  const act = o.gelu ? `geluNew(${pre})` : o.swiglu ? `swigluOf(Gate[o], ${pre})` : pre;
  return `result[o] = ${o.hasRes ? `Res[o] + ${act}` : act};`;
}

/** WGSL of the SwiGLU epilogue, in PerfSwigluFwd's order of operations. */
function swigluDecl(o: MatMulOptions): string {
  if (!o.swiglu && !o.pair) return '';
  return `
      fn swigluOf(g : f32, u : f32) -> f32 {
        let s = 1.0 / (1.0 + exp(-1.0 * g));
        return g * s * u;
      }`;
}

/** The B bindings of a program: B, then B1 and B2 when B comes in parts. */
function bNames(o: MatMulOptions): string[] {
  return ['B', 'B1', 'B2'].slice(0, o.parts ?? 1);
}

/**
 * WGSL statements returning part p's `read(p, row)` for output column `c` when B comes in 2 or 3 parts split
 * along N at the uniforms n0 and n1 (row: c's row within its part): wRead's and bq's body.
 */
function partPick(parts: number, read: (p: number, row: string) => string): string {
  return `if (c < uniforms.n0) { return ${read(0, 'c')}; }
        ${parts > 2 ? `if (c < uniforms.n1) { return ${read(1, '(c - uniforms.n0)')}; }` : ''}
        return ${parts > 2 ? read(2, '(c - uniforms.n1)') : read(1, '(c - uniforms.n0)')};`;
}

/**
 * WGSL of `bq(c, q)`: load q (a vec4 of B's binding: 4 f32, or 4 words holding 8 packed halves) of row c of the
 * [N, K] weight, from the part that holds row c when B comes in parts (FewRowsMatMulProgram's vector loads).
 */
function bqDecl(o: MatMulOptions): string {
  const names = bNames(o);
  const fn = (name: string, body: string) => `
      fn ${name}(c : i32, q : i32) -> ${o.packedB ? 'vec4<i32>' : 'vec4<f32>'} {
        let KV = uniforms.dimK / ${o.packedB ? 8 : 4};
        ${body}
      }`;
  // The pair's two weights are read side by side, row c of each (bq: gate_proj, bq1: up_proj).
  if (o.pair) return fn('bq', 'return B[c * KV + q];') + fn('bq1', 'return B1[c * KV + q];');
  const body =
    names.length < 2
      ? 'return B[c * KV + q];'
      : partPick(names.length, (p, row) => `${names[p]}[${row} * KV + q]`);
  return fn('bq', body);
}

/** WGSL of `loraPart(c)`: which part of B (and which block of Down's LoRA columns) holds column c. */
function loraPartDecl(): string {
  return `
      fn loraPart(c : i32) -> i32 {
        return select(select(2, 1, c < uniforms.n1), 0, c < uniforms.n0);
      }`;
}

/**
 * WGSL of `wRead(c, k)`: op(B)[k, c] when B comes in parts (transB: part p holds rows n_p … n_{p+1} − 1 of the
 * [N, K] weight), and `loraPart(c)`, the part of column c (which block of Down its LoRA term reads).
 */
function partsDecl(o: MatMulOptions): string {
  if ((o.parts ?? 1) < 2 || o.pair) return '';
  return `
      fn wRead(c : i32, k : i32) -> f32 {
        let K = uniforms.dimK;
        ${partPick(o.parts!, (p, row) => `${p === 0 ? 'bAt' : `bAt${p}`}(${row} * K + k)`)}
      }
      ${loraPartDecl()}`;
}

/**
 * The inputs a program binds, in order: A, B, [LnG, LnB], then for fwd/dz Bias, [Extra] or [Down, LoraB], then DY
 * (dz) or [Res] (fwd).
 */
function variableNamesOf(o: MatMulOptions): string[] {
  const norm = o.ln ? (o.rms ? ['LnG'] : ['LnG', 'LnB']) : [];
  return o.mode === 'mm'
    ? ['A', ...bNames(o), ...norm]
    : [
        'A',
        ...bNames(o),
        ...(o.noBias ? [] : ['Bias']),
        ...norm,
        ...(o.hasExtra ? ['Extra'] : []),
        ...(o.swiglu ? ['Gate'] : []),
        ...(o.loraR ? ['Down', ...loraBNames(o)] : []),
        ...(o.mode === 'dz' ? ['DY'] : o.hasRes ? ['Res'] : []),
      ];
}

/** The LoRA B bindings: LoraB; the pair's LoraB1 too; each part's with loraParts (LoraB, LoraB1[, LoraB2]). */
function loraBNames(o: MatMulOptions): string[] {
  if (o.pair) return ['LoraB', 'LoraB1'];
  if (o.loraParts && (o.parts ?? 1) > 1) return ['LoraB', 'LoraB1', 'LoraB2'].slice(0, o.parts);
  return ['LoraB'];
}

const optionsKey = (o: MatMulOptions): string =>
  `${o.mode}_${+o.transA}${+o.transB}${+o.gelu}${+o.hasExtra}${+o.hasRes}${o.ln ? (o.rms ? '_rms' : '_ln') : ''}` +
  `${o.loraR ? `_lora${o.loraR}` : ''}${o.noBias ? '_nb' : ''}${(o.parts ?? 1) > 1 ? `_p${o.parts}` : ''}` +
  `${o.swiglu ? '_swiglu' : ''}${o.pair ? '_pair' : ''}${o.packedB ? '_f16' : ''}${o.loraParts ? '_lp' : ''}`;

/** WGSL of the epilogue's LoRA up-projection: Σ_j Down[r, j]·LoraB[c, j] over the rank (when loraR is set). */
function loraUpDecl(o: MatMulOptions): string {
  if (!o.loraR) return '';
  const R = o.loraR;
  const parts = o.parts ?? 1;
  if (o.pair) {
    // gate_proj's term (loraUp: Down's first R columns, LoraB) and up_proj's (loraUp1: the next R, LoraB1).
    const fn = (name: string, d: string, b: string) => `
      fn ${name}(r : i32, c : i32) -> f32 {
        var s = 0.0;
        let d0 = r * ${2 * R}${d};
        for (var j = 0; j < ${R}; j = j + 1) { s = s + Down[d0 + j] * ${b}[c * ${R} + j]; }
        return s;
      }`;
    return fn('loraUp', '', 'LoraB') + fn('loraUp1', ` + ${R}`, 'LoraB1');
  }
  // In parts, column c's pair is its part's: Down's columns loraPart(c)·R … + R − 1 of parts·R.
  const d0 = parts > 1 ? `r * ${parts * R} + loraPart(c) * ${R}` : `r * ${R}`;
  if (parts > 1 && o.loraParts) {
    // Each part's B bound as it is: row c − n_p of part p's, summed in the same order as the stacked B's.
    const sum = (b: string, row: string) =>
      `for (var j = 0; j < ${R}; j = j + 1) { s = s + Down[d0 + j] * ${b}[(${row}) * ${R} + j]; }`;
    return `
      fn loraUp(r : i32, c : i32) -> f32 {
        var s = 0.0;
        let p = loraPart(c);
        let d0 = r * ${parts * R} + p * ${R};
        if (p == 0) { ${sum('LoraB', 'c')} }
        ${parts > 2 ? `else if (p == 1) { ${sum('LoraB1', 'c - uniforms.n0')} }` : ''}
        else { ${parts > 2 ? sum('LoraB2', 'c - uniforms.n1') : sum('LoraB1', 'c - uniforms.n0')} }
        return s;
      }`;
  }
  return `
      fn loraUp(r : i32, c : i32) -> f32 {
        var s = 0.0;
        let d0 = ${d0};
        for (var j = 0; j < ${R}; j = j + 1) { s = s + Down[d0 + j] * LoraB[c * ${R} + j]; }
        return s;
      }`;
}

/** Lanes per row of the layer-norm prologue's reductions (kernels/webgpu-layernorm.ts's workgroup size). */
const LN_LANES = 64;

/**
 * WGSL of the layer-norm prologue for `rows` rows from row0 (rows clamped to M − 1 when reading), run by all 256
 * threads of the workgroup, `256 / 64` rows at a time: `lnMean[i]` and `lnRstd[i]` for row0 + i, in
 * PerfLayerNormFwd's arithmetic order (each of 64 lanes sums its strided columns, then a tree of pairs; the mean,
 * then the variance about it). Call from uniform control flow; ends on a barrier. Needs `tid`, `row0`, `M`, `K`.
 */
function lnPrologueDecl(rows: number, rms = false, vecA = false): string {
  // A bound as vec4s (the few-rows program's vector loads): element i is component i % 4 of vec4 i / 4.
  const a = (i: string) => (vecA ? `A[(${i}) >> 2u][(${i}) & 3]` : `A[${i}]`);
  // RMSNorm (rms): only ρ = 1/√(mean(x²) + ε), each lane summing x·x as PerfRmsNormFwd's rowRstd does.
  const stats = rms
    ? `var q = 0.0;
          if (live) {
            for (var j = lane; j < K; j = j + ${LN_LANES}) { q = q + ${a('off + j')} * ${a('off + j')}; }
          }
          let mean = 0.0;`
    : `var s = 0.0;
          if (live) {
            for (var j = lane; j < K; j = j + ${LN_LANES}) { s = s + ${a('off + j')}; }
          }
          let mean = lnLaneSum(s, tid) / f32(K);
          var q = 0.0;
          if (live) {
            for (var j = lane; j < K; j = j + ${LN_LANES}) {
              let d = ${a('off + j')} - mean;
              q = q + d * d;
            }
          }`;
  return `
      var<workgroup> lnMean : array<f32, ${rows}>;
      var<workgroup> lnRstd : array<f32, ${rows}>;
      var<workgroup> lnRed : array<f32, 256>;
      fn lnLaneSum(v : f32, tid : i32) -> f32 {
        let lane = tid % ${LN_LANES};
        let base = tid - lane;
        lnRed[tid] = v;
        workgroupBarrier();
        for (var s = ${LN_LANES / 2}; s > 0; s = s / 2) {
          if (lane < s) { lnRed[tid] = lnRed[tid] + lnRed[tid + s]; }
          workgroupBarrier();
        }
        let total = lnRed[base];
        workgroupBarrier();
        return total;
      }
      fn lnStats(tid : i32, row0 : i32, M : i32, K : i32) {
        let lane = tid % ${LN_LANES};
        let grp = tid / ${LN_LANES};
        // Rows ≥ M read nothing (their stats are never used for a stored output); the loop itself runs over all
        // rows: tfjs reads workgroupId through a private variable, which WGSL's uniformity analysis does not take
        // as uniform, so a bound made from it could not hold the reductions' barriers.
        let nRows = min(${rows}, M - row0);
        for (var i0 = 0; i0 < ${rows}; i0 = i0 + ${256 / LN_LANES}) {
          let i = i0 + grp;
          let off = min(row0 + i, M - 1) * K;
          let live = i < nRows;
          ${stats}
          let r = inverseSqrt(lnLaneSum(q, tid) / f32(K) + uniforms.lnEps);
          if (lane == 0 && i < nRows) {
            lnMean[i] = mean;
            lnRstd[i] = r;
          }
        }
        workgroupBarrier();
      }`;
}

/** A's element at flat index `at` (column `k`) of local row `i`, layer-normed when the prologue is on. */
function aRead(o: MatMulOptions, at: string, k: string, i: string): string {
  if (o.ln && o.rms) return `((A[${at}] * lnRstd[${i}]) * LnG[${k}])`;
  return o.ln ? `((A[${at}] - lnMean[${i}]) * lnRstd[${i}] * LnG[${k}] + LnB[${k}])` : `A[${at}]`;
}

/**
 * WGSL of one column's k loop over `rows` rows (few-rows and column programs, one element of B at a time): k from
 * `first` by `step`, unrolled by UNROLL (all loads of UNROLL steps issued before their FMAs), into `acc0…` — and,
 * for the gate|up pair, `accU0…` from B1's row (up_proj) over the same reads of A. `cc` is the column, `K` and `N`
 * the shape; B is read along K (transB: W [N, K]) or across it, through wRead when it comes in parts.
 */
function kLoopWgsl(o: MatMulOptions, rows: number, first: string, step: number): string {
  const rowsIdx = Array.from({ length: rows }, (_, i) => i);
  const unrolled = Array.from({ length: UNROLL }, (_, u) => u);
  const at = (k: string) => (o.transB ? `cc * K + ${k}` : `(${k}) * N + cc`);
  const split = (o.parts ?? 1) > 1 && !o.pair;
  const streams = [
    { acc: 'acc', w: 'w', read: (k: string) => (split ? `wRead(cc, ${k})` : `bAt(${at(k)})`) },
    ...(o.pair ? [{ acc: 'accU', w: 'v', read: (k: string) => `bAt1(${at(k)})` }] : []),
  ];
  const each = (f: (st: (typeof streams)[number]) => string) => streams.map(f).join('\n        ');
  const fmas = (
    st: (typeof streams)[number],
    k: (u: number) => string,
    w: (u: number) => string,
    us: number[],
  ) =>
    rowsIdx
      .map((i) =>
        us
          .map(
            (u) =>
              `${st.acc}${i} = fma(${aRead(o, `xo${i} + ${k(u)}`, k(u), `${i}`)}, ${w(u)}, ${st.acc}${i});`,
          )
          .join(' '),
      )
      .join('\n        ');
  const kAt = (u: number) => (u ? `k + ${u * step}` : 'k');
  return `
        ${each((st) => rowsIdx.map((i) => `var ${st.acc}${i} = 0.0;`).join('\n        '))}
        var k = ${first};
        while (k + ${(UNROLL - 1) * step} < K) {
          ${each((st) => unrolled.map((u) => `let ${st.w}${u} = ${st.read(`k + ${u * step}`)};`).join('\n        '))}
          ${each((st) =>
            fmas(
              st,
              (u) => `k + ${u * step}`,
              (u) => `${st.w}${u}`,
              unrolled,
            ),
          )}
          k = k + ${UNROLL * step};
        }
        while (k < K) {
          ${each((st) => `let ${st.w} = ${st.read('k')};`)}
          ${each((st) => fmas(st, kAt, () => st.w, [0]))}
          k = k + ${step};
        }`;
}

/**
 * C [M, N] = op(A)·op(B) (op: transpose or not) with an epilogue in the store; the shape of a tfjs
 * WebGPUProgram (the backend adds bindings, uniforms and the entry point).
 */
class LinearMatMulProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [TS, TS, 1];
  readonly uniforms = MATMUL_UNIFORMS;
  private readonly o: MatMulOptions;

  constructor(o: MatMulOptions, M: number, N: number) {
    this.o = o;
    this.variableNames = variableNamesOf(o);
    this.outputShape = [M, N];
    this.shaderKey = `perfLinear_${optionsKey(o)}`;
    this.dispatch = [Math.ceil(N / TN), Math.ceil(M / TM), 1];
  }

  getUserCode(): string {
    const { transA, transB } = this.o;
    const loads = (TM * TK) / (TS * TS); // elements of each tile per thread: 4
    // A tile As[k][m] (TK × TM). Row-major A [M, K]: neighbouring threads take neighbouring k; A stored [K, M]
    // (transA): neighbouring m. Likewise B tile Bs[k][n] from B [K, N] or B stored [N, K] (transB).
    const loadA = transA
      ? `let mm = f % ${TM}; let kk = f / ${TM};
         let r = row0 + mm; let k = k0 + kk;
         var v = 0.0;
         if (r < M && k < K) { v = A[k * M + r]; }`
      : `let kk = f % ${TK}; let mm = f / ${TK};
         let r = row0 + mm; let k = k0 + kk;
         var v = 0.0;
         if (r < M && k < K) { v = ${aRead(this.o, 'r * K + k', 'k', 'mm')}; }`;
    const loadB = transB
      ? `let kk = f % ${TK}; let nn = f / ${TK};
         let c = col0 + nn; let k = k0 + kk;
         var v = 0.0;
         if (c < N && k < K) { v = ${(this.o.parts ?? 1) > 1 ? 'wRead(c, k)' : 'bAt(c * K + k)'}; }`
      : `let nn = f % ${TN}; let kk = f / ${TN};
         let c = col0 + nn; let k = k0 + kk;
         var v = 0.0;
         if (c < N && k < K) { v = bAt(k * N + c); }`;
    const idx = (i: number, j: number) => `${i}${j}`;
    const accDecl: string[] = [];
    const fmas: string[] = [];
    const stores: string[] = [];
    for (let i = 0; i < PER; i++) {
      for (let j = 0; j < PER; j++) {
        accDecl.push(`var acc${idx(i, j)} = 0.0;`);
        fmas.push(`acc${idx(i, j)} = fma(a${i}, b${j}, acc${idx(i, j)});`);
      }
    }
    const epilogue = epilogueCode(this.o);
    for (let i = 0; i < PER; i++) {
      stores.push(`{
          let r = row0 + ty + ${i * TS};
          if (r < M) {`);
      for (let j = 0; j < PER; j++) {
        stores.push(`
            {
              let c = col0 + tx + ${j * TS};
              if (c < N) {
                let o = r * N + c;
                let acc = acc${idx(i, j)};
                ${epilogue}
              }
            }`);
      }
      stores.push(`
          }
        }`);
    }
    const aRegs = Array.from({ length: PER }, (_, i) => `let a${i} = As[kk * ${TM} + ty + ${i * TS}];`);
    const bRegs = Array.from({ length: PER }, (_, j) => `let b${j} = Bs[kk * ${TN} + tx + ${j * TS}];`);
    return `
      var<workgroup> As : array<f32, ${TM * TK}>;
      var<workgroup> Bs : array<f32, ${TN * TK}>;
      ${GELU_WGSL}
      ${this.o.ln ? lnPrologueDecl(TM, this.o.rms) : ''}
      ${loraUpDecl(this.o)}
      ${swigluDecl(this.o)}
      ${bAtDecl(this.o)}
      ${partsDecl(this.o)}

      fn main(index : i32) {
        let M = uniforms.dimM;
        let N = uniforms.dimN;
        let K = uniforms.dimK;
        let tx = i32(localId.x);
        let ty = i32(localId.y);
        let tid = ty * ${TS} + tx;
        let row0 = i32(workgroupId.y) * ${TM};
        let col0 = i32(workgroupId.x) * ${TN};
        ${this.o.ln ? 'lnStats(tid, row0, M, K);' : ''}
        ${accDecl.join('\n        ')}
        for (var k0 = 0; k0 < K; k0 = k0 + ${TK}) {
          for (var l = 0; l < ${loads}; l = l + 1) {
            let f = tid + l * ${TS * TS};
            ${loadA}
            As[kk * ${TM} + mm] = v;
          }
          for (var l = 0; l < ${loads}; l = l + 1) {
            let f = tid + l * ${TS * TS};
            ${loadB}
            Bs[kk * ${TN} + nn] = v;
          }
          workgroupBarrier();
          for (var kk = 0; kk < ${TK}; kk = kk + 1) {
            ${aRegs.join('\n            ')}
            ${bRegs.join('\n            ')}
            ${fmas.join('\n            ')}
          }
          workgroupBarrier();
        }
        ${stores.join('')}
      }`;
  }
}

/** Threads per workgroup of the few-rows and the column programs (the column program: one output column each). */
const FR_THREADS = 256;
/** Steps of a k lane unrolled in the few-rows program's loop. */
const UNROLL = 4;
/** Default below which the few-rows program halves its column strip (8 → 4) to fill a big GPU. */
export const LINEAR_SMALL_MIN_GROUPS_DEFAULT = 128;
/**
 * Default of setWebGpuLinearSmallRows: output rows up to which the few-rows program runs (a decode step's batch).
 * Tried on an H100 (GPT-2 124M shape, greedy generation of 24 tokens at batch 16, whose prefill has 128 rows):
 * bounds of 64 and 128 alternated in one session gave 503 / 418 ms and 494 / 526 ms — no difference beyond the
 * noise — so the bound stays at 64.
 */
export const LINEAR_SMALL_ROWS_DEFAULT = 64;
let smallRowsMax = LINEAR_SMALL_ROWS_DEFAULT;
let smallMinGroups = LINEAR_SMALL_MIN_GROUPS_DEFAULT;
/** Whether setWebGpuLinearSmallRows was called: then its bound holds on every adapter. */
let smallRowsExplicit = false;

/**
 * A software adapter (SwiftShader, lavapipe/llvmpipe: a CPU runs the workgroups one after another) — where the
 * few-rows program's many 256-thread workgroups and their reductions cost several times the 64×64 tiles (seen in
 * Chromium: LM training on SwiftShader 5× slower with it). Read from the current webgpu backend's adapter info.
 */
function onSoftwareAdapter(): boolean {
  if (tf.getBackend() !== 'webgpu') return false;
  // Asked on every Conv1D call (per layer and token): read once per backend instance.
  const backend = tf.backend() as unknown as { adapterInfo?: { vendor?: string; architecture?: string } };
  let soft = softwareByBackend.get(backend);
  if (soft === undefined) {
    const info = backend.adapterInfo;
    soft = /swiftshader|llvmpipe|lavapipe|software/i.test(
      `${info?.vendor ?? ''} ${info?.architecture ?? ''}`,
    );
    softwareByBackend.set(backend, soft);
  }
  return soft;
}
const softwareByBackend = new WeakMap<object, boolean>();

/** The row bound in force: setWebGpuLinearSmallRows's, else the default on hardware and 0 on a software adapter. */
function smallRowsBound(): number {
  return smallRowsExplicit || !onSoftwareAdapter() ? smallRowsMax : 0;
}

/**
 * Output rows up to which a software adapter runs the column program (ColumnsMatMulProgram) instead of the 64×64
 * tiles, when setWebGpuLinearSmallRows was not called. Measured on SwiftShader (2 cores, [M, 2048]·[2048, 6144]):
 * the tiles take the same ≈ 1.2 s at 2, 8 or 64 rows (a 64-row tile whatever M is); one column per thread over
 * all of K takes ≈ 0.08 s at 2 rows, 0.25 s at 8 and 1.4–1.8 s at 64, so it pays up to about 16 rows.
 */
export const LINEAR_SOFTWARE_COLUMN_ROWS = 16;
/** null: the column program on software adapters only; true / false: on every adapter / never (tests). */
let columnsForced: boolean | null = null;

/**
 * Whether few rows run the column program: null (the default) on software adapters only, true on every adapter
 * (to test it on a GPU, or against the tiles), false never. Returns the previous setting.
 */
export function setWebGpuLinearColumns(on: boolean | null): boolean | null {
  const was = columnsForced;
  columnsForced = on;
  return was;
}

/** Whether the column program is the few-rows route in force (see setWebGpuLinearColumns). */
function columnsRoute(): boolean {
  if (columnsForced !== null) return columnsForced;
  return !smallRowsExplicit && onSoftwareAdapter();
}

/**
 * Output rows up to which the forward, the gelu_new dz kernel and dx = dz·Wᵀ run the few-rows program instead
 * of the 64×64 tiles (0: never), and the workgroup count below which its strips narrow from 8 columns to 4.
 * Returns the previous row bound. Once called, the bound holds on every adapter (without a call, software adapters
 * get the column program up to LINEAR_SOFTWARE_COLUMN_ROWS rows, else the tiles: see onSoftwareAdapter);
 * resetWebGpuLinearSmallRows goes back. For tests and tuning.
 */
export function setWebGpuLinearSmallRows(
  maxRows: number,
  minGroups: number = LINEAR_SMALL_MIN_GROUPS_DEFAULT,
): number {
  if (!Number.isInteger(maxRows) || maxRows < 0)
    throw new Error(
      `setWebGpuLinearSmallRows: maxRows must be an integer ≥ 0 (0 turns it off), got ${maxRows}.`,
    );
  if (!Number.isInteger(minGroups) || minGroups < 1)
    throw new Error(`setWebGpuLinearSmallRows: minGroups must be an integer ≥ 1, got ${minGroups}.`);
  const was = smallRowsMax;
  smallRowsMax = maxRows;
  smallMinGroups = minGroups;
  smallRowsExplicit = true;
  return was;
}

/**
 * The few-rows settings as they are now, as a function that puts them back (for a check that forces the few-rows
 * program with setWebGpuLinearSmallRows and must leave a caller's choice, or the per-adapter default, as it was).
 */
export function saveWebGpuLinearSmallRows(): () => void {
  const saved = { max: smallRowsMax, groups: smallMinGroups, explicit: smallRowsExplicit };
  return () => {
    smallRowsMax = saved.max;
    smallMinGroups = saved.groups;
    smallRowsExplicit = saved.explicit;
  };
}

/**
 * Back to the shipped choice: LINEAR_SMALL_ROWS_DEFAULT on hardware adapters; on software ones the column program
 * up to LINEAR_SOFTWARE_COLUMN_ROWS rows, else the tiles.
 */
export function resetWebGpuLinearSmallRows(): void {
  smallRowsMax = LINEAR_SMALL_ROWS_DEFAULT;
  smallMinGroups = LINEAR_SMALL_MIN_GROUPS_DEFAULT;
  smallRowsExplicit = false;
}

/** How one fused matmul C [M, N] is dispatched. */
export interface LinearPlan {
  /**
   * 'rows': the few-rows program (a column strip per workgroup, K split across its threads); 'columns': one column
   * per thread over all of K, 256 columns per workgroup (software adapters); else 64×64 tiles.
   */
  program: 'rows' | 'columns' | 'tiled';
  /**
   * Column strips (or tiles) and row blocks (or tiles): the dispatch's x and y, except the few-rows program's, which
   * dispatches them the other way round (row blocks along x: RowBlockProgram's `blocksFirst`).
   */
  groups: [number, number];
  /** Output rows × columns one workgroup computes. */
  rows: number;
  columns: number;
}

/**
 * The dispatch of C [M, N] = op(A)·op(B): the few-rows program when M ≤ setWebGpuLinearSmallRows's bound and A
 * is not transposed (dW = xᵀ·dz has M = in, its rows are many), else the tiles. Few rows: blocks of 1, 2, 4 or
 * 8 rows (the smallest power of two ≥ M, at most 8) × strips of 8 columns (32 bytes of a W row), or of 4 when
 * that gives fewer than 128 workgroups (setWebGpuLinearSmallRows's minGroups).
 */
export function linearPlan(M: number, N: number, transA = false): LinearPlan {
  if (!transA && M <= LINEAR_SOFTWARE_COLUMN_ROWS && columnsRoute()) {
    const rows = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
    const bx = Math.ceil(N / FR_THREADS);
    if (bx <= MAX_GROUPS && Math.ceil(M / rows) <= MAX_GROUPS)
      return { program: 'columns', groups: [bx, Math.ceil(M / rows)], rows, columns: FR_THREADS };
  }
  if (!transA && M <= smallRowsBound()) {
    const rows = M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8;
    const by = Math.ceil(M / rows);
    const columns = Math.ceil(N / 8) * by >= smallMinGroups ? 8 : 4;
    const bx = Math.ceil(N / columns);
    if (bx <= MAX_GROUPS && by <= MAX_GROUPS) return { program: 'rows', groups: [bx, by], rows, columns };
  }
  return { program: 'tiled', groups: [Math.ceil(N / TN), Math.ceil(M / TM)], rows: TM, columns: TN };
}

/**
 * What the few-rows and the column programs share: 256 threads a workgroup, the workgroup grid and row block of a
 * LinearPlan, A never transposed (dW = xᵀ·dz has `in` rows and runs the tiles); each writes its own loop.
 */
abstract class RowBlockProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [FR_THREADS, 1, 1];
  readonly uniforms = MATMUL_UNIFORMS;
  protected readonly o: MatMulOptions;
  /** Output rows per workgroup. */
  protected readonly rb: number;

  /**
   * `blocksFirst`: the row blocks along the dispatch's x and the column strips along y (the few-rows program), so
   * that the workgroups reading one strip of W are launched one after another (x varies fastest) and all but the
   * first find it in L2; otherwise strips along x, row blocks along y (the plan's order).
   */
  constructor(
    name: string,
    key: string,
    o: MatMulOptions,
    M: number,
    N: number,
    plan: LinearPlan,
    blocksFirst = false,
  ) {
    if (o.transA) throw new Error(`${name}: A must not be transposed (dW runs the tiles).`);
    this.o = o;
    this.rb = plan.rows;
    this.variableNames = variableNamesOf(o);
    this.outputShape = [M, N];
    this.shaderKey = key;
    const [bx, by] = plan.groups;
    this.dispatch = blocksFirst ? [by, bx, 1] : [bx, by, 1];
  }

  abstract getUserCode(): string;
}

/**
 * C [M, N] = A·op(B) for few rows M, the same epilogue as LinearMatMulProgram: a GEMV-like kernel. Workgroup
 * (x, y) computes rows x·RB … x·RB + RB − 1 × columns y·CW … y·CW + CW − 1 (RB ≤ 8, CW 8 or 4: the row blocks
 * of one strip launched one after another, so that at 9–64 rows W is read from memory once and then from L2); its
 * 256 threads are CW column lanes × KL = 256 / CW k lanes: thread (cl, kl) sums k = kl, kl + KL, … into RB registers (one
 * per row), then the workgroup adds its KL partial sums per output in workgroup memory (RB lanes per thread,
 * then 256 / (RB·CW) groups per output) and stores through the epilogue. Reads: B [K, N] row-major (W): the
 * column lane is the fast thread index, so neighbouring threads read neighbouring columns of a W row (a warp:
 * 32 / CW rows × CW columns); B stored [N, K] (transB, Wᵀ for dx): the k lane is the fast index, so a warp
 * reads 32 consecutive k of one W row. A [M, K]: neighbouring k lanes read neighbouring k, column lanes share
 * the address. Rows ≥ M and columns ≥ N are clamped for loads (no branch in the loop) and skipped for stores.
 * Workgroup memory: 256·RB + 256 floats (≤ 9 KB).
 */
class FewRowsMatMulProgram extends RowBlockProgram {
  private readonly cw: number;
  /** Elements of B per load (vecRowsWidth): 0 for one f32 (or one packed half) at a time, else 4 or 8. */
  private readonly vec: number;
  /**
   * With `vec`: B's bindings as vec4<f32> (or vec4<i32>: 8 packed halves), A and the norm's weights as vec4<f32>,
   * the rest (bias, gate, LoRA, residual) as they are.
   */
  readonly variableComponents?: number[];

  constructor(o: MatMulOptions, M: number, N: number, plan: LinearPlan, vec = 0) {
    const key = `perfLinearRows_${optionsKey(o)}_${plan.rows}x${plan.columns}${vec ? `_v${vec}` : ''}`;
    super('FewRowsMatMulProgram', key, o, M, N, plan, true);
    this.cw = plan.columns;
    this.vec = vec;
    if (vec) {
      // B's parts, and A with the norm's weights (read four at a time beside each load of B: K is a multiple of 4).
      const vecs = new Set([...bNames(o), 'A', 'LnG', 'LnB']);
      this.variableComponents = this.variableNames.map((n) => (vecs.has(n) ? 4 : 1));
    }
  }

  getUserCode(): string {
    const KL = FR_THREADS / this.cw;
    if (this.vec) return this.reductionCode(this.vecLoopCode(KL), KL);
    // Lane kl sums k = kl, kl + KL, … of its column.
    return this.reductionCode(kLoopWgsl(this.o, this.rb, 'kl', KL), KL);
  }

  /** The accumulators' names: acc (the product), and accU for the pair's up_proj. */
  private streams(): string[] {
    return this.o.pair ? ['acc', 'accU'] : ['acc'];
  }

  /**
   * The k loop with B read `vec` elements at a time (K a multiple of vec): lane kl takes loads kl, kl + KL, …
   * along its column's W row (transB: W [N, K]), so a warp reads 32 consecutive vec4s (512 bytes) per load, and
   * each row's four partial sums stay in a vec4 until the end. Leaves `acc0…` as the scalar loop does.
   */
  private vecLoopCode(KL: number): string {
    const RB = this.rb;
    const V = this.vec;
    const o = this.o;
    const rowsIdx = Array.from({ length: RB }, (_, i) => i);
    const U = RB <= 4 ? 4 : 2;
    const unrolled = Array.from({ length: U }, (_, u) => u);
    const halves = V / 4; // vec4s of f32 values per load: 1 (f32) or 2 (8 packed halves)
    // Row i's four A values at vec4 `k4` of the row (columns 4·k4 … + 3), through the prologue when it is on (the
    // norm's weights g{u}_{h} / lb{u}_{h} are loaded once per load of B, for every row).
    const a4 = (k4: string, i: number, gb: string): string => {
      const av = `A[xv${i} + ${k4}]`;
      if (!o.ln) return av;
      if (o.rms) return `((${av} * lnRstd[${i}]) * g${gb})`;
      return `((${av} - lnMean[${i}]) * lnRstd[${i}] * g${gb} + lb${gb})`;
    };
    // Per stream (the product, and the pair's up_proj: bq1 into e{u}_{h} and accU): its loads and accumulators.
    const streams = this.streams().map((acc, si) => ({ acc, b: si ? 'e' : 'b', bq: si ? 'bq1' : 'bq' }));
    // One load: the vec4s b{u}_{h} of elements k = q·V + 4h … + 3 (and e{u}_{h} for the pair's second weight).
    const load = (u: number, q: string): string =>
      streams
        .map(({ b, bq }) => {
          if (!o.packedB) return `let ${b}${u}_0 = ${bq}(cc, ${q});`;
          return `let p${b}${u} = ${bq}(cc, ${q});
            let ${b}${u}_0 = vec4<f32>(unpack2x16float(bitcast<u32>(p${b}${u}.x)), unpack2x16float(bitcast<u32>(p${b}${u}.y)));
            let ${b}${u}_1 = vec4<f32>(unpack2x16float(bitcast<u32>(p${b}${u}.z)), unpack2x16float(bitcast<u32>(p${b}${u}.w)));`;
        })
        .join('\n          ');
    // The norm's weights for load u: vec4s (q·V + 4h) / 4 = q·halves + h.
    const norms = (u: number, q: string): string =>
      !o.ln
        ? ''
        : Array.from({ length: halves }, (_, h) => {
            const k4 = `(${q}) * ${halves} + ${h}`;
            return `let g${u}_${h} = LnG[${k4}];${o.rms ? '' : ` let lb${u}_${h} = LnB[${k4}];`}`;
          }).join(' ');
    const fmas = (u: number, q: string): string =>
      streams
        .map(({ acc, b }) =>
          rowsIdx
            .map((i) =>
              Array.from({ length: halves }, (_, h) => {
                const k4 = `(${q}) * ${halves} + ${h}`;
                return `${acc}${i} = fma(${a4(k4, i, `${u}_${h}`)}, ${b}${u}_${h}, ${acc}${i});`;
              }).join(' '),
            )
            .join('\n            '),
        )
        .join('\n            ');
    return `
        let KV = K / ${V};
        ${rowsIdx.map((i) => `let xv${i} = xo${i} / 4;`).join('\n        ')}
        ${streams.map(({ acc }) => rowsIdx.map((i) => `var ${acc}${i} = vec4<f32>(0.0);`).join('\n        ')).join('\n        ')}
        var kq = kl;
        while (kq + ${(U - 1) * KL} < KV) {
          ${unrolled.map((u) => load(u, `kq + ${u * KL}`)).join('\n          ')}
          ${unrolled.map((u) => norms(u, `kq + ${u * KL}`)).join('\n          ')}
          ${unrolled.map((u) => fmas(u, `kq + ${u * KL}`)).join('\n          ')}
          kq = kq + ${U * KL};
        }
        while (kq < KV) {
          ${load(0, 'kq')}
          ${norms(0, 'kq')}
          ${fmas(0, 'kq')}
          kq = kq + ${KL};
        }`;
  }

  /** The whole shader around `loop` (which leaves each row's partial sum in acc0…, scalar or vec4). */
  private reductionCode(loop: string, KL: number): string {
    const RB = this.rb;
    const CW = this.cw;
    const OW = RB * CW; // outputs per workgroup
    const G = FR_THREADS / OW; // groups of RB k lanes per output in the reduction
    const transB = this.o.transB;
    const rowsIdx = Array.from({ length: RB }, (_, i) => i);
    // Thread index of lane (kl, cl): which of the two is the fast one follows B's layout (coalesced reads).
    const lane = (kl: string, cl: string) =>
      transB ? `(${cl}) * ${KL} + (${kl})` : `(${kl}) * ${CW} + (${cl})`;
    const total = (acc: string, i: number) =>
      this.vec ? `${acc}${i}.x + ${acc}${i}.y + ${acc}${i}.z + ${acc}${i}.w` : `${acc}${i}`;
    // Each stream's sums through workgroup memory into \`acc\` (\`accU\`) of threads tid < OW, one after the
    // other in the same arrays: the next stream writes part only after the barrier behind every read of it, and
    // part2 only after a barrier that the threads still reading it reach once they have read it.
    const reduce = (acc: string) => `
        ${rowsIdx.map((i) => `part[${i * FR_THREADS} + tid] = ${total(acc, i)};`).join('\n        ')}
        workgroupBarrier();
        {
          let q = tid % ${OW};
          let g = tid / ${OW};
          let i = q / ${CW};
          let cq = q % ${CW};
          var s = 0.0;
          for (var j = 0; j < ${RB}; j = j + 1) {
            s = s + part[i * ${FR_THREADS} + ${lane(`g * ${RB} + j`, 'cq')}];
          }
          part2[tid] = s;
        }
        workgroupBarrier();
        var ${acc} = 0.0;
        if (tid < ${OW}) {
          for (var g = 0; g < ${G}; g = g + 1) { ${acc} = ${acc} + part2[g * ${OW} + tid]; }
        }`;
    return `
      var<workgroup> part : array<f32, ${FR_THREADS * RB}>;
      var<workgroup> part2 : array<f32, ${FR_THREADS}>;
      ${GELU_WGSL}
      ${this.o.ln ? lnPrologueDecl(RB, this.o.rms, this.vec > 0) : ''}
      ${loraUpDecl(this.o)}
      ${swigluDecl(this.o)}
      ${this.vec ? bqDecl(this.o) : bAtDecl(this.o)}
      ${this.vec ? '' : partsDecl(this.o)}
      ${this.vec && (this.o.parts ?? 1) > 1 && !this.o.pair ? loraPartDecl() : ''}

      fn main(index : i32) {
        let M = uniforms.dimM;
        let N = uniforms.dimN;
        let K = uniforms.dimK;
        let tid = i32(localIndex);
        let cl = ${transB ? `tid / ${KL}` : `tid % ${CW}`};
        let kl = ${transB ? `tid % ${KL}` : `tid / ${CW}`};
        // Row blocks along x, column strips along y: the blocks sharing a strip of W run back to back.
        let row0 = i32(workgroupId.x) * ${RB};
        let col0 = i32(workgroupId.y) * ${CW};
        let cc = min(col0 + cl, N - 1);
        ${this.o.ln ? 'lnStats(tid, row0, M, K);' : ''}
        ${rowsIdx.map((i) => `let xo${i} = min(row0 + ${i}, M - 1) * K;`).join('\n        ')}
        ${loop}
        ${this.streams().map(reduce).join('')}
        if (tid < ${OW}) {
          let r = row0 + tid / ${CW};
          let c = col0 + tid % ${CW};
          if (r < M && c < N) {
            let o = r * N + c;
            ${epilogueCode(this.o)}
          }
        }
      }`;
  }
}

/**
 * C [M, N] = A·op(B) for few rows on a CPU-run adapter (SwiftShader, lavapipe), the same epilogue (and prologue)
 * as LinearMatMulProgram: workgroup (x, y) computes rows y·RB … y·RB + RB − 1 (RB ≤ 8) × columns x·256 … + 255,
 * each thread one column over all of K into RB registers, in k order with one fma per step as the tiles do — so
 * every output is bit for bit the tiles' — with no workgroup memory and no barrier in the loop (on a software
 * adapter the 256 threads of a workgroup run as SIMD lanes one after another, and each barrier switches between
 * them). Threads past N skip the loop. The layer-norm prologue (lnStats) is the tiles' code, run by all 256.
 */
class ColumnsMatMulProgram extends RowBlockProgram {
  constructor(o: MatMulOptions, M: number, N: number, plan: LinearPlan) {
    super('ColumnsMatMulProgram', `perfLinearCols_${optionsKey(o)}_${plan.rows}`, o, M, N, plan);
  }

  getUserCode(): string {
    const RB = this.rb;
    const rowsIdx = Array.from({ length: RB }, (_, i) => i);
    const epilogue = epilogueCode(this.o);
    return `
      ${GELU_WGSL}
      ${this.o.ln ? lnPrologueDecl(RB, this.o.rms) : ''}
      ${loraUpDecl(this.o)}
      ${swigluDecl(this.o)}
      ${bAtDecl(this.o)}
      ${partsDecl(this.o)}

      fn main(index : i32) {
        let M = uniforms.dimM;
        let N = uniforms.dimN;
        let K = uniforms.dimK;
        let tid = i32(localIndex);
        let row0 = i32(workgroupId.y) * ${RB};
        let c = i32(workgroupId.x) * ${FR_THREADS} + tid;
        ${this.o.ln ? 'lnStats(tid, row0, M, K);' : ''}
        if (c < N) {
          let cc = c;
          ${rowsIdx.map((i) => `let xo${i} = min(row0 + ${i}, M - 1) * K;`).join('\n          ')}
          ${kLoopWgsl(this.o, RB, '0', 1)}
          ${rowsIdx
            .map(
              (i) => `{
            let r = row0 + ${i};
            if (r < M) {
              let o = r * N + c;
              let acc = acc${i};${this.o.pair ? `\n              let accU = accU${i};` : ''}
              ${epilogue}
            }
          }`,
            )
            .join('\n          ')}
        }
      }`;
  }
}

/**
 * C [M, N] = op(A)·op(B) with the fused linear's epilogue through matMulFast's tile kernel (kernels/webgpu-matmul.ts
 * fastTileWgsl: 256 threads on a 128 × 128 tile of 8 × 8 outputs each, or the smaller tiles matMulFastTile picks
 * for a shape that would leave the GPU idle; vec4 loads and workgroup reads, K slices double-buffered), where
 * setWebGpuLinearFastTiles turns it on and the options allow (fastTileApplies). B packed f16 is read a quad (two
 * words) at a time where its contiguous dimension is a multiple of 4, and unpacked into the same f32 tile; the
 * epilogue (bias, LoRA's term, gelu_new, SwiGLU, residual, dz) is epilogueCode's, one element at a time.
 */
class LinearTileProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [16, 16, 1];
  readonly uniforms = MATMUL_UNIFORMS;
  readonly variableComponents: number[];
  readonly outputComponent: number;
  private readonly plan: ProgramOptions;
  private readonly o: MatMulOptions;

  constructor(o: MatMulOptions, M: number, N: number, K: number) {
    const tile = matMulFastTile(M, N);
    // Each operand's contiguous dimension: K for A and for Bᵀ, M for Aᵀ, N for B (packed: its words' halves).
    const vecA = (o.transA ? M : K) % 4 === 0;
    const vecB = (o.transB ? K : N) % 4 === 0;
    // A plain product stores vec4s where N allows; an epilogue stores one element at a time.
    const plain = o.mode === 'mm';
    const vecC = plain && N % 4 === 0;
    this.o = o;
    this.plan = {
      ...tile,
      groups: [Math.ceil(N / tile.tn), Math.ceil(M / tile.tm), 1],
      vecA,
      vecB,
      vecC,
      variant: null,
      checked: true,
      transA: o.transA,
      transB: o.transB,
    };
    this.variableNames = variableNamesOf(o);
    this.outputShape = [M, N];
    this.dispatch = this.plan.groups;
    this.variableComponents = this.variableNames.map((n) =>
      (n === 'A' && vecA) || (n === 'B' && vecB && !o.packedB) ? 4 : 1,
    );
    this.outputComponent = vecC ? 4 : 1;
    this.shaderKey = `perfLinearTile_${optionsKey(o)}_${tile.tm}x${tile.tn}x${tile.bk}_${+vecA}${+vecB}${+vecC}`;
  }

  getUserCode(): string {
    const o = this.o;
    const unpack = (w: string) => `unpack2x16float(bitcast<u32>(${w}))`;
    const bReads = o.packedB
      ? {
          quad: (base: string) =>
            `vec4<f32>(${unpack(`B[(${base}) / 2]`)}, ${unpack(`B[(${base}) / 2 + 1]`)})`,
          elem: (i: string) => `bAt(${i})`,
        }
      : undefined;
    return fastTileWgsl(this.plan, {
      decls: `${GELU_WGSL}${loraUpDecl(o)}${swigluDecl(o)}${o.packedB ? bAtDecl(o) : ''}`,
      bReads,
      epilogue: this.plan.vecC ? undefined : epilogueCode(o),
      batched: false,
    });
  }
}

/** null: the default (the device's timing, else off); true / false: on / off (tests, the GPU bench, the env). */
let fastTilesForced: boolean | null = null;
/** What timing on this device chose (core/backend/webgpu-tune.ts); false until it has run, and on software adapters. */
let fastTilesTuned = false;

/**
 * Whether the fused linear's tiled products (the forward, dz and dx / dW at more rows than the few-rows program's
 * bound: a minibatch's scoring and update) run matMulFast's tile kernel (LinearTileProgram: 8 × 8 outputs a thread
 * on 128 × 128 tiles) instead of LinearMatMulProgram's 64 × 64 tiles of 4 × 4. null (the default): what timing both
 * on this device chose (core/backend/webgpu-tune.ts; off where it has not run); docs/gpu.md, "The fused linear on the
 * tile kernel". Returns the previous setting.
 */
export function setWebGpuLinearFastTiles(on: boolean | null): boolean | null {
  const was = fastTilesForced;
  fastTilesForced = on;
  return was;
}

/** setWebGpuLinearFastTiles's setting now: null (the default), true or false. */
export function webGpuLinearFastTiles(): boolean | null {
  return fastTilesForced;
}

/**
 * Whether the tile kernel takes these options (with fast tiles on): everything but the layer-norm prologue and B
 * in parts (a decode step's, at few rows: their reads are per element inside the 64 × 64 tiles' loads).
 */
export function fastTileApplies(o: Pick<MatMulOptions, 'ln' | 'parts'>): boolean {
  return (fastTilesForced ?? fastTilesTuned) && !o.ln && (o.parts ?? 1) < 2;
}

/**
 * What timing both forms on this device chose (core/backend/webgpu-tune.ts): used wherever setWebGpuLinearFastTiles /
 * setWebGpuLinearVecRows left the setting at null. Returns the previous choice.
 */
export function setWebGpuLinearTuned(o: { fastTiles?: boolean; vecRows?: boolean; headRows?: boolean }): {
  fastTiles: boolean;
  vecRows: boolean;
  headRows: boolean;
} {
  const was = { fastTiles: fastTilesTuned, vecRows: vecRowsTuned, headRows: headRowsTuned };
  if (o.fastTiles !== undefined) fastTilesTuned = o.fastTiles;
  if (o.vecRows !== undefined) vecRowsTuned = o.vecRows;
  if (o.headRows !== undefined) headRowsTuned = o.headRows;
  return was;
}

/** The fused linear's kernels in force now: the setting where one was made, else the device's timing, else off. */
export function webGpuLinearKernelsInForce(): { fastTiles: boolean; vecRows: boolean; headRows: boolean } {
  return {
    fastTiles: fastTilesForced ?? fastTilesTuned,
    vecRows: vecRowsForced ?? vecRowsTuned,
    headRows: headRowsForced ?? headRowsTuned,
  };
}

/** null: the default (the device's timing, else off); true / false: on / off (tests, the GPU bench, the env). */
let headRowsForced: boolean | null = null;
/** What timing on this device chose (core/backend/webgpu-tune.ts); false until it has run, and on software adapters. */
let headRowsTuned = false;

/**
 * Whether an f32 LM head at a decode step's few rows (model/vocab-chunks.ts headRowsLogits: logits = h · Wᵀ for
 * W [V, C], no gradient) runs the few-rows program (linearNtDecodeWebGpu, as the f16 head and every decode product
 * do) instead of tfjs's matMul. null (the default): what timing both on this device chose
 * (core/backend/webgpu-tune.ts; off where it has not run); docs/gpu.md, "The f32 LM head at decode". Returns the
 * previous setting.
 */
export function setWebGpuHeadRows(on: boolean | null): boolean | null {
  const was = headRowsForced;
  headRowsForced = on;
  return was;
}

/** setWebGpuHeadRows's setting now: null (the default), true or false. */
export function webGpuHeadRows(): boolean | null {
  return headRowsForced;
}

/** Whether the f32 LM head at decode runs the few-rows program now (the setting, else the device's timing). */
export function webGpuHeadRowsInForce(): boolean {
  return headRowsForced ?? headRowsTuned;
}

/** The program for C [M, N] with these options: few rows, columns or tiles (linearPlan). */
function matMulProgram(
  o: MatMulOptions,
  M: number,
  N: number,
  K: number,
): LinearMatMulProgram | LinearTileProgram | FewRowsMatMulProgram | ColumnsMatMulProgram {
  const plan = linearPlan(M, N, o.transA);
  if (plan.program === 'columns') return new ColumnsMatMulProgram(o, M, N, plan);
  if (o.pair && plan.program === 'tiled')
    throw new Error(
      `webgpu-linear: the gate|up pair runs at few rows only (${M} rows; see linearNtPairApplies).`,
    );
  if (plan.program === 'tiled')
    return fastTileApplies(o) ? new LinearTileProgram(o, M, N, K) : new LinearMatMulProgram(o, M, N);
  return new FewRowsMatMulProgram(o, M, N, plan, vecRowsWidth(o, K));
}

/** null: the default (the device's timing, else off); true / false: on / off (tests, the GPU bench, the env). */
let vecRowsForced: boolean | null = null;
/** What timing on this device chose (core/backend/webgpu-tune.ts); false until it has run, and on software adapters. */
let vecRowsTuned = false;

/**
 * Whether the few-rows program reads nn.Linear's W [out, in] (transB: the Llama/Qwen decode, the f16 base's
 * forward at few rows, LoRA's down-projections) four f32 or eight packed halves at a time (`vecRowsWidth`). null
 * (the default): what timing both on this device chose (core/backend/webgpu-tune.ts; off where it has not run);
 * docs/gpu.md, "Vector loads in the few-rows program". Returns the previous setting.
 */
export function setWebGpuLinearVecRows(on: boolean | null): boolean | null {
  const was = vecRowsForced;
  vecRowsForced = on;
  return was;
}

/** setWebGpuLinearVecRows's setting now: null (the default), true or false. */
export function webGpuLinearVecRows(): boolean | null {
  return vecRowsForced;
}

/**
 * Elements of B per load in the few-rows program: 4 (f32) or 8 (packed f16) when vector loads are on, B is read
 * along K (transB, A not transposed) and K is a multiple of that; else 0 (one element at a time).
 */
export function vecRowsWidth(o: Pick<MatMulOptions, 'transA' | 'transB' | 'packedB'>, K: number): number {
  if (!(vecRowsForced ?? vecRowsTuned) || o.transA || !o.transB) return 0;
  const v = o.packedB ? 8 : 4;
  return K > 0 && K % v === 0 ? v : 0;
}

const CS_COLS = 32;
const CS_LANES = 8;

/** out[c] = Σ_r X[r, c]: 32 columns per workgroup, 8 lanes striding the rows, then a sum of the 8 lanes. */
class ColumnSumProgram {
  readonly variableNames = ['X'];
  readonly outputShape: number[];
  readonly shaderKey = 'perfLinear_colsum';
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [CS_COLS, CS_LANES, 1];
  readonly uniforms = 'rows : i32, cols : i32,';

  constructor(cols: number) {
    this.outputShape = [cols];
    this.dispatch = [Math.ceil(cols / CS_COLS), 1, 1];
  }

  getUserCode(): string {
    return `
      var<workgroup> part : array<f32, ${CS_COLS * CS_LANES}>;
      fn main(index : i32) {
        let C = uniforms.cols;
        let c = i32(workgroupId.x) * ${CS_COLS} + i32(localId.x);
        var s = 0.0;
        if (c < C) {
          for (var r = i32(localId.y); r < uniforms.rows; r = r + ${CS_LANES}) { s = s + X[r * C + c]; }
        }
        part[localId.y * ${CS_COLS}u + localId.x] = s;
        workgroupBarrier();
        if (localId.y == 0u && c < C) {
          var t = 0.0;
          for (var k = 0u; k < ${CS_LANES}u; k = k + 1u) { t = t + part[k * ${CS_COLS}u + localId.x]; }
          result[c] = t;
        }
      }`;
  }
}

const dims = (M: number, N: number, K: number, scale = 0, eps = 0, n0 = 0, n1 = 0) => [
  { type: 'int32' as const, data: [M] },
  { type: 'int32' as const, data: [N] },
  { type: 'int32' as const, data: [K] },
  { type: 'float32' as const, data: [scale] },
  { type: 'float32' as const, data: [eps] },
  { type: 'int32' as const, data: [n0] },
  { type: 'int32' as const, data: [n1] },
];

/**
 * The Llama/Qwen decode step's nn.Linear (x·Wᵀ, W [out, in] in 1–3 parts w, w1, w2 along out), forward only:
 * `mm` (LoRA's down-projection: x·Aᵀ, the A's of the parts side by side) or `fwd` with the optional bias, the
 * RMSNorm prologue (lnG), SwiGLU's gate (gate), a LoRA pair's up-projection (down, loraB) and a residual (res).
 */
const linearNtKernel: KernelFn = ({ inputs, backend, attrs }) => {
  const { x, w, w1, w2, bias, lnG, gate, down, loraB, loraB1, loraB2, res } = inputs as Record<
    string,
    tf.TensorInfo | undefined
  >;
  const mode = attrs!.mode as 'fwd' | 'mm';
  const ws = [w!, ...(w1 ? [w1] : []), ...(w2 ? [w2] : [])];
  const parts = ws.length;
  const [M, K] = x!.shape;
  const rows = ws.map((t) => t.shape[0]);
  const fwd = mode === 'fwd';
  // gate_proj | up_proj as a pair: the output has one part's columns (swigluOf(gate, up) each).
  const pair = fwd && !!attrs!.pair;
  const N = pair ? rows[0] : rows.reduce((a, b) => a + b, 0);
  const loraR = fwd && down ? loraB!.shape[1] : 0;
  // The parts' LoRA B's bound as they are (loraB, loraB1[, loraB2]) rather than stacked in loraB.
  const loraParts = !!loraR && !pair && parts > 1 && !!loraB1;
  // Packed-f16 parts (int32 words [out_p, in / 2]; webGpuLinearNtDecodeApplies checks all parts agree).
  const packedB = ws[0].dtype === 'int32';
  const program = matMulProgram(
    {
      mode,
      transA: false,
      transB: true,
      gelu: false,
      hasExtra: false,
      hasRes: fwd && !!res,
      ln: !!lnG,
      rms: true,
      noBias: !bias,
      parts,
      swiglu: fwd && !!gate,
      pair,
      loraR,
      loraParts,
      packedB,
    },
    M,
    N,
    K,
  );
  const ins = [
    x!,
    ...ws,
    ...(fwd && bias ? [bias] : []),
    ...(lnG ? [lnG] : []),
    ...(fwd && gate ? [gate] : []),
    ...(loraR
      ? [down!, loraB!, ...(pair || loraParts ? [loraB1!] : []), ...(loraParts && loraB2 ? [loraB2] : [])]
      : []),
    ...(fwd && res ? [res] : []),
  ];
  const n0 = rows[0];
  const n1 = rows[0] + (rows[1] ?? 0);
  return (backend as WebGpuBackendLike).runWebGPUProgram(
    program,
    ins,
    'float32',
    dims(M, N, K, (attrs?.scale as number | undefined) ?? 0, lnG ? (attrs!.eps as number) : 0, n0, n1),
  );
};

/** The forward and the recomputing dz kernel: x [M, K], w [K, N], bias [N], extra? [M, N], then res or dy. */
function epilogueKernel(mode: 'fwd' | 'dz'): KernelFn {
  return ({ inputs, backend, attrs }) => {
    const { x, w, bias, lnG, lnB, extra, down, loraB, res, dy } = inputs as Record<
      string,
      tf.TensorInfo | undefined
    >;
    const ln = mode === 'fwd' && !!lnG;
    const loraR = mode === 'fwd' && down ? down.shape[1] : 0;
    const [M, K] = x!.shape;
    const N = w!.shape[1];
    const program = matMulProgram(
      {
        mode,
        transA: false,
        transB: false,
        gelu: mode === 'dz' || !!attrs?.gelu,
        hasExtra: !!extra,
        hasRes: mode === 'fwd' && !!res,
        ln,
        loraR,
      },
      M,
      N,
      K,
    );
    const ins = [
      x!,
      w!,
      bias!,
      ...(ln ? [lnG!, lnB!] : []),
      ...(extra ? [extra] : []),
      ...(loraR ? [down!, loraB!] : []),
      ...(mode === 'dz' ? [dy!] : res ? [res] : []),
    ];
    const scale = (attrs?.scale as number | undefined) ?? 0;
    const eps = ln ? (attrs!.eps as number) : 0;
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      program,
      ins,
      'float32',
      dims(M, N, K, scale, eps),
    );
  };
}

const KERNELS: Record<string, KernelFn> = {
  [LIN_FWD]: epilogueKernel('fwd'),
  [LIN_DZ]: epilogueKernel('dz'),
  [LIN_MM]: ({ inputs, backend, attrs }) => {
    const { a, b, lnG, lnB } = inputs as Record<string, tf.TensorInfo | undefined>;
    const transA = !!attrs?.transA;
    const transB = !!attrs?.transB;
    // The layer-norm prologue (forward-only decode: LoRA's down-projection of the normalised rows).
    const ln = !!lnG && !transA;
    const [M, K] = transA ? [a!.shape[1], a!.shape[0]] : a!.shape;
    // B packed f16 (int32 words, two values each along its rows: a frozen base weight, linearPackedNNWebGpu).
    const packedB = b!.dtype === 'int32';
    const N = transB ? b!.shape[0] : packedB ? 2 * b!.shape[1] : b!.shape[1];
    const program = matMulProgram(
      { mode: 'mm', transA, transB, gelu: false, hasExtra: false, hasRes: false, ln, packedB },
      M,
      N,
      K,
    );
    const ins = [a!, b!, ...(ln ? [lnG!, lnB!] : [])];
    const eps = ln ? (attrs!.eps as number) : 0;
    return (backend as WebGpuBackendLike).runWebGPUProgram(program, ins, 'float32', dims(M, N, K, 0, eps));
  },
  [LIN_NT]: linearNtKernel,
  [LIN_COLSUM]: ({ inputs, backend }) => {
    const { x } = inputs as Record<'x', tf.TensorInfo>;
    const [R, C] = x.shape;
    return (backend as WebGpuBackendLike).runWebGPUProgram(new ColumnSumProgram(C), [x], 'float32', [
      { type: 'int32', data: [R] },
      { type: 'int32', data: [C] },
    ]);
  },
};

/** Register the five kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuLinear(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the bench counts dispatches with and without it, the checks
 * (src/core/backend/webgpu-fused.ts) compare against the plain ops. Returns the previous setting, to put back.
 */
export function setWebGpuLinearFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether linearWebGpu applies to x [N, in] · w [in, out] + bias [out] (+ residual [N, out]): enabled, the
 * webgpu backend is current, all float32, the shapes agree, and every matmul of the forward and backward fits
 * one dispatch (≤ 65535 tiles of 64 per dimension).
 */
export function webGpuLinearApplies(
  x: tf.Tensor,
  w: tf.Tensor,
  bias: tf.Tensor,
  residual?: tf.Tensor | null,
): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if (x.rank !== 2 || w.rank !== 2 || bias.rank !== 1) return false;
  const [N, K] = x.shape;
  const out = w.shape[1];
  if (w.shape[0] !== K || bias.shape[0] !== out) return false;
  if (residual && (residual.rank !== 2 || residual.shape[0] !== N || residual.shape[1] !== out)) return false;
  if ([x, w, bias, residual].some((t) => t && t.dtype !== 'float32')) return false;
  return [N, K, out].every((d) => d > 0 && Math.ceil(d / 64) <= MAX_GROUPS);
}

export interface LinearOptions {
  gelu?: boolean;
  /** [N, out], added after the activation. */
  residual?: tf.Tensor2D | null;
  /** [N, out] times `scale`, added before the activation (LoRA's (x·Aᵀ)·Bᵀ with its scaling). */
  extra?: { t: tf.Tensor2D; scale: number } | null;
}

const isFrozen = (t: tf.Tensor): boolean => t instanceof tf.Variable && !t.trainable;

/**
 * act(x·W + b + s·extra) + residual through the fused kernels, with its gradient: 1 dispatch forward; backward
 * dx, dW (matmuls), db (column sum), plus the dz kernel with gelu_new; dW and db skipped for frozen W and b.
 */
export function linearWebGpu(
  x: tf.Tensor2D,
  w: tf.Tensor2D,
  bias: tf.Tensor1D,
  opts: LinearOptions = {},
): tf.Tensor2D {
  registerWebGpuLinear();
  const gelu = !!opts.gelu;
  const extra = opts.extra ?? null;
  const residual = opts.residual ?? null;
  const frozen = isFrozen(w) && isFrozen(bias);
  const scale = extra?.scale ?? 0;
  const run = (xi: tf.Tensor, wi: tf.Tensor, bi: tf.Tensor, ei: tf.Tensor | null, ri: tf.Tensor | null) =>
    tf
      .engine()
      .runKernel(
        LIN_FWD,
        { x: xi, w: wi, bias: bi, ...(ei ? { extra: ei } : {}), ...(ri ? { res: ri } : {}) },
        { gelu, scale },
      ) as tf.Tensor2D;
  // Inputs of the custom gradient, in order: x, [w, b], [extra], [residual].
  const inputs: tf.Tensor[] = [
    x,
    ...(frozen ? [] : [w, bias]),
    ...(extra ? [extra.t] : []),
    ...(residual ? [residual] : []),
  ];
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const ts = args.slice(0, inputs.length) as tf.Tensor[];
    const save = args[inputs.length] as tf.GradSaveFunc;
    let k = 0;
    const xi = ts[k++];
    const wi = frozen ? w : ts[k++];
    const bi = frozen ? bias : ts[k++];
    const ei = extra ? ts[k++] : null;
    const ri = residual ? ts[k++] : null;
    // The backward needs x and W, and for gelu_new's recomputed pre-activation b and the extra term too.
    save(frozen ? [xi, ...(gelu && ei ? [ei] : [])] : [xi, wi, bi, ...(gelu && ei ? [ei] : [])]);
    return {
      value: run(xi, wi, bi, ei, ri),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const xs = saved[0];
        const [ws, bs] = frozen ? [w, bias] : [saved[1], saved[2]];
        const es = gelu && extra ? saved[saved.length - 1] : null;
        const dz = gelu
          ? (tf
              .engine()
              .runKernel(
                LIN_DZ,
                { x: xs, w: ws, bias: bs, ...(es ? { extra: es } : {}), dy },
                { scale },
              ) as tf.Tensor)
          : dy;
        const mm = (a: tf.Tensor, b: tf.Tensor, transA: boolean, transB: boolean) =>
          tf.engine().runKernel(LIN_MM, { a, b }, { transA, transB }) as tf.Tensor;
        const grads: tf.Tensor[] = [mm(dz, ws, false, true)];
        if (!frozen)
          grads.push(mm(xs, dz, true, false), tf.engine().runKernel(LIN_COLSUM, { x: dz }) as tf.Tensor);
        if (extra) grads.push(tf.mul(dz, scale));
        if (residual) grads.push(tf.clone(dy));
        return grads;
      },
    };
  }) as (...ts: tf.Tensor[]) => tf.Tensor2D;
  return f(...inputs);
}

let normPrologue = true;

/**
 * Switch the layer-norm prologue off (on by default; setWebGpuLinearFused(false) turns it off too): the decode
 * step then runs layerNorm and the Conv1D as two dispatches, for the tests to compare. Returns the previous setting.
 */
export function setWebGpuLinearNormPrologue(on: boolean): boolean {
  const was = normPrologue;
  normPrologue = on;
  return was;
}

/** A LoRA pair as the decode kernels take it: A [r, in], B [out, r], the term scaled by `scaling`. */
export interface DecodeLowRank {
  a: tf.Tensor2D;
  b: tf.Tensor2D;
  scaling: number;
}

/** The decode step's forward-only Conv1D: a layer norm of x in the prologue, a LoRA pair, the epilogue. */
export interface LinearDecodeOptions {
  ln?: { g: tf.Tensor1D; b: tf.Tensor1D; eps: number } | null;
  lora?: DecodeLowRank | null;
  gelu?: boolean;
  residual?: tf.Tensor2D | null;
}

/**
 * Whether linearDecodeWebGpu applies: what webGpuLinearApplies asks, the layer norm's g and b [in] and the LoRA
 * pair's A [r, in] and B [out, r] float32 (r ≤ 64), and at most 7 inputs (WebGPU's default 8 storage buffers per
 * stage, the output included: a layer norm, a LoRA pair and a residual together are refused).
 */
export function webGpuLinearDecodeApplies(
  x: tf.Tensor,
  w: tf.Tensor,
  bias: tf.Tensor,
  o: {
    ln?: { g: tf.Tensor; b: tf.Tensor } | null;
    lora?: { a: tf.Tensor; b: tf.Tensor } | null;
    residual?: tf.Tensor | null;
  },
): boolean {
  if (!normPrologue || !webGpuLinearApplies(x, w, bias, o.residual)) return false;
  const K = x.shape[1];
  const N = w.shape[1];
  if (o.ln && ![o.ln.g, o.ln.b].every((t) => t.rank === 1 && t.shape[0] === K && t.dtype === 'float32'))
    return false;
  if (o.lora) {
    const { a, b } = o.lora;
    const r = a.shape[0];
    if (a.rank !== 2 || b.rank !== 2 || a.shape[1] !== K || b.shape[0] !== N || b.shape[1] !== r)
      return false;
    if (a.dtype !== 'float32' || b.dtype !== 'float32' || r < 1 || r > 64) return false;
  }
  return 3 + (o.ln ? 2 : 0) + (o.lora ? 2 : 0) + (o.residual ? 1 : 0) <= 7;
}

/** webGpuLinearDecodeApplies with a layer norm and no LoRA pair. */
export function webGpuLinearLayerNormApplies(
  x: tf.Tensor,
  g: tf.Tensor,
  b: tf.Tensor,
  w: tf.Tensor,
  bias: tf.Tensor,
  residual?: tf.Tensor | null,
): boolean {
  return webGpuLinearDecodeApplies(x, w, bias, { ln: { g, b }, residual });
}

/**
 * act(LN(x)·W + b + s·(LN(x)·Aᵀ)·Bᵀ) + residual, forward only (no gradient: the KV-cache decode step, which runs
 * without autodiff; GPT2.decodeStep), LN optional (then x itself), the LoRA pair optional: 1 dispatch without a
 * pair, 2 with one (the down-projection LN(x)·Aᵀ [N, r], itself with the layer norm in its prologue; the
 * up-projection is summed over r in the main matmul's epilogue, not a matmul of its own). The prologue normalises
 * the rows as PerfLayerNormFwd does (the same arithmetic order), so without a pair the result is the same as
 * layerNormWebGpu then linearWebGpu. Check webGpuLinearDecodeApplies first.
 */
export function linearDecodeWebGpu(
  x: tf.Tensor2D,
  w: tf.Tensor2D,
  bias: tf.Tensor1D,
  o: LinearDecodeOptions = {},
): tf.Tensor2D {
  registerWebGpuLinear();
  const e = tf.engine();
  const ln = o.ln ?? null;
  const lnIn: tf.NamedTensorMap = ln ? { lnG: ln.g, lnB: ln.b } : {};
  const eps = ln?.eps ?? 0;
  const res = o.residual ?? null;
  const lora = o.lora ?? null;
  return tf.tidy(() => {
    const down = lora
      ? (e.runKernel(LIN_MM, { a: x, b: lora.a, ...lnIn }, { transA: false, transB: true, eps }) as tf.Tensor)
      : null;
    return e.runKernel(
      LIN_FWD,
      { x, w, bias, ...lnIn, ...(down ? { down, loraB: lora!.b } : {}), ...(res ? { res } : {}) },
      { gelu: !!o.gelu, scale: lora?.scaling ?? 0, eps },
    ) as tf.Tensor2D;
  });
}

/** linearDecodeWebGpu with a layer norm and no LoRA pair: one dispatch. */
export function linearLayerNormWebGpu(
  x: tf.Tensor2D,
  ln: { g: tf.Tensor1D; b: tf.Tensor1D; eps: number },
  w: tf.Tensor2D,
  bias: tf.Tensor1D,
  opts: { gelu?: boolean; residual?: tf.Tensor2D | null } = {},
): tf.Tensor2D {
  return linearDecodeWebGpu(x, w, bias, { ln, gelu: opts.gelu, residual: opts.residual });
}

/**
 * One nn.Linear of the Llama/Qwen decode step (Llama.decodeStep), forward only: W [out, in] as the model holds it
 * (no transposed copy), in 1–3 parts stacked along out (q_proj | k_proj | v_proj as one matmul, their weights never
 * concatenated), each part with its optional LoRA pair (all parts or none, one rank and one scaling).
 */
export interface LinearNtDecodeOptions {
  /** The parts' weights [out_p, in]; the output's columns are theirs in order. */
  w: tf.Tensor2D[];
  bias?: tf.Tensor1D | null;
  /** RMSNorm of x's rows in the prologue (input_layernorm, post_attention_layernorm). */
  rms?: { g: tf.Tensor1D; eps: number } | null;
  /** One pair per part (A [r, in], B [out_p, r]), all with the same r and scaling. */
  lora?: DecodeLowRank[] | null;
  /** SwiGLU's gate [N, out] in the epilogue: silu(gate)·(x·Wᵀ + b + LoRA) (up_proj with gate_proj's output). */
  gate?: tf.Tensor2D | null;
  residual?: tf.Tensor2D | null;
  /**
   * w = [gate_proj, up_proj] (and lora their pairs) as one program: the output [N, out] is
   * silu(x·W_gᵀ + LoRA_g)·(x·W_uᵀ + LoRA_u), the values of gate_proj's program then up_proj's with that `gate`
   * in one dispatch (and one down-projection for both pairs). No bias, gate or residual; few rows only.
   */
  pair?: boolean;
}

/**
 * Whether linearNtDecodeWebGpu applies: the fused path on and webgpu current, float32 throughout, consistent
 * shapes (x [N, in], every part [out_p, in], bias [Σ out_p], the norm's weight [in], the gate and residual
 * [N, Σ out_p], LoRA pairs on every part or none with one rank ≤ 64 and one scaling), at most 3 parts, and within
 * the device's storage buffers per program, the output included (storageBuffersPerProgram: 8 by WebGPU's default;
 * the main matmul's and the down-projection's bindings are both counted, the parts' B's stacked — loraBsApart
 * binds them apart only where that fits too).
 */
export function webGpuLinearNtDecodeApplies(x: tf.Tensor, o: LinearNtDecodeOptions): boolean {
  if (!normPrologue || !enabled || tf.getBackend() !== 'webgpu') return false;
  if (x.rank !== 2 || x.dtype !== 'float32') return false;
  const [M, K] = x.shape;
  const parts = o.w.length;
  if (parts < 1 || parts > 3) return false;
  // f32 parts, or packed-f16 parts (int32 [out_p, in / 2]: baseDtype "f16"), all of one kind.
  const packed = o.w[0].dtype === 'int32';
  const cols = (w: tf.Tensor) => (packed ? w.shape[1]! * 2 : w.shape[1]);
  const kind = packed ? 'int32' : 'float32';
  if (o.w.some((w) => w.rank !== 2 || cols(w) !== K || w.dtype !== kind || w.shape[0] < 1)) return false;
  const N = o.w.reduce((a, w) => a + w.shape[0], 0);
  const is = (t: tf.Tensor, shape: number[]) => t.dtype === 'float32' && tf.util.arraysEqual(t.shape, shape);
  if (o.bias && !is(o.bias, [N])) return false;
  if (o.rms && !is(o.rms.g, [K])) return false;
  if (o.gate && !is(o.gate, [M, N])) return false;
  if (o.residual && !is(o.residual, [M, N])) return false;
  const lora = o.lora ?? null;
  if (lora) {
    if (lora.length !== parts) return false;
    const r = lora[0].a.shape[0];
    if (r < 1 || r > 64) return false;
    for (let p = 0; p < parts; p++) {
      const { a, b, scaling } = lora[p];
      if (!is(a, [r, K]) || !is(b, [o.w[p].shape[0], r]) || scaling !== lora[0].scaling) return false;
    }
  }
  if (![M, K, N].every((d) => d > 0 && Math.ceil(d / 64) <= MAX_GROUPS)) return false;
  if (o.pair) {
    // Two parts of equal rows, nothing but the norm and the LoRA pairs, and a few-rows or column program.
    const out = o.w[0].shape[0];
    if (parts !== 2 || o.w[1].shape[0] !== out || o.bias || o.gate || o.residual) return false;
    if (linearPlan(M, out).program === 'tiled') return false;
  }
  const main =
    1 +
    parts +
    (o.bias ? 1 : 0) +
    (o.rms ? 1 : 0) +
    (o.gate ? 1 : 0) +
    (lora ? (o.pair ? 3 : 2) : 0) +
    (o.residual ? 1 : 0);
  const downProjection = 1 + parts + (o.rms ? 1 : 0);
  const limit = storageBuffersPerProgram();
  return main + 1 <= limit && (!lora || downProjection + 1 <= limit);
}

/**
 * Whether linearNtDecodeWebGpu binds the parts' LoRA B's as they are (no concat): LoRA on 2–3 parts, not the pair,
 * and the main program's storage buffers with them within the device's (q|k|v under LoRA with the RMSNorm
 * prologue: 10, over WebGPU's default 8).
 */
function loraBsApart(o: LinearNtDecodeOptions): boolean {
  const parts = o.w.length;
  if (!o.lora || o.pair || parts < 2) return false;
  const main =
    1 + parts + (o.bias ? 1 : 0) + (o.rms ? 1 : 0) + (o.gate ? 1 : 0) + 1 + parts + (o.residual ? 1 : 0);
  return main + 1 <= storageBuffersPerProgram();
}

/**
 * x·Wᵀ (+ b) over the parts, with RMSNorm(x) in place of x when `rms` is given, the LoRA term
 * s·(x·Aᵀ)·Bᵀ per part, then silu(gate)·(…) and + residual, forward only (no gradient: the decode step runs
 * without autodiff). 1 dispatch without LoRA; with it 2 for one part (the down-projection x·Aᵀ [N, r], itself
 * with the RMSNorm prologue, and the main matmul summing the up-projection in its epilogue, as linearDecodeWebGpu),
 * 2 for several where the device's storage buffers allow their B's bound apart (loraBsApart), else 3 (the B's
 * stacked [Σ out_p, r] first, one concat); the A's are read in parts, never stacked.
 * The prologue normalises rows as PerfRmsNormFwd does (the same order of operations): without LoRA the result
 * equals rmsNorm, the matmul, the bias add and swiglu's kernels up to the matmul's order of summation.
 * Check webGpuLinearNtDecodeApplies first.
 */
export function linearNtDecodeWebGpu(x: tf.Tensor2D, o: LinearNtDecodeOptions): tf.Tensor2D {
  registerWebGpuLinear();
  const e = tf.engine();
  const ws: tf.NamedTensorMap = {
    w: o.w[0],
    ...(o.w[1] ? { w1: o.w[1] } : {}),
    ...(o.w[2] ? { w2: o.w[2] } : {}),
  };
  const norm: tf.NamedTensorMap = o.rms ? { lnG: o.rms.g } : {};
  const eps = o.rms?.eps ?? 0;
  const lora = o.lora ?? null;
  return tf.tidy(() => {
    let low: tf.NamedTensorMap = {};
    if (lora) {
      const as: tf.NamedTensorMap = {
        w: lora[0].a,
        ...(lora[1] ? { w1: lora[1].a } : {}),
        ...(lora[2] ? { w2: lora[2].a } : {}),
      };
      const down = e.runKernel(LIN_NT, { x, ...as, ...norm }, { mode: 'mm', eps }) as tf.Tensor;
      // The pair binds its two B's as they are; parts' B's too where the device's storage buffers allow
      // (loraBsApart), else stacked by one concat.
      const apart = loraBsApart(o);
      const loraB =
        lora.length === 1 || o.pair || apart
          ? lora[0].b
          : tf.concat(
              lora.map((l) => l.b),
              0,
            );
      low = {
        down,
        loraB,
        ...(o.pair || apart ? { loraB1: lora[1].b } : {}),
        ...(apart && lora[2] ? { loraB2: lora[2].b } : {}),
      };
    }
    return e.runKernel(
      LIN_NT,
      {
        x,
        ...ws,
        ...(o.bias ? { bias: o.bias } : {}),
        ...norm,
        ...(o.gate ? { gate: o.gate } : {}),
        ...low,
        ...(o.residual ? { res: o.residual } : {}),
      },
      { mode: 'fwd', eps, scale: lora?.[0].scaling ?? 0, pair: !!o.pair },
    ) as tf.Tensor2D;
  });
}

/**
 * Whether linearPackedNNWebGpu applies to dy [M, N] · W (W [N, K] packed f16: int32 [N, K / 2]): the fused path
 * on, webgpu current, float32 dy of W's rows, and within the workgroup grid of either program.
 */
export function webGpuLinearPackedNNApplies(dy: tf.TensorInfo, w: tf.TensorInfo): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if (dy.shape.length !== 2 || dy.dtype !== 'float32' || w.shape.length !== 2 || w.dtype !== 'int32')
    return false;
  const [M, N] = dy.shape;
  const K = 2 * w.shape[1];
  return w.shape[0] === N && [M, N, K].every((d) => d > 0 && Math.ceil(d / 64) <= MAX_GROUPS);
}

/**
 * dy [M, N] · W → [M, K] for a frozen W [N, K] packed f16 (the backward of x·Wᵀ to x), no gradient: the f32
 * path's own `PerfLinearMatMul` (64 × 64 tiles of 4 × 4 outputs a thread, or its few-rows program at a decode
 * step's rows on a hardware adapter) reading the packed words through `bAt`. Check webGpuLinearPackedNNApplies.
 */
export function linearPackedNNWebGpu(dy: tf.Tensor2D, w: tf.Tensor2D): tf.Tensor2D {
  registerWebGpuLinear();
  return tf.engine().runKernel(LIN_MM, { a: dy, b: w }, { transA: false, transB: false }) as tf.Tensor2D;
}
