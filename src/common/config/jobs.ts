/**
 * The supervised jobs' settings tables, beside the RL table (fields.ts): DPO's (`train` with `"algorithm": "dpo"`,
 * contracts §9, and the app's DPO job) and SFT's (the app's SFT job on prompt / completion pairs). Each row gives
 * the key's type, range, default and one-line doc, whether the app's job request takes it (`inJob`) and the label
 * of its control in the app's DPO and SFT card. Everything else reads these rows: common/config/dpo.ts's validator and defaults, the worker's
 * job keys and SFT options (src/worker/supervised.ts), the wire types (src/worker/protocol.ts) and the card's
 * controls and their defaults (src/ui/components/SupervisedPanel.tsx). Pure data: no tfjs.
 */

/** DPO's losses (docs/dpo.md "Maths"). */
export const DPO_LOSSES = ['sigmoid', 'ipo', 'hinge'] as const;
export type DpoLossType = (typeof DPO_LOSSES)[number];

interface JobFieldCommon {
  /** One line, as the docs and the card's hint show it. */
  doc: string;
  /** Whether the app's job request (the worker's setSupervisedJob) takes the key; else it comes from the run's config. */
  inJob?: boolean;
  /** The label of its control in the app's DPO and SFT card (keys the request takes without a control have none). */
  label?: string;
}
/** A number from `min` to `max` (each bound inclusive unless marked exclusive). */
export interface JobNumberField extends JobFieldCommon {
  type: 'number';
  default: number;
  min: number;
  max: number;
  integer?: boolean;
  minExclusive?: boolean;
  maxExclusive?: boolean;
}
export interface JobChoiceField extends JobFieldCommon {
  type: 'choice';
  default: string;
  choices: readonly string[];
}
export type JobField = JobNumberField | JobChoiceField;

/**
 * DPO's settings of its own and the usual training keys it shares with the RL runs (model, seed and the LoRA keys
 * are validated in common/config/dpo.ts with the RL table's names). Key order is the card's and the docs'.
 */
export const DPO_FIELDS = {
  beta: {
    type: 'number',
    default: 0.1,
    min: 0,
    max: 1e3,
    minExclusive: true,
    doc: 'β: how far the policy may move from the reference.',
    inJob: true,
    label: 'beta',
  },
  dpoLoss: {
    type: 'choice',
    default: 'sigmoid',
    choices: DPO_LOSSES,
    doc: 'The loss: sigmoid (DPO), ipo or hinge.',
    inJob: true,
    label: 'loss',
  },
  labelSmoothing: {
    type: 'number',
    default: 0,
    min: 0,
    max: 0.5,
    maxExclusive: true,
    doc: "cDPO's ε (sigmoid only).",
    inJob: true,
  },
  heldOut: {
    type: 'number',
    default: 0.1,
    min: 0,
    max: 1,
    minExclusive: true,
    maxExclusive: true,
    doc: 'Share of the pairs held out for evaluation (a seeded split).',
    inJob: true,
  },
  steps: {
    type: 'number',
    default: 100,
    min: 1,
    max: 1e6,
    integer: true,
    doc: 'Optimizer steps.',
    inJob: true,
    label: 'DPO steps',
  },
  batchSize: {
    type: 'number',
    default: 8,
    min: 1,
    max: 4096,
    integer: true,
    doc: 'Pairs per step.',
    inJob: true,
    label: 'pairs per step',
  },
  learningRate: {
    type: 'number',
    default: 1e-4,
    min: 0,
    max: 1,
    minExclusive: true,
    doc: 'Adam learning rate.',
    inJob: true,
    label: 'DPO learning rate',
  },
  evalEvery: {
    type: 'number',
    default: 20,
    min: 0,
    max: 1e6,
    integer: true,
    doc: 'Held-out evaluation every this many steps and at the last (0: the last only).',
    inJob: true,
    label: 'eval every',
  },
  seed: {
    type: 'number',
    default: 1,
    min: 0,
    max: 2 ** 31 - 1,
    integer: true,
    doc: 'Seed of the split and the batches.',
  },
  maxGradNorm: { type: 'number', default: 1, min: 0, max: 1e6, doc: 'Global gradient-norm clip (0: none).' },
  lora: {
    type: 'number',
    default: 0,
    min: 0,
    max: 1024,
    integer: true,
    doc: 'LoRA rank (0: full fine-tuning).',
  },
  loraAlpha: { type: 'number', default: 16, min: 0, max: 1e6, minExclusive: true, doc: 'LoRA alpha.' },
  microBatchSize: {
    type: 'number',
    default: 0,
    min: 0,
    max: 4096,
    integer: true,
    doc: 'Pairs per micro-batch (0: the whole batch).',
  },
  saveEvery: {
    type: 'number',
    default: 50,
    min: 0,
    max: 1e6,
    integer: true,
    doc: 'Checkpoint every this many steps (0: the last only).',
  },
} as const satisfies Record<string, JobField>;
export type DpoFieldKey = keyof typeof DPO_FIELDS;

/** The app's SFT job (docs/sft.md): model, seed, maxGradNorm and microBatchSize come from the run's config. */
export const SFT_FIELDS = {
  steps: {
    type: 'number',
    default: 50,
    min: 1,
    max: 1e6,
    integer: true,
    doc: 'Optimizer steps.',
    inJob: true,
    label: 'SFT steps',
  },
  batchSize: {
    type: 'number',
    default: 8,
    min: 1,
    max: 4096,
    integer: true,
    doc: 'Examples per step.',
    inJob: true,
    label: 'examples per step',
  },
  learningRate: {
    type: 'number',
    default: 1e-4,
    min: 0,
    max: 1,
    minExclusive: true,
    doc: 'Adam learning rate (constant).',
    inJob: true,
    label: 'SFT learning rate',
  },
} as const satisfies Record<string, JobField>;
export type SftFieldKey = keyof typeof SFT_FIELDS;

type Table = Record<string, JobField>;
type Defaults<T extends Table> = {
  -readonly [K in keyof T]: T[K] extends JobChoiceField ? T[K]['choices'][number] : number;
};
/** The keys the app's job request takes. */
type JobKeys<T extends Table> = { [K in keyof T]: T[K] extends { inJob: true } ? K : never }[keyof T];

export type DpoJobKey = JobKeys<typeof DPO_FIELDS>;
export type SftJobKey = JobKeys<typeof SFT_FIELDS>;
/** A job request's settings (besides kind, data, dataName): any of its keys; left out = the table's default. */
export type DpoJobSettings = Partial<Pick<Defaults<typeof DPO_FIELDS>, DpoJobKey>>;
export type SftJobSettings = Partial<Pick<Defaults<typeof SFT_FIELDS>, SftJobKey>>;

/** Every key's default. */
export function jobDefaults<T extends Table>(table: T): Defaults<T> {
  return Object.fromEntries(Object.entries(table).map(([k, f]) => [k, f.default])) as Defaults<T>;
}

/** The keys the app's job request takes, in the table's order. */
export function jobKeys<T extends Table>(table: T): (keyof T & string)[] {
  return Object.entries(table)
    .filter(([, f]) => f.inJob === true)
    .map(([k]) => k);
}

/** The defaults of the keys the app's card has a control for (what the card starts at). */
export function cardDefaults<T extends Table>(table: T): Partial<Defaults<T>> {
  return Object.fromEntries(cardControls(table).map(({ key, field }) => [key, field.default])) as Partial<
    Defaults<T>
  >;
}

/** The keys the app's card has a control for, with their labels, in the table's order. */
export function cardControls<T extends Table>(
  table: T,
): { key: keyof T & string; label: string; field: JobField }[] {
  return Object.entries(table)
    .filter(([, f]) => f.label !== undefined)
    .map(([key, field]) => ({ key, label: field.label!, field }));
}

/** What `key` may be, in words ("a number > 0 and <= 1", "a whole number >= 1 and <= 1000000", "one of …"). */
export function jobFieldRange(f: JobField): string {
  if (f.type === 'choice') return `one of ${f.choices.map((c) => `"${c}"`).join(', ')}`;
  const lo = `${f.minExclusive ? '>' : '>='} ${f.min}`;
  const hi = `${f.maxExclusive ? '<' : '<='} ${f.max}`;
  return `${f.integer ? 'a whole number' : 'a number'} ${lo} and ${hi}`;
}

/** Whether `v` is a valid value of `f`. */
export function jobFieldAccepts(f: JobField, v: unknown): boolean {
  if (f.type === 'choice') return typeof v === 'string' && f.choices.includes(v);
  return (
    typeof v === 'number' &&
    Number.isFinite(v) &&
    (f.minExclusive ? v > f.min : v >= f.min) &&
    (f.maxExclusive ? v < f.max : v <= f.max) &&
    (!f.integer || Number.isInteger(v))
  );
}

/**
 * The given keys of `raw` checked against `table` (undefined = left out): the problems, each naming the key, what
 * it must be and what it got; an empty list when all are valid.
 */
export function jobFieldProblems(
  table: Table,
  raw: Record<string, unknown>,
  keys: readonly string[],
): string[] {
  const problems: string[] = [];
  for (const k of keys) {
    const v = raw[k];
    if (v === undefined) continue;
    const f = table[k];
    if (!jobFieldAccepts(f, v)) problems.push(`"${k}" must be ${jobFieldRange(f)}, got ${JSON.stringify(v)}`);
  }
  return problems;
}
