/**
 * The most GPU memory tfjs-backend-webgpu's buffers took while something ran (the f16 rows' timed steps, issue #36's
 * "GPU memory for the step"): its BufferManager keeps two counters, `numBytesUsed` (buffers handed out and not yet
 * released: live tensors, uniforms in flight, what the recorded frames keep) and `numBytesAllocated` (every buffer it
 * created and has not destroyed: those plus its pool of freed ones, which it reuses only for the same size and
 * usage). The meter turns both into accessors on the manager instance while installed, so that every change is seen
 * and the largest values kept; uninstall puts plain values back. Nothing else changes: the manager's methods (which
 * kernels/webgpu-replay.ts wraps) are untouched.
 *
 * What it cannot see: memory Dawn or the driver hold beyond tfjs's buffers (its allocator's blocks, the pipelines,
 * the context), which nvidia-smi's reading includes. On another backend install returns false and read() nulls.
 */
import * as tf from '@tensorflow/tfjs-core';

export interface GpuBufferPeak {
  /** The largest numBytesUsed: bytes of tfjs's buffers in use at once. */
  usedBytes: number;
  /** The largest numBytesAllocated: bytes of tfjs's buffers in existence at once (its pool included). */
  allocatedBytes: number;
}

type Counter = 'numBytesUsed' | 'numBytesAllocated';
const COUNTERS: Counter[] = ['numBytesUsed', 'numBytesAllocated'];

export class GpuBufferPeakMeter {
  private manager: Record<Counter, number> | null = null;
  private values: Record<Counter, number> = { numBytesUsed: 0, numBytesAllocated: 0 };
  private peaks: Record<Counter, number> = { numBytesUsed: 0, numBytesAllocated: 0 };

  /** Start metering the current webgpu backend's buffers; false (nothing done) on another backend. */
  install(): boolean {
    if (this.manager) return true;
    if (tf.getBackend() !== 'webgpu') return false;
    const m = (tf.backend() as unknown as { bufferManager?: Record<Counter, number> }).bufferManager;
    if (!m || COUNTERS.some((c) => typeof m[c] !== 'number')) return false;
    if (COUNTERS.some((c) => Object.getOwnPropertyDescriptor(m, c)?.get))
      throw new Error('GpuBufferPeakMeter: another meter is installed on this backend.');
    this.manager = m;
    for (const c of COUNTERS) {
      this.values[c] = m[c];
      this.peaks[c] = m[c];
      Object.defineProperty(m, c, {
        configurable: true,
        enumerable: true,
        get: () => this.values[c],
        set: (v: number) => {
          this.values[c] = v;
          if (v > this.peaks[c]) this.peaks[c] = v;
        },
      });
    }
    return true;
  }

  /** Start the peaks again from the counters' values now. */
  reset(): void {
    for (const c of COUNTERS) this.peaks[c] = this.values[c];
  }

  /** The peaks since install (or the last reset); null when not installed. */
  read(): GpuBufferPeak | null {
    if (!this.manager) return null;
    return { usedBytes: this.peaks.numBytesUsed, allocatedBytes: this.peaks.numBytesAllocated };
  }

  /** Put the counters back as plain values (their current ones). */
  uninstall(): void {
    const m = this.manager;
    if (!m) return;
    for (const c of COUNTERS) {
      delete (m as Partial<Record<Counter, number>>)[c];
      m[c] = this.values[c];
    }
    this.manager = null;
  }
}
