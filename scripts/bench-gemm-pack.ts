/**
 * gemm.wat's pack_b against its product, on a plain WebAssembly memory (one thread): B stored as is (K×N) and
 * stored transposed (N×K, a weight kept [out, in] as Llama's and Qwen's projections are, read as Wᵀ), at the shapes
 * of a Qwen2.5-0.5B micro-batch (46 or 184 rows through its 896 × 4864 MLP weights):
 *   npx tsx scripts/bench-gemm-pack.ts
 * Best of 7 rounds each. Run nothing else heavy at the same time. docs/performance.md, "Bᵀ packed four k at a time".
 */
import { enableRelaxedSimd, gemmFor } from '../src/core/kernels/gemm-wasm-api';

enableRelaxedSimd();
const mem = new WebAssembly.Memory({ initial: 2000 });
const g = gemmFor(mem, { relaxed: true })!;
const best = (fn: () => void): number => {
  let ms = Infinity;
  for (let r = 0; r < 7; r++) {
    const t = performance.now();
    fn();
    ms = Math.min(ms, performance.now() - t);
  }
  return ms;
};
const f = new Float32Array(mem.buffer);
for (let i = 0; i < f.length; i++) f[i] = (i % 97) / 97;
for (const [M, K, N] of [
  [46, 896, 4864],
  [46, 4864, 896],
  [46, 896, 896],
  [184, 896, 4864],
]) {
  const pB = 64;
  const pP = pB + 4 * K * N + 64;
  const pA = pP + 4 * K * (N + 8) + 64;
  const pPA = pA + 4 * M * K + 64;
  const pC = pPA + 16 * K * (M + 4) + 64;
  const packT = best(() => g.packB(pB, 1, K, K, N, pP));
  const pack = best(() => g.packB(pB, N, 1, K, N, pP));
  g.packA(pA, K, 1, M, K, pPA);
  const gemm = best(() => g.gemm(pPA, pP, pC, N, M, K, N));
  console.log(
    `${M}×${K}×${N}: pack Bᵀ ${packT.toFixed(2)} ms, pack B ${pack.toFixed(2)} ms, ` +
      `product ${gemm.toFixed(2)} ms (${((2 * M * K * N) / gemm / 1e6).toFixed(1)} GFLOP/s)`,
  );
}
