/**
 * Record a sequence of tfjs WebGPU programs once and replay it: graph capture for tfjs-backend-webgpu (issue #31).
 *
 * Why: tfjs encodes every op when it is called — shader lookup, uniform buffer, bind group, dispatch — at about
 * 140 µs of host time per program on an H200 (docs/gpu.md, "What bounded decode"), while a decode token's kernels
 * take the GPU well under a millisecond. A step whose shapes never change (a KV-cache decode token) encodes the
 * same programs over the same buffers every time; recording them once and replaying the recorded
 * pipelines and bind groups costs three encoder calls per dispatch instead. The anchors are CUDA graphs (vLLM,
 * PyTorch) and ONNX Runtime Web's WebGPU graph capture.
 *
 * How (`recordFrame(fn, inputs)`):
 * - `fn` runs once through tfjs as usual (it is a real step: its outputs are the step's results). While it runs,
 *   every `recordAndSubmit` of tfjs's backend is recorded as (pipeline, bind group, workgroup counts): the bind
 *   group tfjs made holds the very buffers the program read and wrote, and its uniform buffer (shapes, strides and
 *   the program's own uniforms: the same at every replay of a static-shape step).
 * - The buffers tfjs releases while recording (intermediates of disposed tensors, the uniform buffers) are pinned:
 *   kept out of tfjs's pool until the frame is disposed, so nothing else is given them and a replay may write
 *   them. Before and after recording tfjs's pending commands are submitted, so that every release reaches the pin.
 * - The inputs (tensors whose values change between replays: a token's ids, its position, the random uniforms)
 *   are moved to the GPU before recording and held by the frame; `write(i, values)` puts the next values in their
 *   buffers (queue.writeBuffer, ordered before the replay's submit). Everything else the programs read (weights,
 *   LoRA adapters, tables) is read where it was when recorded.
 * - `replay()` submits tfjs's pending work, then encodes the recorded dispatches in one compute pass and the
 *   caller's buffer copies after it (state carried from one replay to the next, results into accumulators), and
 *   submits them in one command buffer.
 * - Validity: a buffer the recording read that tfjs releases later (a weight disposed, a LoRA adapter replaced by
 *   an update, a table regrown) marks the frame stale (`valid` false): the caller records again. So does such a
 *   buffer released while another frame records (that frame pins it) once that frame gives it back. A readback or a
 *   data upload of a step input while recording is refused (it would be baked into the recording).
 *
 * Memory: a recorded step's intermediates stay the frame's (a replay writes them again), but not one buffer each.
 * While recording, a buffer that a recorded program wrote and that tfjs then released (its tensor disposed) goes
 * to the recording's free list, and a later program's output of the same size and usage takes it, as tfjs's pool
 * would have done: the frame holds about the step's peak of live intermediates, not their sum (a whole-minibatch
 * update's forward and backward held ~5× its step's peak before; tests/webgpu-replay.slow.test.ts). The order
 * makes it safe: every program that read the old tensor comes before the one that writes the new one, in the
 * recording and in the replay's single pass (WebGPU orders the dispatches of a pass). Never shared: uniform
 * buffers and buffers written from the host (tfjs uploads through mappedAtCreation) — the replay does not write
 * them again — and buffers made before the recording.
 *
 * What a recording must not do: read a tensor back (`data()`), or make a tensor on the host from values that
 * change between replays (they would be replayed as constants). Values that change come in through `inputs`.
 * Tested against the unrecorded path on SwiftShader (tests/webgpu-replay.slow.test.ts).
 */
import * as tf from '@tensorflow/tfjs-core';

/* The parts of tfjs-backend-webgpu 4.22's WebGPUBackend this module reaches into (not its public API). */
interface BufferManagerLike {
  acquireBuffer(
    size: number,
    usage: GPUBufferUsageFlags,
    mappedAtCreation?: boolean,
    reuse?: boolean,
  ): GPUBuffer;
  releaseBuffer(buffer: GPUBuffer, reuse?: boolean): void;
}
interface ProgramLike {
  pipeline: GPUComputePipeline;
  dispatch: [number, number, number];
  shaderKey?: string;
}
interface TensorDataLike {
  resource: unknown;
  values: unknown;
}
export interface ReplayBackend {
  device: GPUDevice;
  queue: GPUQueue;
  bufferManager: BufferManagerLike;
  tensorMap: { get(dataId: object): TensorDataLike | undefined };
  commandEncoder: GPUCommandEncoder | null;
  recordAndSubmit(program: ProgramLike, output: unknown, inputs: unknown[], uniforms?: unknown): void;
  uploadToGPU(dataId: object): void;
  endComputePassEncoder(): void;
  submitQueue(): void;
}

interface Dispatch {
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  /** How the bind group was made (made again when an intermediate moves to a shared scratch buffer). */
  desc: GPUBindGroupDescriptor;
  x: number;
  y: number;
  z: number;
  /** The program's name (its class, else its shader key's first word): what a profile groups by. */
  label: string;
}

/** A dispatch as a profile sees it (kernels/webgpu-replay-profile.ts). */
export interface RecordedDispatch {
  readonly pipeline: GPUComputePipeline;
  readonly bindGroup: GPUBindGroup;
  readonly x: number;
  readonly y: number;
  readonly z: number;
  readonly label: string;
}

/**
 * A program's name for profiles: its class's name where it has one (less the number a bundler appends to a name
 * two modules share: esbuild's "MatMulPackedProgram2"), else the first word of its shader key.
 */
export function programLabel(program: { constructor?: { name?: string }; shaderKey?: string }): string {
  const name = program.constructor?.name;
  if (name && name !== 'Object') return name.replace(/(Program)\d+$/, '$1');
  return program.shaderKey?.split(/[^A-Za-z0-9]/).find(Boolean) ?? 'program';
}

/** A buffer copy a replay appends after its dispatches (a copy of a buffer onto itself is left out). */
export interface ReplayCopy {
  src: GPUBuffer;
  dst: GPUBuffer;
  srcOffset?: number;
  dstOffset?: number;
  /** Bytes; default the whole source. */
  size?: number;
}

/** The webgpu backend when it is the current one, else null. */
export function replayBackend(): ReplayBackend | null {
  if (tf.getBackend() !== 'webgpu') return null;
  const b = tf.backend() as unknown as Partial<ReplayBackend>;
  if (typeof b.recordAndSubmit !== 'function' || !b.bufferManager || !b.device || !b.tensorMap) return null;
  return b as ReplayBackend;
}

/** The GPU buffer of a tensor's data (moved to the GPU first). */
export function tensorBuffer(backend: ReplayBackend, t: tf.Tensor): GPUBuffer {
  backend.uploadToGPU(t.dataId);
  const r = backend.tensorMap.get(t.dataId)?.resource;
  if (!(r instanceof GPUBuffer)) throw new Error('webgpu-replay: a tensor is not backed by a GPU buffer');
  return r;
}

/**
 * Move tensors made from host values to the device now, and wait until the upload is done: tfjs's webgpu backend
 * otherwise keeps each tensor's values on the host until its first use, and Dawn its staging copy until the queue
 * has moved on, so a model built weight by weight would hold every weight twice or three times at the end of its
 * load. No-op on other backends (WASM copies values into its heap when a tensor is made; the CPU backend keeps
 * them).
 */
export async function settleOnDevice(tensors: tf.Tensor[]): Promise<void> {
  const backend = replayBackend();
  if (!backend || tensors.length === 0) return;
  for (const t of tensors) backend.uploadToGPU(t.dataId);
  flushTfjs(backend);
  await backend.queue.onSubmittedWorkDone();
}

/** Submit whatever tfjs has encoded and not submitted, so that work queued after this runs after it. */
export function flushTfjs(backend: ReplayBackend): void {
  backend.endComputePassEncoder();
  if (backend.commandEncoder) backend.submitQueue();
}

// ---- release watch: frames learn that a buffer they read went back to tfjs's pool ---------------------------------

const live = new Set<ReplayFrame>();
let recording: Recorder | null = null;
const patched = new WeakSet<object>();

/** A storage buffer a recorded program may write (tfjs's tensors: STORAGE | COPY_SRC | COPY_DST), not a uniform. */
function programWritable(usage: GPUBufferUsageFlags): boolean {
  return (
    (usage & GPUBufferUsage.STORAGE) !== 0 &&
    (usage & (GPUBufferUsage.UNIFORM | GPUBufferUsage.MAP_READ | GPUBufferUsage.MAP_WRITE)) === 0
  );
}

const sizeKey = (size: number, usage: GPUBufferUsageFlags) => `${size}_${usage}`;

/**
 * Wrap the buffer manager once per backend. Release: while recording, a buffer goes to the recording (its free
 * list when a recorded program wrote it, else pinned); otherwise frames that read it are marked stale. Acquire:
 * while recording, a program's output takes a buffer of the same size and usage from the recording's free list.
 */
function watchReleases(backend: ReplayBackend): void {
  const bm = backend.bufferManager;
  if (patched.has(bm)) return;
  patched.add(bm);
  const release = bm.releaseBuffer.bind(bm);
  const acquire = bm.acquireBuffer.bind(bm);
  (bm as { releaseBuffer: BufferManagerLike['releaseBuffer'] }).releaseBuffer = (buffer, reuse = true) => {
    if (recording && reuse) {
      if (recording.produced.has(buffer)) {
        const key = sizeKey(buffer.size, buffer.usage);
        const list = recording.free.get(key);
        if (list) list.push(buffer);
        else recording.free.set(key, [buffer]);
      } else recording.pinned.push(buffer);
      return;
    }
    for (const f of live) if (f.reads(buffer)) f.markStale();
    release(buffer, reuse);
  };
  (bm as { acquireBuffer: BufferManagerLike['acquireBuffer'] }).acquireBuffer = (
    size,
    usage,
    mappedAtCreation = false,
    reuse = true,
  ) => {
    // A program's output (tfjs acquires it unmapped; a host upload asks for mappedAtCreation): within a recording
    // it may take the buffer of a tensor the recording already let go of (see "Memory" above).
    if (recording && reuse && !mappedAtCreation && programWritable(usage)) {
      const buffer = recording.free.get(sizeKey(size, usage))?.pop() ?? acquire(size, usage, false, true);
      recording.produced.add(buffer);
      return buffer;
    }
    return acquire(size, usage, mappedAtCreation, reuse);
  };
  (bm as { releaseOriginal?: BufferManagerLike['releaseBuffer'] }).releaseOriginal = release;
}

function releaseOriginal(backend: ReplayBackend): BufferManagerLike['releaseBuffer'] {
  return (backend.bufferManager as { releaseOriginal?: BufferManagerLike['releaseBuffer'] }).releaseOriginal!;
}

/**
 * Give a buffer a frame kept back to tfjs's pool. Another live frame may read it: a tensor made before a recording
 * and released during it (a weight replaced inside the step) is pinned by that recording, not released, so the
 * frames that read it were not told then. Once it is in the pool anything may be written there: they go stale now.
 */
function releaseKept(backend: ReplayBackend, buffer: GPUBuffer): void {
  for (const f of live) if (f.reads(buffer)) f.markStale();
  releaseOriginal(backend)(buffer);
}

interface Recorder {
  dispatches: Dispatch[];
  /** Buffers released while recording that the frame keeps as they are (uniforms, uploads, older tensors). */
  pinned: GPUBuffer[];
  used: Set<GPUBuffer>;
  /** Buffers acquired while recording as a program's output: rewritten by their program at every replay. */
  produced: Set<GPUBuffer>;
  /** Of those, the ones released while recording, by size and usage: later outputs of the recording take them. */
  free: Map<string, GPUBuffer[]>;
}

/** A recorded sequence of dispatches, replayable while `valid`. */
export class ReplayFrame {
  private stale = false;
  private disposed = false;
  private constructor(
    private readonly backend: ReplayBackend,
    private readonly dispatches: Dispatch[],
    private readonly pinned: GPUBuffer[],
    /** Its intermediates: scratch buffers that other frames may use for theirs too. */
    private readonly scratch: GPUBuffer[],
    private readonly used: Set<GPUBuffer>,
    private readonly held: tf.Tensor[],
    /** The GPU buffers of the inputs, in the order given. */
    readonly inputBuffers: GPUBuffer[],
  ) {
    live.add(this);
  }

  /** Run `fn` through tfjs once, recording its programs; `inputs` are the tensors `write` will change. */
  static record<T>(
    backend: ReplayBackend,
    fn: () => T,
    inputs: tf.Tensor[],
  ): { frame: ReplayFrame; result: T } {
    if (recording) throw new Error('webgpu-replay: a recording is already under way');
    watchReleases(backend);
    const inputBuffers = inputs.map((t) => tensorBuffer(backend, t));
    const held = inputs.map((t) => tf.keep(t.clone()));
    flushTfjs(backend); // releases pending from before the recording happen outside it
    const rec: Recorder = {
      dispatches: [],
      pinned: [],
      used: new Set(),
      produced: new Set(),
      free: new Map(),
    };
    const recordAndSubmit = backend.recordAndSubmit;
    const device = backend.device;
    const createBindGroup = device.createBindGroup;
    let lastBindGroup: { group: GPUBindGroup; desc: GPUBindGroupDescriptor } | null = null;
    const own = backend as unknown as Record<string, unknown>;
    const { read, readSync } = own;
    own.recordAndSubmit = function (this: ReplayBackend, program: ProgramLike, ...rest: unknown[]) {
      lastBindGroup = null;
      recordAndSubmit.call(this, program, ...(rest as [unknown, unknown[], unknown]));
      if (!lastBindGroup) throw new Error('webgpu-replay: a program ran without a bind group');
      const { group, desc } = lastBindGroup as { group: GPUBindGroup; desc: GPUBindGroupDescriptor };
      for (const e of desc.entries) {
        const buf = (e.resource as GPUBufferBinding).buffer;
        if (buf) rec.used.add(buf);
      }
      const [x, y, z] = program.dispatch;
      rec.dispatches.push({
        pipeline: program.pipeline,
        bindGroup: group,
        desc,
        x,
        y: y ?? 1,
        z: z ?? 1,
        label: programLabel(program),
      });
    };
    (device as unknown as Record<string, unknown>).createBindGroup = function (
      this: GPUDevice,
      desc: GPUBindGroupDescriptor,
    ) {
      const group = createBindGroup.call(device, desc);
      lastBindGroup = { group, desc };
      return group;
    };
    const readback = () =>
      new Error('webgpu-replay: a readback inside a recorded step; read results after it');
    let readRefused = false;
    own.read = () => {
      readRefused = true;
      return Promise.reject(readback());
    };
    own.readSync = () => {
      readRefused = true;
      throw readback();
    };
    recording = rec;
    let result: T;
    try {
      result = fn();
      flushTfjs(backend); // every release of the step reaches the pin
      if (readRefused) throw readback();
    } catch (e) {
      recording = null;
      for (const b of [...rec.pinned, ...[...rec.free.values()].flat()]) releaseKept(backend, b);
      tf.dispose(held);
      throw e;
    } finally {
      recording = null;
      delete own.recordAndSubmit;
      delete own.read;
      delete own.readSync;
      delete (device as unknown as Record<string, unknown>).createBindGroup;
      if (own.recordAndSubmit !== recordAndSubmit) own.recordAndSubmit = recordAndSubmit;
      if (own.read !== read) own.read = read;
      if (own.readSync !== readSync) own.readSync = readSync;
      if (device.createBindGroup !== createBindGroup)
        (device as unknown as Record<string, unknown>).createBindGroup = createBindGroup;
    }
    // The free list's buffers are the frame's intermediates: they move to the frames' shared scratch buffers.
    const scratch = shareScratch(backend, rec);
    const frame = new ReplayFrame(backend, rec.dispatches, rec.pinned, scratch, rec.used, held, inputBuffers);
    for (const b of scratch) scratchOwners.get(b)!.add(frame);
    return { frame, result };
  }

  /** @internal Bytes of the buffers this frame alone keeps (uniforms, uploads, older tensors released in it). */
  get ownBytes(): number {
    return this.pinned.reduce((n, b) => n + b.size, 0);
  }

  /** Bytes of the buffers this frame keeps out of tfjs's pool: its own, and the scratch it shares with others. */
  get heldBytes(): number {
    return [...this.pinned, ...this.scratch].reduce((n, b) => n + b.size, 0);
  }

  /** Dispatches per replay. */
  get size(): number {
    return this.dispatches.length;
  }

  /** @internal The recorded dispatches, in order (kernels/webgpu-replay-profile.ts times them one by one). */
  recorded(): readonly RecordedDispatch[] {
    return this.dispatches;
  }

  /** @internal The device and queue the frame replays on. */
  get gpu(): { device: GPUDevice; queue: GPUQueue } {
    return { device: this.backend.device, queue: this.backend.queue };
  }

  /** False once a buffer the recording read went back to tfjs (record again), or after dispose. */
  get valid(): boolean {
    return !this.stale && !this.disposed;
  }

  /** @internal */
  reads(buffer: GPUBuffer): boolean {
    return this.used.has(buffer);
  }

  /** @internal */
  markStale(): void {
    this.stale = true;
  }

  /** Put the next values of input `i` in its buffer (before the next replay). */
  write(i: number, values: Float32Array | Int32Array): void {
    this.backend.queue.writeBuffer(
      this.inputBuffers[i],
      0,
      values.buffer,
      values.byteOffset,
      values.byteLength,
    );
  }

  /** Encode the recorded dispatches, then `copies`, in one command buffer and submit it. */
  replay(copies: ReplayCopy[] = []): void {
    if (!this.valid) throw new Error('webgpu-replay: the frame is stale or disposed; record it again');
    const backend = this.backend;
    flushTfjs(backend);
    const encoder = backend.device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    let pipeline: GPUComputePipeline | null = null;
    for (const d of this.dispatches) {
      if (d.pipeline !== pipeline) {
        pass.setPipeline(d.pipeline);
        pipeline = d.pipeline;
      }
      pass.setBindGroup(0, d.bindGroup);
      pass.dispatchWorkgroups(d.x, d.y, d.z);
    }
    pass.end();
    encodeCopies(encoder, copies);
    backend.queue.submit([encoder.finish()]);
  }

  /** Give the pinned buffers back to tfjs's pool and let go of the inputs. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    live.delete(this);
    flushTfjs(this.backend); // a replay's commands are submitted; tfjs's may use these buffers next
    for (const b of this.pinned) releaseKept(this.backend, b);
    this.pinned.length = 0;
    for (const b of this.scratch) {
      const owners = scratchOwners.get(b)!;
      owners.delete(this);
      if (owners.size === 0) {
        scratchOwners.delete(b);
        releaseKept(this.backend, b);
      }
    }
    this.scratch.length = 0;
    tf.dispose(this.held);
  }
}

// ---- scratch shared between frames -------------------------------------------------------------------------------

/**
 * The live frames' intermediates, each with the frames that use it. A frame's intermediate is written before it is
 * read within each of its replays and is dead between them, and the queue runs one replay's pass after another,
 * so frames that never run at once (all of them: one queue) can keep their intermediates in the same buffers: the
 * frames hold the largest frame's intermediates, not their sum (the update's policy and value recordings, a
 * generation's decode frame).
 */
const scratchOwners = new Map<GPUBuffer, Set<ReplayFrame>>();

/**
 * Move a finished recording's intermediates (its free list) onto scratch buffers the live frames already have,
 * one per intermediate, of the same size and usage; the bind groups that named an intermediate are made again with
 * its scratch buffer and the intermediate is destroyed. An intermediate with no such scratch buffer
 * left becomes one. Returns the frame's scratch buffers.
 */
function shareScratch(backend: ReplayBackend, rec: Recorder): GPUBuffer[] {
  const spare = new Map<string, GPUBuffer[]>();
  for (const b of scratchOwners.keys()) {
    const key = sizeKey(b.size, b.usage);
    const list = spare.get(key);
    if (list) list.push(b);
    else spare.set(key, [b]);
  }
  const moved = new Map<GPUBuffer, GPUBuffer>();
  const mine: GPUBuffer[] = [];
  for (const [key, list] of rec.free)
    for (const b of list) {
      const s = spare.get(key)?.pop();
      if (s) moved.set(b, s);
      else scratchOwners.set(b, new Set());
      mine.push(s ?? b);
    }
  if (moved.size > 0) {
    for (const d of rec.dispatches) {
      const entries = [...d.desc.entries];
      if (!entries.some((e) => moved.has((e.resource as GPUBufferBinding).buffer))) continue;
      d.desc = {
        ...d.desc,
        entries: entries.map((e) => {
          const r = e.resource as GPUBufferBinding;
          const to = r.buffer ? moved.get(r.buffer) : undefined;
          return to ? { ...e, resource: { ...r, buffer: to } } : e;
        }),
      };
      d.bindGroup = backend.device.createBindGroup(d.desc);
    }
    const release = releaseOriginal(backend);
    for (const [from, to] of moved) {
      rec.used.delete(from);
      rec.used.add(to);
      release(from, false); // destroyed, not pooled: a buffer of the recording's sizes would wait there unused
    }
  }
  return mine;
}

/** Bytes of the buffers that live frames keep out of tfjs's pool, each buffer once. */
export function replayHeldBytes(): number {
  let n = 0;
  for (const b of scratchOwners.keys()) n += b.size;
  for (const f of live) n += f.ownBytes;
  return n;
}

function encodeCopies(encoder: GPUCommandEncoder, copies: ReplayCopy[]): void {
  for (const c of copies)
    if (c.src !== c.dst || (c.srcOffset ?? 0) !== (c.dstOffset ?? 0))
      encoder.copyBufferToBuffer(c.src, c.srcOffset ?? 0, c.dst, c.dstOffset ?? 0, c.size ?? c.src.size);
}

/** Buffer copies in one command buffer, after tfjs's pending work (state carried between steps). */
export function submitCopies(backend: ReplayBackend, copies: ReplayCopy[]): void {
  if (copies.length === 0) return;
  flushTfjs(backend);
  const encoder = backend.device.createCommandEncoder();
  encodeCopies(encoder, copies);
  backend.queue.submit([encoder.finish()]);
}

/** Frames alive now (tests: none should outlive a generation). */
export function liveReplayFrames(): number {
  return live.size;
}
