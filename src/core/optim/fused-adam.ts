/**
 * Fused Adam: a drop-in `tf.AdamOptimizer` whose update is one kernel per variable instead of ~14 ops.
 *
 * Why: tfjs's Adam builds the update from element-wise ops (mul, mul, add, square, mul, mul, add, div, div,
 * sqrt, add, div, mul, add = 14 kernels per variable), and on WebGPU every kernel is a dispatch with its own
 * uniform buffer and bind group (docs/tfjs.md trap 5). Our GPT-2 has 4 + 12·n_layer variables, so the
 * tiny model's policy step alone is ~700 dispatches of Adam. Here each variable costs one kernel call: three
 * small WGSL programs on WebGPU (new m, new v, new weight; a tfjs WebGPU program has one output) and one loop on
 * CPU/WASM. It also keeps peak memory low: tfjs's Adam holds every variable's temporaries until the end of one
 * big tidy (~8× the parameter bytes at the peak); this one frees them per variable.
 *
 * The state is the same as tfjs's Adam (first and second moments as separate variables named `NAME/m`,
 * `NAME/v`, the iteration counter, accBeta1/2), so getWeights/setWeights and the checkpoint format do not change.
 * Bias correction uses β^t computed on the host from the iteration count (tfjs multiplies a float32 scalar
 * each step; the two agree to ~1e-7 relative). Backends without the kernel fall back to tfjs's Adam.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from '../kernels/kernel-fn';
import { adamFor, heapMemory } from '../kernels/wasm-simd';
import type { WebGpuBackendLike } from '../kernels/webgpu-common';
import { replayBackend } from '../kernels/webgpu-replay';
import { adamInPlace, ownsData, type AdamStepUniforms } from '../kernels/webgpu-adam-inplace';

let inPlaceOnWebGpu = true;

/**
 * On WebGPU, write each step's weight and moments in place, one dispatch per variable (kernels/webgpu-adam-inplace.ts),
 * instead of three tfjs programs and new tensors (default on; the same values bit for bit).
 */
export function setWebGpuAdamInPlace(on: boolean): void {
  inPlaceOnWebGpu = on;
}

export const FUSED_ADAM_KERNEL = 'PerfFusedAdam';

/** A step's hyperparameters; bc1, bc2 = 1 − β1^t, 1 − β2^t (the WebGPU in-place kernel takes the same). */
type AdamAttrs = AdamStepUniforms;

/**
 * The step's two device-side controls, a float32 tensor [2] that the kernel reads as an input (not an attribute),
 * so they can be computed on the device without a readback: s[0] the factor applied to the gradient first
 * (global-norm clipping; 1 = none), s[1] whether to apply at all (1) or leave weight and moments as they are (0: a
 * NaN/Inf loss or gradient, decided on the device: ppo/update.ts).
 */
export interface StepControls {
  gscale: number;
  apply: boolean;
}

/** The update on host arrays (CPU and WASM kernels; also the reference the WebGPU shader mirrors). */
export function adamUpdateArrays(
  w: ArrayLike<number>,
  m: ArrayLike<number>,
  v: ArrayLike<number>,
  g: ArrayLike<number>,
  outW: Float32Array,
  outM: Float32Array,
  outV: Float32Array,
  a: AdamAttrs,
  ctl: StepControls,
): void {
  if (!ctl.apply) {
    // A skipped step: weight and moments unchanged (whatever NaN the gradient holds never reaches them).
    for (let i = 0; i < outW.length; i++) {
      outW[i] = w[i];
      outM[i] = m[i];
      outV[i] = v[i];
    }
    return;
  }
  const { lr, beta1, beta2, bc1, bc2, eps } = a;
  const gscale = ctl.gscale;
  const c1 = 1 - beta1;
  const c2 = 1 - beta2;
  for (let i = 0; i < outW.length; i++) {
    const gi = Math.fround(g[i] * gscale); // as float32 arithmetic (and the WebGPU shader) rounds it
    const mi = beta1 * m[i] + c1 * gi;
    const vi = beta2 * v[i] + c2 * gi * gi;
    outM[i] = mi;
    outV[i] = vi;
    outW[i] = w[i] - (lr * (mi / bc1)) / (Math.sqrt(vi / bc2) + eps);
  }
}

/** s = [gscale, apply] as read on a host-memory backend. */
function controlsOf(s: ArrayLike<number>): StepControls {
  return { gscale: s[0], apply: s[1] > 0.5 };
}

// ---- CPU ----------------------------------------------------------------------------------------------

interface CpuBackendLike {
  data: { get(id: unknown): { values: Float32Array } };
  makeTensorInfo(shape: number[], dtype: tf.DataType, values?: Float32Array): tf.TensorInfo;
}

const cpuKernel: KernelFn = ({ inputs, backend, attrs }) => {
  const b = backend as CpuBackendLike;
  const { w, m, v, g, s } = inputs as Record<'w' | 'm' | 'v' | 'g' | 's', tf.TensorInfo>;
  const n = tf.util.sizeFromShape(w.shape);
  const outW = new Float32Array(n);
  const outM = new Float32Array(n);
  const outV = new Float32Array(n);
  const val = (t: tf.TensorInfo) => b.data.get(t.dataId).values;
  // The controls live in host memory on this backend: reading them is not a device round trip.
  const ctl = controlsOf(val(s));
  adamUpdateArrays(val(w), val(m), val(v), val(g), outW, outM, outV, attrs as unknown as AdamAttrs, ctl);
  return [
    b.makeTensorInfo(w.shape, 'float32', outW),
    b.makeTensorInfo(w.shape, 'float32', outM),
    b.makeTensorInfo(w.shape, 'float32', outV),
  ];
};

// ---- WASM ---------------------------------------------------------------------------------------------

interface WasmBackendLike {
  wasm: { asm?: { memory?: WebAssembly.Memory } };
  dataIdMap: { get(dataId: unknown): { memoryOffset: number } };
  typedArrayFromHeap(t: tf.TensorInfo): Float32Array;
  makeOutput(shape: number[], dtype: tf.DataType): tf.TensorInfo;
}

/** Updates run on the SIMD kernel (kernels/adam.wat); the others took the JS loop. */
export const wasmAdamStats = { simd: 0, js: 0 };

const wasmKernel: KernelFn = ({ inputs, backend, attrs }) => {
  const b = backend as WasmBackendLike;
  const { w, m, v, g, s } = inputs as Record<'w' | 'm' | 'v' | 'g' | 's', tf.TensorInfo>;
  // Allocate every output before taking heap views: an allocation can grow the heap and detach older views.
  const oW = b.makeOutput(w.shape, 'float32');
  const oM = b.makeOutput(w.shape, 'float32');
  const oV = b.makeOutput(w.shape, 'float32');
  const a = attrs as unknown as AdamAttrs;
  // The controls are in the WASM heap: reading them is not a device round trip.
  const ctl = controlsOf(b.typedArrayFromHeap(s));
  const simd = ctl.apply ? adamFor(heapMemory(b.wasm)) : null;
  if (simd) {
    const off = (t: tf.TensorInfo): number => b.dataIdMap.get(t.dataId).memoryOffset;
    simd(
      off(w),
      off(m),
      off(v),
      off(g),
      off(oW),
      off(oM),
      off(oV),
      tf.util.sizeFromShape(w.shape),
      a.lr,
      a.beta1,
      a.beta2,
      a.bc1,
      a.bc2,
      a.eps,
      ctl.gscale,
    );
    wasmAdamStats.simd++;
  } else {
    const h = (t: tf.TensorInfo) => b.typedArrayFromHeap(t);
    adamUpdateArrays(h(w), h(m), h(v), h(g), h(oW), h(oM), h(oV), a, ctl);
    if (ctl.apply) wasmAdamStats.js++;
  }
  return [oW, oM, oV];
};

// ---- WebGPU -------------------------------------------------------------------------------------------

type Which = 'm' | 'v' | 'w';
const WORKGROUP = 64;

/**
 * One output of the update as a tfjs WebGPU program (the shape of tfjs-backend-webgpu's WebGPUProgram: the
 * backend adds the buffer bindings, the uniforms struct with `size`, and `main(index)` is called once per
 * element of the flat output). `w` recomputes m' and v' from the old moments rather than reading the new ones,
 * so the three dispatches are independent.
 */
class AdamProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number] = [WORKGROUP, 1, 1];
  readonly size = true;
  // c1 = 1 − β1, c2 = 1 − β2 worked out on the host in float64: 1.0 − f32(0.999) in the shader is 0.00099998713,
  // 1.3e-5 off 0.001, which every v would carry.
  readonly uniforms =
    'lr : f32, beta1 : f32, beta2 : f32, bc1 : f32, bc2 : f32, eps : f32, c1 : f32, c2 : f32,';
  private readonly which: Which;

  constructor(which: Which, n: number) {
    this.which = which;
    // S = [gscale, apply]: read from a buffer, so clipping and the NaN guard can be decided on the device.
    this.variableNames =
      which === 'm' ? ['M', 'G', 'S'] : which === 'v' ? ['V', 'G', 'S'] : ['W', 'M', 'V', 'G', 'S'];
    this.outputShape = [n];
    this.shaderKey = `perfFusedAdamS2_${which}`;
    this.dispatch = [Math.ceil(n / WORKGROUP), 1, 1];
  }

  getUserCode(): string {
    // select(old, new, apply): a skipped step writes the old value back, so a NaN in G never reaches it.
    const body =
      this.which === 'm'
        ? `let g = G[index] * S[0];
          result[index] = select(M[index], uniforms.beta1 * M[index] + uniforms.c1 * g, S[1] > 0.5);`
        : this.which === 'v'
          ? `let g = G[index] * S[0];
          result[index] = select(V[index], uniforms.beta2 * V[index] + uniforms.c2 * g * g, S[1] > 0.5);`
          : `let g = G[index] * S[0];
          let m = uniforms.beta1 * M[index] + uniforms.c1 * g;
          let v = uniforms.beta2 * V[index] + uniforms.c2 * g * g;
          let w = W[index] - uniforms.lr * (m / uniforms.bc1) / (sqrt(v / uniforms.bc2) + uniforms.eps);
          result[index] = select(W[index], w, S[1] > 0.5);`;
    return `
      fn main(index : i32) {
        if (index < uniforms.size) {
          ${body}
        }
      }`;
  }
}

const webgpuKernel: KernelFn = ({ inputs, backend, attrs }) => {
  const b = backend as WebGpuBackendLike;
  const { w, m, v, g, s } = inputs as Record<'w' | 'm' | 'v' | 'g' | 's', tf.TensorInfo>;
  const a = attrs as unknown as AdamAttrs;
  const n = tf.util.sizeFromShape(w.shape);
  const u: { type: 'float32'; data: number[] }[] = [
    a.lr,
    a.beta1,
    a.beta2,
    a.bc1,
    a.bc2,
    a.eps,
    1 - a.beta1,
    1 - a.beta2,
  ].map((x) => ({
    type: 'float32',
    data: [x],
  }));
  // Flat views: the shader indexes every buffer by the flat output index.
  const flat = (t: tf.TensorInfo): tf.TensorInfo => ({ ...t, shape: [n] });
  const outM = b.runWebGPUProgram(new AdamProgram('m', n), [flat(m), flat(g), s], 'float32', u);
  const outV = b.runWebGPUProgram(new AdamProgram('v', n), [flat(v), flat(g), s], 'float32', u);
  const outW = b.runWebGPUProgram(
    new AdamProgram('w', n),
    [flat(w), flat(m), flat(v), flat(g), s],
    'float32',
    u,
  );
  return [outW, outM, outV].map((t) => ({ ...t, shape: w.shape }));
};

// ---- registration and the optimizer -------------------------------------------------------------------

const KERNELS: Record<string, KernelFn> = { cpu: cpuKernel, wasm: wasmKernel, webgpu: webgpuKernel };

/** Register the fused kernel for cpu, wasm and webgpu (idempotent; the backends need not be loaded yet). */
export function registerFusedAdamKernels(): void {
  for (const [backendName, kernelFunc] of Object.entries(KERNELS)) {
    if (!tf.getKernel(FUSED_ADAM_KERNEL, backendName)) {
      tf.registerKernel({
        kernelName: FUSED_ADAM_KERNEL,
        backendName,
        kernelFunc: kernelFunc as tf.KernelFunc,
      });
    }
  }
}

export function fusedAdamAvailable(backendName: string = tf.getBackend()): boolean {
  return !!tf.getKernel(FUSED_ADAM_KERNEL, backendName);
}

type NamedTensorList = { name: string; tensor: tf.Tensor }[];
type GradientsArg = tf.NamedTensorMap | NamedTensorList;

interface AdamInternals {
  beta1: number;
  beta2: number;
  epsilon: number;
  accBeta1: tf.Variable;
  accBeta2: tf.Variable;
  accumulatedFirstMoment: ({ originalName: string; variable: tf.Variable } | undefined)[];
  accumulatedSecondMoment: ({ originalName: string; variable: tf.Variable } | undefined)[];
}

/** An Adam whose learning rate a live change sets (`setLearningRate`): the fused one, or tfjs's own (TfjsAdam). */
export type RunOptimizer = tf.AdamOptimizer & { setLearningRate(lr: number): void };

/** tfjs's own Adam with a settable learning rate: what tests and the memory bench compare the fused one with. */
export class TfjsAdam extends tf.AdamOptimizer {
  setLearningRate(lr: number): void {
    this.learningRate = lr;
  }
}

/** True for an optimizer with the fused, scaled update (see FusedAdamOptimizer.applyScaled). */
export function hasScaledApply(o: tf.Optimizer): o is FusedAdamOptimizer {
  return typeof (o as Partial<FusedAdamOptimizer>).applyScaled === 'function';
}

export class FusedAdamOptimizer extends tf.AdamOptimizer {
  /** Kernel calls made by the fused path (for tests: proves the fused path ran). */
  fusedCalls = 0;

  constructor(learningRate: number, beta1 = 0.9, beta2 = 0.999, epsilon: number | null = null) {
    super(learningRate, beta1, beta2, epsilon as number);
    registerFusedAdamKernels();
  }

  /** The learning rate of the steps from now on (a live change of the run's config reaches Adam this way). */
  setLearningRate(lr: number): void {
    this.learningRate = lr;
  }

  /** The learning rate the next step uses. */
  get lr(): number {
    return this.learningRate;
  }

  override applyGradients(variableGradients: GradientsArg): void {
    this.applyScaled(variableGradients, 1);
  }

  /**
   * Adam on `gradScale`·g (gradScale: global-norm clipping worked out on the host from a norm already read back,
   * so the clipping costs no kernel per variable). Without the fused kernel: tfjs's Adam on the scaled gradients.
   * (A method of its own, not an argument of applyGradients: tfjs's optimizer classes answer `instanceof` by
   * duck typing, so a plain tf.AdamOptimizer passes `instanceof FusedAdamOptimizer`; callers test for this method.)
   */
  applyScaled(variableGradients: GradientsArg, gradScale: number): void {
    if (!fusedAdamAvailable()) {
      if (gradScale === 1) {
        super.applyGradients(variableGradients as Parameters<tf.AdamOptimizer['applyGradients']>[0]);
      } else {
        tf.tidy(() => {
          const list: NamedTensorList = Array.isArray(variableGradients)
            ? variableGradients
            : Object.entries(variableGradients).map(([name, tensor]) => ({ name, tensor }));
          super.applyGradients(list.map(({ name, tensor }) => ({ name, tensor: tf.mul(tensor, gradScale) })));
        });
      }
      return;
    }
    const controls = tf.tensor1d([gradScale, 1], 'float32');
    try {
      this.applyControlled(variableGradients, controls);
    } finally {
      controls.dispose();
    }
  }

  /**
   * Adam with its controls on the device: `controls` = [gscale, apply] (float32 [2], see StepControls), computed by
   * earlier kernels, so the caller need not read anything back before the step (ppo/update.ts
   * jointGuardedStepDeferred). apply 0 leaves weights, moments and β-powers as they are; the host's iteration
   * count cannot see the flag and advances either way: call `uncountSkipped` for each skipped step once the flag
   * has been read. Steps taken between a skip and that call use the bias correction one step ahead (1 − β^(t+1)
   * instead of 1 − β^t), the one difference from deciding on the host (docs/engine.md, "No readback inside the
   * update"). Needs the fused kernel on the current backend (`fusedAdamAvailable`).
   */
  applyControlled(variableGradients: GradientsArg, controls: tf.Tensor1D): void {
    if (!fusedAdamAvailable()) {
      throw new Error(
        `FusedAdamOptimizer.applyControlled: the fused Adam kernel is not registered for the ${tf.getBackend()} backend (cpu, wasm and webgpu have it); use applyScaled with a factor read back on the host.`,
      );
    }
    if (controls.size !== 2 || controls.dtype !== 'float32') {
      throw new Error(
        `FusedAdamOptimizer.applyControlled: controls must be a float32 tensor [gscale, apply] of 2 values, got ${controls.dtype} [${controls.shape}].`,
      );
    }
    const s = this as unknown as AdamInternals;
    const isArray = Array.isArray(variableGradients);
    const names = isArray
      ? (variableGradients as NamedTensorList).map((v) => v.name)
      : Object.keys(variableGradients);
    const t = this.iterations + 1;
    const attrs: AdamAttrs = {
      lr: this.learningRate,
      beta1: s.beta1,
      beta2: s.beta2,
      bc1: 1 - Math.pow(s.beta1, t),
      bc2: 1 - Math.pow(s.beta2, t),
      eps: s.epsilon,
    };
    // WebGPU: the variables whose data is theirs alone are updated in place, all in one command buffer.
    const backend = inPlaceOnWebGpu ? replayBackend() : null;
    const inPlace: { w: tf.Tensor; m: tf.Tensor; v: tf.Tensor; g: tf.Tensor }[] = [];
    names.forEach((name, i) => {
      const value = tf.engine().registeredVariables[name];
      if (s.accumulatedFirstMoment[i] == null) {
        s.accumulatedFirstMoment[i] = {
          originalName: `${name}/m`,
          variable: tf.tidy(() => tf.zerosLike(value).variable(false)),
        };
      }
      if (s.accumulatedSecondMoment[i] == null) {
        s.accumulatedSecondMoment[i] = {
          originalName: `${name}/v`,
          variable: tf.tidy(() => tf.zerosLike(value).variable(false)),
        };
      }
      const g = isArray
        ? (variableGradients as NamedTensorList)[i].tensor
        : (variableGradients as tf.NamedTensorMap)[name];
      if (g == null) return;
      const m = s.accumulatedFirstMoment[i]!.variable;
      const v = s.accumulatedSecondMoment[i]!.variable;
      if (
        backend &&
        g.dtype === 'float32' &&
        value.dtype === 'float32' &&
        g.size === value.size &&
        [value, m, v].every((t) => ownsData(backend, t))
      ) {
        inPlace.push({ w: value, m, v, g });
        this.fusedCalls++;
        return;
      }
      const outs = tf
        .engine()
        .runKernel(
          FUSED_ADAM_KERNEL,
          { w: value, m, v, g, s: controls },
          attrs as unknown as tf.NamedAttrMap,
        ) as tf.Tensor[];
      this.fusedCalls++;
      m.assign(outs[1]);
      v.assign(outs[2]);
      value.assign(outs[0]);
      tf.dispose(outs);
    });
    if (backend) adamInPlace(backend, inPlace, controls, attrs);
    // tfjs's β-powers (its state; checkpoints keep them): advanced only by a step that applied.
    tf.tidy(() => {
      const applied = tf.greater(tf.reshape(tf.slice(controls, [1], [1]), []), 0.5);
      s.accBeta1.assign(tf.where(applied, tf.mul(s.accBeta1, s.beta1), s.accBeta1));
      s.accBeta2.assign(tf.where(applied, tf.mul(s.accBeta2, s.beta2), s.accBeta2));
    });
    this.incrementIterations();
  }

  /** Take back the iteration count of `n` steps that applyControlled skipped on the device (their flag read). */
  uncountSkipped(n: number): void {
    if (!(Number.isInteger(n) && n >= 0 && n <= this.iterations)) {
      throw new Error(
        `FusedAdamOptimizer.uncountSkipped: n must be a whole number in [0, ${this.iterations}], got ${n}`,
      );
    }
    (this as unknown as { iterations_: number }).iterations_ = this.iterations - n;
  }
}
