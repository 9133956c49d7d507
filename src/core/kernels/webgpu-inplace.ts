/**
 * Programs that write tensors that already exist, in place, through tfjs's own program path (so that a recorded
 * step, kernels/webgpu-replay.ts, captures them like any other program): the KV-cache slot writes of the decode
 * steps (kernels/webgpu-decode-attention.ts for GPT-2, kernels/webgpu-gqa-decode.ts for Llama / Qwen).
 *
 * How: tfjs-backend-webgpu's `runWebGPUProgram` takes an optional `output`, an existing tensor that the program's
 * `result` binding is then given (tfjs makes no new one), so a program that writes some of its elements changes
 * that tensor where it writes and leaves the rest as it was. A second tensor can be written by the same dispatch:
 * tfjs declares every input `var<storage, read>`, and `runProgramInPlace` rewrites the declaration of the inputs
 * named in `readWrite` to `read_write` while tfjs builds the shader (its pipeline is compiled once, under that
 * rewrite, and cached by its shader key like any other). Why both in one dispatch: a tfjs program has one output,
 * and the decode's keys and values are two tensors (LayerKV), so the copying path spends two dispatches.
 *
 * The decode attentions go one step further (`runProgramReadWrite`: a new output, the two caches bound read_write):
 * the attention's own dispatch writes the slot's rows, which none of its workgroups reads from memory
 * (setKvWriteInAttention; kernels/webgpu-softmax-wgsl.ts `fresh`).
 *
 * When: only where each written tensor holds its data alone (tfjs's refCount 1: no clone or reshape shares it,
 * as the in-place Adam asks, kernels/webgpu-adam-inplace.ts), and the written tensors are distinct. Their host
 * copies, if tfjs kept any, are dropped after the write, so the next read sees the new values.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LayerKV } from './definitions';
import { ownsData } from './webgpu-adam-inplace';
import { replayBackend } from './webgpu-replay';
import type { WebGpuBackendLike } from './webgpu-common';

let kvOn = true;

/** Turn the decode steps' in-place slot writes on or off (default on); returns the previous setting. */
export function setKvWriteInPlace(on: boolean): boolean {
  const was = kvOn;
  kvOn = on;
  return was;
}

let kvFused = true;

/**
 * Turn the decode attentions' own slot writes on or off (default on): where on and kvWriteInPlaceApplies, the
 * attention's dispatch also writes the new key and value into the cache (1 dispatch a layer for both), else the
 * slot writes run apart (setKvWriteInPlace). Returns the previous setting.
 */
export function setKvWriteInAttention(on: boolean): boolean {
  const was = kvFused;
  kvFused = on;
  return was;
}

/**
 * Whether the decode attention may write the slot's key and value itself (setKvWriteInAttention): for a cache the
 * caller has found kvWriteInPlaceApplies to.
 */
export function kvWriteInAttentionOn(): boolean {
  return kvFused;
}

/** Whether the KV slot writes may go into `kv`'s own tensors: on, and inPlaceApplies to the key and value caches. */
export function kvWriteInPlaceApplies(kv: LayerKV): boolean {
  return kvOn && inPlaceApplies([kv.k, kv.v]);
}

/** The webgpu backend current, and each tensor's data its own and no other's of the list. */
export function inPlaceApplies(tensors: tf.Tensor[]): boolean {
  const backend = replayBackend();
  if (!backend) return false;
  const ids = new Set(tensors.map((t) => t.dataId));
  return ids.size === tensors.length && tensors.every((t) => ownsData(backend, t));
}

interface ProgramLike {
  variableNames: string[];
}

const declarations = new Map<string, RegExp>();
/** tfjs's declaration of input `name` in the shader it builds (webgpu_program.js makeShader), made once a name. */
function declaration(name: string): RegExp {
  let re = declarations.get(name);
  if (!re) declarations.set(name, (re = new RegExp(`var<storage, read> ${name}\\s*:`)));
  return re;
}

/** The error where tfjs's shader does not declare an input as runProgramInPlace expects. */
const undeclared = (names: string[]) =>
  new Error(
    `runProgramInPlace: tfjs's shader did not declare ${names.join(', ')} as expected ` +
      `("var<storage, read> NAME:"); a newer tfjs-backend-webgpu? The in-place write cannot run.`,
  );

/**
 * Run `program` with `output` as its result binding (written in place) and `inputs` as its inputs, those whose
 * program variable is named in `readWrite` bound read_write. Check inPlaceApplies on `output` and those first.
 */
export function runProgramInPlace(
  program: ProgramLike,
  output: tf.Tensor,
  inputs: tf.Tensor[],
  uniforms: { type: 'int32' | 'float32'; data: number[] }[],
  readWrite: string[],
): void {
  runRewritten(program, inputs, uniforms, readWrite, output);
}

/**
 * Run `program` into a new float32 output with `inputs` as its inputs, those whose program variable is named in
 * `readWrite` bound read_write (the program writes some of their elements in place: the decode attentions that
 * also write the new key and value, kernels/webgpu-gqa-decode.ts and webgpu-decode-attention.ts). Check
 * inPlaceApplies on those first. Returns the output.
 */
export function runProgramReadWrite(
  program: ProgramLike,
  inputs: tf.Tensor[],
  uniforms: { type: 'int32' | 'float32'; data: number[] }[],
  readWrite: string[],
): tf.Tensor {
  const info = runRewritten(program, inputs, uniforms, readWrite, null);
  return tf.engine().makeTensorFromTensorInfo(info);
}

function runRewritten(
  program: ProgramLike,
  inputs: tf.Tensor[],
  uniforms: { type: 'int32' | 'float32'; data: number[] }[],
  readWrite: string[],
  output: tf.Tensor | null,
): tf.TensorInfo {
  const backend = replayBackend();
  if (!backend) throw new Error('runProgramInPlace: the webgpu backend is not the current one.');
  const decls = readWrite.map(declaration);
  const device = backend.device;
  const make = device.createShaderModule;
  // tfjs compiles the program's shader here the first time (labelled with the program's class name): rewrite the
  // declarations, or refuse before anything is compiled, cached or encoded.
  (device as unknown as Record<string, unknown>).createShaderModule = function (
    this: GPUDevice,
    desc: GPUShaderModuleDescriptor,
  ) {
    if (desc.label !== program.constructor.name) return make.call(device, desc);
    const missing = readWrite.filter((_, i) => !decls[i].test(desc.code));
    if (missing.length) throw undeclared(missing);
    const code = decls.reduce(
      (src, re, i) => src.replace(re, `var<storage, read_write> ${readWrite[i]}:`),
      desc.code,
    );
    return make.call(device, { ...desc, code });
  };
  let info: tf.TensorInfo;
  try {
    info = (backend as unknown as WebGpuBackendLike).runWebGPUProgram(
      program,
      inputs,
      'float32',
      uniforms,
      output ?? undefined,
    );
  } finally {
    delete (device as unknown as Record<string, unknown>).createShaderModule;
    if (device.createShaderModule !== make)
      (device as unknown as Record<string, unknown>).createShaderModule = make;
  }
  const written = [
    ...(output ? [output] : []),
    ...inputs.filter((_, i) => readWrite.includes(program.variableNames[i])),
  ];
  for (const t of written) {
    const d = backend.tensorMap.get(t.dataId) as unknown as { values: unknown } | undefined;
    if (d) d.values = null;
  }
  return info;
}
