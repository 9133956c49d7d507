/**
 * The register-blocked matmul on WebGPU in Node (src/core/kernels/webgpu-matmul.ts): C = op(A)·op(B) against a
 * float64 loop and against tf.matMul on the same backend, for odd and aligned shapes (the scalar and the vec4
 * loads), both transposes, a batch and a broadcast batch, every tile; its gradient against tf.matMul's; one
 * dispatch per product; no tensor left behind and no WebGPU validation error. The tile choice (matMulFastPlan)
 * needs no GPU. Skipped, with a test named after what to install, without a WebGPU adapter.
 */
import { describe, it, expect, beforeAll, afterEach } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import {
  MATMUL_FAST,
  MATMUL_FAST_MIN_GROUPS_DEFAULT,
  MATMUL_FAST_VARIANTS,
  type MatMulFastLimits,
  type MatMulFastTile,
  matMulFastVariantBytes,
  matMulFastVariantFits,
  setWebGpuMatMulFastVariant,
  matMulFast,
  matMulFastPlan,
  matMulRouted,
  setWebGpuMatMulFast,
  setWebGpuMatMulFastTiles,
  webGpuMatMulFastApplies,
} from '../src/core/kernels/webgpu-matmul';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import { maxDiff } from './helpers/diff';
import { benchMatmulFast, benchMatmulShapePair } from '../src/bench/webgpu-gpu';

const adapter = await webGpuAdapter();

function seeded(n: number, seed: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => 2 * Math.abs(Math.sin(seed * 12.9898 + i * 78.233)) - 1);
}

interface Case {
  M: number;
  K: number;
  N: number;
  tA?: boolean;
  tB?: boolean;
  /** Batches of A and B (rank 3 when either is set; 1 broadcasts). */
  ba?: number;
  bb?: number;
}

const label = (c: Case): string =>
  `${c.ba || c.bb ? `[${c.ba ?? 1}|${c.bb ?? 1}] ` : ''}${c.M}×${c.K}·${c.K}×${c.N}${c.tA ? ' Aᵀ' : ''}${c.tB ? ' Bᵀ' : ''}`;

/** Stored shapes of A and B (transposed operands stored the other way round). */
function shapes(c: Case): { sa: number[]; sb: number[] } {
  const sa = c.tA ? [c.K, c.M] : [c.M, c.K];
  const sb = c.tB ? [c.N, c.K] : [c.K, c.N];
  return c.ba || c.bb ? { sa: [c.ba ?? 1, ...sa], sb: [c.bb ?? 1, ...sb] } : { sa, sb };
}

/** C = op(A)·op(B) in float64 from the stored arrays, [batch, M, N] flattened. */
function reference(c: Case, a: Float32Array, b: Float32Array): Float64Array {
  const { M, K, N } = c;
  const ba = c.ba ?? 1;
  const bb = c.bb ?? 1;
  const B = Math.max(ba, bb);
  const out = new Float64Array(B * M * N);
  for (let z = 0; z < B; z++) {
    const ao = ba === 1 ? 0 : z * M * K;
    const bo = bb === 1 ? 0 : z * K * N;
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = 0; k < K; k++) {
          const av = c.tA ? a[ao + k * M + i] : a[ao + i * K + k];
          const bv = c.tB ? b[bo + j * K + k] : b[bo + k * N + j];
          s += av * bv;
        }
        out[z * M * N + i * N + j] = s;
      }
  }
  return out;
}

/** max |x − ref| / max |ref|. */
const rel = (x: ArrayLike<number>, ref: ArrayLike<number>): number => {
  const d = maxDiff(x, ref);
  return d.abs / d.scale;
};

/** matMulFast and tf.matMul on one case: values, dispatches and kernels of matMulFast, tensors flat. */
async function runCase(c: Case, seed = 3) {
  const { sa, sb } = shapes(c);
  const ah = seeded(
    sa.reduce((p, q) => p * q, 1),
    seed,
  );
  const bh = seeded(
    sb.reduce((p, q) => p * q, 1),
    seed + 1,
  );
  const before = tf.memory().numTensors;
  const a = tf.tensor(ah, sa);
  const b = tf.tensor(bh, sb);
  expect(webGpuMatMulFastApplies(a, b, !!c.tA, !!c.tB)).toBe(true);
  const prof = await tf.profile(() => matMulFast(a, b, c.tA, c.tB));
  const fastT = prof.result as tf.Tensor;
  const plainT = tf.matMul(a, b, c.tA, c.tB);
  expect(fastT.shape).toEqual(plainT.shape);
  const fast = await fastT.data();
  const plain = await plainT.data();
  tf.dispose([fastT, plainT]);
  // Counted after a first run (the shader compiled).
  const counted = await countDispatches(() => tf.tidy(() => void matMulFast(a, b, c.tA, c.tB)));
  tf.dispose([a, b]);
  expect(tf.memory().numTensors).toBe(before);
  expect(await webGpuErrors()).toEqual([]);
  return {
    fast,
    plain,
    ref: reference(c, ah, bh),
    dispatches: counted.dispatches,
    kernels: prof.kernelNames,
  };
}

describe('matMulFastPlan: the tile per shape (no GPU needed)', () => {
  afterEach(() => setWebGpuMatMulFastTiles({ tile: null, minGroups: MATMUL_FAST_MIN_GROUPS_DEFAULT }));

  it('128 × 128 where that gives enough workgroups (2048², the LM head); smaller tiles for fewer rows', () => {
    expect(matMulFastPlan(2048, 2048, 2048)).toMatchObject({ tm: 128, tn: 128, bk: 8, groups: [16, 16, 1] });
    // GPT-2's shapes at 512 rows: c_attn 72 tiles of 128² → 64 × 128 (the smaller side of C halved): 144.
    expect(matMulFastPlan(512, 2304, 768)).toMatchObject({ tm: 64, tn: 128, groups: [18, 8, 1] });
    expect(matMulFastPlan(512, 3072, 768)).toMatchObject({ tm: 64, tn: 128, groups: [24, 8, 1] });
    // c_proj [512, 3072]·[3072, 768]: 24 tiles of 128², 48 of 64 × 128, 96 of 64² (still < 128: the smallest).
    expect(matMulFastPlan(512, 768, 3072)).toMatchObject({ tm: 64, tn: 64, bk: 16, groups: [12, 8, 1] });
    expect(matMulFastPlan(512, 50257, 768)).toMatchObject({ tm: 128, tn: 128, groups: [393, 4, 1] });
    // More rows than columns: the columns' side is halved first.
    expect(matMulFastPlan(2304, 512, 768)).toMatchObject({ tm: 128, tn: 64, groups: [8, 18, 1] });
    expect(matMulFastPlan(1, 1, 1)).toMatchObject({ tm: 64, tn: 64, groups: [1, 1, 1] });
    // A batch counts its workgroups too.
    expect(matMulFastPlan(512, 768, 768, { batch: 8 })).toMatchObject({
      tm: 128,
      tn: 128,
      groups: [6, 4, 8],
    });
  });

  it('vec4 loads where the contiguous dimension is a multiple of 4, scalar loads elsewhere', () => {
    // A [M, K] reads along K; B [K, N] along N; Bᵀ [N, K] along K; Aᵀ [K, M] along M; C stores along N.
    expect(matMulFastPlan(8, 50257, 768)).toMatchObject({ vecA: true, vecB: false, vecC: false });
    expect(matMulFastPlan(8, 50257, 768, { transB: true })).toMatchObject({ vecA: true, vecB: true });
    expect(matMulFastPlan(3, 24, 130)).toMatchObject({ vecA: false, vecB: true, vecC: true });
    expect(matMulFastPlan(3, 24, 130, { transA: true })).toMatchObject({ vecA: false });
    expect(matMulFastPlan(4, 24, 130, { transA: true })).toMatchObject({ vecA: true });
  });

  it('a forced tile and a different workgroup bound; bad settings are refused', () => {
    setWebGpuMatMulFastTiles({ tile: { tm: 128, tn: 64, bk: 8 } });
    expect(matMulFastPlan(1, 1, 1)).toMatchObject({ tm: 128, tn: 64, groups: [1, 1, 1] });
    setWebGpuMatMulFastTiles({ tile: null, minGroups: 1 });
    expect(matMulFastPlan(512, 768, 3072)).toMatchObject({ tm: 128, tn: 128 });
    expect(() =>
      setWebGpuMatMulFastTiles({ tile: { tm: 32, tn: 64, bk: 8 } as unknown as MatMulFastTile }),
    ).toThrow(/tile must be one of/);
    expect(() => setWebGpuMatMulFastTiles({ minGroups: 0 })).toThrow(/minGroups/);
  });

  it('a forced variant: its tile, unchecked only where the shape is a multiple of the tile with vec4 loads', () => {
    try {
      expect(setWebGpuMatMulFastVariant('v128x128k16r8x8db')).toBe(null);
      expect(matMulFastPlan(2048, 2048, 2048)).toMatchObject({
        variant: 'v128x128k16r8x8db',
        tm: 128,
        tn: 128,
        bk: 16,
        groups: [16, 16, 1],
        checked: false,
      });
      expect(matMulFastPlan(2048, 2048, 2056)).toMatchObject({ checked: true });
      expect(matMulFastPlan(16, 50257, 768, { transB: true })).toMatchObject({ checked: true, vecC: false });
      expect(matMulFastPlan(512, 2304, 768)).toMatchObject({ checked: false, groups: [18, 4, 1] });
      expect(() => setWebGpuMatMulFastVariant('nope')).toThrow(/unknown variant/);
    } finally {
      expect(setWebGpuMatMulFastVariant(null)).toBe('v128x128k16r8x8db');
    }
    expect(matMulFastPlan(2048, 2048, 2048)).toMatchObject({ variant: null, tm: 128, bk: 8 });
    // Workgroup memory: 2 buffers · 8 · (128 + 128) · 4 B = 16 KB; BK 16 needs 32 KB.
    const small: MatMulFastLimits = {
      maxComputeWorkgroupStorageSize: 16384,
      maxComputeInvocationsPerWorkgroup: 256,
    };
    const v = (name: string) => MATMUL_FAST_VARIANTS.find((x) => x.name === name)!;
    expect(matMulFastVariantBytes(v('v128x128k8r8x8db'))).toBe(16384);
    expect(matMulFastVariantFits(v('v128x128k8r8x8db'), small)).toBe(true);
    expect(matMulFastVariantFits(v('v128x128k16r8x8db'), small)).toBe(false);
    expect(new Set(MATMUL_FAST_VARIANTS.map((x) => x.name)).size).toBe(MATMUL_FAST_VARIANTS.length);
  });
});

describe('matMulFast on Node WebGPU (src/core/kernels/webgpu-matmul.ts)', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);
  afterEach(() => {
    setWebGpuMatMulFastTiles({ tile: null, minGroups: MATMUL_FAST_MIN_GROUPS_DEFAULT });
    setWebGpuMatMulFast(false);
  });

  // Odd sizes cross every tile edge and K slice and take the scalar loads; multiples of 4 take the vec4 ones.
  const cases: Case[] = [
    { M: 1, K: 1, N: 1 },
    { M: 3, K: 130, N: 24 },
    { M: 70, K: 48, N: 40 },
    { M: 129, K: 257, N: 65 },
    { M: 129, K: 67, N: 65, tA: true, tB: true },
    { M: 132, K: 68, N: 136 },
    { M: 64, K: 96, N: 200, tB: true },
    { M: 7, K: 33, N: 9, ba: 3, bb: 3 },
    { M: 20, K: 12, N: 36, ba: 2, bb: 1, tB: true },
    { M: 5, K: 17, N: 6, ba: 1, bb: 4, tA: true },
  ];
  for (const c of cases) {
    it(`${label(c)} (${JSON.stringify(matMulFastPlan(c.M, c.N, c.K, { batch: Math.max(c.ba ?? 1, c.bb ?? 1), transA: c.tA, transB: c.tB }))}): = float64 loop and tf.matMul, 1 dispatch`, async () => {
      const r = await runCase(c);
      expect(r.dispatches).toBe(1);
      expect(r.kernels).toContain(MATMUL_FAST);
      expect(r.kernels).not.toContain('BatchMatMul');
      for (const v of r.fast) expect(Number.isFinite(v)).toBe(true);
      expect(rel(r.fast, r.ref), 'vs float64').toBeLessThanOrEqual(1e-5);
      expect(rel(r.fast, r.plain), 'vs tf.matMul').toBeLessThanOrEqual(1e-5);
    });
  }

  // Small shapes choose 64 × 64; the other tiles are what big products run, so each is forced here.
  const tiles: MatMulFastTile[] = [
    { tm: 128, tn: 128, bk: 8 },
    { tm: 64, tn: 128, bk: 8 },
    { tm: 128, tn: 64, bk: 8 },
  ];
  const tileCases: Case[] = [
    { M: 129, K: 37, N: 65, tA: true },
    { M: 132, K: 68, N: 136, tB: true },
  ];
  for (const tile of tiles) {
    it(`forced tile ${tile.tm} × ${tile.tn} (K slice ${tile.bk}): odd and aligned shapes, both transposes = float64 loop`, async () => {
      setWebGpuMatMulFastTiles({ tile });
      for (const c of tileCases) {
        expect(matMulFastPlan(c.M, c.N, c.K)).toMatchObject(tile);
        const r = await runCase(c, 11);
        expect(r.kernels).toContain(MATMUL_FAST);
        expect(rel(r.fast, r.ref), `${label(c)} vs float64`).toBeLessThanOrEqual(1e-5);
        expect(rel(r.fast, r.plain), `${label(c)} vs tf.matMul`).toBeLessThanOrEqual(1e-5);
      }
    });
  }

  // The generated variants that won a shape on the H200 sweep of 2026-11-27 (scripts/matmul-sweep.ts: 2048³,
  // GPT-2's c_fc / mlp.c_proj and its LM head; docs/gpu.md), each on three shapes: the tile exactly (the unchecked
  // shader, vec4 loads, two K slices), odd sizes with Aᵀ and a broadcast batch (checked, scalar loads of both and
  // scalar stores), and multiples of 4 off the tile with Bᵀ and the other broadcast (checked, vec4 loads and
  // stores). The other variants were checked there against tf.matMul only (96 runs, relative difference 0), to
  // keep SwiftShader's minutes for these. Variants over this adapter's workgroup memory are skipped.
  // v128x128k8r8x16db (8 × 16 a thread, added 2026-11-30 for the next sweep) is checked here too; its K-slice-16
  // siblings took over 5 minutes to compile on SwiftShader and are checked on a GPU by the sweep only.
  const swept = new Set(['v128x128k16r8x8sbar', 'v64x64k16r4x4db', 'v64x128k16r4x8db', 'v128x128k8r8x16db']);
  for (const v of MATMUL_FAST_VARIANTS.filter((x) => swept.has(x.name))) {
    const vCases: Case[] = [
      { M: v.tm, K: 2 * v.bk, N: v.tn },
      { M: v.tm + 3, K: 2 * v.bk + 5, N: v.tn + 6, tA: true, ba: 2, bb: 1 },
      { M: v.tm + 4, K: v.bk + 4, N: v.tn + 4, tB: true, ba: 1, bb: 2 },
    ];
    it(`variant ${v.name}: = float64 loop and tf.matMul (tile, odd with Aᵀ, off-tile with Bᵀ; batches)`, async (ctx) => {
      const limits = (tf.backend() as unknown as { device: { limits: MatMulFastLimits } }).device.limits;
      if (!matMulFastVariantFits(v, limits)) return ctx.skip();
      // SwiftShader's (Subzero) worker died compiling the K-slice-32 shaders here (a checked case ran > 4 min, then
      // the process was gone): those are checked on a GPU by scripts/matmul-sweep.ts against tf.matMul only.
      if (adapter!.software && v.bk >= 32) return ctx.skip();
      setWebGpuMatMulFastVariant(v.name);
      try {
        for (const [i, c] of vCases.entries()) {
          const plan = matMulFastPlan(c.M, c.N, c.K, {
            batch: Math.max(c.ba ?? 1, c.bb ?? 1),
            transA: c.tA,
            transB: c.tB,
          });
          expect(plan).toMatchObject({ variant: v.name, checked: i > 0 });
          const r = await runCase(c, 13 + i);
          expect(r.dispatches).toBe(1);
          expect(r.kernels).toContain(MATMUL_FAST);
          for (const x of r.fast) expect(Number.isFinite(x)).toBe(true);
          expect(rel(r.fast, r.ref), `${label(c)} vs float64`).toBeLessThanOrEqual(1e-5);
          expect(rel(r.fast, r.plain), `${label(c)} vs tf.matMul`).toBeLessThanOrEqual(1e-5);
        }
      } finally {
        setWebGpuMatMulFastVariant(null);
      }
    });
  }

  it("a vocabulary-like product: GPT-2's LM head x·wteᵀ, 8 × 768 · (1029 × 768)ᵀ (the vocabulary cut to 1029 for SwiftShader)", async () => {
    for (const c of [{ M: 8, K: 768, N: 1029, tB: true }]) {
      const r = await runCase(c, 5);
      expect(r.dispatches).toBe(1);
      expect(rel(r.fast, r.ref), `${label(c)} vs float64`).toBeLessThanOrEqual(1e-5);
      expect(rel(r.fast, r.plain), `${label(c)} vs tf.matMul`).toBeLessThanOrEqual(1e-5);
    }
  });

  it("gradients equal tf.matMul's (plain; Aᵀ with a broadcast batch, against tf.matMul of it tiled), no tensor left", async () => {
    // The backward runs the other transposes (plain: dA = dC·Bᵀ, dB = Aᵀ·dC; Aᵀ: dA = B·dCᵀ, dB = A·dC): two
    // matmuls, plus tfjs's sum over the batch for a broadcast operand (not counted here).
    const grads: [Case, number | null][] = [
      [{ M: 9, K: 20, N: 13 }, 2],
      [{ M: 6, K: 8, N: 12, ba: 3, bb: 1, tA: true }, null],
    ];
    for (const [c, bwdDispatches] of grads) {
      const { sa, sb } = shapes(c);
      const before = tf.memory().numTensors;
      const a = tf.tensor(
        seeded(
          sa.reduce((p, q) => p * q, 1),
          21,
        ),
        sa,
      );
      const b = tf.tensor(
        seeded(
          sb.reduce((p, q) => p * q, 1),
          22,
        ),
        sb,
      );
      const outShape = tf.tidy(() => tf.matMul(a, b, c.tA, c.tB).shape);
      const dy = tf.tensor(
        seeded(
          outShape.reduce((p, q) => p * q, 1),
          23,
        ),
        outShape,
      );
      const fast = tf.grads((x: tf.Tensor, y: tf.Tensor) => matMulFast(x, y, c.tA, c.tB));
      // tf.matMul's own gradient of a broadcast batch has the wrong shape (docs/tfjs.md trap 1): the reference
      // tiles the broadcast operand to the batch first (Tile's gradient sums it back).
      const B = Math.max(c.ba ?? 1, c.bb ?? 1);
      const full = (t: tf.Tensor) => (t.rank === 3 && t.shape[0] === 1 && B > 1 ? tf.tile(t, [B, 1, 1]) : t);
      const plain = tf.grads((x: tf.Tensor, y: tf.Tensor) => tf.matMul(full(x), full(y), c.tA, c.tB));
      const gf = fast([a, b], dy);
      const gp = plain([a, b], dy);
      expect(gf[0].shape).toEqual(a.shape);
      expect(gf[1].shape).toEqual(b.shape);
      for (let i = 0; i < 2; i++) {
        expect(rel(await gf[i].data(), await gp[i].data()), `${label(c)} d${'ab'[i]}`).toBeLessThanOrEqual(
          1e-5,
        );
      }
      tf.dispose([...gf, ...gp]);
      if (bwdDispatches !== null) {
        const fwdBwd = await countDispatches(() => tf.tidy(() => void fast([a, b], dy)));
        expect(fwdBwd.dispatches, label(c)).toBe(1 + bwdDispatches);
      }
      tf.dispose([a, b, dy]);
      expect(tf.memory().numTensors).toBe(before);
    }
    expect(await webGpuErrors()).toEqual([]);
  });

  it("bench --gpu's timing of ours beside tfjs's runs (a code check at tiny sizes: SwiftShader's times mean nothing)", async () => {
    const before = tf.memory().numTensors;
    const sq = await benchMatmulFast(64, { iters: 1, minSeconds: 0 });
    expect(sq).toMatchObject({ n: 64, iters: 1 });
    expect(sq.gflops).toBeGreaterThan(0);
    const pair = await benchMatmulShapePair({ name: 'lm_head', k: 48, n: 131, transB: true }, 8, {
      iters: 1,
      minSeconds: 0,
    });
    expect(pair).toMatchObject({ name: 'lm_head', m: 8, k: 48, n: 131, transB: true, tile: '64×64' });
    expect(pair.tfjsGflops).toBeGreaterThan(0);
    expect(pair.fastGflops).toBeGreaterThan(0);
    expect(pair.maxRelDiff).toBeLessThanOrEqual(1e-5);
    expect(tf.memory().numTensors).toBe(before);
    expect(await webGpuErrors()).toEqual([]);
  });

  it('falls back to tf.matMul where it does not apply; matMulRouted routes only when switched on', async () => {
    const a = tf.tensor2d(seeded(12, 1), [3, 4]);
    const b = tf.tensor2d(seeded(20, 2), [4, 5]);
    const ai = tf.tensor2d([1, 2, 3, 4], [2, 2], 'int32');
    expect(webGpuMatMulFastApplies(ai, ai)).toBe(false);
    expect(webGpuMatMulFastApplies(a, b, true)).toBe(false); // inner sizes disagree
    expect(webGpuMatMulFastApplies(tf.zeros([0, 4]), b)).toBe(false);
    const kernelsOf = async (f: () => tf.Tensor) => {
      const p = await tf.profile(() => tf.tidy(f));
      (p.result as tf.Tensor).dispose();
      return p.kernelNames;
    };
    expect(await kernelsOf(() => matMulFast(ai, ai))).not.toContain(MATMUL_FAST);
    expect(await kernelsOf(() => matMulRouted(a, b))).not.toContain(MATMUL_FAST);
    setWebGpuMatMulFast(true);
    const routedKernels = await kernelsOf(() => matMulRouted(a, b));
    expect(routedKernels).toContain(MATMUL_FAST);
    expect(routedKernels).not.toContain('BatchMatMul');
    expect(setWebGpuMatMulFast(false)).toBe(true);
    tf.dispose([a, b, ai]);
    expect(await webGpuErrors()).toEqual([]);
  });
});
