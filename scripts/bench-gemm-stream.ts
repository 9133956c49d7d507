/**
 * A decode product on gemm.wat with its weight in cache against the same product streaming its weights from
 * memory, as a decode step does (every weight read once per token): C[8, N] = A[8, K] · B[K, N] with B packed once,
 * timed (1) on one B over and over ("hot") and (2) cycling through NB distinct packed Bs of the same shape, NB·K·N·4
 * bytes far larger than the caches ("streaming"). If the core overlapped reading B with multiplying by it, (2)
 * would take max(arithmetic, bytes ÷ bandwidth); it takes about their sum (docs/performance.md, issue #35's decode
 * target). Optional WebAssembly text files given as arguments are timed beside gemm.wat (variants of its loop order,
 * for experiments); every variant's product is checked equal to gemm.wat's.
 *   npx tsx scripts/bench-gemm-stream.ts [VARIANT.wat ...]   (env K, N, NB: default 768, 3072, 40)
 * Run nothing else heavy at the same time; the load average is printed.
 */
import { readFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { assembleText } from './build-wasm-kernels';
import { enableRelaxedSimd } from '../src/core/kernels/gemm-wasm-api';

interface GemmExports {
  pack_a(a: number, rsa: number, csa: number, M: number, K: number, dst: number): void;
  pack_b(b: number, rsb: number, csb: number, K: number, N: number, dst: number): void;
  gemm(pa: number, pb: number, c: number, ldc: number, M: number, K: number, N: number): void;
}

enableRelaxedSimd();
const M = 8;
const K = Number(process.env.K ?? 768);
const N = Number(process.env.N ?? 3072);
const NB = Number(process.env.NB ?? 40);
const texts: Record<string, string> = { 'gemm.wat': await readFile('src/core/kernels/gemm.wat', 'utf8') };
for (const f of process.argv.slice(2)) texts[f] = await readFile(f, 'utf8');

const panelBytes = 32 * K * Math.ceil(N / 8);
const bBase = 1 << 24;
const mem = new WebAssembly.Memory({ initial: Math.ceil((bBase + NB * panelBytes) / 65536) + 1 });
const gemms: Record<string, GemmExports> = {};
for (const [name, text] of Object.entries(texts)) {
  const bytes = await assembleText(name, text);
  const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes as Uint8Array<ArrayBuffer>), {
    env: { memory: mem },
  });
  gemms[name] = inst.exports as unknown as GemmExports;
}
const f32 = new Float32Array(mem.buffer);
// Below bBase: A, its packed strips, C, a reference C, and B's source (K·N floats, packed NB times above bBase).
const aOff = 0;
const paOff = 4 * M * K;
const cOff = paOff + 16 * K * 2 + 64;
const refOff = cOff + 4 * M * N + 64;
const srcOff = refOff + 4 * M * N + 64;
if (srcOff + 4 * K * N > bBase) throw new Error(`K·N too large for this bench (K ${K}, N ${N})`);
for (let i = 0; i < M * K; i++) f32[i] = Math.sin(i);
for (let i = 0; i < K * N; i++) f32[srcOff / 4 + i] = Math.cos(i * 0.37);
const base = gemms['gemm.wat'];
for (let b = 0; b < NB; b++) base.pack_b(srcOff, N, 1, K, N, bBase + b * panelBytes);
base.pack_a(aOff, K, 1, M, K, paOff);
base.gemm(paOff, bBase, refOff, N, M, K, N);

const flops = 2 * M * K * N;
console.log(
  `C[${M}, ${N}] = A[${M}, ${K}] · B[${K}, ${N}], B packed (${(panelBytes / 1e6).toFixed(1)} MB); ` +
    `streaming through ${NB} of them (${((NB * panelBytes) / 1e6).toFixed(0)} MB); load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
);
for (const [name, g] of Object.entries(gemms)) {
  const best = { hot: Infinity, streaming: Infinity };
  for (let w = 0; w < 300; w++) g.gemm(paOff, bBase + (w % NB) * panelBytes, cOff, N, M, K, N); // warm-up, tier-up
  for (let round = 0; round < 5; round++) {
    for (const mode of ['hot', 'streaming'] as const) {
      const t0 = performance.now();
      for (let rep = 0; rep < 3 * NB; rep++) {
        const b = mode === 'hot' ? 0 : rep % NB;
        g.gemm(paOff, bBase + b * panelBytes, cOff, N, M, K, N);
      }
      best[mode] = Math.min(best[mode], (performance.now() - t0) / (3 * NB));
    }
  }
  g.gemm(paOff, bBase, cOff, N, M, K, N);
  let differ = 0;
  for (let i = 0; i < M * N; i++) if (f32[cOff / 4 + i] !== f32[refOff / 4 + i]) differ++;
  console.log(
    `${name}: hot ${best.hot.toFixed(3)} ms (${(flops / best.hot / 1e6).toFixed(1)} GFLOP/s), ` +
      `streaming ${best.streaming.toFixed(3)} ms (${(panelBytes / best.streaming / 1e6).toFixed(1)} GB/s of B)` +
      (differ ? `; ${differ} elements differ from gemm.wat's` : ''),
  );
}
