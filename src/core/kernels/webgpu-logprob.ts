/**
 * Token log-probs and entropy over the vocabulary on WebGPU as fused WGSL kernels, registered as tfjs kernels for
 * the webgpu backend and used by ppo/losses.ts's logprobsFromLogits and entropyFromLogits there (other backends
 * keep the plain ops, bit for bit: logprobsFromLogitsPlain / entropyFromLogitsPlain).
 *
 * Why: every tfjs op is a dispatch on WebGPU (docs/tfjs.md trap 5), and these ops run over [M, V] logits with V up
 * to 50257. The plain log-prob is a division by the temperature, logSumExp (max, subtract, exp, sum, log, add), a
 * flat index (cast, range, multiply, add), a gather and a subtract — each an [M, V] pass where it touches the
 * logits — and its backward about a dozen more, several of them [M, V] temporaries. Here:
 * - `PerfLogprobFwd` (logits [M,V], tokens [M] int32) → logp [M]: one workgroup per row. Each lane walks the row
 *   in strides of the workgroup size (coalesced reads), keeping an online max m and s = Σ exp(z − m) (z =
 *   logits/T; the max is rescaled into s as it grows, one exp per element), the lanes' (m, s) pairs are merged by
 *   a tree reduction in workgroup memory, and lane 0 writes (z[token] − m) − log s. One read of the row.
 * - `PerfLogprobBwd` (logits, tokens, dy [M]) → dlogits [M,V] = dy·(onehot(token) − softmax(z))/T: the same row
 *   reduction, then one pass writing the row, with softmax(z)_v = exp(z_v − m)/s.
 * - `PerfEntropyFwd` (logits [M,V]) → H [M] = log s − Σ exp(z − m)·(z − m)/s (= logsumexp(z) − Σ softmax·z, the
 *   plain formula, but both terms taken relative to the max, so no cancellation between two ~max|z| numbers); the
 *   third running sum t = Σ exp(z − m)·(z − m) is rescaled with the max as t ← e·(t + (m − m')·s), e = exp(m − m').
 * - `PerfEntropyBwd` (logits, dy [M]) → dlogits = −dy·p·(log p + H)/T.
 * So a log-prob is 1 dispatch forward and 1 backward, an entropy (per row, before the masked mean) the same.
 *
 * What the forward saves: the inputs only (logits, tokens), which the backward needs anyway. The backward
 * recomputes (m, s) in its own dispatch rather than the forward saving lse [M]: a tfjs WebGPU program has a
 * single output, so a saved lse would cost a second output — a slice dispatch in every forward, the rollout's
 * no-gradient forwards included — while recomputing costs one more coalesced read of the row inside the backward's
 * one dispatch, and makes the gradient the exact derivative of the forward's own (m, s).
 *
 * Tokens are read from the int32 tensor directly: no cast (for an int32 tensor), range or flat-index ops. A token
 * outside [0, V) gives NaN (its log-prob, and its row's gradient) instead of a silently wrong value; the trainer's
 * non-finite guard then skips the update.
 *
 * Rows: workgroups along x; past 65535 tfjs reshapes the dispatch to 2-D, which the shader folds back into a row
 * index. Flat indices are i32, so M·V ≤ 2³¹ − 1 (else the plain ops). Workgroup size 256 for V ≥ 2048 (GPT-2's
 * vocabulary), 64 below (the bytes vocabulary: 258).
 * Tested against the plain ops on the same backend, the CPU backend and a float64 loop, values and gradients
 * (tests/webgpu-logprob.test.ts); `checkLogprobOnCurrentBackend` (src/core/backend/webgpu-fused.ts) runs the same comparison
 * wherever WebGPU is.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { KernelFn } from './kernel-fn';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';

export const LOGPROB_FWD = 'PerfLogprobFwd';
export const LOGPROB_BWD = 'PerfLogprobBwd';
export const ENTROPY_FWD = 'PerfEntropyFwd';
export const ENTROPY_BWD = 'PerfEntropyBwd';

/** Flat indices are i32 in the shaders. */
export const MAX_ELEMENTS = 2 ** 31 - 1;

/** Lanes per row: 256 where the row is long enough to keep them busy, 64 for small vocabularies. */
export const workgroupFor = (V: number): number => (V >= 2048 ? 256 : 64);

type Kind = 'lpFwd' | 'lpBwd' | 'entFwd' | 'entBwd';

const INPUTS: Record<Kind, string[]> = {
  lpFwd: ['X', 'TOK'],
  lpBwd: ['X', 'TOK', 'DY'],
  entFwd: ['X'],
  entBwd: ['X', 'DY'],
};

/** Below every logit, finite (an infinity would turn the merges' 0·(m − M) into NaN). */
const LOWEST = '-1e38';

/** One workgroup per row of X [rows, cols] (the shape of a tfjs WebGPUProgram; the backend adds bindings). */
class RowSoftmaxProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number];
  readonly uniforms = 'rows : i32, cols : i32, temperature : f32,';
  private readonly kind: Kind;

  constructor(kind: Kind, rows: number, cols: number) {
    this.kind = kind;
    this.variableNames = INPUTS[kind];
    this.outputShape = kind === 'lpBwd' || kind === 'entBwd' ? [rows, cols] : [rows];
    this.workgroupSize = [workgroupFor(cols), 1, 1];
    this.shaderKey = `perfLogprob_${kind}`;
    this.dispatch = [rows, 1, 1];
  }

  getUserCode(): string {
    const WG = this.workgroupSize[0];
    const ent = this.kind === 'entFwd' || this.kind === 'entBwd';
    // The entropy kinds carry the third sum t; the log-prob kinds leave it out (registers and shared memory).
    const stats = `
      var<workgroup> redM : array<f32, ${WG}>;
      var<workgroup> redS : array<f32, ${WG}>;
      ${ent ? `var<workgroup> redT : array<f32, ${WG}>;` : ''}
      // (m, s, t) of the row: m its max, s = Σ exp(z − m), t = Σ exp(z − m)·(z − m) (entropy kinds), z = X/T.
      // Call from uniform control flow only (barriers).
      fn rowStats(off : i32, V : i32) -> vec3<f32> {
        let lane = i32(localId.x);
        var m = ${LOWEST};
        var s = 0.0;
        var t = 0.0;
        for (var j = lane; j < V; j = j + ${WG}) {
          let z = X[off + j] / uniforms.temperature;
          if (z > m) {
            let e = exp(m - z);
            ${ent ? 't = e * (t + (m - z) * s);' : ''}
            s = s * e + 1.0;
            m = z;
          } else {
            let e = exp(z - m);
            s = s + e;
            ${ent ? 't = t + e * (z - m);' : ''}
          }
        }
        redM[lane] = m;
        redS[lane] = s;
        ${ent ? 'redT[lane] = t;' : ''}
        workgroupBarrier();
        for (var k = ${WG / 2}; k > 0; k = k / 2) {
          if (lane < k) {
            let ma = redM[lane];
            let mb = redM[lane + k];
            let mm = max(ma, mb);
            let ea = exp(ma - mm);
            let eb = exp(mb - mm);
            let sa = redS[lane];
            let sb = redS[lane + k];
            ${ent ? 'redT[lane] = ea * (redT[lane] + (ma - mm) * sa) + eb * (redT[lane + k] + (mb - mm) * sb);' : ''}
            redS[lane] = sa * ea + sb * eb;
            redM[lane] = mm;
          }
          workgroupBarrier();
        }
        return vec3<f32>(redM[0], redS[0], ${ent ? 'redT[0]' : '0.0'});
      }`;
    let body: string;
    switch (this.kind) {
      case 'lpFwd':
        body = `
        if (live && localId.x == 0u) {
          let tok = TOK[row];
          if (tok < 0 || tok >= V) {
            result[row] = uniforms.NAN;
          } else {
            result[row] = (X[off + tok] / uniforms.temperature - st.x) - log(st.y);
          }
        }`;
        break;
      case 'entFwd':
        body = `
        if (live && localId.x == 0u) {
          result[row] = log(st.y) - st.z / st.y;
        }`;
        break;
      case 'lpBwd':
        body = `
        let tok = TOK[row];
        let bad = tok < 0 || tok >= V;
        let g = DY[row] / uniforms.temperature;
        let invS = 1.0 / st.y;
        if (live) {
          for (var j = i32(localId.x); j < V; j = j + ${WG}) {
            let p = exp(X[off + j] / uniforms.temperature - st.x) * invS;
            result[off + j] = select(g * (select(0.0, 1.0, j == tok) - p), uniforms.NAN, bad);
          }
        }`;
        break;
      case 'entBwd':
        body = `
        let g = DY[row] / uniforms.temperature;
        let invS = 1.0 / st.y;
        let logS = log(st.y);
        let H = logS - st.z * invS;
        if (live) {
          for (var j = i32(localId.x); j < V; j = j + ${WG}) {
            let zm = X[off + j] / uniforms.temperature - st.x;
            let p = exp(zm) * invS;
            result[off + j] = -g * p * (zm - logS + H);
          }
        }`;
        break;
    }
    return `
      ${stats}
      fn main(index : i32) {
        let V = uniforms.cols;
        // tfjs reshapes a dispatch past 65535 workgroups to 2-D (or 3-D); fold it back. Workgroups past the last
        // row (from that reshape) compute row M − 1 and write nothing: no early return before the barriers.
        let wgRow = i32((workgroupId.z * numWorkgroups.y + workgroupId.y) * numWorkgroups.x + workgroupId.x);
        let live = wgRow < uniforms.rows;
        let row = min(wgRow, uniforms.rows - 1);
        let off = row * V;
        let st = rowStats(off, V);
        ${body}
      }`;
  }
}

function run(kind: Kind, inputs: tf.TensorInfo[], backend: unknown, attrs?: tf.NamedAttrMap): tf.TensorInfo {
  const [M, V] = inputs[0].shape;
  const u = [
    { type: 'int32' as const, data: [M] },
    { type: 'int32' as const, data: [V] },
    { type: 'float32' as const, data: [attrs!.temperature as number] },
  ];
  return (backend as WebGpuBackendLike).runWebGPUProgram(
    new RowSoftmaxProgram(kind, M, V),
    inputs,
    'float32',
    u,
  );
}

type In = Record<'logits' | 'tokens' | 'dy', tf.TensorInfo>;

const KERNELS: Record<string, KernelFn<tf.TensorInfo>> = {
  [LOGPROB_FWD]: ({ inputs, backend, attrs }) => {
    const { logits, tokens } = inputs as In;
    return run('lpFwd', [logits, tokens], backend, attrs);
  },
  [LOGPROB_BWD]: ({ inputs, backend, attrs }) => {
    const { logits, tokens, dy } = inputs as In;
    return run('lpBwd', [logits, tokens, dy], backend, attrs);
  },
  [ENTROPY_FWD]: ({ inputs, backend, attrs }) => {
    const { logits } = inputs as In;
    return run('entFwd', [logits], backend, attrs);
  },
  [ENTROPY_BWD]: ({ inputs, backend, attrs }) => {
    const { logits, dy } = inputs as In;
    return run('entBwd', [logits, dy], backend, attrs);
  },
};

/** Register the four kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuLogprob(): void {
  registerWebGpuKernels(KERNELS);
}

let enabled = true;

/**
 * Switch the fused log-prob AND entropy kernels off (they are on by default): the bench counts dispatches with and
 * without them, the tests and the checks (src/core/backend/webgpu-fused.ts) compare against the plain ops on the same
 * backend. Returns the previous setting, to put back.
 */
export function setWebGpuLogprobFused(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

/**
 * Whether the fused kernels apply to `logits` [..., V] (log-probs take [M, V]; entropy any rank ≥ 2): enabled,
 * the webgpu backend is current, float32, not empty, and M·V fits the shaders' i32 indices.
 */
export function webGpuLogprobApplies(logits: tf.Tensor): boolean {
  return (
    enabled &&
    tf.getBackend() === 'webgpu' &&
    logits.dtype === 'float32' &&
    logits.rank >= 2 &&
    logits.size > 0 &&
    logits.size <= MAX_ELEMENTS
  );
}

/**
 * log softmax(logits / temperature) at `tokens` [M] (int32) per row of logits [M, V], with its gradient (1 dispatch
 * forward, 1 backward). Call only where webGpuLogprobApplies(logits).
 */
export function logprobsWebGpu(logits: tf.Tensor2D, tokens: tf.Tensor1D, temperature: number): tf.Tensor1D {
  if (tokens.dtype !== 'int32')
    throw new Error(`logprobsWebGpu: tokens must be an int32 tensor, got ${tokens.dtype}`);
  registerWebGpuLogprob();
  const attrs = { temperature };
  // Tokens are not an input of the custom gradient (they have none); they are saved for the backward instead.
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const x = args[0] as tf.Tensor;
    const save = args[1] as tf.GradSaveFunc;
    save([x, tokens]);
    return {
      value: tf.engine().runKernel(LOGPROB_FWD, { logits: x, tokens }, attrs) as tf.Tensor,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [xs, ts] = saved;
        return [tf.engine().runKernel(LOGPROB_BWD, { logits: xs, tokens: ts, dy }, attrs) as tf.Tensor];
      },
    };
  }) as (x: tf.Tensor) => tf.Tensor;
  return f(logits) as tf.Tensor1D;
}

/**
 * Entropy of softmax(logits / temperature) per row of logits [M, V] → [M], with its gradient (1 dispatch forward,
 * 1 backward). Call only where webGpuLogprobApplies(logits).
 */
export function entropyRowsWebGpu(logits: tf.Tensor2D, temperature: number): tf.Tensor1D {
  registerWebGpuLogprob();
  const attrs = { temperature };
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const x = args[0] as tf.Tensor;
    const save = args[1] as tf.GradSaveFunc;
    save([x]);
    return {
      value: tf.engine().runKernel(ENTROPY_FWD, { logits: x }, attrs) as tf.Tensor,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => [
        tf.engine().runKernel(ENTROPY_BWD, { logits: saved[0], dy }, attrs) as tf.Tensor,
      ],
    };
  }) as (x: tf.Tensor) => tf.Tensor;
  return f(logits) as tf.Tensor1D;
}
