/**
 * The shared-prefix tests' batch and their two forwards (tests/shared-prefix.test.ts on the CPU,
 * tests/webgpu-shared-prefix.test.ts on WebGPU): the trunk over the full layout and over the compact rows.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { CausalLM } from '../../src/core/model/lm';
import { forwardShareOf, responseRows, type PrefixShare } from '../../src/core/model/shared-prefix';
import { seeded } from './f16-base';

export interface SharedPrefixBatch {
  ids: Int32Array;
  attn: Int32Array;
  /** The response mask [n, R] (1 real, 0 padding on the right). */
  mask: number[][];
  n: number;
  T: number;
  Tq: number;
  R: number;
}

/**
 * 7 rows, query bucket 5, 4 response tokens: queries A (3 ids, left-padded) in rows 0, 2, 5, B (5 ids) in rows 1
 * and 4, C (4 ids) in rows 3 and 6; rows 2 and 4 end early (right padding).
 */
export function sharedPrefixBatch(V: number): SharedPrefixBatch {
  const n = 7;
  const Tq = 5;
  const R = 4;
  const T = Tq + R;
  const q = { A: [11, 12, 13], B: [21, 22, 23, 24, 25], C: [31, 32, 33, 34] };
  const queries = [q.A, q.B, q.A, q.C, q.B, q.A, q.C];
  const mask = queries.map((_, b) => (b === 2 ? [1, 1, 0, 0] : b === 4 ? [1, 0, 0, 0] : [1, 1, 1, 1]));
  const ids = new Int32Array(n * T).fill(V - 1);
  const attn = new Int32Array(n * T);
  queries.forEach((qs, b) => {
    const off = b * T + Tq - qs.length;
    ids.set(qs, off);
    attn.fill(1, off, off + qs.length);
    for (let r = 0; r < R; r++) {
      ids[b * T + Tq + r] = mask[b][r] ? (40 + 7 * b + 3 * r) % (V - 3) : V - 1;
      attn[b * T + Tq + r] = mask[b][r];
    }
  });
  return { ids, attn, mask, n, T, Tq, R };
}

export interface TrunkRun {
  /** Hidden states at the response-predicting positions, [n·R, C]. */
  hidden: Float32Array;
  /** Σ hidden ⊙ W over the real response positions. */
  value: number;
  /** The loss's gradient of each variable, in `vars`' order. */
  grads: Float32Array[];
}

/** The response positions' hidden states and a loss's gradients, over the full layout, then over the share's rows. */
export async function trunkBothWays(
  model: CausalLM,
  vars: tf.Variable[],
  b: SharedPrefixBatch,
  share: PrefixShare,
  recompute: boolean,
): Promise<[TrunkRun, TrunkRun]> {
  const C = model.config.n_embd;
  const out: TrunkRun[] = [];
  for (const shared of [false, true]) {
    const hiddenOf = () => {
      const ids = tf.tensor2d(b.ids, [b.n, b.T], 'int32');
      const attn = tf.tensor2d(b.attn, [b.n, b.T], 'int32');
      if (shared) {
        const f = forwardShareOf(share);
        const compact = model.trunk(ids, attn, undefined, { recompute, share: f.trunk });
        return responseRows(compact, f.response, f.responseGroups, f.responseRoute);
      }
      const h = tf.reshape(model.trunk(ids, attn, undefined, { recompute }), [b.n, b.T, C]);
      return tf.reshape(tf.slice(h, [0, b.Tq - 1, 0], [b.n, b.R, C]), [b.n * b.R, C]) as tf.Tensor2D;
    };
    const w = tf.tidy(() =>
      tf.mul(
        tf.tensor2d(seeded(b.n * b.R * C, 5), [b.n * b.R, C]),
        tf.tensor2d(b.mask.flat(), [b.n * b.R, 1]),
      ),
    );
    const h = tf.tidy(hiddenOf);
    const g = tf.variableGrads(() => tf.sum(tf.mul(hiddenOf(), w)) as tf.Scalar, vars);
    const grads: Float32Array[] = [];
    for (const v of vars) grads.push((await g.grads[v.name].data()) as Float32Array);
    out.push({ hidden: (await h.data()) as Float32Array, value: (await g.value.data())[0], grads });
    tf.dispose([w, h, g.value, ...Object.values(g.grads)]);
  }
  return [out[0], out[1]];
}

/**
 * The policy's gradients as its Adam receives them each update, clipped (sorted by variable name): what a trainer
 * with and without the share must agree on. Hooks both ways the update applies them (update.ts: on the device with
 * its controls, or scaled on the host); the hook keeps copies, which `flush` (after each step) reads back and frees.
 */
export function capturePolicyGrads(t: { policyOpt: unknown }): {
  updates: Float32Array[][];
  flush: () => Promise<void>;
} {
  const updates: Float32Array[][] = [];
  const pending: { grads: tf.Tensor[]; controls: tf.Tensor | null; scale: number }[] = [];
  const opt = t.policyOpt as {
    applyScaled: (g: unknown, scale: number) => void;
    applyControlled: (g: unknown, controls: tf.Tensor1D) => void;
  };
  const copies = (g: unknown) => {
    const list = Array.isArray(g)
      ? (g as { name: string; tensor: tf.Tensor }[]).map(({ name, tensor }) => [name, tensor] as const)
      : Object.entries(g as tf.NamedTensorMap);
    return [...list].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, x]) => tf.keep(tf.clone(x)));
  };
  const scaled = opt.applyScaled.bind(opt);
  const controlled = opt.applyControlled.bind(opt);
  const hooked = (g: unknown, controls: tf.Tensor1D) => {
    pending.push({ grads: copies(g), controls: tf.keep(tf.clone(controls)), scale: 1 });
    controlled(g, controls);
  };
  opt.applyScaled = (g, scale) => {
    pending.push({ grads: copies(g), controls: null, scale });
    // (applyScaled calls applyControlled where the fused kernel is: count that update once.)
    opt.applyControlled = controlled;
    try {
      scaled(g, scale);
    } finally {
      opt.applyControlled = hooked;
    }
  };
  opt.applyControlled = hooked;
  const flush = async () => {
    for (const p of pending.splice(0)) {
      let scale = p.scale;
      let apply = 1;
      if (p.controls) [scale, apply] = (await p.controls.data()) as Float32Array;
      const vals: Float32Array[] = [];
      for (const x of p.grads) vals.push(((await x.data()) as Float32Array).map((v) => v * scale));
      tf.dispose([...p.grads, ...(p.controls ? [p.controls] : [])]);
      if (apply !== 0) updates.push(vals);
    }
  };
  return { updates, flush };
}

/**
 * Two runs' captured gradients (capturePolicyGrads) agree: the same number of updates, each gradient within `tol`
 * relative to its largest entry, or exactly zero where the reference's is (LoRA's A before B has moved), and each
 * update with some gradient that is not zero.
 */
export function expectSameGrads(
  on: Float32Array[][],
  off: Float32Array[][],
  tol: number,
  check: (ok: boolean, what: string) => void,
): void {
  check(on.length === off.length && off.length > 0, `${on.length} updates against ${off.length}`);
  off.forEach((step, s) => {
    check(
      step.some((g) => g.some((x) => x !== 0)),
      `update ${s}: every gradient zero`,
    );
    step.forEach((g, i) => {
      const h = on[s][i];
      const scale = g.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      const diff = g.reduce((m, x, k) => Math.max(m, Math.abs(x - h[k])), 0);
      check(
        scale === 0 ? diff === 0 : diff / scale < tol,
        `gradient ${i} at update ${s}: ${diff} against a scale of ${scale}`,
      );
    });
  });
}
