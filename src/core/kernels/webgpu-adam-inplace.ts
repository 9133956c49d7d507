/**
 * The fused Adam step on WebGPU written in place: one dispatch per variable that updates the weight and both
 * moments in their own buffers, all variables of a step encoded into one command buffer (issue #31, "whatever else
 * the profile shows is the host's cost").
 *
 * Why: tfjs's WebGPU programs have one output, so the fused Adam of src/core/optim/fused-adam.ts is three programs per
 * variable (new m, new v, new weight), each paying tfjs's ~90–140 µs of host time (uniforms, bind group, encode),
 * and each makes a new tensor the variable is then assigned. A LoRA run trains hundreds of small variables: on a
 * GPT-2 update 579 of its ~2 500 programs were Adam's (docs/gpu.md). Here a variable costs one bind group and three
 * encoder calls, and no tensor is made.
 *
 * Same arithmetic as the tfjs program (the same WGSL expressions in the same order, the same float32 uniforms), so
 * the results are bit for bit the same (tests/webgpu-adam-inplace.test.ts). In place is safe only where nothing else
 * holds the data: a weight or moment whose data another tensor shares (a clone, a reshape: tfjs's refCount above 1)
 * takes the tfjs program instead, and a value tfjs had read back to the host (its cached `values`) is dropped, so
 * the next read sees the new one. tfjs's pending commands are submitted first (the gradients and the controls come
 * from them), and later tfjs work runs after this in queue order.
 */
import { flushTfjs, tensorBuffer, type ReplayBackend } from './webgpu-replay';
import type * as tf from '@tensorflow/tfjs-core';

const WG = 256;
const MAX_GROUPS = 65535;

const SHADER = /* wgsl */ `
struct U { lr : f32, beta1 : f32, beta2 : f32, bc1 : f32, bc2 : f32, eps : f32, c1 : f32, c2 : f32 };
@group(0) @binding(0) var<storage, read_write> W : array<f32>;
@group(0) @binding(1) var<storage, read_write> M : array<f32>;
@group(0) @binding(2) var<storage, read_write> V : array<f32>;
@group(0) @binding(3) var<storage, read> G : array<f32>;
@group(0) @binding(4) var<storage, read> S : array<f32>;
@group(0) @binding(5) var<uniform> uniforms : U;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid : vec3<u32>, @builtin(num_workgroups) groups : vec3<u32>) {
  let index = gid.x + gid.y * groups.x * ${WG}u;
  if (index >= arrayLength(&W)) {
    return;
  }
  let apply = S[1] > 0.5;
  let g = G[index] * S[0];
  let m = uniforms.beta1 * M[index] + uniforms.c1 * g;
  let v = uniforms.beta2 * V[index] + uniforms.c2 * g * g;
  let w = W[index] - uniforms.lr * (m / uniforms.bc1) / (sqrt(v / uniforms.bc2) + uniforms.eps);
  W[index] = select(W[index], w, apply);
  M[index] = select(M[index], m, apply);
  V[index] = select(V[index], v, apply);
}`;

interface DeviceState {
  pipeline: GPUComputePipeline;
  layout: GPUBindGroupLayout;
  uniforms: GPUBuffer;
}
const states = new WeakMap<GPUDevice, DeviceState>();

function stateOf(device: GPUDevice): DeviceState {
  let s = states.get(device);
  if (!s) {
    const pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module: device.createShaderModule({ code: SHADER }), entryPoint: 'main' },
    });
    s = {
      pipeline,
      layout: pipeline.getBindGroupLayout(0),
      uniforms: device.createBuffer({ size: 32, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST }),
    };
    states.set(device, s);
  }
  return s;
}

/**
 * The hyperparameters of one Adam step (src/core/optim/fused-adam.ts's kernels take the same): bc1, bc2 = 1 − β1^t,
 * 1 − β2^t; written as float32 uniforms, 1 − β worked out in float64.
 */
export interface AdamStepUniforms {
  lr: number;
  beta1: number;
  beta2: number;
  bc1: number;
  bc2: number;
  eps: number;
}

interface TensorData {
  refCount: number;
  values: unknown;
}

/** Whether `t`'s data is its alone (tfjs's refCount 1), so that writing it in place changes no other tensor. */
export function ownsData(backend: ReplayBackend, t: tf.Tensor): boolean {
  const d = backend.tensorMap.get(t.dataId) as unknown as TensorData | undefined;
  return !!d && d.refCount === 1;
}

/**
 * Adam on every (w, m, v, g) in place, with the step's controls [gscale, apply] (a float32 tensor [2] on the
 * device). The caller has checked `ownsData` for w, m and v; g and the controls are read only.
 */
export function adamInPlace(
  backend: ReplayBackend,
  items: { w: tf.Tensor; m: tf.Tensor; v: tf.Tensor; g: tf.Tensor }[],
  controls: tf.Tensor,
  u: AdamStepUniforms,
): void {
  if (items.length === 0) return;
  const device = backend.device;
  const s = stateOf(device);
  const bufs = items.map(({ w, m, v, g }) => [w, m, v, g].map((t) => tensorBuffer(backend, t)));
  const sBuf = tensorBuffer(backend, controls);
  flushTfjs(backend); // the gradients and the controls are computed by tfjs's pending commands
  const data = new Float32Array([u.lr, u.beta1, u.beta2, u.bc1, u.bc2, u.eps, 1 - u.beta1, 1 - u.beta2]);
  backend.queue.writeBuffer(s.uniforms, 0, data.buffer, 0, data.byteLength);
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(s.pipeline);
  items.forEach(({ w }, i) => {
    const [wb, mb, vb, gb] = bufs[i];
    const n = w.size;
    if (n === 0) return;
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: s.layout,
        entries: [
          { binding: 0, resource: { buffer: wb, size: n * 4 } },
          { binding: 1, resource: { buffer: mb, size: n * 4 } },
          { binding: 2, resource: { buffer: vb, size: n * 4 } },
          { binding: 3, resource: { buffer: gb, size: n * 4 } },
          { binding: 4, resource: { buffer: sBuf, size: 8 } },
          { binding: 5, resource: { buffer: s.uniforms } },
        ],
      }),
    );
    const groups = Math.ceil(n / WG);
    const x = Math.min(groups, MAX_GROUPS);
    pass.dispatchWorkgroups(x, Math.ceil(groups / x), 1);
  });
  pass.end();
  backend.queue.submit([encoder.finish()]);
  // A value tfjs read back before keeps its host copy: drop it, so the next read sees the update.
  for (const { w, m, v } of items)
    for (const t of [w, m, v]) {
      const d = backend.tensorMap.get(t.dataId) as unknown as TensorData | undefined;
      if (d) d.values = null;
    }
}
