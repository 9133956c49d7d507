/**
 * Where a recorded frame's GPU time goes (kernels/webgpu-replay.ts): a profile for the GPU leases (issues #31 and
 * #36). A replayed decode token is one compute pass of 65–260 dispatches; tf.profile cannot see it (no tfjs kernel
 * runs), and the wall time of a replay says how long the pass takes, not which of its kernels take it, nor whether
 * the time is in the kernels at all or between them (a dispatch's launch and the barrier a storage write puts
 * before the next one). docs/gpu.md estimated that fixed cost a token from the f16/f32 ratio alone.
 *
 * `profileReplayFrame(frame)` measures both on the device the frame lives on:
 * - the wall time of a replay as replays run (one pass): (t(2r) − t(r)) / r over r and 2r replays back to back,
 *   so that the wait's latency cancels, the best of three (the helpers below; core/backend/webgpu-tune.ts times
 *   kernel forms with them too);
 * - where the device has `timestamp-query`, each dispatch alone: the same dispatches in the same order, each in a
 *   compute pass of its own whose beginning and end write a timestamp, the least of `reps` runs a dispatch. Their sum
 *   is the frame's kernel time; the wall time less that sum, over the dispatches, is what a dispatch costs beyond its
 *   kernel in the one-pass replay (`gapUsPerDispatch`; a pass of its own adds its own overhead, so the kernel times
 *   are upper bounds and the gap a lower one). Dawn quantises timestamps unless `timestamp_quantization` is disabled
 *   (PPO_DAWN_DISABLE, src/cli/backend-webgpu-node.ts).
 * Grouped by program (its class name), with the dearest dispatches listed. A replay writes what the frame's
 * programs write — its outputs and intermediates, and state such as a KV cache slot — again from the same inputs:
 * profile a frame whose results have been read, before it is disposed (model/decode-replay.ts's probe).
 */
import type { ReplayFrame } from './webgpu-replay';

export interface ReplayProgramTime {
  /** The program's name (webgpu-replay.ts programLabel). */
  label: string;
  /** Its dispatches in one replay. */
  count: number;
  /** Their kernel time, µs, summed (null without timestamps). */
  us: number | null;
  /** Its share of the frame's kernel time (null without timestamps). */
  share: number | null;
}

export interface ReplayProfile {
  dispatches: number;
  /** GPU wall time of one replay as replays run (one compute pass), µs. */
  wallUsPerReplay: number;
  /** Whether the device had timestamp queries (the per-dispatch figures below need them). */
  timestamps: boolean;
  /** Σ of the dispatches' kernel times, each timed in a pass of its own, µs (null without timestamps). */
  kernelUsPerReplay: number | null;
  /** (wall − kernel) / dispatches, µs: a dispatch's cost beyond its kernel in the one-pass replay. */
  gapUsPerDispatch: number | null;
  /** Per program, dearest first (by count where there are no timestamps). */
  byProgram: ReplayProgramTime[];
  /** The dearest dispatches: their place in the frame, program, workgroup counts and kernel time (µs). */
  top: { index: number; label: string; workgroups: [number, number, number]; us: number }[];
}

// ---- the GPU time of a replay (also core/backend/webgpu-tune.ts's, timing kernel forms) ----------------------

/** Milliseconds for `r` replays of the frame back to back, waited for (onSubmittedWorkDone). */
export async function replaysWallMs(frame: ReplayFrame, r: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < r; i++) frame.replay();
  await frame.gpu.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}

/** Warm a frame up (pipelines, clocks): about 20 ms of single replays, at least two. Returns the fastest, ms. */
export async function warmReplays(frame: ReplayFrame): Promise<number> {
  let once = Infinity;
  for (let n = 0, spent = 0; n < 2 || (spent < 20 && n < 200); n++) {
    const t = await replaysWallMs(frame, 1);
    spent += t;
    once = Math.min(once, t);
  }
  return once;
}

/** Replays per trial for a frame whose fastest replay took `onceMs`, so that r of them take about `targetMs`. */
export function replaysPerTrial(onceMs: number, targetMs: number): number {
  return Math.min(64, Math.max(2, Math.ceil(targetMs / Math.max(onceMs, 1e-3))));
}

/**
 * One trial: ms a replay, (t(2r) − t(r)) / r, so that the wait's own latency cancels; t(2r) / 2r where noise makes
 * the difference ≤ 0.
 */
export async function replayTrialMs(frame: ReplayFrame, r: number): Promise<number> {
  const t1 = await replaysWallMs(frame, r);
  const t2 = await replaysWallMs(frame, 2 * r);
  const slope = (t2 - t1) / r;
  return slope > 0 ? slope : t2 / (2 * r);
}

/** Dispatches per query set (two timestamps each; WebGPU allows 4096 queries a set). */
const CHUNK = 1024;

export async function profileReplayFrame(
  frame: ReplayFrame,
  opts: { reps?: number; top?: number } = {},
): Promise<ReplayProfile> {
  if (!frame.valid) throw new Error('profileReplayFrame: the frame is stale or disposed');
  const { device, queue } = frame.gpu;
  const list = frame.recorded();
  const n = list.length;
  const reps = Math.max(1, opts.reps ?? 5);

  // Wall time per replay, one pass each, as replays run: the best of three trials of about 20 ms.
  const r = replaysPerTrial(await warmReplays(frame), 20);
  let wallMs = Infinity;
  for (let t = 0; t < 3; t++) wallMs = Math.min(wallMs, await replayTrialMs(frame, r));

  const timestamps = device.features.has('timestamp-query');
  let perDispatch: number[] | null = null;
  if (timestamps) {
    perDispatch = new Array<number>(n).fill(Infinity);
    for (let lo = 0; lo < n; lo += CHUNK) {
      const hi = Math.min(n, lo + CHUNK);
      const count = 2 * (hi - lo);
      const querySet = device.createQuerySet({ type: 'timestamp', count });
      const resolved = device.createBuffer({
        size: count * 8,
        usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
      });
      const readback = device.createBuffer({
        size: count * 8,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
      try {
        for (let rep = 0; rep < reps; rep++) {
          const encoder = device.createCommandEncoder();
          for (let i = lo; i < hi; i++) {
            const d = list[i];
            const pass = encoder.beginComputePass({
              timestampWrites: {
                querySet,
                beginningOfPassWriteIndex: 2 * (i - lo),
                endOfPassWriteIndex: 2 * (i - lo) + 1,
              },
            });
            pass.setPipeline(d.pipeline);
            pass.setBindGroup(0, d.bindGroup);
            pass.dispatchWorkgroups(d.x, d.y, d.z);
            pass.end();
          }
          encoder.resolveQuerySet(querySet, 0, count, resolved, 0);
          encoder.copyBufferToBuffer(resolved, 0, readback, 0, count * 8);
          queue.submit([encoder.finish()]);
          await readback.mapAsync(GPUMapMode.READ);
          const ts = new BigInt64Array(readback.getMappedRange().slice(0));
          readback.unmap();
          for (let i = lo; i < hi; i++) {
            const ns = Number(ts[2 * (i - lo) + 1] - ts[2 * (i - lo)]);
            perDispatch[i] = Math.min(perDispatch[i], Math.max(0, ns) / 1000);
          }
        }
      } finally {
        querySet.destroy();
        resolved.destroy();
        readback.destroy();
      }
    }
  }

  const wallUs = wallMs * 1000;
  const kernelUs = perDispatch ? perDispatch.reduce((a, b) => a + b, 0) : null;
  const groups = new Map<string, { count: number; us: number }>();
  list.forEach((d, i) => {
    const g = groups.get(d.label) ?? { count: 0, us: 0 };
    g.count++;
    g.us += perDispatch ? perDispatch[i] : 0;
    groups.set(d.label, g);
  });
  const byProgram: ReplayProgramTime[] = [...groups.entries()]
    .map(([label, g]) => ({
      label,
      count: g.count,
      us: perDispatch ? g.us : null,
      share: perDispatch ? (kernelUs ? g.us / kernelUs : 0) : null,
    }))
    .sort((a, b) => (a.us !== null && b.us !== null ? b.us - a.us : b.count - a.count));
  const top = perDispatch
    ? perDispatch
        .map((us, index) => ({
          index,
          label: list[index].label,
          workgroups: [list[index].x, list[index].y, list[index].z] as [number, number, number],
          us,
        }))
        .sort((a, b) => b.us - a.us)
        .slice(0, opts.top ?? 10)
    : [];
  return {
    dispatches: n,
    wallUsPerReplay: wallUs,
    timestamps,
    kernelUsPerReplay: kernelUs,
    gapUsPerDispatch: kernelUs !== null && n > 0 ? (wallUs - kernelUs) / n : null,
    byProgram,
    top,
  };
}

/** One line a person reads: the wall time, the kernels' share and the dearest programs. */
export function describeReplayProfile(p: ReplayProfile, programs = 6): string {
  const head = `${p.dispatches} dispatches, ${p.wallUsPerReplay.toFixed(1)} µs a replay`;
  if (p.kernelUsPerReplay === null || p.gapUsPerDispatch === null)
    return `${head} (no timestamp queries: no per-dispatch times)`;
  const parts = p.byProgram
    .slice(0, programs)
    .map((g) => `${g.label} ×${g.count} ${g.us!.toFixed(1)} µs`)
    .join(', ');
  return `${head}; kernels ${p.kernelUsPerReplay.toFixed(1)} µs, ${p.gapUsPerDispatch.toFixed(2)} µs a dispatch beyond its kernel; ${parts}`;
}
