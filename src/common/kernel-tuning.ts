/**
 * What timing the fused linear's kernel forms on the device decided (core/backend/webgpu-tune.ts does the timing): the
 * types, the rule and the words, without tfjs, so that the app's page can show them.
 */
/** A form is chosen where its time is at most this fraction of the other's (noise does not flip a default). */
export const TUNE_MIN_GAIN = 0.9;
/** How much smaller the products are where a software adapter is made to time them (a check that it runs). */
export const TUNE_SOFTWARE_SCALE = 16;
/** Largest relative difference (max |on − off| / max |off|) at which the two forms' values agree. */
export const TUNE_MAX_REL_DIFF = 1e-5;

/** Changes when the kernels or how they are timed change: decisions remembered under an older one are timed again. */
export const TUNE_VERSION = 'tune-2';

/** What was decided for one of the forms, and how. */
export interface KernelChoice {
  on: boolean;
  /**
   * 'timed' on this device now; 'remembered' from an earlier timing on this adapter (the store); 'set' explicitly
   * (not timed); 'not timed' (a software adapter, turned off, an error).
   */
  how: 'timed' | 'remembered' | 'set' | 'not timed';
  /** In words, for the CLI, the app and the benches' JSON. */
  why: string;
  /** Milliseconds for the tuning products, summed, without and with the form ('timed' only). */
  offMs?: number;
  onMs?: number;
  /** max |on − off| / max |off| over the products ('timed' only). */
  relDiff?: number;
  /** When it was timed (in a remembered record; the record's `at` where absent). */
  at?: string;
}

export interface WebGpuKernelTuning {
  /** The few-rows program's vector loads (decode). */
  vecRows: KernelChoice;
  /** matMulFast's tile kernel for the fused linear's tiled products (scoring, update). */
  fastTiles: KernelChoice;
  /** The f32 LM head at decode through the few-rows program instead of tfjs's matMul (absent before 2026-12-01). */
  headRows?: KernelChoice;
  /** Wall time the tuning took, in ms (0 where nothing was timed). */
  ms: number;
}

/** The decision for one form from its timing: on where it agrees and is at least TUNE_MIN_GAIN faster. */
export function decideByTiming(
  name: string,
  offMs: number,
  onMs: number,
  relDiff: number,
): Pick<KernelChoice, 'on' | 'why'> {
  const times = `${offMs.toFixed(3)} ms without, ${onMs.toFixed(3)} ms with`;
  if (!(relDiff <= TUNE_MAX_REL_DIFF))
    return {
      on: false,
      why: `${name} off: its values differ from the other form's by ${relDiff.toExponential(2)} relative (more than ${TUNE_MAX_REL_DIFF}) on this device`,
    };
  if (!(offMs > 0 && onMs > 0 && Number.isFinite(offMs) && Number.isFinite(onMs)))
    return { on: false, why: `${name} off: the timing gave no usable figure (${times})` };
  const on = onMs <= TUNE_MIN_GAIN * offMs;
  return {
    on,
    why: on
      ? `${name} on: timed faster on this device (${times})`
      : `${name} off: not ${Math.round((1 - TUNE_MIN_GAIN) * 100)}% faster on this device (${times})`,
  };
}

/** A timing kept for an adapter (TuneStore), with when it was taken. */
export interface RememberedTuning {
  at: string;
  vecRows?: KernelChoice;
  fastTiles?: KernelChoice;
  headRows?: KernelChoice;
}

/** A remembered timing's choice as this run reports it: 'remembered', with the times and when they were taken. */
export function rememberedChoice(c: KernelChoice, at: string): KernelChoice {
  const when = c.at ?? at;
  return { ...c, at: when, how: 'remembered', why: `${c.why}, as timed on ${when.slice(0, 10)}` };
}

/** The tuning in one line: each form on or off and how it was decided. */
export function describeKernelTuning(t: WebGpuKernelTuning): string {
  const why = (c: KernelChoice) => c.why.slice(c.why.indexOf(': ') + 2);
  const all = [t.vecRows, t.fastTiles, ...(t.headRows ? [t.headRows] : [])];
  if (all.every((c) => c.how === 'not timed' && why(c) === why(t.vecRows)))
    return t.headRows
      ? `vector loads in the few-rows program, the tile kernel for the tiled products and the few-rows program for the f32 LM head at decode off: ${why(t.vecRows)}.`
      : `vector loads in the few-rows program and the tile kernel for the tiled products off: ${why(t.vecRows)}.`;
  return `${all.map((c) => c.why).join('; ')}${t.ms > 0 ? ` (timed in ${(t.ms / 1000).toFixed(1)} s)` : ''}.`;
}
