/**
 * Kept runs: every run the person starts is kept (its config with the seed, its metric history and a short
 * editable name) so runs can be compared side by side. Pure parts here (names, the storage budget, the overlay
 * list, the comparison CSV) so Node tests cover them; the storage is injected: IndexedDB in the browser (a
 * database of its own, apart from the autosaves of src/worker/autosave-web.ts), a Map in tests.
 */
import { createStore, del, set, values, type UseStore } from 'idb-keyval';
import {
  CONFIG_FIELDS,
  describeAllowed,
  validateConfig,
  type ConfigKey,
  type TrainConfig,
} from '../../common/config';
import { metricColumns } from '../../common/checkpoint-zip';
import type { MetricsByName } from '../../worker/protocol';
import { formatBytes } from './format';

export interface KeptRun {
  /** Unique in this browser. */
  id: string;
  /** Short and editable: "grpo G=4 lr 3e-4". */
  name: string;
  /** The validated config the run was trained with (its seed included). */
  config: TrainConfig;
  /** Milliseconds since 1970: when its first step ran. */
  createdAt: number;
  updatedAt: number;
  /** One entry per step, oldest first (value metrics are null for critic-free runs). */
  metrics: MetricsByName[];
  /** A DPO or SFT job instead of an RL run of `config.algorithm` (absent: RL). */
  job?: 'dpo' | 'sft';
}

/** Where kept runs live. */
export interface RunStorage {
  list(): Promise<KeptRun[]>;
  put(run: KeptRun): Promise<void>;
  remove(id: string): Promise<void>;
}

export const RUNS_DB = 'ppo-playground-runs';
export const RUNS_STORE = 'runs';
const KEY_PREFIX = 'run:';

/** Kept runs in IndexedDB (idb-keyval), one entry `run:<id>` per run. */
export function indexedDbRunStorage(): RunStorage {
  let store: UseStore | null = null;
  const use = (): UseStore => {
    if (typeof indexedDB === 'undefined') throw new Error('this browser offers no IndexedDB here');
    store ??= createStore(RUNS_DB, RUNS_STORE);
    return store;
  };
  return {
    list: async () => ((await values(use())) as unknown[]).filter(isKeptRun),
    put: (run) => set(KEY_PREFIX + run.id, run, use()),
    remove: (id) => del(KEY_PREFIX + id, use()),
  };
}

/** Kept runs in memory (tests, and browsers without IndexedDB). */
export function memoryRunStorage(initial: KeptRun[] = []): RunStorage & { map: Map<string, KeptRun> } {
  const map = new Map<string, KeptRun>(initial.map((r) => [r.id, r]));
  return {
    map,
    list: async () => [...map.values()].map((r) => structuredClone(r)),
    put: async (run) => void map.set(run.id, structuredClone(run)),
    remove: async (id) => void map.delete(id),
  };
}

function isKeptRun(v: unknown): v is KeptRun {
  const r = v as Partial<KeptRun> | null;
  return (
    typeof r === 'object' &&
    r !== null &&
    typeof r.id === 'string' &&
    typeof r.name === 'string' &&
    typeof r.createdAt === 'number' &&
    typeof r.config === 'object' &&
    Array.isArray(r.metrics)
  );
}

export function newRunId(now = Date.now()): string {
  return `${now.toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

// ---- names ------------------------------------------------------------------------------------------------

/** What a kept run trained: its DPO/SFT job, else its config's algorithm. */
export function runKind(run: Pick<KeptRun, 'config' | 'job'>): string {
  return run.job ?? algorithmOf(run.config);
}

/** The run's algorithm (docs/formats.md §7); "ppo" for configs from before the key existed. */
export function algorithmOf(config: TrainConfig): string {
  const a = (config as unknown as Record<string, unknown>).algorithm;
  return typeof a === 'string' ? a : 'ppo';
}

/** Samples per prompt: `groupSize`, where 0 (or absent) means the algorithm's default (4 for grpo and rloo, else 1). */
export function groupSizeOf(config: TrainConfig): number {
  const g = (config as unknown as Record<string, unknown>).groupSize;
  if (typeof g === 'number' && g > 0) return g;
  const a = algorithmOf(config);
  return a === 'grpo' || a === 'rloo' ? 4 : 1;
}

/** Whether the algorithm trains a value model (ppo does; grpo, rloo and reinforce++ do not). */
export function hasValueModel(config: TrainConfig): boolean {
  return algorithmOf(config) === 'ppo';
}

/** "GRPO", "RLOO", "REINFORCE++". */
export function algorithmLabel(config: TrainConfig): string {
  return algorithmOf(config).toUpperCase();
}

/** A learning rate as people write it: 3e-4, 1e-5, 2.5e-4, 0.5. */
export function formatLearningRate(lr: number): string {
  if (!Number.isFinite(lr) || lr === 0) return String(lr);
  if (Math.abs(lr) >= 0.01) return String(Number(lr.toPrecision(3)));
  return Number(lr.toPrecision(3))
    .toExponential()
    .replace('e+', 'e')
    .replace(/\.?0+e/, 'e');
}

/** A model's short name: "tiny", "gpt2" for "openai-community/gpt2", "gpt2-4x160" for "uploaded:gpt2-4x160". */
export function modelShortName(model: string): string {
  return (
    model
      .replace(/^uploaded:/, '')
      .split('/')
      .pop() || model
  );
}

/** What a run trains on: its task, or "own prompts". */
export function taskShortName(config: TrainConfig): string {
  return config.prompts && config.prompts.length > 0 ? 'own prompts' : (config.task ?? 'no task');
}

/**
 * A run's short name from its config: algorithm, G when not 1, the learning rate, LoRA when on, then the model
 * and the task ("ppo lr 1e-4 · tiny · sentiment").
 */
export function runName(config: TrainConfig): string {
  const parts = [algorithmOf(config)];
  const g = groupSizeOf(config);
  if (g !== 1) parts.push(`G=${g}`);
  parts.push(`lr ${formatLearningRate(config.learningRate)}`);
  if (config.lora > 0) parts.push(`lora r=${config.lora}`);
  return `${parts.join(' ')} · ${modelShortName(config.model)} · ${taskShortName(config)}`;
}

/** `base`, or `base (2)`, `base (3)`, … when that name is taken, so every legend entry is distinct. */
export function uniqueName(base: string, taken: Iterable<string>): string {
  const names = new Set(taken);
  if (!names.has(base)) return base;
  for (let i = 2; ; i++) if (!names.has(`${base} (${i})`)) return `${base} (${i})`;
}

// ---- the budget ---------------------------------------------------------------------------------------------

export interface RunBudget {
  /** Kept runs at most. */
  maxRuns: number;
  /** Bytes of metric history at most (estimated by estimateRunBytes). */
  maxBytes: number;
}

export const RUN_BUDGET: RunBudget = { maxRuns: 20, maxBytes: 16 * 1024 ** 2 };

/** About how many bytes a run takes in IndexedDB: ~24 bytes per metric value, plus its config. */
export function estimateRunBytes(run: KeptRun): number {
  const last = run.metrics[run.metrics.length - 1];
  const perRow = last ? Object.keys(last).length * 24 : 0;
  return 2048 + run.metrics.length * perRow;
}

export interface BudgetResult {
  kept: KeptRun[];
  dropped: KeptRun[];
  /** In words, for the person ("dropped the oldest run 'ppo lr 1e-4' to stay within 20 kept runs"); null when none was. */
  message: string | null;
}

/**
 * The runs within the budget: the oldest (by createdAt) are dropped first while there are more than
 * `maxRuns` or their history is over `maxBytes`. `keepId` (the run in progress) is never dropped.
 */
export function enforceBudget(
  runs: readonly KeptRun[],
  budget: RunBudget,
  keepId?: string | null,
): BudgetResult {
  const kept = [...runs].sort((a, b) => a.createdAt - b.createdAt);
  let bytes = kept.reduce((sum, r) => sum + estimateRunBytes(r), 0);
  const dropped: KeptRun[] = [];
  let overBytes = false;
  let overCount = false;
  for (;;) {
    const tooMany = kept.length > budget.maxRuns;
    const tooBig = bytes > budget.maxBytes;
    if (!tooMany && !tooBig) break;
    const i = kept.findIndex((r) => r.id !== keepId);
    if (i < 0) break;
    const [gone] = kept.splice(i, 1);
    bytes -= estimateRunBytes(gone);
    dropped.push(gone);
    if (tooMany) overCount = true;
    else overBytes = true;
  }
  if (dropped.length === 0) return { kept, dropped, message: null };
  const names = dropped.map((r) => `'${r.name}'`).join(', ');
  const limits = [
    overCount ? `${budget.maxRuns} kept run${budget.maxRuns === 1 ? '' : 's'}` : null,
    overBytes ? `${formatBytes(budget.maxBytes)} of kept history` : null,
  ].filter(Boolean);
  const what = dropped.length === 1 ? `the oldest run ${names}` : `the oldest runs ${names}`;
  return { kept, dropped, message: `dropped ${what} to stay within ${limits.join(' and ')}` };
}

// ---- the comparison -----------------------------------------------------------------------------------------

/** Runs compared at most. */
export const MAX_COMPARED = 4;

/** One colour per overlaid run, in overlay order. */
export const RUN_COLOURS = ['#0877bd', '#e8710a', '#1e8e3e', '#a142f4', '#d93025'] as const;

export interface OverlayRun {
  id: string;
  name: string;
  colour: string;
  /** The run in the worker now: drawn bold. */
  current: boolean;
  metrics: readonly MetricsByName[];
  config: TrainConfig | null;
}

/**
 * The runs the charts draw: the compared ones (in the order they were chosen), and the current run (its live
 * history) when it has steps. The current run is always drawn, whether or not it is ticked.
 */
export function overlayRuns(s: {
  runs: readonly KeptRun[];
  compared: readonly string[];
  currentRunId: string | null;
  metrics: readonly MetricsByName[];
  runConfig: TrainConfig | null;
}): OverlayRun[] {
  const byId = new Map(s.runs.map((r) => [r.id, r]));
  const out: Omit<OverlayRun, 'colour'>[] = [];
  let currentDone = false;
  const addCurrent = () => {
    if (currentDone || s.metrics.length === 0) return;
    currentDone = true;
    const kept = s.currentRunId ? byId.get(s.currentRunId) : undefined;
    out.push({
      id: s.currentRunId ?? 'current',
      name: kept?.name ?? 'current run',
      current: true,
      metrics: s.metrics,
      config: kept?.config ?? s.runConfig,
    });
  };
  for (const id of s.compared) {
    if (id === s.currentRunId) {
      addCurrent();
      continue;
    }
    const r = byId.get(id);
    if (r) out.push({ id, name: r.name, current: false, metrics: r.metrics, config: r.config });
  }
  addCurrent();
  return out.map((r, i) => ({ ...r, colour: RUN_COLOURS[i % RUN_COLOURS.length] }));
}

function csvField(s: string): string {
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/**
 * Several runs' histories as one CSV: a `run` column (the run's name), `step`, then every metric any of them
 * has (the single-run CSV's columns, src/common/checkpoint-zip.ts). Missing and null values are empty.
 */
export function comparisonCsv(runs: readonly { name: string; metrics: readonly MetricsByName[] }[]): string {
  const all = runs.flatMap((r) => r.metrics) as Record<string, number>[];
  const cols = ['step', ...metricColumns(all).filter((c) => c !== 'step')];
  const lines = [['run', ...cols].join(',')];
  for (const r of runs) {
    const name = csvField(r.name);
    for (const row of r.metrics) {
      const v = row as Record<string, number | null | undefined>;
      lines.push(
        [name, ...cols.map((c) => (v[c] === undefined || v[c] === null ? '' : String(v[c])))].join(','),
      );
    }
  }
  return lines.join('\n') + '\n';
}

// ---- "Run again with…" -------------------------------------------------------------------------------------

/** The keys "Run again with…" offers, those the config knows (algorithm and groupSize come with §7). */
export const RERUN_KEYS = ['algorithm', 'learningRate', 'seed', 'lora', 'groupSize'] as const;

/** The offered keys this config table has. */
export function rerunKeys(): ConfigKey[] {
  return RERUN_KEYS.filter((k) => Object.hasOwn(CONFIG_FIELDS, k)) as ConfigKey[];
}

/** A value typed in the form, as the key's type; an Error naming the key and what it accepts otherwise. */
export function parseSetting(key: ConfigKey, text: string): unknown {
  const f = CONFIG_FIELDS[key];
  const s = text.trim();
  const bad = () => new Error(`"${key}" must be ${describeAllowed(key)}, not ${JSON.stringify(text)}.`);
  switch (f.type) {
    case 'number': {
      const v = Number(s);
      if (s === '' || !Number.isFinite(v) || v < f.min || v > f.max || (f.integer && !Number.isInteger(v)))
        throw bad();
      return v;
    }
    case 'boolean':
      if (s === 'true' || s === 'false') return s === 'true';
      throw bad();
    case 'choice':
      if ((f.choices as readonly string[]).includes(s)) return s;
      throw bad();
    default:
      throw new Error(
        `"${key}" cannot be changed in "Run again with…"; choose one of ${rerunKeys().join(', ')}.`,
      );
  }
}

/** The config of a run again from `config` with `key` set to `value`, validated (rules between keys too). */
export function configWith(config: TrainConfig, key: ConfigKey, value: unknown): TrainConfig {
  return validateConfig({ ...config, [key]: value }, 'Run again with…');
}

// ---- settings side by side ------------------------------------------------------------------------------------

export interface SettingsRow {
  key: string;
  /** One value per run, as text ("–" where the run's config has none). */
  values: string[];
  /** The runs do not all agree. */
  differs: boolean;
}

/**
 * The kept runs' settings side by side (W&B's run comparison): the keys whose values differ first, then the
 * basic ones (`always`) that agree; every other agreeing key is left out.
 */
export function settingsTable(
  runs: readonly Pick<KeptRun, 'config' | 'job'>[],
  always: readonly string[],
): SettingsRow[] {
  const text = (v: unknown) =>
    v === undefined || v === null ? '–' : typeof v === 'string' ? v : JSON.stringify(v);
  const keys = ['algorithm', ...Object.keys(CONFIG_FIELDS).filter((k) => k !== 'algorithm')];
  const rows = keys.map((key) => {
    const values = runs.map((r) =>
      key === 'algorithm' ? runKind(r) : text((r.config as unknown as Record<string, unknown>)[key]),
    );
    return { key, values, differs: new Set(values).size > 1 };
  });
  return [...rows.filter((r) => r.differs), ...rows.filter((r) => !r.differs && always.includes(r.key))];
}
