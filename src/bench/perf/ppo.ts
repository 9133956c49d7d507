/**
 * The PPO step, timed by phase from the trainer's own metrics (timeGenerate / timeScore / timeUpdate), with the
 * update's model FLOPs (flops.ts ppoUpdateFlops) and its MFU against a measured matmul peak.
 */
import type { PpoTrainer } from '../../core/ppo/trainer';
import { bucket } from '../../core/ppo/trainer';
import { ppoUpdateFlops } from './flops';

export interface PpoBench {
  /** Steps timed (after `warmup` untimed steps). */
  steps: number;
  batchSize: number;
  responseLength: number;
  /** Query bucket of the last timed step (T = Tq + R). */
  Tq: number;
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
  timeStep: number;
  /** The trainer's own metric: counted response tokens per second of the whole step. */
  tokensPerSecond: number;
  /**
   * The trainer's `decodeReplays` per timed step: decode tokens generation ran as replays of a recorded token
   * (WebGPU; 0 where the recorded decode did not apply, each token then paying tfjs's program path).
   */
  decodeReplays?: number;
  /** (query + response) tokens the update processes per second: epochs · batch · T / timeUpdate. */
  updateTokensPerSecond: number;
  /** Model FLOPs of one step's update (policy + value, forward + backward, every epoch). */
  updateFlops: number;
  updateGflopsPerSecond: number;
  /** updateGflopsPerSecond ÷ peakGflops (null when no peak was given). */
  updateMfu: number | null;
  peakGflops: number | null;
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * Run `warmup` steps (shader compilation, buffer pools, WASM heap growth), then `steps` timed steps; phase
 * times are the means over the timed steps.
 */
export async function benchPpoStep(
  trainer: PpoTrainer,
  o: {
    steps: number;
    warmup?: number;
    peakGflops?: number | null;
    onStep?: (i: number, secs: number) => void;
  },
): Promise<PpoBench> {
  for (let i = 0; i < (o.warmup ?? 1); i++) {
    const r = await trainer.trainStep();
    o.onStep?.(-1 - i, r.metrics.timeStep);
  }
  const rows: {
    gen: number;
    score: number;
    upd: number;
    step: number;
    tps: number;
    flops: number;
    tokens: number;
    Tq: number;
    replays: number;
  }[] = [];
  const cfg = trainer.cfg;
  const c = trainer.models.policy.config;
  for (let i = 0; i < o.steps; i++) {
    const r = await trainer.trainStep();
    const m = r.metrics;
    const Tq = bucket(
      Math.max(...r.rollout.queries.map((q) => q.length)),
      c.n_positions - cfg.responseLength,
    );
    const epochs = m.epochsRun;
    rows.push({
      gen: m.timeGenerate,
      score: m.timeScore,
      upd: m.timeUpdate,
      step: m.timeStep,
      tps: m.tokensPerSecond,
      flops: ppoUpdateFlops(c, { batch: cfg.batchSize, Tq, R: cfg.responseLength, epochs }),
      tokens: epochs * cfg.batchSize * (Tq + cfg.responseLength),
      Tq,
      replays: m.decodeReplays ?? 0,
    });
    o.onStep?.(i, m.timeStep);
  }
  const upd = mean(rows.map((r) => r.upd));
  const flops = mean(rows.map((r) => r.flops));
  const gflops = flops / upd / 1e9;
  const peak = o.peakGflops ?? null;
  return {
    steps: o.steps,
    batchSize: cfg.batchSize,
    responseLength: cfg.responseLength,
    Tq: rows[rows.length - 1].Tq,
    timeGenerate: mean(rows.map((r) => r.gen)),
    timeScore: mean(rows.map((r) => r.score)),
    timeUpdate: upd,
    timeStep: mean(rows.map((r) => r.step)),
    tokensPerSecond: mean(rows.map((r) => r.tps)),
    decodeReplays: mean(rows.map((r) => r.replays)),
    updateTokensPerSecond: mean(rows.map((r) => r.tokens)) / upd,
    updateFlops: flops,
    updateGflopsPerSecond: gflops,
    updateMfu: peak ? gflops / peak : null,
    peakGflops: peak,
  };
}
