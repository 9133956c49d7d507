/**
 * Layer norm on WebGPU as fused WGSL kernels, registered as tfjs kernels for the webgpu backend and used by
 * model/ops.ts's layerNorm there (other backends keep their ops, bit for bit).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). Layer norm through ops is a moments
 * reduction, subtract, add ε, rsqrt, two multiplies and an add in the forward, and about a dozen more kernels in
 * the backward; GPT-2 runs it 2·n_layer + 1 times per forward. Here the forward is one dispatch and the backward
 * four:
 * - forward  `PerfLayerNormFwd`  (x[R,C], g, b) → y: one workgroup per row; mean, then variance about it (the
 *   same two passes as tf.moments), y = (x − μ)·r·g + b with r = 1/√(σ² + ε);
 * - backward `PerfLayerNormStats` (x) → [R,2] (μ, r); `PerfLayerNormDx` (x, g, dy, stats) → dx =
 *   r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)), dx̂ = dy·g (one workgroup per row); `PerfLayerNormDgDb` → dg =
 *   Σ_rows dy·x̂ and db = Σ_rows dy (two programs, one thread per column).
 * The forward saves x and g only: x̂ is recomputed in the backward rather than kept alive between the passes.
 * Tested against the plain ops, values and gradients, on WebGPU in Node (tests/webgpu-node.test.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';
import { columnSumWgsl, rowProgramWgsl } from './webgpu-rownorm-wgsl';

export const LN_FWD = 'PerfLayerNormFwd';
export const LN_STATS = 'PerfLayerNormStats';
export const LN_DX = 'PerfLayerNormDx';
export const LN_DGDB = 'PerfLayerNormDgDb';

const WG = 64;
/** Rows are workgroups along x; WebGPU guarantees 65535 per dimension. Beyond that the plain ops are used. */
export const MAX_ROWS = 65535;

/** The row's mean and 1/√(σ² + ε): the same two passes as tf.moments (rowSum: webgpu-rownorm-wgsl.ts). */
const ROW_STATS = `
  fn rowMeanRstd(off : i32, C : i32) -> vec2<f32> {
    var s = 0.0;
    for (var j = i32(localId.x); j < C; j = j + ${WG}) { s = s + X[off + j]; }
    let mean = rowSum(s) / f32(C);
    var q = 0.0;
    for (var j = i32(localId.x); j < C; j = j + ${WG}) {
      let d = X[off + j] - mean;
      q = q + d * d;
    }
    return vec2<f32>(mean, inverseSqrt(rowSum(q) / f32(C) + uniforms.eps));
  }`;

type Kind = 'fwd' | 'stats' | 'dx';

/** One workgroup per row (the shape of a tfjs WebGPUProgram; the backend adds bindings and uniforms). */
class RowProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms = 'cols : i32, eps : f32,';
  private readonly kind: Kind;

  constructor(kind: Kind, rows: number, cols: number) {
    this.kind = kind;
    this.variableNames = kind === 'fwd' ? ['X', 'G', 'B'] : kind === 'stats' ? ['X'] : ['X', 'G', 'DY', 'S'];
    this.outputShape = kind === 'stats' ? [rows, 2] : [rows, cols];
    this.shaderKey = `perfLayerNorm_${kind}`;
    this.dispatch = [rows, 1, 1];
  }

  getUserCode(): string {
    const body =
      this.kind === 'fwd'
        ? `let mr = rowMeanRstd(off, C);
        for (var j = i32(localId.x); j < C; j = j + ${WG}) {
          result[off + j] = (X[off + j] - mr.x) * mr.y * G[j] + B[j];
        }`
        : this.kind === 'stats'
          ? `let mr = rowMeanRstd(off, C);
        if (localId.x == 0u) {
          result[row * 2] = mr.x;
          result[row * 2 + 1] = mr.y;
        }`
          : `let mean = S[row * 2];
        let r = S[row * 2 + 1];
        var a = 0.0;
        var b = 0.0;
        for (var j = i32(localId.x); j < C; j = j + ${WG}) {
          let dxh = DY[off + j] * G[j];
          a = a + dxh;
          b = b + dxh * (X[off + j] - mean) * r;
        }
        let ma = rowSum(a) / f32(C);
        let mb = rowSum(b) / f32(C);
        for (var j = i32(localId.x); j < C; j = j + ${WG}) {
          let xh = (X[off + j] - mean) * r;
          result[off + j] = r * (DY[off + j] * G[j] - ma - xh * mb);
        }`;
    return rowProgramWgsl({ wg: WG, fns: ROW_STATS, body });
  }
}

/** dg = Σ_rows dy·x̂ or db = Σ_rows dy: one thread per column, a loop over the rows. */
class ColumnSumProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly size = true;
  readonly uniforms = 'rows : i32, cols : i32,';
  private readonly which: 'dg' | 'db';

  constructor(which: 'dg' | 'db', cols: number) {
    this.which = which;
    this.variableNames = which === 'dg' ? ['X', 'DY', 'S'] : ['DY'];
    this.outputShape = [cols];
    this.shaderKey = `perfLayerNorm_${which}`;
    this.dispatch = [Math.ceil(cols / WG), 1, 1];
  }

  getUserCode(): string {
    return columnSumWgsl(this.which === 'dg' ? 'DY[k] * (X[k] - S[r * 2]) * S[r * 2 + 1]' : 'DY[k]');
  }
}

const rowsCols = (x: tf.TensorInfo): [number, number] => {
  const C = x.shape[x.shape.length - 1];
  return [tf.util.sizeFromShape(x.shape) / C, C];
};

const KERNELS: Record<string, KernelFn> = {
  [LN_FWD]: ({ inputs, backend, attrs }) => {
    const { x, g, b } = inputs as Record<'x' | 'g' | 'b', tf.TensorInfo>;
    const [R, C] = rowsCols(x);
    const u = [
      { type: 'int32' as const, data: [C] },
      { type: 'float32' as const, data: [attrs!.eps as number] },
    ];
    const out = (backend as WebGpuBackendLike).runWebGPUProgram(
      new RowProgram('fwd', R, C),
      [x, g, b],
      'float32',
      u,
    );
    return { ...out, shape: x.shape };
  },
  [LN_STATS]: ({ inputs, backend, attrs }) => {
    const { x } = inputs as Record<'x', tf.TensorInfo>;
    const [R, C] = rowsCols(x);
    const u = [
      { type: 'int32' as const, data: [C] },
      { type: 'float32' as const, data: [attrs!.eps as number] },
    ];
    return (backend as WebGpuBackendLike).runWebGPUProgram(new RowProgram('stats', R, C), [x], 'float32', u);
  },
  [LN_DX]: ({ inputs, backend }) => {
    const { x, g, dy, stats } = inputs as Record<'x' | 'g' | 'dy' | 'stats', tf.TensorInfo>;
    const [R, C] = rowsCols(x);
    const u = [
      { type: 'int32' as const, data: [C] },
      { type: 'float32' as const, data: [0] },
    ];
    const out = (backend as WebGpuBackendLike).runWebGPUProgram(
      new RowProgram('dx', R, C),
      [x, g, dy, stats],
      'float32',
      u,
    );
    return { ...out, shape: x.shape };
  },
  [LN_DGDB]: ({ inputs, backend }) => {
    const { x, dy, stats } = inputs as Record<'x' | 'dy' | 'stats', tf.TensorInfo>;
    const [R, C] = rowsCols(x);
    const u = [
      { type: 'int32' as const, data: [R] },
      { type: 'int32' as const, data: [C] },
    ];
    const b = backend as WebGpuBackendLike;
    const dg = b.runWebGPUProgram(new ColumnSumProgram('dg', C), [x, dy, stats], 'float32', u);
    const db = b.runWebGPUProgram(new ColumnSumProgram('db', C), [dy], 'float32', u);
    return [dg, db];
  },
};

/** Register the four kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuLayerNorm(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the bench counts dispatches with and without it, the checks
 * (src/core/backend/webgpu-fused.ts) compare against the plain ops. Returns the previous setting, to put back.
 */
export function setWebGpuLayerNormFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/** Whether layerNormWebGpu applies: enabled, the webgpu backend is current and the rows fit one dispatch. */
export function webGpuLayerNormApplies(x: tf.Tensor): boolean {
  return (
    enabled &&
    tf.getBackend() === 'webgpu' &&
    x.dtype === 'float32' &&
    x.size / x.shape[x.shape.length - 1] <= MAX_ROWS
  );
}

const byEps = new Map<number, (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => tf.Tensor>();

/** Layer norm over the last axis through the fused kernels, with its gradient (1 dispatch forward, 4 backward). */
export function layerNormWebGpu(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor, eps: number): tf.Tensor {
  registerWebGpuLayerNorm();
  let f = byEps.get(eps);
  if (!f) {
    f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const [xi, gi, bi] = args as tf.Tensor[];
      const save = args[3] as tf.GradSaveFunc;
      save([xi, gi]);
      return {
        value: tf.engine().runKernel(LN_FWD, { x: xi, g: gi, b: bi }, { eps }) as tf.Tensor,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [xs, gs] = saved;
          const stats = tf.engine().runKernel(LN_STATS, { x: xs }, { eps }) as tf.Tensor;
          const dx = tf.engine().runKernel(LN_DX, { x: xs, g: gs, dy, stats }, {}) as tf.Tensor;
          const [dg, db] = tf.engine().runKernel(LN_DGDB, { x: xs, dy, stats }, {}) as tf.Tensor[];
          return [dx, dg, db];
        },
      };
    }) as (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => tf.Tensor;
    byEps.set(eps, f);
  }
  return f(x, g, b);
}
