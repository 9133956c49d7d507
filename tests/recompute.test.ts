/**
 * Activation recomputation (src/core/model/recompute.ts): the same loss and gradients as plain autodiff (input,
 * trained variables; frozen variables get none), a lower peak of live tensor bytes, and no tensor left behind.
 */
import { describe, it, expect, beforeAll, vi } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { recomputed, recordingGradients } from '../src/core/model/recompute';
import { Rng } from '../src/core/base/rng';

const D = 24;
const H = 96;
const LAYERS = 4;
const N = 256;

function randn(rng: Rng, shape: number[], scale: number): tf.Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return tf.tensor(
    Array.from({ length: n }, () => (rng.next() * 2 - 1) * scale),
    shape,
  );
}

/** A variable from random values (the initial tensor freed: a variable keeps its own handle on the data). */
function randVar(rng: Rng, shape: number[], scale: number, trainable: boolean, name: string): tf.Variable {
  const t = randn(rng, shape, scale);
  const v = tf.variable(t, trainable, name);
  t.dispose();
  return v;
}

/** A stack of residual MLP blocks with a masked mean loss; layer 1's weights are frozen. */
function makeNet(seed: number) {
  const rng = new Rng(seed);
  const layers = Array.from({ length: LAYERS }, (_, i) => ({
    w1: randVar(rng, [D, H], 0.3, i !== 1, `rc_w1_${seed}_${i}`),
    w2: randVar(rng, [H, D], 0.3, i !== 1, `rc_w2_${seed}_${i}`),
  }));
  const x = randn(rng, [N, D], 1);
  const mask = tf.tensor2d(
    Array.from({ length: N }, (_, i) => (i % 5 === 4 ? 0 : 1)),
    [N, 1],
  );
  const block = (i: number) => (h: tf.Tensor, m: tf.Tensor) =>
    tf.add(h, tf.mul(tf.matMul(tf.tanh(tf.matMul(h, layers[i].w1)), layers[i].w2), m));
  const loss = (recompute: boolean) => {
    let h: tf.Tensor = x;
    for (let i = 0; i < LAYERS; i++) {
      const vars = [layers[i].w1, layers[i].w2];
      h = recompute ? recomputed(block(i), h, [mask], vars) : block(i)(h, mask);
    }
    return tf.mean(tf.square(h)) as tf.Scalar;
  };
  const trained = layers.flatMap((l) => [l.w1, l.w2]).filter((v) => v.trainable);
  const dispose = () => tf.dispose([x, mask, ...layers.flatMap((l) => [l.w1, l.w2])]);
  return { loss, trained, dispose };
}

async function gradsOf(recompute: boolean) {
  const net = makeNet(3);
  // What each gradient computation differentiates with respect to: variableGrads' own, then (recomputed) each
  // block's backward, its input and its trained variables.
  const engine = tf.engine();
  const spy = vi.spyOn(engine, 'gradients');
  const { value, grads } = tf.variableGrads(() => net.loss(recompute), net.trained);
  const wrt = spy.mock.calls.map((c) => (c[1] as unknown[]).length);
  spy.mockRestore();
  const out = {
    loss: (await value.data())[0],
    grads: await Promise.all(net.trained.map(async (v) => Array.from(await grads[v.name].data()))),
    wrt,
  };
  value.dispose();
  tf.dispose(grads);
  net.dispose();
  return out;
}

describe('activation recomputation', () => {
  beforeAll(useCpu);

  it('gives the loss and every trained gradient of plain autodiff (within 1e-6 relative)', async () => {
    const plain = await gradsOf(false);
    const rec = await gradsOf(true);
    expect(rec.loss).toBe(plain.loss);
    // Plain: one computation over the 6 trained variables. Recomputed: each block's backward too, with respect to
    // its input and its trained weights, last block first; the frozen layer 1's weights get no gradient.
    expect(plain.wrt).toEqual([6]);
    expect(rec.wrt).toEqual([6, 3, 3, 1, 3]);
    let worst = 0;
    plain.grads.forEach((g, k) =>
      g.forEach((a, i) => {
        worst = Math.max(worst, Math.abs(rec.grads[k][i] - a) / Math.max(Math.abs(a), 1e-6));
      }),
    );
    expect(worst).toBeLessThan(1e-6);
    expect(plain.grads.flat().some((g) => g !== 0)).toBe(true);
  });

  it('the gradient with respect to the input also matches (tf.grads through several recomputed blocks)', () => {
    const net = makeNet(5);
    const rng = new Rng(9);
    const w = randVar(rng, [D, H], 0.3, true, 'rc_input_w');
    const f = (recompute: boolean) => (x: tf.Tensor) => {
      let h = x;
      for (let i = 0; i < 3; i++) {
        const blk = (a: tf.Tensor) => tf.add(a, tf.matMul(tf.sin(tf.matMul(a, w)), tf.transpose(w)));
        h = recompute ? recomputed(blk, h, [], [w]) : blk(h);
      }
      return tf.sum(tf.square(h));
    };
    const x0 = randn(rng, [8, D], 1);
    const [a, b] = tf.tidy(() => [tf.grad(f(false))(x0), tf.grad(f(true))(x0)]);
    const da = a.arraySync() as number[][];
    const db = b.arraySync() as number[][];
    da.forEach((row, i) =>
      row.forEach((v, j) => expect(Math.abs(db[i][j] - v) / Math.max(Math.abs(v), 1e-6)).toBeLessThan(1e-6)),
    );
    tf.dispose([a, b, x0, w]);
    net.dispose();
  });

  it('holds less at its peak than plain autodiff', async () => {
    const peak = async (recompute: boolean) => {
      const net = makeNet(7);
      const info = await tf.profile(() => {
        const { value, grads } = tf.variableGrads(() => net.loss(recompute), net.trained);
        value.dispose();
        tf.dispose(grads);
      });
      net.dispose();
      return info.peakBytes;
    };
    const plain = await peak(false);
    const rec = await peak(true);
    // Plain keeps every block's N×H activations (and their copies) at once; recomputation one block's.
    expect(rec).toBeLessThan(0.6 * plain);
  });

  it('is the plain function outside a gradient computation, and leaves no tensor behind', async () => {
    expect(recordingGradients()).toBe(false);
    await gradsOf(true); // warm-up
    const before = tf.memory().numTensors;
    await gradsOf(true);
    expect(tf.memory().numTensors).toBe(before);
    const net = makeNet(11);
    const a = tf.tidy(() => net.loss(true));
    const b = tf.tidy(() => net.loss(false));
    expect((await a.data())[0]).toBe((await b.data())[0]);
    tf.dispose([a, b]);
    net.dispose();
  });
});
