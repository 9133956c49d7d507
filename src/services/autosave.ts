/**
 * Autosave of a training run, the platform-neutral part: when to save, and how a save replaces the previous
 * one without ever leaving nothing behind. The worker plugs in IndexedDB (src/worker/autosave-web.ts); the
 * tests plug in a Map.
 *
 * A save is the file map of `checkpointFiles` (docs/formats.md §2: weights, optimizer, trainer_state.json with the
 * metric history and config). Each file is its own entry (`save:<slot>/<id>:<file>`), and a file above AUTOSAVE_PART_BYTES is stored in
 * parts (`…:<file>#0`, `#1`, …: Chromium refuses one value above ~127 MB, which GPT-2 124M's weights pass),
 * and one small entry, the slot's pointer (`slot:<slot>`), names the save in force. A new save is written under a
 * new id; the pointer moves to it only after every file was written; only then are the older save's entries
 * deleted. So a full disk (QuotaExceededError), a crash or a closed tab in the middle of a save leaves the older
 * save intact, and the half-written one is swept away by the next successful save. Every tab has a slot of its
 * own (./autosave-tabs.ts); the first format's single slot (pointer `current`, files `save:<id>:<file>`) is still
 * read.
 */
import { isUserError, UserError } from '../common/errors';
import type { FileBody } from '../core/model/safetensors';

/** Keys and values, as IndexedDB (idb-keyval) offers them. */
export interface AutosaveStore {
  get(key: string): Promise<unknown>;
  set(key: string, value: unknown): Promise<void>;
  del(key: string): Promise<void>;
  keys(): Promise<string[]>;
}

/** What a save is, without its files. */
export interface AutosaveInfo {
  /** Steps completed when it was saved. */
  step: number;
  /** Milliseconds since 1970 (Date.now()). */
  savedAt: number;
  /** The run's config (docs/formats.md §5 keys). */
  config: Record<string, unknown>;
  /** The policy's label ("built-in tiny", a Hub id, …). */
  label: string;
  /** Which run it belongs to (a run keeps its id through autosaves, resumes and device recovery). */
  runId: string;
  /** Metric history entries held (one per step). */
  historyLength: number;
  /** Total bytes of its files. */
  bytes: number;
}

export const AUTOSAVE_FORMAT = 'ppo-playground-autosave/1';
const PREFIX = 'save:';

/**
 * Where a slot keeps its entries: its pointer, and the prefix of its file entries (`<files><saveId>:<file>`).
 * The first format had one slot per site (pointer `current`, files `save:<saveId>:<file>`); now every tab has
 * its own (pointer `slot:<id>`, files `save:<id>/<saveId>:<file>`, see ./autosave-tabs.ts). Save ids hold
 * neither ':' nor '/', so every entry belongs to exactly one slot.
 */
export interface SlotKeys {
  id: string;
  pointer: string;
  files: string;
}

/** The single slot of the first format (read, resumed and replaced like a closed tab's slot). */
export const legacySlotKeys: SlotKeys = { id: 'legacy', pointer: 'current', files: PREFIX };

/** A tab's slot. */
export function tabSlotKeys(id: string): SlotKeys {
  if (!/^[a-z0-9-]+$/i.test(id) || id === legacySlotKeys.id) throw new Error(`bad autosave slot id "${id}"`);
  return { id, pointer: `slot:${id}`, files: `${PREFIX}${id}/` };
}

/** The slot id a key belongs to (a pointer or a file entry), or null for keys of no slot. */
export function slotIdOfKey(key: string): string | null {
  if (key === legacySlotKeys.pointer) return legacySlotKeys.id;
  if (key.startsWith('slot:')) return key.slice(5);
  if (!key.startsWith(PREFIX)) return null;
  const rest = key.slice(PREFIX.length);
  const colon = rest.indexOf(':');
  const saveId = colon < 0 ? rest : rest.slice(0, colon);
  const slash = saveId.indexOf('/');
  return slash < 0 ? legacySlotKeys.id : saveId.slice(0, slash);
}

/** The slots in a key listing: those with a pointer, and the file entries of each. */
export function slotIdsOf(keys: string[]): { withPointer: string[]; files: Map<string, string[]> } {
  const withPointer: string[] = [];
  const files = new Map<string, string[]>();
  for (const key of keys) {
    const id = slotIdOfKey(key);
    if (id === null) continue;
    if (key === legacySlotKeys.pointer || key.startsWith('slot:')) withPointer.push(id);
    else files.set(id, [...(files.get(id) ?? []), key]);
  }
  return { withPointer, files };
}

interface Pointer extends AutosaveInfo {
  format: typeof AUTOSAVE_FORMAT;
  id: string;
  files: string[];
  /**
   * Files stored in parts (`<file key>#<k>`, k from 0), by name: how many. Absent for a file stored whole (every
   * file of a save written before parts existed).
   */
  parts?: Record<string, number>;
  /** Each file's bytes, by name (absent in saves written before frozen files were shared). */
  sizes?: Record<string, number>;
  /**
   * Files this save shares with an earlier save of the same run in this slot, by name: the id of the save whose
   * entries hold them (a frozen file, written once per run). Absent: every file is under this save's own id.
   */
  at?: Record<string, string>;
}

/**
 * The largest value a save writes as one entry. Chromium refuses an IndexedDB value above 133 169 152 bytes
 * ("The serialized keys and/or value are too large"), which GPT-2 124M's weights pass; bigger files go in parts.
 */
export const AUTOSAVE_PART_BYTES = 64 * 1024 ** 2;

/** The browser autosaves at least this often (in steps), or every `saveEvery` steps when that is smaller. */
export const AUTOSAVE_MAX_INTERVAL = 10;

/**
 * Steps between autosaves for config `saveEvery`: min(saveEvery, 10); 0 (saveEvery 0) = only when the run
 * pauses or ends.
 */
export function autosaveInterval(saveEvery: number): number {
  return saveEvery > 0 ? Math.min(saveEvery, AUTOSAVE_MAX_INTERVAL) : 0;
}

/** Whether the step just completed is an autosave step. */
export function autosaveDue(step: number, saveEvery: number): boolean {
  const every = autosaveInterval(saveEvery);
  return every > 0 && step > 0 && step % every === 0;
}

/** A storage-quota failure, however the platform spells it (DOMException name / legacy code 22, Firefox's). */
export function isQuotaError(e: unknown): boolean {
  if (typeof e !== 'object' || e === null) return false;
  const err = e as { name?: unknown; code?: unknown; message?: unknown; inner?: unknown };
  if (err.name === 'QuotaExceededError' || err.name === 'NS_ERROR_DOM_QUOTA_REACHED') return true;
  if (err.code === 22 || err.code === 1014) return true;
  return typeof err.message === 'string' && /quota/i.test(err.message);
}

export type SaveFailure = 'quota' | 'nonfinite' | 'failed';

export type SaveResult =
  | { ok: true; info: AutosaveInfo }
  | {
      ok: false;
      reason: SaveFailure;
      /** Plain words for the person: what failed, and that the older save is kept. */
      message: string;
      /** The save still in force (the older one), or null when there is none. */
      kept: AutosaveInfo | null;
    };

const mb = (n: number): string => `${(n / 1024 ** 2).toFixed(n < 10 * 1024 ** 2 ? 1 : 0)} MB`;

function describeKept(kept: AutosaveInfo | null): string {
  return kept
    ? `The previous autosave (step ${kept.step}) is kept.`
    : 'There is no earlier autosave of this run.';
}

function isPointer(v: unknown): v is Pointer {
  if (typeof v !== 'object' || v === null) return false;
  const p = v as Record<string, unknown>;
  return (
    p.format === AUTOSAVE_FORMAT &&
    typeof p.id === 'string' &&
    Array.isArray(p.files) &&
    p.files.every((f) => typeof f === 'string') &&
    Number.isInteger(p.step) &&
    typeof p.savedAt === 'number' &&
    typeof p.config === 'object' &&
    p.config !== null &&
    typeof p.runId === 'string' &&
    (p.parts === undefined || isRecordOf(p.parts, (n) => Number.isInteger(n) && (n as number) >= 1)) &&
    (p.sizes === undefined || isRecordOf(p.sizes, (n) => Number.isInteger(n) && (n as number) >= 0)) &&
    (p.at === undefined || isRecordOf(p.at, (id) => typeof id === 'string' && /^[^:/]+$/.test(id)))
  );
}

function isRecordOf(v: unknown, ok: (x: unknown) => boolean): boolean {
  return typeof v === 'object' && v !== null && Object.values(v).every(ok);
}

/** A file's bytes, whole or as chunks in order. */
async function* chunksOf(body: FileBody): AsyncGenerator<Uint8Array> {
  if (body instanceof Uint8Array) yield body;
  else yield* body.chunks();
}

function infoOf(p: Pointer): AutosaveInfo {
  const { step, savedAt, config, label, runId, historyLength, bytes } = p;
  return { step, savedAt, config, label, runId, historyLength, bytes };
}

/**
 * One autosave slot: at most one save in force. Calls must not overlap (the worker runs them in its serial
 * queue). Several slots can share a store (./autosave-tabs.ts); a slot only ever touches its own entries.
 */
export class AutosaveSlot {
  private seq = 0;

  constructor(
    private readonly store: AutosaveStore,
    private readonly now: () => number = () => Date.now(),
    readonly keys: SlotKeys = legacySlotKeys,
    /** Files above this many bytes are stored in parts of at most this size (AUTOSAVE_PART_BYTES). */
    private readonly partBytes: number = AUTOSAVE_PART_BYTES,
  ) {}

  private fileKey(saveId: string, name: string): string {
    return `${this.keys.files}${saveId}:${name}`;
  }

  /** The entries of a file: its key when whole, else `<key>#0`, `<key>#1`, … */
  private entryKeys(saveId: string, name: string, parts: number | undefined): string[] {
    const key = this.fileKey(saveId, name);
    return parts === undefined ? [key] : Array.from({ length: parts }, (_, k) => `${key}#${k}`);
  }

  private owns(key: string): boolean {
    return key !== this.keys.pointer && slotIdOfKey(key) === this.keys.id;
  }

  private async pointer(): Promise<Pointer | null> {
    const raw = await this.store.get(this.keys.pointer);
    return isPointer(raw) ? raw : null;
  }

  /** Whether `key` is an entry of save `p` (its own entries, and those of the files it shares); none for null. */
  private entryOf(p: Pointer | null): (key: string) => boolean {
    if (!p) return () => false;
    const own = this.fileKey(p.id, '');
    const shared = new Set(
      Object.entries(p.at ?? {}).flatMap(([name, id]) => this.entryKeys(id, name, p.parts?.[name])),
    );
    return (key) => key.startsWith(own) || shared.has(key);
  }

  /** Whether every one of this slot's file entries in `keys` belongs to the save in force (nothing to sweep). */
  async isTidy(keys: string[]): Promise<boolean> {
    const keep = this.entryOf(await this.pointer());
    return keys.every(keep);
  }

  /** The save in force, or null. */
  async info(): Promise<AutosaveInfo | null> {
    const p = await this.pointer();
    return p ? infoOf(p) : null;
  }

  /**
   * Save the run. `makeFiles` builds the checkpoint files (it may refuse: core's checkpointFiles throws a
   * UserError for NaN/Inf weights), leaving out those it is told to (`shared`); a file may come as a ByteSource,
   * streamed into the store part by part (a model's weights are never all in memory at once). Never throws: a
   * failure is a result that says why, and the older save stays.
   *
   * `frozen`: files that never change while a run runs (its frozen base or reference, its reward model). When the
   * save in force is of the same run and holds one of them, the new save shares that file's entries instead of
   * writing it again: a LoRA run writes its base once, not at every autosave.
   */
  async save(
    meta: Omit<AutosaveInfo, 'savedAt' | 'bytes'>,
    makeFiles: (shared: ReadonlySet<string>) => Promise<Map<string, FileBody>>,
    /** The save in force for this run when this slot has none yet (a resumed run's save, in another slot). */
    keptElsewhere: AutosaveInfo | null = null,
    frozen: readonly string[] = [],
  ): Promise<SaveResult> {
    let kept: Pointer | null = null;
    try {
      kept = await this.pointer();
    } catch {
      kept = null;
    }
    const keptInfo = kept ? infoOf(kept) : keptElsewhere;
    // The frozen files the save in force can lend: same run, the file in it, its size known.
    const lent = new Map<string, { at: string; parts: number | undefined; size: number }>();
    if (kept && kept.runId === meta.runId) {
      for (const name of frozen) {
        const size = kept.sizes?.[name];
        if (kept.files.includes(name) && size !== undefined)
          lent.set(name, { at: kept.at?.[name] ?? kept.id, parts: kept.parts?.[name], size });
      }
    }

    let files: Map<string, FileBody>;
    try {
      files = await makeFiles(new Set(lent.keys()));
    } catch (e) {
      return this.refused(e, meta.step, keptInfo);
    }

    const savedAt = this.now();
    const id = `${meta.runId}-${meta.step}-${savedAt}-${++this.seq}`;
    const written: string[] = [];
    let bytes = 0; // what this save writes (not what it shares)
    for (const [name, b] of files) if (!lent.has(name)) bytes += b.byteLength;
    const parts: Record<string, number> = {};
    const sizes: Record<string, number> = {};
    const at: Record<string, string> = {};
    for (const [name, l] of lent) {
      sizes[name] = l.size;
      at[name] = l.at;
      if (l.parts !== undefined) parts[name] = l.parts;
    }
    try {
      for (const [name, body] of files) {
        if (lent.has(name)) continue; // the save in force's copy is the same file
        const size = body.byteLength;
        sizes[name] = size;
        const n = size <= this.partBytes ? 1 : Math.ceil(size / this.partBytes);
        const keys = n === 1 ? [this.fileKey(id, name)] : this.entryKeys(id, name, n);
        if (n > 1) parts[name] = n;
        if (n === 1 && body instanceof Uint8Array) {
          await this.store.set(keys[0], body); // whole, as it is
          written.push(keys[0]);
          continue;
        }
        // Part by part as the bytes come, each part its own copy (a view would be stored with the whole
        // buffer under it).
        let k = 0;
        let part = new Uint8Array(Math.min(size, this.partBytes));
        let fill = 0;
        const flush = async () => {
          await this.store.set(keys[k], part);
          written.push(keys[k]);
          k++;
          part = new Uint8Array(Math.max(0, Math.min(size - k * this.partBytes, this.partBytes)));
          fill = 0;
        };
        for await (let c of chunksOf(body)) {
          while (c.length > 0) {
            if (k >= n) throw new Error(`${name}: more than the ${size} bytes announced`);
            const take = Math.min(c.length, part.length - fill);
            part.set(c.subarray(0, take), fill);
            fill += take;
            c = c.subarray(take);
            if (fill === part.length) await flush();
          }
        }
        if (size === 0) await flush();
        if (k !== n) throw new Error(`${name}: fewer than the ${size} bytes announced`);
      }
      const next: Pointer = {
        ...meta,
        savedAt,
        bytes: Object.values(sizes).reduce((a, b) => a + b, 0),
        format: AUTOSAVE_FORMAT,
        id,
        files: [...new Set([...files.keys(), ...lent.keys()])],
        sizes,
        ...(Object.keys(parts).length > 0 ? { parts } : {}),
        ...(Object.keys(at).length > 0 ? { at } : {}),
      };
      await this.store.set(this.keys.pointer, next);
      // The new save is in force: sweep the older one (but what it lends) and what a crash left half-written.
      await this.sweep(this.entryOf(next)).catch(() => undefined);
      return { ok: true, info: infoOf(next) };
    } catch (e) {
      // Take back what was written of the new save; the pointer still names the older one.
      for (const key of written) await this.store.del(key).catch(() => undefined);
      const quota = isQuotaError(e);
      // The browser's words without their closing full stop (they go inside brackets below).
      const why = (e instanceof Error ? e.message : String(e)).trim().replace(/[.\s]+$/, '');
      return {
        ok: false,
        reason: quota ? 'quota' : 'failed',
        message: quota
          ? `Autosave failed at step ${meta.step}: the browser's storage for this site is full (the save needs ` +
            `${mb(bytes)}). ${describeKept(keptInfo)} Free some space (clear other sites' data) or export a ` +
            'checkpoint to keep this run.'
          : `Autosave failed at step ${meta.step}: the browser's storage refused it (${why}). ${describeKept(keptInfo)}`,
        kept: keptInfo,
      };
    }
  }

  /** The result of a save whose files could not be made. */
  private refused(e: unknown, step: number, keptInfo: AutosaveInfo | null): SaveResult {
    const why = e instanceof Error ? e.message : String(e);
    const nonfinite = isUserError(e) && /NaN|Inf/.test(why);
    return {
      ok: false,
      reason: nonfinite ? 'nonfinite' : 'failed',
      message: nonfinite
        ? `Autosave skipped at step ${step}: the weights hold NaN/Inf values. ${describeKept(keptInfo)}`
        : `Autosave failed at step ${step}: ${why} ${describeKept(keptInfo)}`,
      kept: keptInfo,
    };
  }

  /** Delete every file entry of this slot but those `keep` says to keep. */
  private async sweep(keep: (key: string) => boolean): Promise<void> {
    for (const key of await this.store.keys()) {
      if (this.owns(key) && !keep(key)) await this.store.del(key);
    }
  }

  /** Delete this slot's entries that its pointer does not name (what a crash in the middle of a save left). */
  async tidy(): Promise<void> {
    await this.sweep(this.entryOf(await this.pointer()));
  }

  /**
   * The save in force with its files, or null when there is none. A save with a file missing (storage cleared
   * behind the app's back) is discarded and reported as a UserError.
   */
  async load(): Promise<{ info: AutosaveInfo; files: Map<string, Uint8Array> } | null> {
    const p = await this.pointer();
    if (!p) return null;
    const files = new Map<string, Uint8Array>();
    for (const name of p.files) {
      const keys = this.entryKeys(p.at?.[name] ?? p.id, name, p.parts?.[name]);
      const data = await this.readFile(keys, p.sizes?.[name]);
      if (!(data instanceof Uint8Array)) {
        await this.discard().catch(() => undefined);
        throw new UserError(
          `The autosave of step ${p.step} is incomplete (${name} is missing from the browser's storage or cut short) and was ` +
            'discarded; start the run again or import an exported checkpoint.',
        );
      }
      files.set(name, data);
    }
    return { info: infoOf(p), files };
  }

  /**
   * A file's bytes from its entries, or null when one is missing or the parts do not add up. With its size known
   * (`Pointer.sizes`), each part is copied into the file's buffer before the next is read, so a file in parts
   * takes its own size and one part at the peak, not twice its size (IndexedDB hands out a copy of each part: a
   * 1.5B model's 3.1 GB f16 base would otherwise be held twice while it is restored). Saves without sizes: every
   * part, then one buffer.
   */
  private async readFile(keys: string[], size: number | undefined): Promise<Uint8Array | null> {
    const get = async (key: string): Promise<Uint8Array | null> => {
      const v = await this.store.get(key);
      return v instanceof Uint8Array ? v : null;
    };
    if (keys.length === 1) {
      const whole = await get(keys[0]);
      return whole && (size === undefined || whole.length === size) ? whole : null;
    }
    // A save written before sizes were kept: every part first, to learn the size.
    let early: Uint8Array[] | null = null;
    if (size === undefined) {
      early = [];
      for (const key of keys) {
        const part = await get(key);
        if (!part) return null;
        early.push(part);
      }
      size = early.reduce((n, b) => n + b.length, 0);
    }
    const data = new Uint8Array(size);
    let at = 0;
    for (let k = 0; k < keys.length; k++) {
      const part = early ? early[k] : await get(keys[k]);
      if (!part || at + part.length > size) return null;
      data.set(part, at);
      at += part.length;
    }
    return at === size ? data : null;
  }

  /** Forget the autosave (every entry of this slot). */
  async discard(): Promise<void> {
    await this.store.del(this.keys.pointer);
    await this.sweep(() => false);
  }
}

/** A Map as an AutosaveStore (tests; also a fallback where IndexedDB is unavailable). */
export function memoryAutosaveStore(map: Map<string, unknown> = new Map()): AutosaveStore {
  return {
    get: async (k) => map.get(k),
    set: async (k, v) => void map.set(k, v),
    del: async (k) => void map.delete(k),
    keys: async () => [...map.keys()],
  };
}
