/**
 * The GEMM of gemm.wat (relaxed SIMD and plain SIMD) against tfjs-wasm's matMul (XNNPACK, through the project's
 * BatchMatMul wrapper) on one thread, all on the tfjs heap, same process:
 *   npx tsx scripts/bench-wasm-gemm.ts [--reps 5] [--seconds 0.3] [--json]
 *   npx tsx scripts/bench-wasm-gemm.ts --batched [--reps 5] [--seconds 0.3]
 * Each shape is timed `reps` times (rounds of products until `seconds` pass) and the best round is kept: on a
 * shared machine the best is the one least disturbed. GFLOP/s = 2·M·K·N per product ÷ wall seconds; the CPU-second
 * rate (process.cpuUsage) of the same best round is printed beside it. "ours" packs A and B on every call (what a
 * product with fresh operands costs); "packed once" packs A per call and B (a frozen weight) once ahead — what
 * XNNPACK's cached packing of a live weight tensor gets; "tf.matMul on gemm" is the product through the engine's
 * BatchMatMul with setWasmGemm(true) (A packed per call, B's panels kept unless Bᵀ, the output allocated). First
 * it prints the 128-bit SIMD peak of the core (simdPeak), the ceiling of any WebAssembly GEMM. Run nothing else
 * heavy at the same time; the load average is printed.
 * --batched times attention's batched products instead (BATCHED_SHAPES: q·kᵀ, probs·v and the gradients' transposed
 * forms) through tf.matMul, on gemm.wat per batch element (setGemmBatchedMinRows's default) and on bmm.wat with
 * tfjs's transposes (the route before it), alternating, best round of each.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { loadavg } from 'node:os';
import {
  GEMM_BATCHED_MIN_ROWS,
  registerWasmExtraKernels,
  setGemmBatchedMinRows,
  setWasmGemm,
} from '../src/core/kernels/wasm-extra';
import { heapMemory } from '../src/core/kernels/wasm-simd';
import {
  enableRelaxedSimd,
  gemmFor,
  packedABytes,
  packedBBytes,
  type Gemm,
} from '../src/core/kernels/gemm-wasm-api';

interface Shape {
  label: string;
  M: number;
  K: number;
  N: number;
  ta: boolean;
  tb: boolean;
}
/** The shapes, and GPT-2 124M's c_fc at 512 rows: forward, and the backward's two products. */
export const SHAPES: Shape[] = [
  { label: '1024²', M: 1024, K: 1024, N: 1024, ta: false, tb: false },
  { label: '8×768×3072 (decode c_fc)', M: 8, K: 768, N: 3072, ta: false, tb: false },
  { label: '512×768×3072 (c_fc forward)', M: 512, K: 768, N: 3072, ta: false, tb: false },
  { label: 'Xᵀ·dY 768×512×3072 (dW)', M: 768, K: 512, N: 3072, ta: true, tb: false },
  { label: 'dY·Wᵀ 512×3072×768 (dX)', M: 512, K: 3072, N: 768, ta: false, tb: true },
];

/** Attention's batched products: [batch × heads, rows, cols] operands, as the model multiplies them. */
export const BATCHED_SHAPES: { label: string; a: number[]; b: number[]; ta: boolean; tb: boolean }[] = [
  { label: 'tiny q·kᵀ, dO·vᵀ (8×4 heads, 56 tokens)', a: [32, 56, 40], b: [32, 56, 40], ta: false, tb: true },
  { label: 'tiny probs·v, dS·k', a: [32, 56, 56], b: [32, 56, 40], ta: false, tb: false },
  { label: 'tiny probsᵀ·dO, dSᵀ·q', a: [32, 56, 56], b: [32, 56, 40], ta: true, tb: false },
  { label: 'GPT-2 q·kᵀ (4×12 heads, 37 tokens)', a: [48, 37, 64], b: [48, 37, 64], ta: false, tb: true },
  { label: 'GPT-2 probs·v', a: [48, 37, 37], b: [48, 37, 64], ta: false, tb: false },
];

async function batched(reps: number, seconds: number): Promise<void> {
  registerWasmExtraKernels();
  await tf.setBackend('wasm');
  await tf.ready();
  console.error(
    `load average before: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
  for (const s of BATCHED_SHAPES) {
    const a = tf.randomNormal(s.a, 0, 1, 'float32', 1);
    const b = tf.randomNormal(s.b, 0, 1, 'float32', 2);
    const M = s.ta ? s.a[2] : s.a[1];
    const K = s.ta ? s.a[1] : s.a[2];
    const N = s.tb ? s.b[1] : s.b[2];
    const flops = 2 * s.a[0] * M * K * N;
    const best = { gemm: { gflops: 0, gflopsCpu: 0 }, bmm: { gflops: 0, gflopsCpu: 0 } };
    for (let r = 0; r < reps; r++)
      for (const route of ['gemm', 'bmm'] as const) {
        const was = setGemmBatchedMinRows(route === 'gemm' ? GEMM_BATCHED_MIN_ROWS : Infinity);
        const t = time(() => tf.matMul(a, b, s.ta, s.tb).dispose(), flops, 1, seconds);
        setGemmBatchedMinRows(was);
        if (t.gflops > best[route].gflops) best[route] = t;
      }
    tf.dispose([a, b]);
    console.log(
      `${s.label.padEnd(42)} gemm.wat ${best.gemm.gflops.toFixed(1)} | bmm.wat ${best.bmm.gflops.toFixed(1)} GFLOP/s` +
        ` | ${(best.gemm.gflops / best.bmm.gflops).toFixed(2)}×`,
    );
  }
  console.error(
    `load average after: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
}

const arg = (name: string, d: number): number => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};

interface Backend {
  wasm: { asm?: { memory?: WebAssembly.Memory }; wasmMemory?: WebAssembly.Memory };
  dataIdMap: { get(id: unknown): { memoryOffset: number } };
}

/** Best-of-`reps` rate of `fn` (one product per call): {gflops (wall), gflopsCpu}. */
function time(
  fn: () => void,
  flops: number,
  reps: number,
  seconds: number,
): { gflops: number; gflopsCpu: number } {
  fn();
  fn();
  let best = { gflops: 0, gflopsCpu: 0 };
  for (let r = 0; r < reps; r++) {
    let n = 0;
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    while (n === 0 || performance.now() - t0 < seconds * 1000) {
      fn();
      n++;
    }
    const wall = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(c0);
    const cpu = (c.user + c.system) / 1e6;
    const g = (flops * n) / wall / 1e9;
    if (g > best.gflops) best = { gflops: g, gflopsCpu: (flops * n) / cpu / 1e9 };
  }
  return best;
}

/**
 * The most a 128-bit WebAssembly SIMD loop can reach on this core, one thread: 12 independent accumulator chains
 * (x·y + acc, as f32x4.relaxed_madd and as f32x4.mul then f32x4.add) with no loads, so nothing but the vector
 * pipes bounds it. No GEMM written in WebAssembly can exceed it; issue #35's targets are read against it.
 */
export async function simdPeak(seconds: number): Promise<{ madd: number; mulAdd: number }> {
  const { default: wabtInit } = await import('wabt');
  const wabt = await wabtInit();
  const chains = 12;
  const text = (fused: boolean): string => {
    const locals = Array.from({ length: chains }, (_, i) => `(local $a${i} v128)`).join(' ');
    const step = (i: number) =>
      fused
        ? `(local.set $a${i} (f32x4.relaxed_madd (local.get $x) (local.get $y) (local.get $a${i})))`
        : `(local.set $a${i} (f32x4.add (f32x4.mul (local.get $x) (local.get $y)) (local.get $a${i})))`;
    const body = Array.from({ length: chains }, (_, i) => step(i)).join(' ');
    const sum = Array.from({ length: chains }, (_, i) => `(local.get $a${i})`).reduce(
      (a, b) => `(f32x4.add ${a} ${b})`,
    );
    return `(module (func (export "run") (param $n i32) (result f32) (local $x v128) (local $y v128) ${locals}
      (local.set $x (f32x4.splat (f32.const 1.0000001))) (local.set $y (f32x4.splat (f32.const 0.9999999)))
      (loop $l ${body} (local.set $n (i32.sub (local.get $n) (i32.const 1))) (br_if $l (local.get $n)))
      (f32x4.extract_lane 0 ${sum})))`;
  };
  const rate = async (fused: boolean): Promise<number> => {
    const features = { simd: true, relaxed_simd: true };
    const bytes = wabt.parseWat('peak', text(fused), features).toBinary({}).buffer;
    const instance = await WebAssembly.instantiate(await WebAssembly.compile(new Uint8Array(bytes)));
    const run = instance.exports.run as (n: number) => number;
    const n = 1 << 22;
    run(n);
    let best = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000 * 3) {
      const t = performance.now();
      run(n);
      best = Math.max(best, (n * chains * 8) / ((performance.now() - t) / 1000) / 1e9);
    }
    return best;
  };
  return { madd: await rate(true), mulAdd: await rate(false) };
}

export async function main(): Promise<void> {
  const reps = arg('--reps', 5);
  const seconds = arg('--seconds', 0.3);
  if (process.argv.includes('--batched')) return batched(reps, seconds);
  const relaxedOn = enableRelaxedSimd();
  registerWasmExtraKernels();
  await tf.setBackend('wasm');
  await tf.ready();
  const bk = tf.backend() as unknown as Backend;
  const mem = heapMemory(bk.wasm);
  const builds: [string, Gemm | null][] = [
    ['relaxed', gemmFor(mem, { relaxed: true })],
    ['plain', gemmFor(mem, { relaxed: false })],
  ];
  const load0 = loadavg();
  console.error(
    `relaxed SIMD: ${relaxedOn}; load average before: ${load0.map((x) => x.toFixed(2)).join(' ')}`,
  );
  const peak = relaxedOn ? await simdPeak(seconds) : null;
  if (peak) {
    console.log(
      `128-bit SIMD peak of this core (12 independent chains, one thread): relaxed_madd ${peak.madd.toFixed(1)}, ` +
        `mul + add ${peak.mulAdd.toFixed(1)} GFLOP/s`,
    );
  }
  const rows: Record<string, unknown>[] = [];
  for (const s of SHAPES) {
    const { M, K, N, ta, tb } = s;
    const flops = 2 * M * K * N;
    const a = tf.randomNormal(ta ? [K, M] : [M, K], 0, 1, 'float32', 1);
    const b = tf.randomNormal(tb ? [N, K] : [K, N], 0, 1, 'float32', 2);
    const c = tf.zeros([M, N]);
    const scratch = tf.zeros([packedBBytes(K, N) / 4]);
    const scratchA = tf.zeros([packedABytes(M, K) / 4]);
    const off = (t: tf.Tensor): number => bk.dataIdMap.get(t.dataId).memoryOffset;
    const row: Record<string, unknown> = { shape: s.label, M, K, N, ta, tb };
    setWasmGemm(false);
    row.xnnpack = time(() => tf.matMul(a, b, ta, tb).dispose(), flops, reps, seconds);
    // tf.matMul through the gemm route (setWasmGemm): what the engine gets, B's panels kept from its second use
    setWasmGemm(true);
    row.route = time(() => tf.matMul(a, b, ta, tb).dispose(), flops, reps, seconds);
    setWasmGemm(false);
    for (const [name, g] of builds) {
      if (!g) continue;
      // Offsets read after every allocation (none happen inside the timed calls).
      const [pa, pb, pc, pp, pq] = [off(a), off(b), off(c), off(scratch), off(scratchA)];
      const rsa = ta ? 1 : K;
      const csa = ta ? M : 1;
      const rsb = tb ? 1 : N;
      const csb = tb ? K : 1;
      row[name] = time(
        () => {
          g.packB(pb, rsb, csb, K, N, pp);
          g.packA(pa, rsa, csa, M, K, pq);
          g.gemm(pq, pp, pc, N, M, K, N);
        },
        flops,
        reps,
        seconds,
      );
      g.packB(pb, rsb, csb, K, N, pp);
      row[`${name}PackedOnce`] = time(
        () => {
          g.packA(pa, rsa, csa, M, K, pq);
          g.gemm(pq, pp, pc, N, M, K, N);
        },
        flops,
        reps,
        seconds,
      );
    }
    tf.dispose([a, b, c, scratch, scratchA]);
    rows.push(row);
    const f = (k: string): string => {
      const v = row[k] as { gflops: number; gflopsCpu: number } | undefined;
      return v ? `${v.gflops.toFixed(1)} (${v.gflopsCpu.toFixed(1)}/CPU s)` : '—';
    };
    console.log(
      `${s.label.padEnd(30)} XNNPACK ${f('xnnpack')} | tf.matMul on gemm ${f('route')} | relaxed ${f('relaxed')}, packed once ${f('relaxedPackedOnce')} | plain ${f('plain')}, packed once ${f('plainPackedOnce')}`,
    );
  }
  const load1 = loadavg();
  console.error(`load average after: ${load1.map((x) => x.toFixed(2)).join(' ')}`);
  if (process.argv.includes('--json')) console.log(JSON.stringify({ relaxedOn, peak, load0, load1, rows }));
}

if (process.argv[1]?.endsWith('bench-wasm-gemm.ts')) await main();
