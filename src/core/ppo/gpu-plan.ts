/**
 * A step's plan on a device with memory of its own (WebGPU), and what happens when that device runs out.
 *
 * The budget plan of src/core/model/size.ts (resolveStepPlan without a device) is made for WASM's heap: GPT-2 124M
 * at batch 16 runs micro-batches of 4 with recompute, which on a big GPU costs several times the whole batch
 * (every program there is bound by latency, not by memory). On WebGPU the plan starts from the whole minibatch
 * without recompute (the largest slice whose biggest tensor fits one buffer: size.ts deviceStepPlan) and gets
 * smaller only when the device says it ran out:
 *
 * - every phase that allocates (generating, scoring, each minibatch's gradients) runs inside a device error
 *   scope (`DeviceErrors`: WebGPU's pushErrorScope('out-of-memory'), with a 'validation' scope under it that holds
 *   the errors a failed buffer causes downstream), checked before anything the phase computed is used — for an
 *   update, before the optimiser applies it, so no weight and no Adam moment changes from a failed attempt;
 * - an allocation can also throw (tfjs-backend-webgpu's createBuffer with mappedAtCreation throws a RangeError
 *   when it cannot be mapped); a throw that src/core/model/oom.ts recognises as running out counts the same;
 * - on either, the phase's tensors are freed, tfjs's pool of free GPU buffers is emptied (it would otherwise keep
 *   the failed attempt's big buffers, and a failed buffer is invalid), and the phase runs again with half the
 *   micro-batch (fallbackPlan below). The run keeps the smaller plan from then on (the trainer holds it), and the
 *   step's alerts say so once (planNotice).
 *
 * Elsewhere (WASM, CPU, WebGL) the default DeviceErrors does nothing and the budget plan is as it was; tests
 * inject their own DeviceErrors to simulate a device that runs out (tests/gpu-plan-fallback.slow.test.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { TrainConfig } from '../../common/config';
import { evenSlice, type PlanDevice, type RunShape, type StepPlan } from '../model/size';
import { isHeapExhaustion } from '../model/oom';

/** The parts of a step the device's errors are checked around. */
export type DevicePhase =
  /** generateInMicroBatches over the whole batch, in slices of the plan's generation micro-batch */
  | 'generate'
  /** the forwards of policy, reference, value and reward models over the batch, in micro-batches */
  | 'score'
  /** one minibatch's gradients, summed over its micro-batches (before the optimiser applies them) */
  | 'update'
  /** the optimiser steps of a whole update phase: a failure there cannot be undone (the run stops) */
  | 'apply';

/** What a check is about: the phase, and the samples each of its slices holds. */
export interface DeviceCheck {
  phase: DevicePhase;
  /** Samples per slice (the generation slice for 'generate', else the micro-batch). */
  size: number;
}

/**
 * The device's error scopes, as the trainer uses them: `push` before a phase, `pop` after it (nested like a stack).
 * `pop` resolves to the device's out-of-memory message when the phase ran out, else null.
 */
export interface DeviceErrors {
  push(check: DeviceCheck): void;
  pop(): Promise<string | null>;
  /**
   * Whether an error a phase threw is the device running out (its words), or null (an ordinary failure, thrown on
   * as it is). Absent: none is.
   */
  ranOut?(e: unknown): string | null;
  /**
   * After a phase ran out and its tensors were freed, and at the start of every step once the run has fallen back:
   * give the device back what the backend keeps pooled (and wait until the device has it back).
   */
  release?(): void | Promise<void>;
  /**
   * Between the phases of a step whose plan splits the batch (a memory-bounded plan): give back what the backend
   * keeps pooled, without waiting. tfjs-backend-webgpu reuses a freed buffer only for the same size, so each
   * phase's slices (generation, scoring, the update) would otherwise keep their own buffers in the pool beside the
   * next phase's live ones (an H200, Qwen2.5-1.5B's LoRA GRPO step at micro-batches of 4: 14.9 GB before, 6.54 GB
   * with this and larger generation slices; docs/engine.md, "On WebGPU").
   */
  trim?(): void;
}

/** The trainer's device collaborators (PpoTrainer's constructor; BuildOptions.device). */
export interface TrainerDevice {
  /** Default: webgpuDeviceErrors() (WebGPU's error scopes; nothing elsewhere). */
  errors?: DeviceErrors;
  /** The device the plan is made for. Default: currentPlanDevice() (the WebGPU device tfjs runs on, or none). */
  planDevice?: () => PlanDevice | undefined;
}

// ---------------------------------------------------------------------------------------------------------
// WebGPU

/** What tfjs-backend-webgpu 4.22 exposes that the plan uses: its device, command queue and buffer pool (another slice than kernels/webgpu-common.ts WebGpuBackendLike, which runs programs). */
interface PlanBackendView {
  device?: GpuDeviceLike;
  commandEncoder?: unknown;
  endComputePassEncoder?(): void;
  submitQueue?(): void;
  bufferManager?: {
    freeBuffers?: Map<string, { size: number; destroy(): void }[]>;
    numFreeBuffers?: number;
    numBytesAllocated?: number;
  };
}
interface GpuDeviceLike {
  limits?: { maxStorageBufferBindingSize?: number; maxBufferSize?: number };
  queue?: { onSubmittedWorkDone?(): Promise<void>; submit?(commandBuffers: unknown[]): void };
  pushErrorScope?(filter: 'out-of-memory' | 'validation'): void;
  popErrorScope?(): Promise<{ message: string } | null>;
}

function webgpuBackend(): PlanBackendView | null {
  try {
    return tf.getBackend() === 'webgpu' ? (tf.backend() as unknown as PlanBackendView) : null;
  } catch {
    return null;
  }
}

/** The smaller of a device's maxStorageBufferBindingSize and maxBufferSize; undefined when neither is known. */
export function bufferLimitOf(limits: {
  maxStorageBufferBindingSize?: number;
  maxBufferSize?: number;
}): number | undefined {
  const caps = [limits.maxStorageBufferBindingSize, limits.maxBufferSize].filter(
    (c): c is number => typeof c === 'number' && c > 0,
  );
  return caps.length > 0 ? Math.min(...caps) : undefined;
}

/** The device tfjs runs on now, as a plan sees it: WebGPU with its buffer limit, or undefined (the budget plan). */
export function currentPlanDevice(): PlanDevice | undefined {
  const b = webgpuBackend();
  if (!b) return undefined;
  const maxBufferBytes = bufferLimitOf(b.device?.limits ?? {});
  return maxBufferBytes === undefined ? { backend: 'webgpu' } : { backend: 'webgpu', maxBufferBytes };
}

/**
 * Submit what tfjs has recorded but not sent, so that the errors of that work land in the scope open now (tfjs
 * batches its programs into one command encoder and submits it only now and then; a buffer that failed makes the
 * whole encoder invalid, and it would be reported at a later submit, in whatever scope is open then).
 */
function flush(b: PlanBackendView): void {
  if (b.commandEncoder == null || !b.submitQueue) return;
  b.endComputePassEncoder?.();
  b.submitQueue();
}

/**
 * Empty tfjs-backend-webgpu's pool of free buffers (destroyed; the pool's bookkeeping kept consistent): after a
 * phase ran out, its buffers went back to the pool on dispose, sized for the attempt that failed, and one of them
 * may be the invalid buffer the failed allocation returned. The device frees a destroyed buffer's memory once the
 * work submitted before has finished: releaseDeviceMemory waits for that.
 *
 * Where anything was destroyed, an empty submit follows. Dawn frees a destroyed buffer's memory only once a submit
 * made after the destroy has completed; without one, the memory stays taken until the engine's next GPU work, which
 * after the trim on entering 'idle' (a step's end) may be minutes away. Measured in Node's Dawn on this machine's
 * SwiftShader, where the device's memory is the process's: 1.07 GB destroyed stayed resident through five waits on
 * the queue, and went with one empty submit (tests/gpu-plan-release.test.ts). A browser's GPU process may tick its
 * devices on its own; the submit costs nothing there either.
 */
export function releasePooledBuffers(): void {
  const b = webgpuBackend();
  const m = b?.bufferManager;
  if (!b || !m?.freeBuffers) return;
  flush(b);
  let destroyed = 0;
  for (const list of m.freeBuffers.values()) {
    for (const buf of list) {
      buf.destroy();
      destroyed++;
      if (typeof m.numBytesAllocated === 'number') m.numBytesAllocated -= buf.size;
      if (typeof m.numFreeBuffers === 'number') m.numFreeBuffers--;
    }
    list.length = 0;
  }
  if (destroyed > 0) b.device?.queue?.submit?.([]);
}

/** releasePooledBuffers, then wait for the device's queue, so that what was destroyed is free for the next try. */
export async function releaseDeviceMemory(): Promise<void> {
  releasePooledBuffers();
  const queue = webgpuBackend()?.device?.queue;
  if (queue?.onSubmittedWorkDone) await queue.onSubmittedWorkDone();
}

/**
 * The default DeviceErrors: on WebGPU, an 'out-of-memory' error scope over a 'validation' one for each check
 * (what tfjs recorded before is submitted first, and what the phase recorded is submitted before the pop). pop:
 * the out-of-memory message, if any; the validation errors that a failed buffer causes downstream are then
 * dropped with it. A validation error without running out is a kernel the device rejected (its results would be
 * wrong): it is thrown. On other backends (or when the backend changes between push and pop) it does nothing.
 */
export function webgpuDeviceErrors(): DeviceErrors {
  /** Per push, the device its scopes were pushed on (null: none were). */
  const stack: (GpuDeviceLike | null)[] = [];
  return {
    push() {
      const b = webgpuBackend();
      const d = b?.device;
      if (!b || !d?.pushErrorScope || !d.popErrorScope) {
        stack.push(null);
        return;
      }
      flush(b);
      d.pushErrorScope('validation');
      d.pushErrorScope('out-of-memory');
      stack.push(d);
    },
    async pop() {
      const d = stack.pop();
      if (!d) return null;
      const b = webgpuBackend();
      if (b && b.device === d) flush(b);
      const oom = await d.popErrorScope!();
      const invalid = await d.popErrorScope!();
      if (oom) return oom.message || 'out of memory';
      if (invalid) {
        throw new Error(
          `WebGPU rejected a kernel (its results would be wrong): ${invalid.message || String(invalid)}`,
        );
      }
      return null;
    },
    // Only on WebGPU: on WASM a failed allocation may have written through a null pointer (src/core/model/oom.ts), so
    // a run that ran out there is not one to go on with.
    ranOut: (e) =>
      webgpuBackend() && isHeapExhaustion(e)
        ? (e instanceof Error ? e.message : String(e)).split('\n')[0].slice(0, 200)
        : null,
    release: releaseDeviceMemory,
    trim: releasePooledBuffers,
  };
}

// ---------------------------------------------------------------------------------------------------------
// Falling back

/**
 * The plan to try after `phase` ran out with `plan`, or null when nothing smaller is left to try.
 * - generating: half the generation slice (the micro-batch never above it);
 * - scoring, updating: half the micro-batch (evened out over the minibatch: 8 → 4, 6 → 3, 5 → 3); at one sample,
 *   the update turns recompute on (recompute "auto" only): it holds the blocks' inputs instead of their
 *   activations, the one way left to hold less;
 * only while the micro-batch is automatic (microBatchSize 0). A set microBatchSize is what the person asked
 * for in every phase: only recompute "auto" may still turn on, in the update.
 */
export function fallbackPlan(
  plan: StepPlan,
  phase: Exclude<DevicePhase, 'apply'>,
  cfg: Pick<TrainConfig, 'microBatchSize' | 'recompute' | 'batchSize' | 'miniBatches'>,
): StepPlan | null {
  const auto = cfg.microBatchSize === 0;
  const recomputeLeft = phase === 'update' && !plan.recompute && cfg.recompute === 'auto';
  if (!auto) return recomputeLeft ? { ...plan, recompute: true } : null;
  const mb = Math.max(1, Math.ceil(cfg.batchSize / Math.max(1, cfg.miniBatches)));
  if (phase === 'generate') {
    if (plan.generateMicroBatchSize <= 1) return null;
    const g = evenSlice(cfg.batchSize, Math.ceil(plan.generateMicroBatchSize / 2));
    return { ...plan, generateMicroBatchSize: g, microBatchSize: Math.min(plan.microBatchSize, g) };
  }
  if (plan.microBatchSize > 1) {
    return { ...plan, microBatchSize: evenSlice(mb, Math.ceil(plan.microBatchSize / 2)) };
  }
  return recomputeLeft ? { ...plan, recompute: true } : null;
}

// ---------------------------------------------------------------------------------------------------------
// In words

/** Why the plan in force is what it is. */
export type PlanReason =
  /** WebGPU: the whole minibatch, or the largest slice the device's buffers hold */
  | 'device'
  /** WASM, CPU, WebGL: the budget each phase's activations are held to (size.ts AUTO_MICRO_BATCH_BYTES) */
  | 'budget'
  /** microBatchSize set in the config */
  | 'set'
  /** smaller than planned, after the device ran out of memory during this run */
  | 'out-of-memory';

/** The plan a run's steps use now, with what the words need. */
export interface PlanInForce extends StepPlan {
  reason: PlanReason;
  /** The backend tfjs runs on ('webgpu', 'wasm', 'cpu', 'webgl'). */
  backend: string;
  batchSize: number;
  /** Samples per minibatch (batchSize / miniBatches). */
  miniBatchSize: number;
}

const BACKEND_WORDS: Record<string, string> = { webgpu: 'WebGPU', wasm: 'WASM', cpu: 'CPU', webgl: 'WebGL' };

/**
 * The plan in one short line, as the CLI prints it after "plan: " and the app shows it:
 * "whole batch (16) on WebGPU, recompute off", "micro-batches of 4 with recompute (WASM heap budget)",
 * "micro-batches of 8 after the device ran out of memory".
 */
export function describePlan(p: PlanInForce): string {
  const where = BACKEND_WORDS[p.backend] ?? p.backend;
  const whole = p.microBatchSize >= p.miniBatchSize;
  const size = whole
    ? p.miniBatchSize === p.batchSize
      ? `whole batch (${p.batchSize})`
      : `whole minibatch (${p.miniBatchSize})`
    : `micro-batches of ${p.microBatchSize}`;
  const rc = whole
    ? `, recompute ${p.recompute ? 'on' : 'off'}`
    : p.recompute
      ? ' with recompute'
      : p.reason === 'out-of-memory'
        ? ''
        : ', recompute off';
  const gen =
    p.generateMicroBatchSize < p.batchSize && p.generateMicroBatchSize !== p.microBatchSize
      ? `; generation in slices of ${p.generateMicroBatchSize}`
      : '';
  switch (p.reason) {
    case 'device':
      return `${size} on ${where}${rc}${gen}`;
    case 'budget':
      return `${size}${rc} (${p.backend === 'wasm' ? 'WASM heap' : `${where} memory`} budget)${gen}`;
    case 'set':
      return `${size}${rc} (microBatchSize set)${gen}`;
    case 'out-of-memory':
      return `${size}${p.recompute ? ' with recompute' : ''} after the device ran out of memory${gen}`;
  }
}

/**
 * The plan a run of `cfg` would start with, from its shape (model/size.ts runShapeOf) before any trainer exists:
 * what the CLI's preflight and the worker's estimate describe.
 */
export function plannedInForce(
  shape: RunShape,
  cfg: Pick<TrainConfig, 'microBatchSize' | 'batchSize' | 'miniBatches'>,
  backend: string,
  device: PlanDevice | undefined,
): PlanInForce {
  const mb = Math.max(1, Math.ceil(cfg.batchSize / Math.max(1, cfg.miniBatches)));
  const micro = shape.microBatchSize ?? mb;
  return {
    microBatchSize: micro,
    generateMicroBatchSize: shape.generateMicroBatchSize ?? micro,
    recompute: !!shape.recompute,
    reason: cfg.microBatchSize > 0 ? 'set' : device ? 'device' : 'budget',
    backend,
    batchSize: cfg.batchSize,
    miniBatchSize: mb,
  };
}

/**
 * The words of the alert a step raises when the device ran out and the step was redone smaller (once per step).
 * `purpose`: what the work was for when it was not the step's own (" for the held-out evaluation").
 */
export function planNotice(
  step: number,
  phase: Exclude<DevicePhase, 'apply'>,
  from: PlanInForce,
  to: PlanInForce,
  purpose = '',
): { message: string; advice: string } {
  const during = { generate: 'generating', score: 'scoring', update: 'updating' }[phase] + purpose;
  const slice =
    phase === 'generate'
      ? `in slices of ${from.generateMicroBatchSize}`
      : from.microBatchSize >= from.miniBatchSize
        ? `${from.miniBatchSize} samples at once`
        : `in micro-batches of ${from.microBatchSize}`;
  return {
    message:
      `The device ran out of memory at step ${step} while ${during} ${slice}; that work was freed and ` +
      `redone smaller, before any weight changed. The run goes on with ${describePlan(to)}.`,
    advice:
      'Nothing to do: the results do not depend on the micro-batch. To start there next time, set ' +
      `microBatchSize ${to.microBatchSize}${to.recompute && !from.recompute ? ' and recompute "blocks"' : ''}.`,
  };
}

/**
 * The words of the alert a step raises when the device ran out while the update's recordings (update-replay.ts)
 * were held: they were freed, the work redone through tfjs at the same plan, and the update is not recorded again.
 */
export function recordingsDroppedNotice(
  step: number,
  phase: Exclude<DevicePhase, 'apply'>,
  plan: PlanInForce,
): { message: string; advice: string } {
  const during = { generate: 'generating', score: 'scoring', update: 'updating' }[phase];
  return {
    message:
      `The device ran out of memory at step ${step} while ${during}; the recorded update's buffers were freed, that ` +
      `work was redone before any weight changed, and the update runs through tfjs from now on, with ${describePlan(plan)}.`,
    advice:
      'Nothing to do: the results are the same; each update now costs more host time. A smaller batch or ' +
      'microBatchSize would leave room for the recorded update again.',
  };
}
