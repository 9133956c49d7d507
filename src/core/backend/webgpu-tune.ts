/**
 * Choose the fused linear's kernels by timing them on this device (issue #31: "matMulFast as the default where it
 * wins"; docs/gpu.md, "Kernels chosen by timing on the device").
 *
 * Two forms of the fused linear (kernels/webgpu-linear.ts) give the same values and differ only in speed, by an
 * amount that depends on the GPU: the few-rows program's vector loads (setWebGpuLinearVecRows: a decode step's
 * products) and matMulFast's tile kernel for the tiled products (setWebGpuLinearFastTiles: a minibatch's scoring and
 * update). Neither can be timed on this project's machines (a software adapter runs few rows through another
 * program and says nothing of a GPU's speed), and a default fixed from one GPU would be a guess on the next. So on a
 * hardware adapter the backend times both forms of each, on products of a 1.5B model's shapes, once when it
 * starts (well under a second on a desktop GPU), and a form is used where it is at least `TUNE_MIN_GAIN` faster
 * and its values agree with the other's. A setting made explicitly (the setters, `PPO_WEBGPU_VEC_ROWS`,
 * `PPO_WEBGPU_LINEAR_TILES`) is kept and not timed; `PPO_WEBGPU_TUNE=0` (Node) skips the timing.
 *
 * How a form is timed: its products, `calls` in a row, are recorded once (kernels/webgpu-replay.ts) and the
 * recording is replayed back to back and waited for, as the recorded decode and update run, so the time is the
 * GPU's and not tfjs's per-program JavaScript (which on a fast GPU is larger than a decode product's kernel). The
 * two forms' trials alternate, three each, and each form's best trial counts (the least disturbed by anything else
 * on the machine). An invalid pipeline or an out-of-memory error while a form is recorded or replayed (WebGPU
 * error scopes) leaves that form off and says so.
 */
import * as tf from '@tensorflow/tfjs-core';
import { f16LinearNT, packF16 } from '../kernels/webgpu-f16';
import {
  linearNtDecodeWebGpu,
  linearWebGpu,
  setWebGpuLinearTuned,
  webGpuLinearFastTiles,
  webGpuLinearVecRows,
  setWebGpuLinearFastTiles,
  setWebGpuLinearVecRows,
} from '../kernels/webgpu-linear';
import { ReplayFrame, replayBackend, type ReplayBackend } from '../kernels/webgpu-replay';
import { releaseDeviceMemory } from '../ppo/gpu-plan';
import { decideByTiming, type KernelChoice, type WebGpuKernelTuning } from '../../common/kernel-tuning';

export * from '../../common/kernel-tuning';

export interface TuneOptions {
  /** A software adapter: nothing is timed (its speed says nothing of a GPU's), unless `force`. */
  software: boolean;
  /** Time even on a software adapter (tests). */
  force?: boolean;
  /** Skip timing altogether (PPO_WEBGPU_TUNE=0): the shipped defaults, off. */
  skip?: boolean;
  /** Divide the products' sizes by this (tests on a software adapter); 1 by default. */
  scale?: number;
  /** Products per recording (default 8) and the time one trial aims at, in ms (default 4). */
  calls?: number;
  trialMs?: number;
  /** Other products to time a form on (tests: a failing or disagreeing one); the shapes above by default. */
  products?: Partial<Record<'vecRows' | 'fastTiles', (scale: number) => TuneProduct[]>>;
}

let last: WebGpuKernelTuning | null = null;

/** The last tuning's result in this process or worker (null: none has run). */
export function webGpuKernelTuning(): WebGpuKernelTuning | null {
  return last;
}

/** Forget the tuning: both forms back to off wherever no setting was made (tests). */
export function resetWebGpuKernelTuning(): void {
  setWebGpuLinearTuned({ fastTiles: false, vecRows: false });
  last = null;
}

/** One product of a form: made once, run `calls` times in a recording (call i: `run(i)`); `owned` disposed after. */
export interface TuneProduct {
  run: (i: number) => tf.Tensor;
  owned: tf.Tensor[];
}

/**
 * Distinct weights the vector loads' products cycle through, so that a recording reads more than a GPU's L2 holds
 * (4 × 27.5 MB in f16 against the H200's 50 MB), as a decode reads each layer's weights from memory once a token.
 */
export const TUNE_DECODE_WEIGHTS = 4;

const rand = (n: number, seed: number, scale: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => scale * Math.sin(seed * 12.9898 + i * 78.233));
const dim = (n: number, scale: number, multiple: number): number =>
  Math.max(multiple, Math.round(n / scale / multiple) * multiple);

/**
 * The vector loads' products: Qwen2.5-1.5B's gate_proj at decode ([M, 1536] · W [8960, 1536]ᵀ) with W in f32 and
 * packed f16, at 1 row (a chat's decode) and 16 (GRPO's generation), over TUNE_DECODE_WEIGHTS distinct W's.
 */
function vecProducts(scale: number): TuneProduct[] {
  const K = dim(1536, scale, 8);
  const N = dim(8960, scale, 8);
  const out: TuneProduct[] = [];
  for (const f16 of [false, true]) {
    // The same W's for both row counts (the second product owns them: disposed once).
    const ws = Array.from({ length: TUNE_DECODE_WEIGHTS }, (_, j) => {
      const v = rand(N * K, 7 + j, 0.02);
      return f16 ? tf.tensor2d(packF16(v), [N, K / 2], 'int32') : tf.tensor2d(v, [N, K]);
    });
    for (const M of [1, 16]) {
      const x = tf.tensor2d(rand(M * K, 3 + M, 1), [M, K]);
      out.push({
        run: (i) => linearNtDecodeWebGpu(x, { w: [ws[i % ws.length]] }),
        owned: M === 16 ? [...ws, x] : [x],
      });
    }
  }
  return out;
}

/**
 * The tile kernel's products: a minibatch's forward through Qwen2.5-1.5B's f16 base ([512, 1536] · W [4096, 1536]ᵀ,
 * packed) and GPT-2's c_fc with gelu_new ([512, 768] · [768, 3072] + b).
 */
function tileProducts(scale: number): TuneProduct[] {
  const M = dim(512, scale, 8);
  const QK = dim(1536, scale, 8);
  const QN = dim(4096, scale, 8);
  const wq = tf.tensor2d(packF16(rand(QN * QK, 11, 0.02)), [QN, QK / 2], 'int32');
  const xq = tf.tensor2d(rand(M * QK, 12, 1), [M, QK]);
  const GC = dim(768, scale, 8);
  const xg = tf.tensor2d(rand(M * GC, 13, 1), [M, GC]);
  const wg = tf.tensor2d(rand(GC * 4 * GC, 14, 0.02), [GC, 4 * GC]);
  const bg = tf.tensor1d(rand(4 * GC, 15, 0.1));
  return [
    { run: () => f16LinearNT(xq, wq), owned: [wq, xq] },
    { run: () => linearWebGpu(xg, wg, bg, { gelu: true }), owned: [xg, wg, bg] },
  ];
}

/** max |b − a| / max |a| of one product computed two ways (both read, then disposed; scripts/kernel-time.ts too). */
export async function pairRelDiff(a: tf.Tensor, b: tf.Tensor): Promise<number> {
  const [va, vb] = [await a.data(), await b.data()];
  tf.dispose([a, b]);
  let num = 0;
  let den = 0;
  for (let i = 0; i < va.length; i++) {
    num = Math.max(num, Math.abs(vb[i] - va[i]));
    den = Math.max(den, Math.abs(va[i]));
  }
  return den > 0 ? num / den : num;
}

interface Scoped {
  pushErrorScope(filter: 'validation' | 'out-of-memory'): void;
  popErrorScope(): Promise<{ message: string } | null>;
}

/** Run `fn` inside WebGPU validation and out-of-memory error scopes; the first error's message, or null. */
async function scoped<T>(device: Scoped, fn: () => Promise<T>): Promise<{ value?: T; error: string | null }> {
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  let value: T | undefined;
  let thrown: string | null = null;
  try {
    value = await fn();
  } catch (e) {
    thrown = (e as Error).message;
  }
  const validation = await device.popErrorScope();
  const oom = await device.popErrorScope();
  const error = thrown ?? validation?.message ?? (oom ? `out of memory: ${oom.message}` : null);
  return { value, error };
}

/** Milliseconds per product of each form: recorded `calls` in a row, the best of three alternating trials. */
async function timeForms(
  backend: ReplayBackend,
  products: TuneProduct[],
  setForm: (on: boolean) => void,
  calls: number,
  trialMs: number,
): Promise<{ offMs: number; onMs: number; relDiff: number }> {
  let offMs = 0;
  let onMs = 0;
  let relDiff = 0;
  for (const p of products) {
    setForm(false);
    const a = p.run(0);
    let b: tf.Tensor;
    try {
      setForm(true);
      b = p.run(0);
    } catch (e) {
      a.dispose();
      throw e;
    }
    relDiff = Math.max(relDiff, await pairRelDiff(a, b));
    const frames: ReplayFrame[] = [];
    const results: tf.Tensor[] = [];
    try {
      for (const on of [false, true]) {
        setForm(on);
        const { frame, result } = ReplayFrame.record(backend, () => {
          let y = p.run(0);
          for (let i = 1; i < calls; i++) {
            y.dispose();
            y = p.run(i);
          }
          return y;
        }, []);
        frames.push(frame);
        results.push(result);
      }
      const settle = () => backend.queue.onSubmittedWorkDone();
      const trial = async (f: ReplayFrame, reps: number) => {
        const t0 = performance.now();
        for (let r = 0; r < reps; r++) f.replay();
        await settle();
        return (performance.now() - t0) / (reps * calls);
      };
      for (const f of frames) await trial(f, 1); // warm: first use of the pipelines and bind groups
      const once = await trial(frames[0], 1);
      const reps = Math.min(64, Math.max(1, Math.ceil(trialMs / Math.max(once * calls, 1e-3))));
      const best = [Infinity, Infinity];
      for (let t = 0; t < 3; t++) {
        const order = t % 2 === 0 ? [0, 1] : [1, 0];
        for (const i of order) best[i] = Math.min(best[i], await trial(frames[i], reps));
      }
      offMs += best[0];
      onMs += best[1];
    } finally {
      for (const f of frames) f.dispose();
      tf.dispose(results);
    }
  }
  return { offMs, onMs, relDiff };
}

/**
 * Time both forms of each switch on the current WebGPU backend and use the faster where no setting was made
 * (module comment). Returns what was decided; webGpuKernelTuning() keeps it.
 */
export async function tuneWebGpuLinear(o: TuneOptions): Promise<WebGpuKernelTuning> {
  const t0 = performance.now();
  const scale = o.scale ?? 1;
  const calls = o.calls ?? 8;
  const trialMs = o.trialMs ?? 4;
  const backend = replayBackend();
  const device = (backend as unknown as { device?: Scoped } | null)?.device;
  const skipWhy = !backend
    ? 'not timed: the backend is not WebGPU'
    : o.skip
      ? 'not timed: timing turned off (PPO_WEBGPU_TUNE=0)'
      : o.software && !o.force
        ? 'not timed: a software adapter (its speed says nothing of a GPU’s)'
        : null;
  const switches = [
    {
      key: 'vecRows' as const,
      name: 'vector loads in the few-rows program',
      set: webGpuLinearVecRows(),
      setForm: setWebGpuLinearVecRows,
      products: vecProducts,
    },
    {
      key: 'fastTiles' as const,
      name: 'the tile kernel for the tiled products',
      set: webGpuLinearFastTiles(),
      setForm: setWebGpuLinearFastTiles,
      products: tileProducts,
    },
  ];
  const result = {} as Record<'vecRows' | 'fastTiles', KernelChoice>;
  for (const s of switches) {
    if (s.set !== null) {
      result[s.key] = { on: s.set, how: 'set', why: `${s.name} ${s.set ? 'on' : 'off'}: set explicitly` };
      continue;
    }
    if (skipWhy || !backend || !device) {
      setWebGpuLinearTuned({ [s.key]: false });
      result[s.key] = { on: false, how: 'not timed', why: `${s.name} off: ${skipWhy ?? 'no device'}` };
      continue;
    }
    const products = (o.products?.[s.key] ?? s.products)(scale);
    const timed = await scoped(device, () =>
      timeForms(backend, products, (on) => s.setForm(on), calls, trialMs),
    ).finally(() => {
      s.setForm(null);
      for (const p of products) tf.dispose(p.owned);
    });
    if (timed.error || !timed.value) {
      setWebGpuLinearTuned({ [s.key]: false });
      result[s.key] = {
        on: false,
        how: 'not timed',
        why: `${s.name} off: timing it failed on this device (${timed.error ?? 'no result'})`,
      };
      continue;
    }
    const { offMs, onMs, relDiff } = timed.value;
    const d = decideByTiming(s.name, offMs, onMs, relDiff);
    setWebGpuLinearTuned({ [s.key]: d.on });
    result[s.key] = { ...d, how: 'timed', offMs, onMs, relDiff };
  }
  // The products' buffers went to tfjs's pool of freed buffers, which keeps them for tensors of their sizes: give
  // them back to the device (a few hundred MB on a GPU).
  if (!skipWhy) await releaseDeviceMemory();
  last = { ...result, ms: skipWhy ? 0 : performance.now() - t0 };
  return last;
}
