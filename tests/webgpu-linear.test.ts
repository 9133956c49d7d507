/**
 * The fused Conv1D on WebGPU in Node (src/core/kernels/webgpu-linear.ts, used by ops.ts conv1d): values and
 * gradients against a float64 loop, against the plain ops on the same backend (the fused switch off) and against
 * the CPU backend; the dispatches it costs forward and backward (a count regression test); LoRA and frozen
 * weights; no tensor left behind. Skipped, with a test named after what to install, without a WebGPU adapter.
 */
import { describe, it, expect, beforeAll, afterEach } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { conv1d, type Conv1dEpilogue, type LowRank } from '../src/core/model/ops';
import {
  LIN_COLSUM,
  LIN_DZ,
  LIN_FWD,
  LIN_MM,
  LINEAR_SMALL_MIN_GROUPS_DEFAULT,
  LINEAR_SMALL_ROWS_DEFAULT,
  linearPlan,
  setWebGpuLinearFused,
  setWebGpuLinearSmallRows,
  resetWebGpuLinearSmallRows,
  webGpuLinearApplies,
} from '../src/core/kernels/webgpu-linear';
import { checkLinearOnCurrentBackend } from '../src/core/backend/webgpu-fused';
import { maxDiff } from './helpers/diff';
import { countDispatches } from '../src/bench/webgpu-dispatch';

const adapter = await webGpuAdapter();

function seeded(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  return Float32Array.from(
    { length: n },
    (_, i) => lo + (hi - lo) * Math.abs(Math.sin(seed * 12.9898 + i * 78.233)),
  );
}

const GK = 2 * Math.sqrt(2 / Math.PI);
const sig = (z: number) => 1 / (1 + Math.exp(-z));

interface Case {
  N: number;
  K: number;
  O: number;
  gelu: boolean;
  res: boolean;
  /** LoRA rank (0: none) and scaling. */
  r?: number;
  s?: number;
  /** Spread of x (large: gelu's sigmoid saturates both ways). */
  spread?: number;
}

interface Host {
  x: Float32Array;
  w: Float32Array;
  b: Float32Array;
  res: Float32Array | null;
  a: Float32Array | null;
  bb: Float32Array | null;
  dy: Float32Array;
}

function hostInputs(c: Case, seed: number): Host {
  const r = c.r ?? 0;
  return {
    x: seeded(c.N * c.K, seed, -(c.spread ?? 1), c.spread ?? 1),
    w: seeded(c.K * c.O, seed + 1, -0.6, 0.6),
    b: seeded(c.O, seed + 2, -0.5, 0.5),
    res: c.res ? seeded(c.N * c.O, seed + 3) : null,
    a: r ? seeded(r * c.K, seed + 4, -0.5, 0.5) : null,
    bb: r ? seeded(c.O * r, seed + 5, -0.5, 0.5) : null,
    dy: seeded(c.N * c.O, seed + 6, -1, 1),
  };
}

/**
 * The plain loop in float64: y = act(x·W + b + s·(x·Aᵀ)·Bᵀ) + res and, with dz = dy·act'(pre), the gradients
 * dx = dz·(W + s·(B·A)ᵀ)ᵀ, dW = xᵀ·dz, db = Σ_rows dz, dres = dy, dA = s·(dz·B)ᵀ·x, dB = s·dzᵀ·(x·Aᵀ).
 */
function reference(c: Case, h: Host) {
  const { N, K, O } = c;
  const r = c.r ?? 0;
  const s = c.s ?? 0;
  const down = new Float64Array(N * r); // x·Aᵀ
  for (let n = 0; n < N; n++)
    for (let q = 0; q < r; q++) {
      let t = 0;
      for (let k = 0; k < K; k++) t += h.x[n * K + k] * h.a![q * K + k];
      down[n * r + q] = t;
    }
  const y = new Float64Array(N * O);
  const dz = new Float64Array(N * O);
  for (let n = 0; n < N; n++)
    for (let o = 0; o < O; o++) {
      let p = h.b[o];
      for (let k = 0; k < K; k++) p += h.x[n * K + k] * h.w[k * O + o];
      for (let q = 0; q < r; q++) p += s * down[n * r + q] * h.bb![o * r + q];
      let v = p;
      let d = 1;
      if (c.gelu) {
        const sg = sig(GK * (p + 0.044715 * p ** 3));
        v = p * sg;
        d = sg + p * sg * (1 - sg) * GK * (1 + 3 * 0.044715 * p * p);
      }
      y[n * O + o] = v + (h.res ? h.res[n * O + o] : 0);
      dz[n * O + o] = h.dy[n * O + o] * d;
    }
  const dx = new Float64Array(N * K);
  const dw = new Float64Array(K * O);
  const db = new Float64Array(O);
  const dzB = new Float64Array(N * r); // dz·B
  for (let n = 0; n < N; n++)
    for (let q = 0; q < r; q++) {
      let t = 0;
      for (let o = 0; o < O; o++) t += dz[n * O + o] * h.bb![o * r + q];
      dzB[n * r + q] = t;
    }
  for (let n = 0; n < N; n++)
    for (let k = 0; k < K; k++) {
      let t = 0;
      for (let o = 0; o < O; o++) t += dz[n * O + o] * h.w[k * O + o];
      for (let q = 0; q < r; q++) t += s * dzB[n * r + q] * h.a![q * K + k];
      dx[n * K + k] = t;
    }
  for (let k = 0; k < K; k++)
    for (let o = 0; o < O; o++) {
      let t = 0;
      for (let n = 0; n < N; n++) t += h.x[n * K + k] * dz[n * O + o];
      dw[k * O + o] = t;
    }
  for (let o = 0; o < O; o++) for (let n = 0; n < N; n++) db[o] += dz[n * O + o];
  const da = new Float64Array(r * K);
  const dbb = new Float64Array(O * r);
  for (let q = 0; q < r; q++)
    for (let k = 0; k < K; k++) {
      let t = 0;
      for (let n = 0; n < N; n++) t += dzB[n * r + q] * h.x[n * K + k];
      da[q * K + k] = s * t;
    }
  for (let o = 0; o < O; o++)
    for (let q = 0; q < r; q++) {
      let t = 0;
      for (let n = 0; n < N; n++) t += dz[n * O + o] * down[n * r + q];
      dbb[o * r + q] = s * t;
    }
  return { y, dx, dw, db, da, dbb };
}

/** max |a − b| / max(1, max |b|): float32 summation order against the float64 loop or another order. */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const { abs, scale } = maxDiff(a, b);
  return abs / Math.max(1, scale);
}

interface Run {
  y: Float32Array;
  grads: Float32Array[];
  fwd: number;
  bwd: number;
  kernels: string[];
  /** Workgroups [x, y, z] of each forward dispatch, in order (webgpu only). */
  fwdGroups: number[][];
}

/** The workgroup counts of every dispatch `fn` makes (GPUComputePassEncoder.dispatchWorkgroups's arguments). */
async function recordWorkgroups(fn: () => void): Promise<number[][]> {
  const proto = (globalThis as unknown as Record<string, { prototype: Record<string, unknown> }>)
    .GPUComputePassEncoder.prototype;
  const dispatch = proto.dispatchWorkgroups as (...a: number[]) => void;
  const groups: number[][] = [];
  proto.dispatchWorkgroups = function (this: unknown, x: number, y = 1, z = 1) {
    groups.push([x, y, z]);
    return dispatch.call(this, x, y, z);
  };
  try {
    fn();
    return groups;
  } finally {
    proto.dispatchWorkgroups = dispatch;
  }
}

/**
 * conv1d on the current backend from host arrays: the value, the gradients (x, W, b[, res] — or x, A, B with
 * LoRA, where W and b are frozen variables as under LoRA) from the upstream dy, and the dispatches of the
 * forward and of the backward alone (dispatch counts only on webgpu).
 */
async function runConv1d(c: Case, h: Host, frozenBase = false): Promise<Run> {
  const before = tf.memory().numTensors;
  const x = tf.tensor2d(h.x, [c.N, c.K]);
  const wt = tf.tensor2d(h.w, [c.K, c.O]);
  const bt = tf.tensor1d(h.b);
  const w = frozenBase ? tf.variable(wt, false) : wt;
  const b = frozenBase ? tf.variable(bt, false) : bt;
  const res = h.res ? tf.tensor2d(h.res, [c.N, c.O]) : null;
  const a = h.a ? tf.tensor2d(h.a, [c.r!, c.K]) : null;
  const bb = h.bb ? tf.tensor2d(h.bb, [c.O, c.r!]) : null;
  const dy = tf.tensor2d(h.dy, [c.N, c.O]);
  const epi: Conv1dEpilogue = { ...(c.gelu ? { activation: 'gelu_new' } : {}) };
  const lowRank = (ai: tf.Tensor, bi: tf.Tensor): LowRank => ({
    a: ai as tf.Tensor2D,
    b: bi as tf.Tensor2D,
    scaling: c.s!,
  });
  let f: (...ts: tf.Tensor[]) => tf.Tensor;
  let xs: tf.Tensor[];
  if (a) {
    f = (xi, ai, bi, ri) =>
      conv1d(xi as tf.Tensor2D, w, b, lowRank(ai, bi), { ...epi, residual: ri as tf.Tensor2D | undefined });
    xs = [x, a, bb!, ...(res ? [res] : [])];
  } else if (frozenBase) {
    f = (xi, ri) =>
      conv1d(xi as tf.Tensor2D, w, b, null, { ...epi, residual: ri as tf.Tensor2D | undefined });
    xs = [x, ...(res ? [res] : [])];
  } else {
    f = (xi, wi, bi, ri) =>
      conv1d(xi as tf.Tensor2D, wi, bi, null, { ...epi, residual: ri as tf.Tensor2D | undefined });
    xs = [x, w, b, ...(res ? [res] : [])];
  }
  const onWebGpu = tf.getBackend() === 'webgpu';
  const count = async (fn: () => void) => (onWebGpu ? (await countDispatches(fn)).dispatches : 0);
  const yT = tf.tidy(() => f(...xs));
  const y = (await yT.data()) as Float32Array;
  yT.dispose();
  const gT = tf.tidy(() => tf.grads(f)(xs, dy));
  const grads = (await Promise.all(gT.map((g) => g.data()))) as Float32Array[];
  tf.dispose(gT);
  // Counted after a first run (shaders compiled); the backward alone is fwd+bwd minus the forward.
  const fwdGroups = onWebGpu ? await recordWorkgroups(() => tf.tidy(() => void f(...xs))) : [];
  const fwd = fwdGroups.length;
  const fwdBwd = await count(() => tf.tidy(() => void tf.grads(f)(xs, dy)));
  const prof = await tf.profile(() => tf.tidy(() => tf.grads(f)(xs, dy)));
  tf.dispose(prof.result as tf.Tensor[]);
  tf.dispose([x, w, b, wt, bt, dy, ...[res, a, bb].filter((t): t is tf.Tensor2D => t !== null)]);
  expect(tf.memory().numTensors).toBe(before);
  return { y, grads, fwd, bwd: fwdBwd - fwd, kernels: prof.kernelNames, fwdGroups };
}

// The few-rows program is what a GPU runs at few rows; software adapters default to the column program or the
// tiles (see the test 'software adapters: …'), so this file asks for it explicitly to test it on SwiftShader.
beforeAll(() => void setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT));

describe('linearPlan: workgroups of the fused Conv1D (no GPU needed)', () => {
  afterEach(() => setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT));
  const total = (M: number, N: number, transA = false) => {
    const p = linearPlan(M, N, transA);
    return p.groups[0] * p.groups[1];
  };

  it("GPT-2 124M's decode shapes (16 rows): ≥ 128 workgroups each, against 12–48 on the 64×64 tiles", () => {
    // c_attn [16,768]·[768,2304], c_fc [16,768]·[768,3072], attn c_proj [16,768]·[768,768], mlp c_proj
    // [16,3072]·[3072,768]: the output is [16, N] whatever K is.
    expect(linearPlan(16, 2304)).toEqual({ program: 'rows', groups: [288, 2], rows: 8, columns: 8 });
    expect(linearPlan(16, 3072)).toEqual({ program: 'rows', groups: [384, 2], rows: 8, columns: 8 });
    expect(linearPlan(16, 768)).toEqual({ program: 'rows', groups: [96, 2], rows: 8, columns: 8 });
    expect([2304, 3072, 768].map((N) => total(16, N))).toEqual([576, 768, 192]);
    setWebGpuLinearSmallRows(0);
    expect(linearPlan(16, 768)).toEqual({ program: 'tiled', groups: [12, 1], rows: 64, columns: 64 });
    expect([2304, 3072, 768].map((N) => total(16, N))).toEqual([36, 48, 12]);
  });

  it('row blocks of 1, 2, 4 or 8; strips of 4 columns when 8 would give < 128 workgroups; tiles beyond 64 rows and for dW', () => {
    expect(linearPlan(1, 768)).toEqual({ program: 'rows', groups: [192, 1], rows: 1, columns: 4 });
    expect(linearPlan(2, 2304)).toEqual({ program: 'rows', groups: [288, 1], rows: 2, columns: 8 });
    expect(linearPlan(3, 37)).toEqual({ program: 'rows', groups: [10, 1], rows: 4, columns: 4 });
    expect(linearPlan(33, 1000)).toEqual({ program: 'rows', groups: [125, 5], rows: 8, columns: 8 });
    expect(linearPlan(64, 768).program).toBe('rows');
    expect(linearPlan(65, 768)).toEqual({ program: 'tiled', groups: [12, 2], rows: 64, columns: 64 });
    // dW = xᵀ·dz: A transposed, its output has `in` rows: always the tiles.
    expect(linearPlan(16, 768, true).program).toBe('tiled');
    expect(setWebGpuLinearSmallRows(128)).toBe(LINEAR_SMALL_ROWS_DEFAULT);
    expect(linearPlan(128, 768)).toEqual({ program: 'rows', groups: [96, 16], rows: 8, columns: 8 });
    expect(() => setWebGpuLinearSmallRows(-1)).toThrow(/integer ≥ 0/);
    setWebGpuLinearSmallRows(64, 1);
    expect(linearPlan(3, 37)).toEqual({ program: 'rows', groups: [5, 1], rows: 4, columns: 8 });
    // Row blocks go along the dispatch's x: more than 65535 of them (a bound raised past 524 280 rows) take the tiles.
    setWebGpuLinearSmallRows(1 << 20, 1);
    expect(linearPlan(8 * 65535, 16).program).toBe('rows');
    expect(linearPlan(8 * 65535 + 1, 16).program).toBe('tiled');
  });
});

describe('fused Conv1D on Node WebGPU (src/core/kernels/webgpu-linear.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  afterEach(() => setWebGpuLinearFused(true));

  it('software adapters: the column program or the tiles unless asked (the few-rows program is several times slower on a CPU)', () => {
    expect(tf.getBackend()).toBe('webgpu');
    try {
      resetWebGpuLinearSmallRows();
      // tests/webgpu-linear-columns.test.ts: the column program gives the tiles' outputs bit for bit.
      expect(linearPlan(16, 768).program).toBe(adapter!.software ? 'columns' : 'rows');
      expect(linearPlan(17, 768).program).toBe(adapter!.software ? 'tiled' : 'rows');
      setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT);
      expect(linearPlan(16, 768).program).toBe('rows');
    } finally {
      setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT);
    }
  });

  // Rows 70 and columns 130 cross the 64-row/column tile; K 24 and 67 are not multiples of the 16 slice.
  const cases: [string, Case, number][] = [
    ['x·W + b (c_attn)', { N: 70, K: 24, O: 40, gelu: false, res: false }, 3],
    ['+ residual (the projections), K 67, 130 columns', { N: 5, K: 67, O: 130, gelu: false, res: true }, 3],
    ['gelu_new (c_fc)', { N: 33, K: 40, O: 96, gelu: true, res: false }, 4],
    [
      'gelu_new + residual, |pre| up to ~40 (σ saturates)',
      { N: 70, K: 24, O: 40, gelu: true, res: true, spread: 6 },
      4,
    ],
  ];
  for (const [name, c, bwdDispatches] of cases) {
    it(`${name}: values and gradients equal the float64 loop and the plain ops; 1 dispatch forward, ${bwdDispatches} backward`, async () => {
      const h = hostInputs(c, 7);
      const ref = reference(c, h);
      const fused = await runConv1d(c, h);
      setWebGpuLinearFused(false);
      const plain = await runConv1d(c, h);
      setWebGpuLinearFused(true);
      expect(fused.fwd).toBe(1);
      expect(fused.bwd).toBe(bwdDispatches);
      expect(plain.fwd, 'the plain ops cost more').toBeGreaterThan(1);
      expect(fused.kernels).toContain(LIN_FWD);
      expect(fused.kernels).toContain(LIN_MM);
      expect(fused.kernels).toContain(LIN_COLSUM);
      expect(fused.kernels.includes(LIN_DZ)).toBe(c.gelu);
      expect(fused.kernels).not.toContain('Sigmoid');
      expect(plain.kernels).not.toContain(LIN_FWD);
      for (const v of fused.y) expect(Number.isFinite(v)).toBe(true);
      expect(relErr(fused.y, ref.y), 'y vs float64').toBeLessThan(2e-6);
      expect(relErr(fused.y, plain.y), 'y vs plain').toBeLessThan(2e-6);
      const names = ['dx', 'dW', 'db', 'dres'];
      const refs = [ref.dx, ref.dw, ref.db, h.dy];
      expect(fused.grads.length).toBe(c.res ? 4 : 3);
      for (let i = 0; i < fused.grads.length; i++) {
        expect(relErr(fused.grads[i], refs[i]), `${names[i]} vs float64`).toBeLessThan(1e-5);
        expect(relErr(fused.grads[i], plain.grads[i]), `${names[i]} vs plain`).toBeLessThan(1e-5);
      }
      expect(await webGpuErrors()).toEqual([]);
    });
  }

  // The few-rows program (decode shapes, ≤ 64 rows; the cases above with 5–33 rows run it too, on short sums):
  // K around 1000 (each thread's k lane sums 16–35 terms, then the workgroup adds 32–64 lanes), columns not
  // multiples of the 4- or 8-column strip, rows 1, 3, 16, 33 (row blocks of 1, 4, 8, and 8 with a fifth holding
  // one row). dx = dz·Wᵀ runs it too (Wᵀ read along k), dW the tiles. The forward's workgroups are asserted (the
  // few-rows program ran: the tiles would be 1 × 1). The 16-row case takes 8-column strips at 12 workgroups
  // (minGroups 1): at the shipped 128 it would need 1000+ columns, slow on SwiftShader for nothing more.
  // Against the float64 loop, the bounds of the cases above. Against the plain ops twice those: tfjs's own
  // matmul over K ≈ 1000 is off the float64 loop by up to ~2e-6 (measured; float32 rounding grows about as √K),
  // the fused kernel by ~3e-7. LoRA's A and B gradients go through tfjs's matmuls over K as well (plain-op
  // rounding again: the same doubled bound).
  const Y_TOL = 4e-6;
  const G_TOL = 2e-5;
  const fewRows: [string, Case, boolean, number][] = [
    [
      '1 row, x·W + b alone, 37 columns (strips of 4)',
      { N: 1, K: 1030, O: 37, gelu: false, res: false },
      false,
      4,
    ],
    [
      '3 rows, gelu_new + residual, 45 columns (strips of 4)',
      { N: 3, K: 1100, O: 45, gelu: true, res: true },
      false,
      4,
    ],
    [
      '16 rows, gelu_new + residual, 45 columns (strips of 8), frozen W and b',
      { N: 16, K: 1024, O: 45, gelu: true, res: true },
      true,
      8,
    ],
  ];
  for (const [name, c, frozen, columns] of fewRows) {
    it(`few rows: ${name}: values and gradients equal the float64 loop and the plain ops; 1 dispatch forward`, async () => {
      const h = hostInputs(c, 51);
      const ref = reference(c, h);
      setWebGpuLinearSmallRows(
        LINEAR_SMALL_ROWS_DEFAULT,
        columns === 8 ? 1 : LINEAR_SMALL_MIN_GROUPS_DEFAULT,
      );
      try {
        const plan = linearPlan(c.N, c.O);
        expect(plan.program).toBe('rows');
        expect(plan.columns).toBe(columns);
        const fused = await runConv1d(c, h, frozen);
        // Row blocks along x, strips along y (the blocks sharing a strip of W launched back to back).
        expect(fused.fwdGroups).toEqual([[plan.groups[1], plan.groups[0], 1]]);
        setWebGpuLinearFused(false);
        const plain = await runConv1d(c, h, frozen);
        setWebGpuLinearFused(true);
        checkFewRows(c, h, ref, fused, plain, frozen);
      } finally {
        setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT);
      }
      expect(await webGpuErrors()).toEqual([]);
    });
  }

  function checkFewRows(
    c: Case,
    h: Host,
    ref: ReturnType<typeof reference>,
    fused: Run,
    plain: Run,
    frozen: boolean,
  ) {
    expect(fused.bwd).toBe((frozen ? 1 : 3) + (c.gelu ? 1 : 0));
    for (const v of fused.y) expect(Number.isFinite(v)).toBe(true);
    expect(relErr(fused.y, ref.y), 'y vs float64').toBeLessThan(2e-6);
    expect(relErr(fused.y, plain.y), 'y vs plain').toBeLessThan(Y_TOL);
    const names = frozen ? ['dx', 'dres'] : ['dx', 'dW', 'db', 'dres'];
    const refs = frozen ? [ref.dx, h.dy] : [ref.dx, ref.dw, ref.db, h.dy];
    expect(fused.grads.length).toBe(names.length - (c.res ? 0 : 1));
    for (let i = 0; i < fused.grads.length; i++) {
      expect(relErr(fused.grads[i], refs[i]), `${names[i]} vs float64`).toBeLessThan(1e-5);
      expect(relErr(fused.grads[i], plain.grads[i]), `${names[i]} vs plain`).toBeLessThan(G_TOL);
    }
  }

  it('few rows with LoRA on a frozen base (33 rows, K 520, gelu_new + residual): values and x, A, B gradients', async () => {
    const c: Case = { N: 33, K: 520, O: 70, gelu: true, res: true, r: 4, s: 2.5 };
    const h = hostInputs(c, 61);
    const ref = reference(c, h);
    const fused = await runConv1d(c, h, true);
    expect(linearPlan(c.N, c.O)).toEqual({ program: 'rows', groups: [18, 5], rows: 8, columns: 4 });
    // x·Aᵀ and ·Bᵀ (tfjs matmuls), then the fused kernel.
    expect(fused.fwdGroups.length).toBe(3);
    expect(fused.fwdGroups[2]).toEqual([5, 18, 1]);
    expect(fused.bwd).toBe(8);
    expect(relErr(fused.y, ref.y), 'y vs float64').toBeLessThan(2e-6);
    const refs = [ref.dx, ref.da, ref.dbb, h.dy];
    const tols = [1e-5, G_TOL, G_TOL, 0];
    for (let i = 0; i < 4; i++)
      expect(relErr(fused.grads[i], refs[i]), `grad ${i} vs float64`).toBeLessThanOrEqual(tols[i]);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('setWebGpuLinearSmallRows(0) runs the tiles instead, with the same values (16 rows, gelu_new + residual)', async () => {
    const c: Case = { N: 16, K: 300, O: 50, gelu: true, res: true };
    const h = hostInputs(c, 71);
    const x = tf.tensor2d(h.x, [c.N, c.K]);
    const w = tf.tensor2d(h.w, [c.K, c.O]);
    const b = tf.tensor1d(h.b);
    const res = tf.tensor2d(h.res!, [c.N, c.O]);
    const forward = async () => {
      let y: tf.Tensor | null = null;
      const groups = await recordWorkgroups(() => {
        y = conv1d(x, w, b, null, { activation: 'gelu_new', residual: res });
      });
      const data = await y!.data();
      y!.dispose();
      return { groups, data };
    };
    try {
      const rows = await forward();
      setWebGpuLinearSmallRows(0);
      const tiled = await forward();
      expect(rows.groups).toEqual([[2, 13, 1]]);
      expect(tiled.groups).toEqual([[1, 1, 1]]);
      expect(relErr(rows.data, tiled.data)).toBeLessThan(2e-6);
      expect(relErr(rows.data, reference(c, h).y)).toBeLessThan(2e-6);
    } finally {
      setWebGpuLinearSmallRows(LINEAR_SMALL_ROWS_DEFAULT);
      tf.dispose([x, w, b, res]);
    }
  });

  it('equals the CPU backend (gelu_new + residual): values and gradients', async () => {
    const c: Case = { N: 70, K: 24, O: 40, gelu: true, res: true };
    const h = hostInputs(c, 21);
    const fused = await runConv1d(c, h);
    await tf.setBackend('cpu');
    try {
      expect(webGpuLinearApplies(tf.zeros([2, 3]), tf.zeros([3, 4]), tf.zeros([4]))).toBe(false);
      const cpu = await runConv1d(c, h);
      expect(relErr(fused.y, cpu.y)).toBeLessThan(2e-6);
      for (let i = 0; i < 4; i++)
        expect(relErr(fused.grads[i], cpu.grads[i]), `grad ${i}`).toBeLessThan(1e-5);
    } finally {
      await tf.setBackend('webgpu');
    }
  });

  it('LoRA on a frozen base (gelu_new + residual): x, A, B and residual gradients; no dW or db is computed', async () => {
    const c: Case = { N: 33, K: 24, O: 72, gelu: true, res: true, r: 4, s: 2.5 };
    const h = hostInputs(c, 31);
    const ref = reference(c, h);
    const fused = await runConv1d(c, h, true);
    setWebGpuLinearFused(false);
    const plain = await runConv1d(c, h, true);
    setWebGpuLinearFused(true);
    expect(relErr(fused.y, ref.y)).toBeLessThan(2e-6);
    expect(relErr(fused.y, plain.y)).toBeLessThan(2e-6);
    const refs = [ref.dx, ref.da, ref.dbb, h.dy];
    for (let i = 0; i < 4; i++) {
      expect(relErr(fused.grads[i], refs[i]), `grad ${i} vs float64`).toBeLessThan(1e-5);
      expect(relErr(fused.grads[i], plain.grads[i]), `grad ${i} vs plain`).toBeLessThan(1e-5);
    }
    // Forward: x·Aᵀ, ·Bᵀ, the fused kernel. Backward: dz; dx through W; s·dz; the LoRA pair's four matmuls
    // (tfjs's MatMul gradients) and the add of x's two gradients. No dW matmul and no db column sum.
    expect(fused.fwd).toBe(3);
    expect(fused.bwd).toBe(8);
    expect(fused.kernels).not.toContain(LIN_COLSUM);
    expect(fused.kernels.filter((k) => k === LIN_MM).length).toBe(1);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('frozen W and b without LoRA: the backward is dx alone (1 dispatch; gelu_new 2)', async () => {
    for (const gelu of [false, true]) {
      const c: Case = { N: 20, K: 16, O: 24, gelu, res: false };
      const h = hostInputs(c, 41);
      const ref = reference(c, h);
      const fused = await runConv1d(c, h, true);
      expect(fused.fwd).toBe(1);
      expect(fused.bwd).toBe(gelu ? 2 : 1);
      expect(fused.grads.length).toBe(1);
      expect(relErr(fused.grads[0], ref.dx)).toBeLessThan(1e-5);
    }
  });

  it('no tensor is left behind: forward + backward three times, the count stays flat', async () => {
    const x = tf.randomNormal([9, 12], 0, 1, 'float32', 1) as tf.Tensor2D;
    const w = tf.variable(tf.randomNormal([12, 20], 0, 1, 'float32', 2));
    const b = tf.variable(tf.randomNormal([20], 0, 1, 'float32', 3));
    const res = tf.randomNormal([9, 20], 0, 1, 'float32', 4) as tf.Tensor2D;
    const counts: number[] = [];
    for (let i = 0; i < 3; i++) {
      const { value, grads } = tf.variableGrads(
        () => tf.sum(conv1d(x, w, b, null, { activation: 'gelu_new', residual: res })) as tf.Scalar,
        [w, b],
      );
      tf.dispose([value, ...Object.values(grads)]);
      counts.push(tf.memory().numTensors);
    }
    expect(counts[1]).toBe(counts[0]);
    expect(counts[2]).toBe(counts[0]);
    tf.dispose([x, w, b, res]);
  });

  it('checkLinearOnCurrentBackend: fused equals plain, 1 dispatch forward, 5 forward + backward', async () => {
    const r = await checkLinearOnCurrentBackend();
    expect(r.maxRelValue).toBeLessThan(2e-6);
    expect(r.maxRelGrad).toBeLessThan(1e-5);
    expect(r.dispatchesFwd).toBe(1);
    expect(r.dispatchesFwdBwd).toBe(5);
    expect(await webGpuErrors()).toEqual([]);
  });
});
