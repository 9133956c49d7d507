/**
 * Choose the fused linear's kernels by timing them on this device (issue #31: "matMulFast as the default where it
 * wins"; docs/gpu.md, "Kernels chosen by timing on the device").
 *
 * Three pairs of forms (kernels/webgpu-linear.ts) give the same values and differ only in speed, by an amount that
 * depends on the GPU: the few-rows program's vector loads (setWebGpuLinearVecRows: a decode step's products),
 * matMulFast's tile kernel for the fused linear's tiled products (setWebGpuLinearFastTiles: a minibatch's scoring
 * and update), and the few-rows program for an f32 LM head at decode in place of tfjs's matMul (setWebGpuHeadRows:
 * GPT-2's head, and every f32 Llama head, at each token). Neither can be timed on this project's machines (a software adapter runs few rows through another
 * program and says nothing of a GPU's speed), and a default fixed from one GPU would be a guess on the next. So on a
 * hardware adapter the backend times both forms of each, on products of a 1.5B model's shapes, the first time it
 * starts on that adapter, and a form is used where it is at least `TUNE_MIN_GAIN` faster and its values agree with
 * the other's. The decision is remembered per adapter (`TuneStore`: a file in Node, IndexedDB in the app), so that
 * the same machine makes the same choice every time: the vector loads sum in another order, so a choice that
 * flipped between processes would change a seeded run's last bits. A setting made explicitly (the setters,
 * `PPO_WEBGPU_VEC_ROWS`, `PPO_WEBGPU_LINEAR_TILES`, `PPO_WEBGPU_HEAD_ROWS`) is kept and not timed; `PPO_WEBGPU_TUNE=0` (Node) skips the
 * timing, `=1` times again.
 *
 * How a form is timed: its products, `calls` in a row, are recorded once (kernels/webgpu-replay.ts) and the
 * recording is replayed back to back, as the recorded decode and update run, so the time is the GPU's and not
 * tfjs's per-program JavaScript (which on a fast GPU is larger than a decode product's kernel). A trial times r and
 * 2r replays, each waited for, and takes the difference over r: the wait's own latency cancels. The two forms'
 * trials alternate, three each, after about 20 ms of warm-up each, and each form's best trial counts (the least
 * disturbed by anything else on the machine). Any error while a form is built, recorded or replayed (a thrown one,
 * or an invalid pipeline or out-of-memory reported to WebGPU's error scopes) leaves that form off and says so; the
 * backend starts regardless.
 */
import * as tf from '@tensorflow/tfjs-core';
import { f16LinearNT, packF16 } from '../kernels/webgpu-f16';
import {
  linearNtDecodeWebGpu,
  linearWebGpu,
  setWebGpuHeadRows,
  setWebGpuLinearTuned,
  webGpuHeadRows,
  webGpuLinearFastTiles,
  webGpuLinearVecRows,
  setWebGpuLinearFastTiles,
  setWebGpuLinearVecRows,
} from '../kernels/webgpu-linear';
import { decodeLogits, headRowsLogits } from '../model/vocab-chunks';
import { ReplayFrame, replayBackend, type ReplayBackend } from '../kernels/webgpu-replay';
import { replayTrialMs, replaysPerTrial, warmReplays } from '../kernels/webgpu-replay-profile';
import { releaseDeviceMemory } from '../ppo/gpu-plan';
import {
  TUNE_VERSION,
  decideByTiming,
  rememberedChoice,
  type KernelChoice,
  type RememberedTuning,
  type WebGpuKernelTuning,
} from '../../common/kernel-tuning';

export * from '../../common/kernel-tuning';

/** Where decisions are remembered between runs, by adapter (TuneOptions.store). */
export interface TuneStore {
  get(key: string): Promise<RememberedTuning | null>;
  set(key: string, value: RememberedTuning): Promise<void>;
}

export interface TuneOptions {
  /** A software adapter: nothing is timed (its speed says nothing of a GPU's), unless `force`. */
  software: boolean;
  /** Time even on a software adapter, and again where a decision is remembered (PPO_WEBGPU_TUNE=1; tests). */
  force?: boolean;
  /** Skip timing altogether (PPO_WEBGPU_TUNE=0): the shipped defaults, off. */
  skip?: boolean;
  /** Divide the products' sizes by this (tests on a software adapter); 1 by default. */
  scale?: number;
  /** Products per recording (default 8) and the time one trial's shorter half aims at, in ms (default 4). */
  calls?: number;
  trialMs?: number;
  /** Other products to time a form on (tests: a failing or disagreeing one); the shapes above by default. */
  products?: Partial<Record<TunedForm, (scale: number) => TuneProductSource[]>>;
  /** Where decisions are remembered, and this adapter's key in it (adapterTuneKey); none: timed every time. */
  store?: TuneStore;
  adapterKey?: string;
}

/** The switches timed here: the vector loads, the tile kernel, the f32 LM head at decode. */
type TunedForm = 'vecRows' | 'fastTiles' | 'headRows';

let last: WebGpuKernelTuning | null = null;

/** The last tuning's result in this process or worker (null: none has run). */
export function webGpuKernelTuning(): WebGpuKernelTuning | null {
  return last;
}

/** Forget the tuning: both forms back to off wherever no setting was made (tests). */
export function resetWebGpuKernelTuning(): void {
  setWebGpuLinearTuned({ fastTiles: false, vecRows: false, headRows: false });
  last = null;
}

/** One product of a form, run `calls` times in a recording (call i: `run(i)`); `owned` disposed after. */
export interface TuneProduct {
  run: (i: number) => tf.Tensor;
  owned: tf.Tensor[];
  /** The calls whose values the two forms must agree on (default: call 0). */
  checks?: number[];
}
/** A product, or how to make it (made just before it is timed, disposed right after). */
export type TuneProductSource = TuneProduct | (() => TuneProduct);

/**
 * Bytes of distinct weights the vector loads' products cycle through (at scale 1), so that a recording reads more
 * than a GPU's L2 holds (the H200's is 50 MB), as a decode reads each layer's weights from memory once a token.
 */
export const TUNE_DECODE_BYTES = 110e6;

/** Host values: a fixed pseudo-random pattern laid out cheaply (a few ms for millions of values). */
const PATTERN = Float32Array.from({ length: 4099 }, (_, i) => Math.sin(i * 78.233 + 12.9898));
function values(n: number, seed: number, scale: number): Float32Array {
  const out = new Float32Array(n);
  let j = (seed * 131) % PATTERN.length;
  for (let i = 0; i < n; i++) {
    out[i] = scale * PATTERN[j];
    j = j + 1 === PATTERN.length ? 0 : j + 1;
  }
  return out;
}
const dim = (n: number, scale: number, multiple: number): number =>
  Math.max(multiple, Math.round(n / scale / multiple) * multiple);

/** `copies` − 1 more weights from w on the device: its rows rotated, each a buffer of its own. */
function rotations(w: tf.Tensor2D, copies: number): tf.Tensor2D[] {
  const N = w.shape[0];
  return [
    w,
    ...Array.from({ length: copies - 1 }, (_, j) =>
      tf.tidy(() => {
        const at = Math.max(1, Math.floor(((j + 1) * N) / copies));
        return tf.concat([tf.slice(w, [at, 0], [N - at, -1]), tf.slice(w, [0, 0], [at, -1])]) as tf.Tensor2D;
      }),
    ),
  ];
}

/**
 * The vector loads' products: Qwen2.5-1.5B's gate_proj at decode ([M, 1536] · W [8960, 1536]ᵀ) with W in f32, then
 * packed f16, at 1 row (a chat's decode) and 16 (GRPO's generation), over as many distinct W's as make
 * TUNE_DECODE_BYTES (2 in f32, 4 in f16).
 */
function vecProducts(scale: number): TuneProductSource[] {
  const K = dim(1536, scale, 8);
  const N = dim(8960, scale, 8);
  return [false, true].map((f16) => () => {
    const v = values(N * K, 7, 0.02);
    const w0 = f16 ? tf.tensor2d(packF16(v), [N, K / 2], 'int32') : tf.tensor2d(v, [N, K]);
    const copies = Math.max(2, Math.ceil(TUNE_DECODE_BYTES / scale ** 2 / (N * K * (f16 ? 2 : 4))));
    const ws = rotations(w0, copies);
    const xs = [1, 16].map((M) => tf.tensor2d(values(M * K, 3 + M, 1), [M, K]));
    // Each W once per pass over them, 1 row then 16 (a W is read again only after the others).
    const n = ws.length;
    return {
      run: (i: number) => linearNtDecodeWebGpu(xs[Math.floor(i / n) % 2], { w: [ws[i % n]] }),
      owned: [...ws, ...xs],
      checks: [0, n],
    };
  });
}

/**
 * The tile kernel's products: a minibatch's forward through Qwen2.5-1.5B's f16 base ([512, 1536] · W [4096, 1536]ᵀ,
 * packed) and GPT-2's c_fc with gelu_new ([512, 768] · [768, 3072] + b).
 */
function tileProducts(scale: number): TuneProductSource[] {
  const M = dim(512, scale, 8);
  return [
    () => {
      const K = dim(1536, scale, 8);
      const N = dim(4096, scale, 8);
      const w = tf.tensor2d(packF16(values(N * K, 11, 0.02)), [N, K / 2], 'int32');
      const x = tf.tensor2d(values(M * K, 12, 1), [M, K]);
      return { run: () => f16LinearNT(x, w), owned: [w, x] };
    },
    () => {
      const C = dim(768, scale, 8);
      const x = tf.tensor2d(values(M * C, 13, 1), [M, C]);
      const w = tf.tensor2d(values(C * 4 * C, 14, 0.02), [C, 4 * C]);
      const b = tf.tensor1d(values(4 * C, 15, 0.1));
      return { run: () => linearWebGpu(x, w, b, { gelu: true }), owned: [x, w, b] };
    },
  ];
}

/**
 * The f32 LM head's products at decode (model/vocab-chunks.ts headRowsLogits inside decodeLogits: tfjs's matMul, or
 * the few-rows program): [M, 768] · W [32768, 768]ᵀ (a block of GPT-2's tied head) and [M, 1536] · W [16384, 1536]ᵀ (of
 * Qwen2.5-1.5B's), at 1 row and 16, over as many distinct W's as make TUNE_DECODE_BYTES (2 each).
 */
function headProducts(scale: number): TuneProductSource[] {
  return [
    [768, 32768],
    [1536, 16384],
  ].map(([k, n]) => () => {
    const K = dim(k, scale, 8);
    const N = dim(n, scale, 8);
    const w0 = tf.tensor2d(values(N * K, 17, 0.02), [N, K]);
    const ws = rotations(w0, Math.max(2, Math.ceil(TUNE_DECODE_BYTES / scale ** 2 / (N * K * 4))));
    const xs = [1, 16].map((M) => tf.tensor2d(values(M * K, 19 + M, 1), [M, K]));
    const c = ws.length;
    return {
      // As a generation runs the head (decodeLogits: the only place the few-rows form applies).
      run: (i: number) =>
        decodeLogits({ lmHead: (h) => headRowsLogits(h, ws[i % c]) }, xs[Math.floor(i / c) % 2]),
      owned: [...ws, ...xs],
      checks: [0, c],
    };
  });
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
    thrown = (e as Error).message ?? String(e);
  }
  let popped: string | null = null;
  try {
    const validation = await device.popErrorScope();
    const oom = await device.popErrorScope();
    popped = validation?.message ?? (oom ? `out of memory: ${oom.message}` : null);
  } catch (e) {
    popped = `the error scopes failed: ${(e as Error).message}`;
  }
  return { value, error: thrown ?? popped };
}

/** Both forms of one product, each recorded `calls` calls long; values compared at calls 0 and 1. */
async function recordForms(
  backend: ReplayBackend,
  p: TuneProduct,
  setForm: (on: boolean) => void,
  calls: number,
  frames: ReplayFrame[],
  results: tf.Tensor[],
): Promise<number> {
  let relDiff = 0;
  for (const i of p.checks ?? [0]) {
    setForm(false);
    const a = p.run(i);
    let b: tf.Tensor;
    try {
      setForm(true);
      b = p.run(i);
    } catch (e) {
      a.dispose();
      throw e;
    }
    relDiff = Math.max(relDiff, await pairRelDiff(a, b));
  }
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
  return relDiff;
}

/** Milliseconds per product call of each form, summed over the products (module comment: how). */
async function timeForms(
  backend: ReplayBackend,
  sources: TuneProductSource[],
  setForm: (on: boolean) => void,
  calls: number,
  trialMs: number,
): Promise<{ offMs: number; onMs: number; relDiff: number }> {
  let offMs = 0;
  let onMs = 0;
  let relDiff = 0;
  for (const source of sources) {
    const frames: ReplayFrame[] = [];
    const results: tf.Tensor[] = [];
    let p: TuneProduct | null = null;
    try {
      p = typeof source === 'function' ? source() : source;
      relDiff = Math.max(relDiff, await recordForms(backend, p, setForm, calls, frames, results));
      // Warm-up: pipelines, bind groups and clocks, about 20 ms of each form (at least two replays).
      let once = Infinity;
      for (const f of frames) once = Math.min(once, await warmReplays(f));
      const reps = replaysPerTrial(once, trialMs);
      // Per product call: a trial's ms a replay over the calls it records.
      const best = [Infinity, Infinity];
      for (let t = 0; t < 3; t++) {
        const order = t % 2 === 0 ? [0, 1] : [1, 0];
        for (const i of order) best[i] = Math.min(best[i], (await replayTrialMs(frames[i], reps)) / calls);
      }
      offMs += best[0];
      onMs += best[1];
    } finally {
      for (const f of frames) f.dispose();
      tf.dispose(results);
      if (p) tf.dispose(p.owned);
    }
  }
  return { offMs, onMs, relDiff };
}

/**
 * A key for this adapter in a TuneStore: what it says it is, and TUNE_VERSION (a change to the kernels or to how
 * they are timed makes earlier decisions moot).
 */
export function adapterTuneKey(a: {
  vendor?: string;
  architecture?: string;
  device?: string;
  description?: string;
}): string {
  return [TUNE_VERSION, a.vendor, a.architecture, a.device, a.description].map((x) => x ?? '').join('|');
}

/**
 * Time both forms of each switch on the current WebGPU backend and use the faster where no setting was made
 * (module comment), or what the store remembers for this adapter. Returns what was decided; webGpuKernelTuning()
 * keeps it. Never throws: a failure leaves a form off and says why.
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
    {
      key: 'headRows' as const,
      name: 'the few-rows program for the f32 LM head at decode',
      set: webGpuHeadRows(),
      setForm: setWebGpuHeadRows,
      products: headProducts,
    },
  ];
  const storeKey = o.store && o.adapterKey ? o.adapterKey : null;
  let remembered: RememberedTuning | null = null;
  if (!skipWhy && storeKey && !o.force) {
    try {
      remembered = await o.store!.get(storeKey);
    } catch {
      remembered = null; // an unreadable store: time again
    }
  }
  const result = {} as Record<TunedForm, KernelChoice>;
  let timedAny = false;
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
    const known = remembered?.[s.key];
    if (known && known.how === 'timed') {
      setWebGpuLinearTuned({ [s.key]: known.on });
      result[s.key] = rememberedChoice(known, remembered!.at);
      continue;
    }
    timedAny = true;
    let timed: { value?: { offMs: number; onMs: number; relDiff: number }; error: string | null };
    try {
      const sources = (o.products?.[s.key] ?? s.products)(scale);
      timed = await scoped(device, () => timeForms(backend, sources, (on) => s.setForm(on), calls, trialMs));
    } catch (e) {
      timed = { error: (e as Error).message ?? String(e) };
    } finally {
      s.setForm(null);
    }
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
  if (timedAny) {
    // The products' buffers went to tfjs's pool of freed buffers, which keeps them for tensors of their sizes:
    // give them back to the device (a few hundred MB on a GPU).
    try {
      await releaseDeviceMemory();
    } catch {
      // the pool stays as it is
    }
    // Remember what was timed (both forms timed and agreeing or not: a failure is timed again next time).
    if (storeKey && Object.values(result).some((c) => c.how === 'timed')) {
      // What was timed now, with this date, and what was remembered, as it was stored (its own date): a choice
      // reused or set this time is not stored as one timed now, or it would be timed again at the next start.
      const at = new Date().toISOString();
      const record: RememberedTuning = { at };
      for (const k of Object.keys(result) as TunedForm[]) {
        const c = result[k];
        const kept = remembered?.[k];
        if (c.how === 'timed') record[k] = { ...c, at };
        else if (c.how === 'remembered' && kept?.how === 'timed') record[k] = { at: remembered!.at, ...kept };
      }
      try {
        await o.store!.set(storeKey, record);
      } catch {
        // not remembered: timed again next time
      }
    }
  }
  last = { ...result, ms: timedAny ? performance.now() - t0 : 0 };
  return last;
}
