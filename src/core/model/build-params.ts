/**
 * Building a model's tf.Variables from its weights' values, shared by GPT2 and Llama (fromArrays, fromReader): each
 * spec's values checked against its shape, turned into the pieces the model holds (a vocabulary matrix may come in
 * row chunks; the f16 base's matrices as packed int32 words), each piece a variable. Built a weight at a time
 * (`buildParamsFromReader`), each weight's variables go to the device before the next weight is read
 * (settleOnDevice), so a load holds one weight's values on the host besides the model (docs/models.md, "Reading a
 * weights file"). On an error every variable made so far is disposed.
 */
import * as tf from '@tensorflow/tfjs-core';
import { UserError } from '../../common/errors';
import { settleOnDevice } from '../kernels/webgpu-replay';
import type { ParamSpec } from './specs';

/** A weight as the model holds it: its pieces, each [name, shape, values] (int32 values: packed f16 words). */
export type WeightPieces = [string, number[], Float32Array | Int32Array][];

/** A spec's values, checked: present and of its shape's size (else a UserError saying which and what). */
export function checkedValues<D extends { length: number }>(spec: ParamSpec, data: D | undefined): D {
  if (!data) throw new UserError(`model weights: tensor "${spec.name}" of shape [${spec.shape}] is missing.`);
  const size = spec.shape.reduce((a, b) => a * b, 1);
  if (data.length !== size) {
    throw new UserError(
      `model weights: tensor "${spec.name}" has ${data.length} values, expected shape [${spec.shape}] (${size}).`,
    );
  }
  return data;
}

/** A weight's pieces as variables named `${id}/${piece}` (those made are disposed if one fails). */
export function pieceVariables(
  pieces: WeightPieces,
  id: string,
  trainable: boolean,
): [string, tf.Variable][] {
  const out: [string, tf.Variable][] = [];
  try {
    for (const [name, shape, part] of pieces) {
      const init = tf.tensor(part, shape, part instanceof Int32Array ? 'int32' : 'float32');
      out.push([name, tf.variable(init, trainable, `${id}/${name}`)]);
      init.dispose(); // the variable holds its own reference to the data
    }
  } catch (e) {
    for (const [, v] of out) v.dispose();
    throw e;
  }
  return out;
}

/** Every spec's variables, `pieces` giving each spec's pieces; all disposed on an error. */
export function buildParams(
  specs: ParamSpec[],
  pieces: (spec: ParamSpec) => WeightPieces,
  id: string,
  trainable: boolean,
): Map<string, tf.Variable> {
  const params = new Map<string, tf.Variable>();
  try {
    for (const spec of specs)
      for (const [name, v] of pieceVariables(pieces(spec), id, trainable)) params.set(name, v);
  } catch (e) {
    for (const v of params.values()) v.dispose();
    throw e;
  }
  return params;
}

/**
 * buildParams a weight at a time: `pieces` reads each spec's values in turn; its variables are settled on the device
 * before the next spec is read.
 */
export async function buildParamsFromReader(
  specs: ParamSpec[],
  pieces: (spec: ParamSpec) => Promise<WeightPieces>,
  id: string,
  trainable: boolean,
): Promise<Map<string, tf.Variable>> {
  const params = new Map<string, tf.Variable>();
  try {
    for (const spec of specs) {
      const made = pieceVariables(await pieces(spec), id, trainable);
      for (const [name, v] of made) params.set(name, v);
      await settleOnDevice(made.map(([, v]) => v));
    }
  } catch (e) {
    for (const v of params.values()) v.dispose();
    throw e;
  }
  return params;
}
