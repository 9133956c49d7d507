/**
 * The peak memory of tensors while something runs (a training step): what the bench reports and the app's memory
 * line shows beside the bytes held between steps. Two counts, because tfjs's own is not the memory taken:
 *
 * - `numBytes`: the largest `tf.memory().numBytes`. tfjs adds a tensor's bytes for every tensor object, so a buffer
 *   viewed by several tensors (autodiff's saved clones of its inputs, a reshape, WASM's shared Identity) counts
 *   once per tensor: a GPT-2 LoRA step's clones of its frozen weights alone add hundreds of MB that take no memory.
 * - `liveBytesGrowth`: the most the bytes of distinct data buffers grew over their amount at the start: each
 *   buffer counted once, from when the engine first tracks it to when the backend frees it (removeDataId). This is
 *   the memory the tensors really take; a backend's own copies (XNNPACK's packed matmul weights on WASM) aside.
 *
 * Every change of the engine's byte count is seen (tf.profile only samples after each kernel, and its Math.max over
 * every kernel's snapshot overflows the stack on a GPT-2 step). The meter wraps the engine's counter and two of its
 * methods (instance properties over the prototype's) while installed; uninstall puts them back. docs/engine.md,
 * "Memory: what a run holds".
 */
import * as tf from '@tensorflow/tfjs-core';

export interface PeakMemory {
  /** The largest tf.memory().numBytes (tfjs's count: a shared buffer once per tensor that views it). */
  numBytes: number;
  /** The most the distinct buffers' bytes grew over their amount at the start (or the last reset). */
  liveBytesGrowth: number;
}

interface EngineHooks {
  state: { numBytes: number; tensorInfo: WeakMap<object, { bytes: number; backend: unknown }> };
  trackTensor(a: { dataId: object }, backend: unknown): void;
  removeDataId(dataId: object, backend: unknown): void;
}

/** Measures PeakMemory from `install()` or the last `reset()` until `read()`. One may be installed at a time. */
export class PeakMemoryMeter {
  private engine: EngineHooks | null = null;
  private value = 0;
  private peak = 0;
  private live = 0;
  private livePeak = 0;

  install(): void {
    if (this.engine) return;
    const engine = tf.engine() as unknown as EngineHooks;
    const state = engine.state;
    if (Object.getOwnPropertyDescriptor(state, 'numBytes')?.get) {
      throw new Error('PeakMemoryMeter: another meter is installed on this engine.');
    }
    this.engine = engine;
    this.value = state.numBytes;
    this.reset();
    Object.defineProperty(state, 'numBytes', {
      configurable: true,
      enumerable: true,
      get: () => this.value,
      set: (v: number) => {
        this.value = v;
        if (v > this.peak) this.peak = v;
      },
    });
    const track = Object.getPrototypeOf(engine).trackTensor as EngineHooks['trackTensor'];
    const remove = Object.getPrototypeOf(engine).removeDataId as EngineHooks['removeDataId'];
    engine.trackTensor = (a, backend) => {
      const fresh = !state.tensorInfo.has(a.dataId);
      track.call(engine, a, backend);
      if (fresh) {
        this.live += state.tensorInfo.get(a.dataId)?.bytes ?? 0;
        if (this.live > this.livePeak) this.livePeak = this.live;
      }
    };
    engine.removeDataId = (dataId, backend) => {
      const info = state.tensorInfo.get(dataId);
      if (info && info.backend === backend) this.live -= info.bytes;
      remove.call(engine, dataId, backend);
    };
  }

  /** Start a new measurement from now. */
  reset(): void {
    this.peak = this.value;
    this.live = 0;
    this.livePeak = 0;
  }

  read(): PeakMemory {
    return { numBytes: this.peak, liveBytesGrowth: this.livePeak };
  }

  uninstall(): void {
    const engine = this.engine;
    if (!engine) return;
    delete (engine as { trackTensor?: unknown }).trackTensor;
    delete (engine as { removeDataId?: unknown }).removeDataId;
    delete (engine.state as { numBytes?: number }).numBytes;
    engine.state.numBytes = this.value;
    this.engine = null;
  }
}

/** Both peaks while `f` runs (PeakMemory). */
export async function peakMemoryDuring(f: () => Promise<void>): Promise<PeakMemory> {
  const meter = new PeakMemoryMeter();
  meter.install();
  try {
    await f();
  } finally {
    meter.uninstall();
  }
  return meter.read();
}

/** The largest tf.memory().numBytes while `f` runs (peakMemoryDuring's `numBytes`). */
export async function peakBytesDuring(f: () => Promise<void>): Promise<number> {
  return (await peakMemoryDuring(f)).numBytes;
}
