/**
 * Σ over tensors of Σ x² — the squared global gradient norm — in one program per 7 tensors on WebGPU (issue #31).
 *
 * Why: the update's norm was `addN(sum(square(g)))` over every trained variable: two programs per variable plus the
 * grouped AddN, each paying tfjs's host cost per program (~90 µs on the H200 machine). A LoRA run trains hundreds of
 * small variables (a GPT-2 update: ~400 of its ~2 500 programs). Here one workgroup of 256 lanes strides over up to
 * 7 tensors (WebGPU's default 8 storage buffers per stage, one for the output), sums their squares and reduces in
 * workgroup memory; the partial sums of the groups are added by AddN. float32 throughout, as tf.sum; the order of
 * the additions differs, so the sum may differ from tf.sum's by float32 rounding (~1e-7 relative).
 * Only tensors of at most MAX_FUSED elements go through it (one workgroup per program would be slow on a full
 * fine-tune's embedding); larger ones keep sum(square). Other backends keep the plain ops, unchanged.
 * Tested against a float64 loop and the plain ops (tests/webgpu-sumsq.test.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { registerWebGpuKernels, type WebGpuBackendLike } from './webgpu-common';

export const SUM_SQUARES = 'PerfSumSquares';
const WG = 256;
/** Tensors per program: 8 storage buffers per stage by default, one of them the output. */
export const SUMSQ_PER_PROGRAM = 7;
/** Largest tensor summed by the one-workgroup program. */
export const MAX_FUSED = 1 << 20;

let enabled = true;

/** Turn the fused sum of squares on or off (default on; webgpu only). */
export function setWebGpuSumSquares(on: boolean): void {
  enabled = on;
}

class SumSquaresProgram {
  readonly variableNames: string[];
  readonly outputShape = [1];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number] = [1, 1, 1];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly uniforms: string;
  private readonly k: number;

  constructor(k: number) {
    this.k = k;
    this.variableNames = Array.from({ length: k }, (_, i) => `X${i}`);
    this.uniforms = Array.from({ length: k }, (_, i) => `n${i} : i32,`).join(' ');
    this.shaderKey = `perfSumSquares_${k}`;
  }

  getUserCode(): string {
    const loops = Array.from(
      { length: this.k },
      (_, i) => `
        for (var j = i32(localId.x); j < uniforms.n${i}; j = j + ${WG}) {
          let x = X${i}[j];
          s = s + x * x;
        }`,
    ).join('');
    return `
      var<workgroup> red : array<f32, ${WG}>;
      fn main(index : i32) {
        var s = 0.0;
        ${loops}
        red[localId.x] = s;
        workgroupBarrier();
        for (var h = ${WG / 2}u; h > 0u; h = h / 2u) {
          if (localId.x < h) {
            red[localId.x] = red[localId.x] + red[localId.x + h];
          }
          workgroupBarrier();
        }
        if (localId.x == 0u) {
          result[0] = red[0];
        }
      }`;
  }
}

const kernel = ({ inputs, backend }: { inputs: tf.NamedTensorInfoMap; backend: unknown }) => {
  const xs = Object.keys(inputs)
    .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)))
    .map((k) => inputs[k] as tf.TensorInfo);
  const flat = xs.map((t) => ({ ...t, shape: [tf.util.sizeFromShape(t.shape)] }));
  const u = flat.map((t) => ({ type: 'int32' as const, data: [t.shape[0]] }));
  return (backend as WebGpuBackendLike).runWebGPUProgram(
    new SumSquaresProgram(xs.length),
    flat,
    'float32',
    u,
  );
};

function register(): void {
  registerWebGpuKernels({ [SUM_SQUARES]: kernel });
}

/**
 * Σ_t Σ x² over `list` as a scalar: on WebGPU the fused program (groups of 7 tensors of at most MAX_FUSED elements,
 * float32), elsewhere — and for larger tensors — `addN(sum(square(x)))` as before.
 */
export function sumOfSquares(list: tf.Tensor[]): tf.Scalar {
  return tf.tidy(() => {
    if (!enabled || tf.getBackend() !== 'webgpu')
      return tf.addN(list.map((x) => tf.sum(tf.square(x)))) as tf.Scalar;
    register();
    const small = list.filter((x) => x.dtype === 'float32' && x.size > 0 && x.size <= MAX_FUSED);
    // An empty tensor adds nothing (and tfjs's WebGPU backend cannot make a 0-byte buffer for its sum).
    const rest = list.filter((x) => x.size > 0 && !small.includes(x));
    const parts: tf.Tensor[] = [];
    for (let i = 0; i < small.length; i += SUMSQ_PER_PROGRAM) {
      const group = small.slice(i, i + SUMSQ_PER_PROGRAM);
      const ins = Object.fromEntries(group.map((x, j) => [`x${j}`, x]));
      parts.push(tf.reshape(tf.engine().runKernel(SUM_SQUARES, ins, {}) as tf.Tensor, []));
    }
    for (const x of rest) parts.push(tf.sum(tf.square(x)));
    if (parts.length === 0) return tf.scalar(0);
    return (parts.length === 1 ? parts[0] : tf.addN(parts)) as tf.Scalar;
  });
}
