/**
 * RMSNorm (Llama / Qwen2 / Qwen3) on WebGPU as fused WGSL kernels, registered as tfjs kernels for the webgpu
 * backend and used by model/ops.ts's rmsNorm there (other backends keep its plain ops, bit for bit).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). RMSNorm through ops is square, mean, add ε,
 * rsqrt and two multiplies (5 dispatches: tfjs's mean is one reduction) forward, and about a dozen kernels in
 * autodiff's backward; a Llama layer runs it twice, Qwen3 four times (q_norm and k_norm over every head). Here the
 * forward is one dispatch and the backward three (two for a frozen weight, see rmsNormWebGpu):
 * - forward `PerfRmsNormFwd` (x[R,C], w) → y: one workgroup per row; r = 1/√(mean(x²) + ε), y = (x·r)·w (the plain
 *   path's order of operations);
 * - backward `PerfRmsNormStats` (x) → [R] (r per row); `PerfRmsNormDx` (x, w, dy, r) → dx = r·(ĝ − x̂·mean(ĝ·x̂)) with
 *   x̂ = x·r and ĝ = dy·w (one workgroup per row); `PerfRmsNormDw` (x, dy, r) → dw = Σ_rows dy·x̂ (one thread per
 *   column, a loop over the rows).
 * The custom gradient saves x and w only: r is recomputed in the backward rather than kept alive between the passes.
 * Rows go along x and y of the dispatch (65535 × 65535), so q_norm / k_norm over B·T·heads rows fit one dispatch.
 * Tested against the plain ops, values and gradients, on WebGPU in Node (tests/webgpu-llama-kernels.test.ts);
 * `checkRmsNormOnCurrentBackend` (src/core/backend/webgpu-fused.ts) runs the same comparison wherever webgpu is current.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';
import { columnSumWgsl, rowProgramWgsl } from './webgpu-rownorm-wgsl';

export const RMS_FWD = 'PerfRmsNormFwd';
export const RMS_STATS = 'PerfRmsNormStats';
export const RMS_DX = 'PerfRmsNormDx';
export const RMS_DW = 'PerfRmsNormDw';

const WG = 64;
/** Workgroups per dispatch dimension that WebGPU guarantees. */
const MAX_DIM = 65535;

/** The row's 1/√(mean(x²) + ε) (rowSum: webgpu-rownorm-wgsl.ts). */
const ROW_STATS = `
  fn rowRstd(off : i32, C : i32) -> f32 {
    var q = 0.0;
    for (var j = i32(localId.x); j < C; j = j + ${WG}) { q = q + X[off + j] * X[off + j]; }
    return inverseSqrt(rowSum(q) / f32(C) + uniforms.eps);
  }`;

type Kind = 'fwd' | 'stats' | 'dx';

/** [rows along x, rows along y] of a dispatch of one workgroup per row. */
function rowDispatch(rows: number): [number, number, number] {
  return [Math.min(rows, MAX_DIM), Math.ceil(rows / MAX_DIM), 1];
}

/** One workgroup per row (the shape of a tfjs WebGPUProgram; the backend adds bindings and uniforms). */
class RowProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'rows : i32, cols : i32, eps : f32,';
  private readonly kind: Kind;

  constructor(kind: Kind, rows: number, cols: number) {
    this.kind = kind;
    this.variableNames = kind === 'fwd' ? ['X', 'W'] : kind === 'stats' ? ['X'] : ['X', 'W', 'DY', 'S'];
    this.outputShape = kind === 'stats' ? [rows] : [rows, cols];
    this.shaderKey = `perfRmsNorm_${kind}`;
    this.dispatch = rowDispatch(rows);
  }

  getUserCode(): string {
    const body =
      this.kind === 'fwd'
        ? `let r = rowRstd(off, C);
        for (var j = i32(localId.x); j < C; j = j + ${WG}) {
          if (own) { result[off + j] = (X[off + j] * r) * W[j]; }
        }`
        : this.kind === 'stats'
          ? `let r = rowRstd(off, C);
        if (own && localId.x == 0u) { result[row] = r; }`
          : `let r = S[row];
        var a = 0.0;
        for (var j = i32(localId.x); j < C; j = j + ${WG}) {
          a = a + DY[off + j] * W[j] * X[off + j] * r;
        }
        let ma = rowSum(a) / f32(C);
        for (var j = i32(localId.x); j < C; j = j + ${WG}) {
          if (own) { result[off + j] = r * (DY[off + j] * W[j] - X[off + j] * r * ma); }
        }`;
    // Rows over x and y: a workgroup past the last row has `own` false and writes nothing.
    return rowProgramWgsl({ wg: WG, fns: ROW_STATS, body, rowsOnXY: { maxDim: MAX_DIM } });
  }
}

/** dw = Σ_rows dy·x·r: one thread per column, a loop over the rows. */
class ColumnSumProgram {
  readonly variableNames = ['X', 'DY', 'S'];
  readonly outputShape: number[];
  readonly shaderKey = 'perfRmsNorm_dw';
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly size = true;
  readonly uniforms = 'rows : i32, cols : i32,';

  constructor(cols: number) {
    this.outputShape = [cols];
    this.dispatch = [Math.ceil(cols / WG), 1, 1];
  }

  getUserCode(): string {
    return columnSumWgsl('DY[k] * X[k] * S[r]');
  }
}

const rowsCols = (x: tf.TensorInfo): [number, number] => {
  const C = x.shape[x.shape.length - 1];
  return [tf.util.sizeFromShape(x.shape) / C, C];
};

function runRows(kind: Kind, inputs: tf.TensorInfo[], backend: unknown, eps: number): tf.TensorInfo {
  const x = inputs[0];
  const [R, C] = rowsCols(x);
  const u = [
    { type: 'int32' as const, data: [R] },
    { type: 'int32' as const, data: [C] },
    { type: 'float32' as const, data: [eps] },
  ];
  const out = (backend as WebGpuBackendLike).runWebGPUProgram(
    new RowProgram(kind, R, C),
    inputs,
    'float32',
    u,
  );
  return kind === 'stats' ? out : { ...out, shape: x.shape };
}

const KERNELS: Record<string, KernelFn> = {
  [RMS_FWD]: ({ inputs, backend, attrs }) => {
    const { x, w } = inputs as Record<'x' | 'w', tf.TensorInfo>;
    return runRows('fwd', [x, w], backend, attrs!.eps as number);
  },
  [RMS_STATS]: ({ inputs, backend, attrs }) => {
    const { x } = inputs as Record<'x', tf.TensorInfo>;
    return runRows('stats', [x], backend, attrs!.eps as number);
  },
  [RMS_DX]: ({ inputs, backend }) => {
    const { x, w, dy, stats } = inputs as Record<'x' | 'w' | 'dy' | 'stats', tf.TensorInfo>;
    return runRows('dx', [x, w, dy, stats], backend, 0);
  },
  [RMS_DW]: ({ inputs, backend }) => {
    const { x, dy, stats } = inputs as Record<'x' | 'dy' | 'stats', tf.TensorInfo>;
    const [R, C] = rowsCols(x);
    const u = [
      { type: 'int32' as const, data: [R] },
      { type: 'int32' as const, data: [C] },
    ];
    return (backend as WebGpuBackendLike).runWebGPUProgram(
      new ColumnSumProgram(C),
      [x, dy, stats],
      'float32',
      u,
    );
  },
};

/** Register the four kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuRmsNorm(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the checks (src/core/backend/webgpu-fused.ts) compare against the plain
 * ops. Returns the previous setting, to put back.
 */
export function setWebGpuRmsNormFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether rmsNormWebGpu applies to x (any rank, normalised over the last axis) and weight w: enabled, the webgpu
 * backend current, float32, w as long as x's last axis, and the rows within 65535 × 65535 workgroups.
 */
export function webGpuRmsNormApplies(x: tf.Tensor, w: tf.Tensor): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if (x.dtype !== 'float32' || w.dtype !== 'float32' || x.rank < 1 || x.size === 0) return false;
  const C = x.shape[x.rank - 1];
  return w.size === C && x.size / C <= MAX_DIM * MAX_DIM;
}

const byEps = new Map<number, (x: tf.Tensor, w: tf.Tensor) => tf.Tensor>();

/**
 * RMSNorm over the last axis through the fused kernels, with its gradient (1 dispatch forward, 3 backward). Same
 * values as model/ops.ts's plain rmsNorm. Check webGpuRmsNormApplies first. A frozen weight (a tf.Variable with
 * trainable = false: the base under LoRA) is left out of the custom gradient's inputs, so no dw is computed
 * (tfjs computes every input's gradient of a custom gradient): 2 dispatches backward.
 */
export function rmsNormWebGpu(x: tf.Tensor, w: tf.Tensor, eps: number): tf.Tensor {
  registerWebGpuRmsNorm();
  if (w instanceof tf.Variable && !w.trainable) return rmsNormFrozenWeight(x, w, eps);
  let f = byEps.get(eps);
  if (!f) {
    f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const [xi, wi] = args as tf.Tensor[];
      const save = args[2] as tf.GradSaveFunc;
      save([xi, wi]);
      return {
        value: tf.engine().runKernel(RMS_FWD, { x: xi, w: wi }, { eps }) as tf.Tensor,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [xs, ws] = saved;
          const e = tf.engine();
          const stats = e.runKernel(RMS_STATS, { x: xs }, { eps }) as tf.Tensor;
          const dx = e.runKernel(RMS_DX, { x: xs, w: ws, dy, stats }, {}) as tf.Tensor;
          const dw = tf.reshape(e.runKernel(RMS_DW, { x: xs, dy, stats }, {}) as tf.Tensor, ws.shape);
          stats.dispose();
          return [dx, dw];
        },
      };
    }) as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor;
    byEps.set(eps, f);
  }
  return f(x, w);
}

/** rmsNormWebGpu with a frozen weight: the gradient w.r.t. x only (stats and dx, 2 dispatches). */
function rmsNormFrozenWeight(x: tf.Tensor, w: tf.Variable, eps: number): tf.Tensor {
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const xi = args[0] as tf.Tensor;
    const save = args[1] as tf.GradSaveFunc;
    save([xi]);
    return {
      value: tf.engine().runKernel(RMS_FWD, { x: xi, w }, { eps }) as tf.Tensor,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const e = tf.engine();
        const stats = e.runKernel(RMS_STATS, { x: saved[0] }, { eps }) as tf.Tensor;
        const dx = e.runKernel(RMS_DX, { x: saved[0], w, dy, stats }, {}) as tf.Tensor;
        stats.dispose();
        return dx;
      },
    };
  }) as (x: tf.Tensor) => tf.Tensor;
  return f(x);
}
