/**
 * The lean backward (src/core/optim/lean-gradients.ts): tfjs's own backward walk, with each tape node's output
 * gradients and saved tensors freed once the node is walked. The gradients must be tfjs's to the bit (plain
 * autodiff, recomputed blocks, a Llama with LoRA on the CPU backend and on WebGPU in Node), the peak of live bytes
 * lower, no tensor left behind, a caller's dy and a gradient shared by two entries untouched, and tfjs's errors
 * kept.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  installLeanGradients,
  leanGradientStats,
  setLeanGradients,
  type LeanGradientsMode,
} from '../src/core/optim/lean-gradients';
import { recomputed } from '../src/core/model/recompute';
import { Rng } from '../src/core/base/rng';
import { Llama } from '../src/core/model/llama';
import { LoraAdapters } from '../src/core/model/lora';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { TINY_QWEN2_JSON, batchFor, hostWeights, tokenLogprobs } from './helpers/f16-base';

const adapter = await webGpuAdapter();

/** A stack of residual MLP blocks (layer 1 frozen) with a masked mean loss, optionally recomputed per block. */
function makeNet(seed: number) {
  const rng = new Rng(seed);
  const randn = (shape: number[], s: number) =>
    tf.tensor(
      Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => (rng.next() * 2 - 1) * s),
      shape,
    );
  const layers = Array.from({ length: 4 }, (_, i) => {
    const [a, b] = [randn([24, 96], 0.3), randn([96, 24], 0.3)];
    const w = { w1: tf.variable(a, i !== 1), w2: tf.variable(b, i !== 1) };
    tf.dispose([a, b]);
    return w;
  });
  const x = randn([256, 24], 1);
  const mask = tf.tensor2d(
    Array.from({ length: 256 }, (_, i) => (i % 5 === 4 ? 0 : 1)),
    [256, 1],
  );
  const block = (i: number) => (h: tf.Tensor, m: tf.Tensor) =>
    tf.add(h, tf.mul(tf.matMul(tf.tanh(tf.matMul(h, layers[i].w1)), layers[i].w2), m));
  const loss = (recompute: boolean) => {
    let h: tf.Tensor = x;
    for (let i = 0; i < layers.length; i++) {
      const vars = [layers[i].w1, layers[i].w2];
      h = recompute ? recomputed(block(i), h, [mask], vars) : block(i)(h, mask);
    }
    return tf.mean(tf.square(h)) as tf.Scalar;
  };
  const trained = layers.flatMap((l) => [l.w1, l.w2]).filter((v) => v.trainable);
  return { loss, trained, dispose: () => tf.dispose([x, mask, ...layers.flatMap((l) => [l.w1, l.w2])]) };
}

/** Loss, gradients (host arrays, in `vars` order) and the peak of live bytes of one variableGrads. */
async function run(mode: LeanGradientsMode, f: () => tf.Scalar, vars: tf.Variable[]) {
  const was = setLeanGradients(mode);
  try {
    const calls = leanGradientStats.calls;
    const before = tf.memory().numTensors;
    const bytes0 = tf.memory().numBytes;
    let out: { value: tf.Scalar; grads: tf.NamedTensorMap } | null = null;
    const prof = await tf.profile(() => {
      out = tf.variableGrads(f, vars);
      return [out.value, ...Object.values(out.grads)];
    });
    const { value, grads } = out!;
    const r = {
      loss: (await value.data())[0],
      grads: await Promise.all(vars.map(async (v) => Array.from(await grads[v.name].data()))),
      // Bytes the gradient computation added at its peak (the weights and inputs before it left out).
      peak: prof.peakBytes - bytes0,
      lean: leanGradientStats.calls > calls,
    };
    tf.dispose([value, ...Object.values(grads)]);
    expect(tf.memory().numTensors).toBe(before);
    return r;
  } finally {
    setLeanGradients(was);
  }
}

const tinyLlama = parseLlamaConfig({ ...TINY_QWEN2_JSON, num_hidden_layers: 3 });

/** A LoRA'd tiny Qwen2's Σ wᵢ·logprobᵢ over a fixed batch, and its adapters' variables. */
function llamaLoss() {
  const model = Llama.fromArrays(tinyLlama, hostWeights(tinyLlama, 7, 0.05, false), false, 'lean');
  const adapters = LoraAdapters.create(tinyLlama, { lora: 4 }, 5);
  for (const m of adapters.modules.values()) {
    const v = tf.randomNormal(m.b.shape, 0, 0.02, 'float32', 9);
    m.b.assign(v);
    v.dispose();
  }
  const lm = model.withLora(adapters);
  const b = batchFor(tinyLlama);
  const w = tf.tensor1d(b.mask.map((v, i) => v * Math.sin(i + 1)));
  // One forward first: the model's lazily built tables (rotary, masks) are not the backward's.
  tf.dispose(tokenLogprobs(lm, b));
  return {
    f: () => tf.sum(tf.mul(tokenLogprobs(lm, b), w)) as tf.Scalar,
    vars: adapters.variables(),
    dispose: () => {
      lm.dispose();
      model.dispose();
      w.dispose();
    },
  };
}

describe('the lean backward (CPU backend)', () => {
  beforeAll(async () => {
    await useCpu();
    installLeanGradients();
  });

  for (const recompute of [false, true]) {
    it(`residual MLP${recompute ? ', blocks recomputed' : ''}: tfjs's loss and gradients to the bit, a lower peak`, async () => {
      const net = makeNet(3);
      const plain = await run('off', () => net.loss(recompute), net.trained);
      const lean = await run('all', () => net.loss(recompute), net.trained);
      net.dispose();
      expect([plain.lean, lean.lean]).toEqual([false, true]);
      expect(lean.loss).toBe(plain.loss);
      expect(lean.grads).toEqual(plain.grads);
      console.log(`peak bytes: tfjs ${plain.peak}, lean ${lean.peak} (recompute ${recompute})`);
      // Recomputed blocks keep only their inputs, so the gradients tfjs held to the end were most of the peak.
      expect(lean.peak).toBeLessThan((recompute ? 0.75 : 1) * plain.peak);
    });
  }

  it('a Qwen2 with LoRA: the log-prob gradients to the bit, a lower peak', async () => {
    const m = llamaLoss();
    const plain = await run('off', m.f, m.vars);
    const lean = await run('all', m.f, m.vars);
    m.dispose();
    expect([plain.lean, lean.lean]).toEqual([false, true]);
    expect(lean.loss).toBe(plain.loss);
    expect(lean.grads).toEqual(plain.grads);
    console.log(`Qwen2 peak bytes: tfjs ${plain.peak}, lean ${lean.peak}`);
    expect(lean.peak).toBeLessThan(plain.peak);
  });

  it("keeps a caller's dy and a gradient a gradient function passes on as is; sums a reused input", async () => {
    const was = setLeanGradients('all');
    try {
      const x = tf.tensor1d([1, 2, 3]);
      const dy = tf.tensor1d([0.5, -1, 2]);
      // d/dx of identity(x) · x, where identity's gradient returns its dy object itself.
      const identity = tf.customGrad(((a: tf.Tensor) => ({
        value: tf.clone(a),
        gradFunc: (d: tf.Tensor) => d,
      })) as unknown as Parameters<typeof tf.customGrad>[0]);
      const before = tf.memory().numTensors;
      const [g] = tf.grads((a: tf.Tensor) => tf.mul(identity(a), a))([x], dy);
      // d(x·x)/dx · dy = 2x·dy
      expect(Array.from(await g.data())).toEqual([1, -4, 12]);
      expect(dy.isDisposed).toBe(false);
      expect(Array.from(await dy.data())).toEqual([0.5, -1, 2]);
      g.dispose();
      expect(tf.memory().numTensors).toBe(before);
      tf.dispose([x, dy]);
    } finally {
      setLeanGradients(was);
    }
  });

  it('keeps a saved tensor that a gradient function hands on as the gradient, for the nodes before it', async () => {
    const was = setLeanGradients('all');
    try {
      const x = tf.tensor1d([1, 2, 3]);
      // f(h) = 3h, whose gradient (under sum: dy is ones) is the tensor it saved, 3 everywhere, handed on as is.
      const f = tf.customGrad(((h: tf.Tensor, save: tf.GradSaveFunc) => {
        const three = tf.mul(tf.onesLike(h), 3);
        save([three]);
        return { value: tf.mul(h, 3), gradFunc: (_dy: tf.Tensor, saved: tf.Tensor[]) => saved[0] };
      }) as unknown as Parameters<typeof tf.customGrad>[0]);
      const before = tf.memory().numTensors;
      // d/dx Σ 3x² = 6x: the square's gradient reads the handed-on tensor after f's node was walked.
      const [g] = tf.grads((a: tf.Tensor) => tf.sum(f(tf.square(a))))([x]);
      expect(Array.from(await g.data())).toEqual([6, 12, 18]);
      g.dispose();
      expect(tf.memory().numTensors).toBe(before);
      // … and as the gradient asked for: returned alive (tfjs's own walk frees it with the saved tensors).
      const [g3] = tf.grads((a: tf.Tensor) => tf.sum(f(a)))([x]);
      expect(g3.isDisposed).toBe(false);
      expect(Array.from(await g3.data())).toEqual([3, 3, 3]);
      g3.dispose();
      expect(tf.memory().numTensors).toBe(before);
      x.dispose();
    } finally {
      setLeanGradients(was);
    }
  });

  it("says what tfjs says where there is no gradient, and checks its mode's name", () => {
    const was = setLeanGradients('all');
    try {
      const x = tf.scalar(1);
      expect(() => tf.grads(() => tf.scalar(2))([x])).toThrow(/Cannot compute gradient of y=f\(x\)/);
      x.dispose();
    } finally {
      setLeanGradients(was);
    }
    expect(() => setLeanGradients('some' as LeanGradientsMode)).toThrow(/"webgpu", "all" or "off"/);
  });
});

describe('the lean backward (WebGPU in Node, its default backend)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(async () => {
    await useNodeWebGpu();
    installLeanGradients();
  });
  afterAll(useCpu);

  it('is on by default on webgpu: the Qwen2 LoRA gradients of tfjs to the bit, a lower peak', async () => {
    const m = llamaLoss();
    const plain = await run('off', m.f, m.vars);
    const lean = await run('webgpu', m.f, m.vars);
    m.dispose();
    expect([plain.lean, lean.lean]).toEqual([false, true]);
    expect(lean.loss).toBe(plain.loss);
    expect(lean.grads).toEqual(plain.grads);
    console.log(`WebGPU Qwen2 peak bytes: tfjs ${plain.peak}, lean ${lean.peak}`);
    expect(lean.peak).toBeLessThan(plain.peak);
    expect(await webGpuErrors()).toEqual([]);
  });
});
