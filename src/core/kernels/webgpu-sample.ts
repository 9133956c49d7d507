/**
 * Token sampling on WebGPU as one fused WGSL kernel (issue #22): temperature, top-k and top-p over logits [B, V],
 * one workgroup per row, with only the chosen ids and their log-probs written (B × 3 floats) — no [B, V]
 * probabilities, sort, cumsum or readback. Called through src/core/model/sample-op.ts's `sampleTokens`, which runs
 * the same semantics in JavaScript on CPU and WASM.
 *
 * The randomness is ONE uniform u ∈ [0, 1) per row, from the host's seeded Rng (an input tensor U [B]), and the
 * token is chosen by the inverse CDF over the kept set, walked in vocabulary order. Why not Gumbel-max: Gumbel-max
 * needs V independent uniforms per row — either a [B, V] upload per step (the traffic this kernel exists to avoid)
 * or a hash inside the kernel whose statistical quality the sampler would then rest on, plus log(−log u) per
 * element — while the inverse CDF needs one, is exact given u (no hash to trust), consumes the Rng exactly as
 * generate()'s pickTokens does (one `next()` per row per step, so per-row streams, checkpoints and resumes keep
 * their meaning), and its result is reproducible: same logits, same u → same token on a given backend.
 *
 * Per row (z = logits / T; T = 0 is greedy):
 * 1. (max, argmax) of z in one strided pass and a tree reduction; ties go to the LOWEST index, as tf.argMax. T = 0
 *    stops here: the token is the argmax of the raw logits, exactly.
 * 2. S_all = Σ exp(z − m) (for the unfiltered log-prob, the distribution PPO trains against).
 * 3. Top-k (K > 0 and K < V) by partial selection: floats are mapped to order-preserving u32 keys (sign flip),
 *    and 32 rounds of binary search on the key, each a parallel count #{j : key_j ≥ mid} (a strided pass, then
 *    every lane sums the WG partials in the same order: 2 barriers a round, not a tree's log2 WG + 2), find the largest key with count ≥ K: exactly the K-th largest z. Kept: z ≥ it (ties at the
 *    threshold all kept, as filterLogits' `where(less(z, kth))`).
 * 4. Top-p (P < 1), over the top-k-kept set (Hugging Face's order): with e_j = exp(z_j − m) and S_k their sum over
 *    the kept set, another 32 rounds of binary search find the smallest key t with Σ_{kept, key > t} e < P·S_k.
 *    That t is the smallest kept value whose strictly-greater mass is below P — filterLogits' threshold (the
 *    sorted entry at `#{i : mass before i < P}`), found without sorting. Kept: key ≥ t.
 * 5. Inverse CDF in vocabulary order: lane l sums the kept e over its contiguous chunk [l·C, (l+1)·C); lane 0
 *    scans the WG chunk sums (exclusive prefixes, total S), sets target = u·S and picks the first lane whose
 *    inclusive prefix exceeds it; that lane walks its chunk and takes the first kept j whose running sum
 *    exceeds the target (strictly, so a zero-mass entry is never chosen), else the chunk's last kept entry with
 *    e > 0 (u·S rounding up to S). So the token is always in the kept set.
 * Output [B, 3] float32: (token id — exact in float32 for V ≤ 2²⁴, log p_kept(token), log p_all(token)) with
 * log p_kept = (z − m) − log S_kept (the renormalised distribution it was drawn from; 0 when greedy) and
 * log p_all = (z − m) − log S_all (softmax(logits / T) unfiltered; T = 1 when greedy, generate()'s convention).
 * A tfjs WebGPU program has one output, hence the packing; sample-op.ts slices it.
 *
 * Passes over the row: 2 + (32 if top-k) + (33 if top-p) + 2, all from the row's logits (cache-resident); the
 * binary searches run a fixed 32 rounds so every barrier is in uniform control flow. A NaN row gives token =
 * argmax's fallback 0 and NaN log-probs; the token is always in [0, V).
 * Rows: workgroups along x (folded back from tfjs's 2-D reshape past 65535, as webgpu-logprob.ts). Flat indices
 * are i32: B·V ≤ 2³¹ − 1. Workgroup 256 lanes for V ≥ 2048, 64 from 256, 32 below.
 */
import * as tf from '@tensorflow/tfjs-core';
import { type WebGpuBackendLike, registerWebGpuKernels } from './webgpu-common';

export const SAMPLE_KERNEL = 'PerfSampleTokens';
/** The same choice with generate()'s masking of stopped rows, in one dispatch (chooseTokensWebGpu). */
export const CHOOSE_KERNEL = 'PerfChooseTokens';

/** Flat indices are i32 in the shader; token ids travel as float32 (exact below 2²⁴). */
export const MAX_ELEMENTS = 2 ** 31 - 1;
export const MAX_VOCAB = 2 ** 24;

export const sampleWorkgroupFor = (V: number): number => (V >= 2048 ? 256 : V >= 256 ? 64 : 32);

class SampleProgram {
  readonly variableNames: string[];
  readonly outputShape: number[];
  readonly shaderKey: string;
  readonly dispatchLayout = { x: [0] };
  readonly dispatch: [number, number, number];
  readonly workgroupSize: [number, number, number];
  readonly uniforms: string;

  /**
   * `choose`: generate()'s whole per-token choice (PerfChooseTokens): the rows that stopped (F [B], nonzero =
   * stopped) give the pad id and log-prob 0, and a row stops once its token is one of the `stops` ids (Stop
   * [stops] int32; none: no binding). Output int32 [3·B]: the tokens, the log-probs' float32 bits, the rows
   * stopped after this token (0 / 1).
   */
  constructor(
    rows: number,
    cols: number,
    private readonly choose: { stops: number } | null = null,
  ) {
    this.outputShape = choose ? [3 * rows] : [rows, 3];
    this.workgroupSize = [sampleWorkgroupFor(cols), 1, 1];
    this.variableNames = ['X', 'U', ...(choose ? ['F'] : []), ...(choose?.stops ? ['Stop'] : [])];
    this.uniforms = `rows : i32, cols : i32, temperature : f32, topK : i32, topP : f32,${choose ? ' padId : i32,' : ''}`;
    this.shaderKey = `perfSample_${this.workgroupSize[0]}${choose ? `_choose${choose.stops}` : ''}`;
    this.dispatch = [rows, 1, 1];
  }

  /** The row's results: the packed floats, or (choose) the masked token, log-prob bits and stop flag. */
  private store(): string {
    if (!this.choose)
      return `
          result[row * 3] = f32(tok);
          result[row * 3 + 1] = lpKept;
          result[row * 3 + 2] = lpAll;`;
    const n = this.choose.stops;
    return `
          let done = F[row] != 0;
          var stopped = done;
          ${n ? `for (var i = 0; i < ${n}; i = i + 1) { stopped = stopped || Stop[i] == tok; }` : ''}
          result[row] = select(tok, uniforms.padId, done);
          result[uniforms.rows + row] = select(bitcast<i32>(lpAll), 0, done);
          result[2 * uniforms.rows + row] = select(0, 1, stopped);`;
  }

  getUserCode(): string {
    const WG = this.workgroupSize[0];
    return `
      var<workgroup> redF : array<f32, ${WG}>;
      var<workgroup> redG : array<f32, ${WG}>;
      var<workgroup> redU : array<u32, ${WG}>;
      var<workgroup> pickLane : u32;
      var<workgroup> pickTarget : f32;
      var<workgroup> pickTotal : f32;
      var<workgroup> pickTok : i32;

      // Order-preserving map f32 → u32 (−0 first folded into +0, so equal floats have equal keys).
      fn keyOf(z : f32) -> u32 {
        let b = bitcast<u32>(select(z, 0.0, z == 0.0));
        return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
      }

      // Σ over the workgroup (call from uniform control flow: barriers).
      // Every lane sums the WG partials itself, in the same order (so the same value in every lane): two barriers
      // a reduction instead of a tree's log2(WG) + 2 (they dominate the 64 search rounds).
      fn sumAll(v : f32) -> f32 {
        redF[localId.x] = v;
        workgroupBarrier();
        var r = 0.0;
        for (var l = 0; l < ${WG}; l = l + 1) { r = r + redF[l]; }
        workgroupBarrier();
        return r;
      }

      fn countAll(v : u32) -> u32 {
        redU[localId.x] = v;
        workgroupBarrier();
        var r = 0u;
        for (var l = 0; l < ${WG}; l = l + 1) { r = r + redU[l]; }
        workgroupBarrier();
        return r;
      }

      fn main(index : i32) {
        let V = uniforms.cols;
        let lane = i32(localId.x);
        let wgRow = i32((workgroupId.z * numWorkgroups.y + workgroupId.y) * numWorkgroups.x + workgroupId.x);
        let live = wgRow < uniforms.rows;
        let row = min(wgRow, uniforms.rows - 1);
        let off = row * V;
        let greedy = uniforms.temperature == 0.0;

        // 1. (max, argmax), lowest index on ties.
        var bv = -uniforms.INFINITY;
        var bi = 0x7fffffffu;
        for (var j = lane; j < V; j = j + ${WG}) {
          let z = select(X[off + j] / uniforms.temperature, X[off + j], greedy);
          if (z > bv || (z == bv && u32(j) < bi)) { bv = z; bi = u32(j); }
        }
        redF[lane] = bv;
        redU[lane] = bi;
        workgroupBarrier();
        for (var k = ${WG / 2}; k > 0; k = k / 2) {
          if (lane < k) {
            let ov = redF[lane + k];
            let oi = redU[lane + k];
            if (ov > redF[lane] || (ov == redF[lane] && oi < redU[lane])) {
              redF[lane] = ov;
              redU[lane] = oi;
            }
          }
          workgroupBarrier();
        }
        let m = redF[0];
        let arg = select(0, i32(redU[0]), redU[0] < u32(V));
        workgroupBarrier();

        // 2. S_all.
        var s = 0.0;
        for (var j = lane; j < V; j = j + ${WG}) {
          s = s + exp(select(X[off + j] / uniforms.temperature, X[off + j], greedy) - m);
        }
        let sAll = sumAll(s);

        var tok = arg;
        var lpKept = 0.0;
        if (!greedy) {
          // 3. Top-k: the largest key with #{key ≥ it} ≥ K.
          var kKey = 0u;
          if (uniforms.topK > 0 && uniforms.topK < V) {
            var lo = 0u;
            var hi = 0xffffffffu;
            for (var round = 0; round < 32; round = round + 1) {
              let d = hi - lo;
              let mid = lo + (d >> 1u) + (d & 1u);
              var c = 0u;
              for (var j = lane; j < V; j = j + ${WG}) {
                c = c + select(0u, 1u, keyOf(X[off + j] / uniforms.temperature) >= mid);
              }
              let ok = countAll(c) >= u32(uniforms.topK);
              let open = lo < hi;
              lo = select(lo, mid, ok && open);
              hi = select(hi, mid - 1u, !ok && open);
            }
            kKey = lo;
          }
          // 4. Top-p over the top-k set: the smallest key t with Σ_{kept, key > t} e < P·S_k.
          var thr = kKey;
          if (uniforms.topP < 1.0) {
            var sk = 0.0;
            for (var j = lane; j < V; j = j + ${WG}) {
              let z = X[off + j] / uniforms.temperature;
              sk = sk + select(0.0, exp(z - m), keyOf(z) >= kKey);
            }
            let bound = uniforms.topP * sumAll(sk);
            var lo = kKey;
            var hi = 0xffffffffu;
            for (var round = 0; round < 32; round = round + 1) {
              let mid = lo + ((hi - lo) >> 1u);
              var a = 0.0;
              for (var j = lane; j < V; j = j + ${WG}) {
                let z = X[off + j] / uniforms.temperature;
                let kz = keyOf(z);
                a = a + select(0.0, exp(z - m), kz >= kKey && kz > mid);
              }
              let ok = sumAll(a) < bound;
              let open = lo < hi;
              hi = select(hi, mid, ok && open);
              lo = select(lo, mid + 1u, !ok && open);
            }
            thr = max(kKey, lo);
          }
          // 5. Inverse CDF in vocabulary order over contiguous chunks.
          let C = (V + ${WG} - 1) / ${WG};
          let j0 = lane * C;
          let j1 = min(V, j0 + C);
          var cs = 0.0;
          for (var j = j0; j < j1; j = j + 1) {
            let z = X[off + j] / uniforms.temperature;
            cs = cs + select(0.0, exp(z - m), keyOf(z) >= thr);
          }
          redG[lane] = cs;
          workgroupBarrier();
          if (lane == 0) {
            var acc = 0.0;
            var lastPos = 0u;
            for (var l = 0; l < ${WG}; l = l + 1) {
              let c = redG[l];
              redF[l] = acc;
              acc = acc + c;
              if (c > 0.0) { lastPos = u32(l); }
            }
            let goal = U[row] * acc;
            var pick = lastPos;
            var prefix = 0.0;
            for (var l = 0; l < ${WG}; l = l + 1) {
              prefix = prefix + redG[l];
              if (prefix > goal && redG[l] > 0.0) { pick = u32(l); break; }
            }
            pickLane = pick;
            pickTarget = goal;
            pickTotal = acc;
            pickTok = arg;
          }
          workgroupBarrier();
          if (u32(lane) == pickLane) {
            var run = redF[lane];
            var found = -1;
            var lastKept = -1;
            for (var j = j0; j < j1; j = j + 1) {
              let z = X[off + j] / uniforms.temperature;
              if (keyOf(z) >= thr) {
                let e = exp(z - m);
                run = run + e;
                if (e > 0.0) { lastKept = j; }
                if (run > pickTarget) { found = j; break; }
              }
            }
            if (found < 0) { found = lastKept; }
            if (found >= 0) { pickTok = found; }
          }
          workgroupBarrier();
          tok = pickTok;
          lpKept = (X[off + tok] / uniforms.temperature - m) - log(pickTotal);
        }
        if (live && lane == 0) {
          let zt = select(X[off + tok] / uniforms.temperature, X[off + tok], greedy);
          let lpAll = (zt - m) - log(sAll);${this.store()}
        }
      }`;
  }
}

interface KernelArgs {
  inputs: tf.NamedTensorInfoMap;
  backend: unknown;
  attrs?: tf.NamedAttrMap;
}

/** The program over logits [B, V]: the packed floats, or (`choose`) generate's masked choice in int32. */
function runSample({ inputs, backend, attrs }: KernelArgs, choose: boolean): tf.TensorInfo {
  const { logits, uniforms, finished, stops } = inputs as Record<
    'logits' | 'uniforms' | 'finished' | 'stops',
    tf.TensorInfo | undefined
  >;
  const [B, V] = logits!.shape;
  const a = attrs as { temperature: number; topK: number; topP: number; padId?: number };
  const n = choose && stops ? stops.shape[0] : 0;
  return (backend as WebGpuBackendLike).runWebGPUProgram(
    new SampleProgram(B, V, choose ? { stops: n } : null),
    choose ? [logits!, uniforms!, finished!, ...(n ? [stops!] : [])] : [logits!, uniforms!],
    choose ? 'int32' : 'float32',
    [
      { type: 'int32', data: [B] },
      { type: 'int32', data: [V] },
      { type: 'float32', data: [a.temperature] },
      { type: 'int32', data: [a.topK] },
      { type: 'float32', data: [a.topP] },
      ...(choose ? [{ type: 'int32' as const, data: [a.padId ?? 0] }] : []),
    ],
  );
}

const KERNELS = {
  [SAMPLE_KERNEL]: (args: KernelArgs) => runSample(args, false),
  [CHOOSE_KERNEL]: (args: KernelArgs) => runSample(args, true),
};

/** Register the sampling kernels for webgpu (idempotent; the backend need not be loaded yet). */
export function registerWebGpuSample(): void {
  registerWebGpuKernels(KERNELS);
}

/**
 * Run the kernel: logits [B, V] float32, uniforms [B] float32 in [0, 1) (ignored when temperature is 0) →
 * packed [B, 3] float32 (token, log p_kept, log p_all). Call only on the webgpu backend.
 */
export function sampleWebGpuPacked(
  logits: tf.Tensor2D,
  uniforms: tf.Tensor1D,
  temperature: number,
  topK: number,
  topP: number,
): tf.Tensor2D {
  registerWebGpuSample();
  return tf
    .engine()
    .runKernel(SAMPLE_KERNEL, { logits, uniforms }, { temperature, topK, topP }) as tf.Tensor2D;
}

/**
 * generate()'s per-token choice in one dispatch: the kernel's token (temperature 0: the argmax) and log p_all for
 * each row of logits [B, V], where `finished` [B] int32 is nonzero the pad id and 0 instead, and the rows stopped
 * after it: finished, or the token is one of `stops` ([n] int32; null: no stop ids). `uniforms` [B] is read only
 * when sampling (pass any [B] float32 tensor when greedy). Returns int32 [3·B]: tokens, the log-probs' float32
 * bits, the stopped rows (0 / 1), so that a recorded decode carries each to where it goes by buffer copies
 * (model/decode-replay.ts). Call only on the webgpu backend.
 */
export function chooseTokensWebGpu(
  logits: tf.Tensor2D,
  uniforms: tf.Tensor1D,
  finished: tf.Tensor1D,
  stops: tf.Tensor1D | null,
  o: { temperature: number; topK: number; topP: number; padId: number },
): tf.Tensor1D {
  registerWebGpuSample();
  const inputs: tf.NamedTensorMap = { logits, uniforms, finished, ...(stops ? { stops } : {}) };
  return tf.engine().runKernel(CHOOSE_KERNEL, inputs, { ...o }) as tf.Tensor1D;
}
