/**
 * Where issue #36's step spends the GPU's time: one Qwen2.5-1.5B- (or Qwen3-1.7B-) shaped GRPO + LoRA step with the
 * base in f16 (`bench --gpu`'s f16 row: B16 = 2 prompts × 8, R 64, LoRA r 8, the default plan) under tf.profile,
 * each kernel's GPU time (timestamp queries where the adapter has them) summed per kernel name and phase
 * (generation, scoring, update). The recorded decode and update are turned off for the profiled step (their
 * replays bypass tfjs's kernels, which tf.profile sees): the kernels are the same, their host cost is not what
 * this measures. A development tool beside `bench --gpu` (which says how fast; this says where).
 * Usage: npx tsx scripts/profile-f16-step.ts [qwen2.5-1.5b|qwen3-1.7b] [top]   (a software adapter: the dry run's
 * 2 layers of width 64). Prints the step's phases unprofiled, then per phase the top kernels, then one JSON line.
 */
import * as tf from '@tensorflow/tfjs-core';
import { adapterLabel, setNodeWebGpuBackend } from '../src/cli/backend-webgpu-node';
import { nodeResources } from '../src/cli/train';
import { f16GrpoBenchHooks } from '../src/cli/torch-probe';
import { F16_BENCH_SHAPES, f16BenchRun, type F16BenchShapeName } from '../src/bench/torch-grpo';
import { setDecodeReplay } from '../src/core/model/decode-replay';
import type { Phase } from '../src/core/ppo/trainer';

const name = (process.argv[2] ?? 'qwen2.5-1.5b') as F16BenchShapeName;
if (!(F16_BENCH_SHAPES as readonly string[]).includes(name))
  throw new Error(`the shape must be one of ${F16_BENCH_SHAPES.join(', ')}, got "${name}".`);
const top = Number(process.argv[3] ?? 25);
const adapter = await setNodeWebGpuBackend();
const dryRun = adapter.software;
console.log(
  `adapter: ${adapterLabel(adapter)}${dryRun ? ' (software: the dry run’s 2 layers of width 64)' : ''}`,
);

/** Where tf.profile is collecting (tfjs's engine state; internal, read only to split the kernels by phase). */
const profiledSoFar = (): number =>
  (tf.engine() as unknown as { state: { activeProfile?: { kernels?: unknown[] } } }).state.activeProfile
    ?.kernels?.length ?? 0;
const marks: { phase: Phase; at: number }[] = [];
const hooks = f16GrpoBenchHooks({ dryRun, res: nodeResources, python: 'python3', log: console.log });
try {
  const trainer = await hooks.buildTrainer(name, { ...f16BenchRun(dryRun) }, (cfg) => ({
    config: () => cfg,
    events: { phase: (phase: Phase) => marks.push({ phase, at: profiledSoFar() }) },
  }));
  const phases = (r: { timeGenerate: number; timeScore: number; timeUpdate: number }) =>
    `generate ${r.timeGenerate.toFixed(3)} s, score ${r.timeScore.toFixed(3)} s, update ${r.timeUpdate.toFixed(3)} s`;
  console.log(`warm-up step: ${phases((await trainer.trainStep()).metrics)}`);
  console.log(`step (recorded decode and update on): ${phases((await trainer.trainStep()).metrics)}`);
  setDecodeReplay(false);
  trainer.updateReplay = false;
  console.log(`step (unrecorded, unprofiled): ${phases((await trainer.trainStep()).metrics)}`);
  marks.length = 0;
  const prof = await tf.profile(async () => {
    await trainer.trainStep();
    return tf.scalar(0);
  });
  if (prof.result) tf.dispose(prof.result as tf.Tensor);
  const phaseAt = (i: number): string => {
    let p = 'before';
    for (const m of marks) if (m.at <= i) p = m.phase;
    return p;
  };
  const by = new Map<string, Map<string, { ms: number; n: number }>>();
  let timed = 0;
  let total = 0;
  for (let i = 0; i < prof.kernels.length; i++) {
    const k = prof.kernels[i];
    const t = await (k.kernelTimeMs as unknown as Promise<number | { error: string }>);
    const ms = typeof t === 'number' ? t : 0;
    if (typeof t === 'number') timed++;
    total += ms;
    const ph = phaseAt(i);
    const m = by.get(ph) ?? new Map<string, { ms: number; n: number }>();
    const e = m.get(k.name) ?? { ms: 0, n: 0 };
    e.ms += ms;
    e.n++;
    m.set(k.name, e);
    by.set(ph, m);
  }
  console.log(
    `profiled step: ${prof.kernels.length} kernels, ${timed} with GPU times, ${total.toFixed(1)} ms of kernel time`,
  );
  const summary: Record<
    string,
    { kernelMs: number; kernels: number; top: Record<string, [number, number]> }
  > = {};
  for (const [ph, m] of by) {
    const rows = [...m.entries()].sort((a, b) => b[1].ms - a[1].ms);
    const ms = rows.reduce((s, [, v]) => s + v.ms, 0);
    const n = rows.reduce((s, [, v]) => s + v.n, 0);
    console.log(`${ph}: ${ms.toFixed(1)} ms over ${n} kernels`);
    for (const [k, v] of rows.slice(0, top))
      console.log(`  ${v.ms.toFixed(2).padStart(9)} ms  ×${String(v.n).padEnd(6)} ${k}`);
    summary[ph] = {
      kernelMs: ms,
      kernels: n,
      top: Object.fromEntries(rows.slice(0, top).map(([k, v]) => [k, [v.ms, v.n]])),
    };
  }
  console.log(
    JSON.stringify({ shape: name, dryRun, kernels: prof.kernels.length, timed, kernelMs: total, summary }),
  );
} finally {
  await hooks.cleanup();
}
