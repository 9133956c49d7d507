/**
 * The SwiGLU MLP's elementwise middle, silu(gate)·up, on WebGPU as fused WGSL kernels, registered as tfjs kernels
 * for the webgpu backend and used by model/ops.ts's swiglu there (other backends keep its plain ops, bit for bit).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5). silu(gate)·up through ops is sigmoid and two
 * multiplies forward (3 dispatches) and about 7 kernels in autodiff's backward, over the MLP's widest tensor
 * ([B·T, intermediate_size], 4864 columns in Qwen2-0.5B), each reading and writing it whole. Here:
 * - forward `PerfSwigluFwd` (gate, up) → y = gate·σ(gate)·up, σ(g) = 1/(1 + e^(−g)) as tfjs's WGSL sigmoid;
 * - backward `PerfSwigluBwd` (gate, up, dy), twice (part 0: d gate = dy·up·(σ + g·σ·(1 − σ)); part 1:
 *   d up = dy·g·σ): a tfjs WebGPU program has one output, and the two gradients are two tensors.
 * One thread per element; workgroups along x and y of the dispatch (past 65535·64 elements), so every
 * [B·T, intermediate] fits one dispatch.
 * Tested against the plain ops, values and gradients, on WebGPU in Node (tests/webgpu-llama-kernels.test.ts);
 * `checkSwigluOnCurrentBackend` (src/core/backend/webgpu-fused.ts) runs the same comparison wherever webgpu is current.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';

export const SWIGLU_FWD = 'PerfSwigluFwd';
export const SWIGLU_BWD = 'PerfSwigluBwd';

const WG = 64;
const MAX_DIM = 65535;

type Kind = 'fwd' | 'dgate' | 'dup';

class SwigluProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WG, 1, 1];
  readonly size = true;
  private readonly kind: Kind;

  constructor(kind: Kind, n: number) {
    this.kind = kind;
    // d up does not read up: an input the shader never reads gets no binding, so it is not passed.
    this.variableNames = kind === 'fwd' ? ['G', 'U'] : kind === 'dgate' ? ['G', 'U', 'DY'] : ['G', 'DY'];
    this.outputShape = [n];
    this.shaderKey = `perfSwiglu_${kind}`;
    const groups = Math.ceil(n / WG);
    this.dispatch = [Math.min(groups, MAX_DIM), Math.ceil(groups / MAX_DIM), 1];
  }

  getUserCode(): string {
    const value =
      this.kind === 'fwd'
        ? 'g * s * U[index]'
        : this.kind === 'dgate'
          ? 'DY[index] * U[index] * (s + g * s * (1.0 - s))'
          : 'DY[index] * g * s';
    return `
      fn main(index : i32) {
        if (index < uniforms.size) {
          let g = G[index];
          let s = 1.0 / (1.0 + exp(-1.0 * g));
          result[index] = ${value};
        }
      }`;
  }
}

function run(kind: Kind, inputs: tf.TensorInfo[], backend: unknown): tf.TensorInfo {
  const shape = inputs[0].shape;
  const n = tf.util.sizeFromShape(shape);
  const out = (backend as WebGpuBackendLike).runWebGPUProgram(new SwigluProgram(kind, n), inputs, 'float32');
  return { ...out, shape };
}

const KERNELS: Record<string, KernelFn> = {
  [SWIGLU_FWD]: ({ inputs, backend }) => {
    const { gate, up } = inputs as Record<'gate' | 'up', tf.TensorInfo>;
    return run('fwd', [gate, up], backend);
  },
  [SWIGLU_BWD]: ({ inputs, backend, attrs }) => {
    const { gate, up, dy } = inputs as Record<'gate' | 'up' | 'dy', tf.TensorInfo>;
    return attrs!.part === 0 ? run('dgate', [gate, up, dy], backend) : run('dup', [gate, dy], backend);
  },
};

/** Register the two kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuSwiglu(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused path off (it is on by default): the checks (src/core/backend/webgpu-fused.ts) compare against the plain
 * ops. Returns the previous setting, to put back.
 */
export function setWebGpuSwigluFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/** Whether swigluWebGpu applies: enabled, the webgpu backend current, float32 gate and up of one shape. */
export function webGpuSwigluApplies(gate: tf.Tensor, up: tf.Tensor): boolean {
  if (!enabled || tf.getBackend() !== 'webgpu') return false;
  if (gate.dtype !== 'float32' || up.dtype !== 'float32' || gate.size === 0) return false;
  return tf.util.arraysEqual(gate.shape, up.shape) && Math.ceil(gate.size / WG) <= MAX_DIM * MAX_DIM;
}

/**
 * silu(gate)·up through the fused kernels, with its gradient (1 dispatch forward, 2 backward). Same values as
 * model/ops.ts's plain swiglu. Check webGpuSwigluApplies first.
 */
export const swigluWebGpu = (gate: tf.Tensor, up: tf.Tensor): tf.Tensor => {
  registerWebGpuSwiglu();
  return swigluGrad(gate, up);
};

const swigluGrad = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
  const [g, u] = args as tf.Tensor[];
  const save = args[2] as tf.GradSaveFunc;
  save([g, u]);
  return {
    value: tf.engine().runKernel(SWIGLU_FWD, { gate: g, up: u }, {}) as tf.Tensor,
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [gs, us] = saved;
      const e = tf.engine();
      return [
        e.runKernel(SWIGLU_BWD, { gate: gs, up: us, dy }, { part: 0 }) as tf.Tensor,
        e.runKernel(SWIGLU_BWD, { gate: gs, up: us, dy }, { part: 1 }) as tf.Tensor,
      ];
    },
  };
}) as (gate: tf.Tensor, up: tf.Tensor) => tf.Tensor;
