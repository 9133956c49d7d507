/**
 * Training on the gemm.wat route (setWasmGemm(true): relaxed-SIMD FMA, packed operands, kept panels of weights)
 * against the XNNPACK route (setWasmGemm(false)), the same 3 PPO steps through the CLI's own entry (runCli) on the
 * WASM backend, full fine-tuning and LoRA: every per-step metric (times aside) within 1e-5 relative; the final
 * weights (a harder measure: see below) no farther from the XNNPACK run's than the CPU backend's are. The two routes round differently (FMA, another summation blocking), so bit equality is not
 * expected; 1e-5 relative after 3 steps is issue #35's bar. One exception, measured: metrics that are small
 * differences of large terms (kl = Σ logp − logp_ref, nonScoreReward = −klCoef·kl) lose digits to cancellation,
 * and there the CPU backend — the project's exact reference — is itself 1.4–7e-5 relative away from the XNNPACK
 * run (gemm: 1.6–1.8e-5). For a metric where the CPU run is farther than 1e-5 from the XNNPACK run, the bar is that
 * distance: the gemm route must be no farther from XNNPACK than the reference backend is. Also checks that the gemm
 * route really ran (gemmStats) and that the other runs did not touch it.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { cliInProcess } from './helpers/cli';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { gemmStats, setWasmGemm } from '../src/core/kernels/wasm-extra';
import { readSafetensors } from '../src/core/model/safetensors';

let dir: string;
let model: string;

beforeAll(async () => {
  await useCpu(); // the fixture is made on CPU; each run sets WASM itself (--backend wasm)
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-wasm-gemm-'));
  // Big enough that every product takes the microkernel's full tiles and its ragged edges (n_embd 72: 9 panels).
  model = await makeTinyFolder({ n_layer: 2, n_embd: 72, n_head: 4 });
  writeFileSync(path.join(dir, 'reward.mjs'), 'export default (sample) => sample.response.length;\n');
});
afterAll(() => setWasmGemm(false));

const cli = (args: string[]) => cliInProcess(args);

const TIMES = /^time|tokensPerSecond|Seconds|Ms$/;

function metrics(out: string): Record<string, number>[] {
  return readFileSync(path.join(out, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, number>);
}

/** |a − b| ≤ 1e-5 · max(|a|, |b|), with an absolute floor of 1e-9 for values that are 0 on one side. */
function close(a: number, b: number): boolean {
  return Math.abs(a - b) <= 1e-5 * Math.max(Math.abs(a), Math.abs(b)) + 1e-9;
}

async function weights(file: string): Promise<Map<string, Float32Array>> {
  const buf = readFileSync(file);
  const st = readSafetensors(new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength), file);
  return new Map([...st.tensors].map(([name, t]) => [name, t.data]));
}

describe('training on gemm.wat matches the XNNPACK path', () => {
  for (const lora of [0, 4]) {
    it(`3 PPO steps, ${lora ? `LoRA r=${lora}` : 'full fine-tuning'}: metrics within 1e-5 relative, weights as close as the CPU backend`, async () => {
      const cfgPath = path.join(dir, `run-${lora}.json`);
      writeFileSync(
        cfgPath,
        JSON.stringify({
          model,
          task: 'sentiment',
          batchSize: 4,
          miniBatches: 1,
          ppoEpochs: 2,
          responseLength: 6,
          steps: 3,
          seed: 5,
          lora,
          learningRate: 1e-3,
        }),
      );
      const reward = ['--reward-module', path.join(dir, 'reward.mjs')];
      const outs: string[] = [];
      const routed: number[] = [];
      for (const run of ['xnnpack', 'gemm', 'cpu'] as const) {
        setWasmGemm(run === 'gemm');
        const calls = gemmStats.calls;
        const out = path.join(dir, `out-${lora}-${run}`);
        const backend = ['--backend', run === 'cpu' ? 'cpu' : 'wasm'];
        const r = await cli(['train', '--config', cfgPath, '--out', out, ...reward, ...backend]);
        expect(r.code, r.stderr).toBe(0);
        outs.push(out);
        routed.push(gemmStats.calls - calls);
      }
      setWasmGemm(false);
      expect(routed).toEqual([0, expect.any(Number), 0]);
      expect(routed[1]).toBeGreaterThan(100);
      const [ref, got, cpu] = outs.map(metrics);
      expect(got.map((m) => m.step)).toEqual([1, 2, 3]);
      const rel = (a: number, b: number): number =>
        Math.abs(a - b) / Math.max(Math.abs(a), Math.abs(b), 1e-30);
      const bad: string[] = [];
      for (let s = 0; s < 3; s++)
        for (const [k, v] of Object.entries(ref[s])) {
          if (TIMES.test(k) || typeof v !== 'number') continue;
          if (close(v, got[s][k])) continue;
          // the cancellation case (see the header): no farther from XNNPACK than the CPU backend is
          if (!close(v, cpu[s][k]) && rel(v, got[s][k]) <= rel(v, cpu[s][k])) continue;
          bad.push(`step ${s + 1} ${k}: xnnpack ${v}, gemm ${got[s][k]}, cpu ${cpu[s][k]}`);
        }
      expect(bad).toEqual([]);
      const file = (o: string) =>
        path.join(o, 'checkpoint-3', lora ? 'adapter/adapter_model.safetensors' : 'model.safetensors');
      const [wr, wg, wc] = await Promise.all(outs.map((o) => weights(file(o))));
      expect([...wg.keys()].sort()).toEqual([...wr.keys()].sort());
      /** The largest difference in a tensor relative to that tensor's largest value, over all tensors. */
      const worst = (x: Map<string, Float32Array>): number => {
        let w = 0;
        for (const [name, a] of wr) {
          const b = x.get(name)!;
          let num = 0;
          let den = 0;
          for (let i = 0; i < a.length; i++) {
            num = Math.max(num, Math.abs(a[i] - b[i]));
            den = Math.max(den, Math.abs(a[i]));
          }
          w = Math.max(w, den > 0 ? num / den : num);
        }
        return w;
      };
      // Measured: gemm 3.1e-4 (full) and 1.4e-5 (LoRA) from XNNPACK, the CPU backend 1.2e-3 and 4.5e-5. Adam divides
      // each gradient by its running RMS, so an element whose gradient is rounding noise moves by ±lr either way;
      // 1e-5 of the largest weight is below that floor for every pair of backends. The bar: within 1e-5, or no
      // farther from XNNPACK than the reference backend is.
      const dg = worst(wg);
      if (dg >= 1e-5) expect(dg).toBeLessThanOrEqual(worst(wc));
    }, 600_000);
  }
});
