/**
 * Counting what a GPU pays per op on WebGPU: compute dispatches (`GPUComputePassEncoder.dispatchWorkgroups`,
 * one per tfjs kernel that runs a program) and readbacks (`GPUBuffer.mapAsync`, one per tensor read to the
 * host). tfjs encodes a dispatch when the kernel runs, so counting the calls made while a function runs counts
 * that function's kernels. Works wherever the WebGPU classes are globals (a browser, or Node after
 * src/cli/backend-webgpu-node.ts). Used by the fused kernels' checks and the benches (docs/tfjs.md, trap 5).
 */
export interface DispatchCount<T> {
  result: T;
  dispatches: number;
  readbacks: number;
}

type Proto = Record<string, (...a: unknown[]) => unknown>;

function protoOf(name: string): Proto {
  const cls = (globalThis as unknown as Record<string, { prototype: Proto } | undefined>)[name];
  if (!cls?.prototype)
    throw new Error(`${name} is not a global here: WebGPU is not set up (Node: setNodeWebGpuBackend).`);
  return cls.prototype;
}

/** Run `fn` and count the dispatches and readbacks it makes (nested calls count into each level). */
export async function countDispatches<T>(fn: () => T | Promise<T>): Promise<DispatchCount<T>> {
  const pass = protoOf('GPUComputePassEncoder');
  const buffer = protoOf('GPUBuffer');
  const dispatch = pass.dispatchWorkgroups;
  const mapAsync = buffer.mapAsync;
  let dispatches = 0;
  let readbacks = 0;
  pass.dispatchWorkgroups = function (this: unknown, ...a: unknown[]) {
    dispatches++;
    return dispatch.apply(this, a);
  };
  buffer.mapAsync = function (this: unknown, ...a: unknown[]) {
    readbacks++;
    return mapAsync.apply(this, a);
  };
  try {
    const result = await fn();
    return { result, dispatches, readbacks };
  } finally {
    pass.dispatchWorkgroups = dispatch;
    buffer.mapAsync = mapAsync;
  }
}
