/**
 * Autosave with several tabs open: one slot per tab, owned through the Web Locks API.
 *
 * Every tab (every model worker) writes its run into a slot of its own (`slot:<id>` and `save:<id>/…`, see
 * ./autosave.ts) and holds the lock `ppo-playground-autosave:<id>` from just before its first write until the tab
 * closes (the browser releases a closed or crashed tab's locks). So two tabs training at once never touch each
 * other's save, and a save whose lock nobody holds is the save of a tab that is gone: that is what a new tab
 * offers to resume.
 *
 * Resuming takes the old slot's lock first (so two tabs cannot resume the same save), restores from it, and the
 * tab's own first save then replaces it. A tab that was offered a save and started another run instead replaces
 * the offered one with its own first save — what one tab did before there were several (a new run's save
 * replaces the save the banner offered). Saves the tab was not offered, and saves of live tabs, are never
 * touched. The save of the single-slot format (`current`, before this file) is a slot like any other.
 *
 * Without Web Locks (navigator.locks is missing outside secure contexts, and in old browsers) no tab can tell
 * a live tab's save from a closed one's: each tab still saves into its own slot, any other save can be offered,
 * and nothing but the offered save (once declined) or a resumed one is ever deleted.
 */
import { UserError } from '../common/errors';
import type { FileBody } from '../core/model/safetensors';
import {
  AutosaveSlot,
  legacySlotKeys,
  slotIdsOf,
  tabSlotKeys,
  type AutosaveInfo,
  type AutosaveStore,
  type SaveResult,
} from './autosave';

/** What autosave uses of the Web Locks API (navigator.locks, in windows and workers); tests plug in a fake. */
export interface LockManagerLike {
  request(
    name: string,
    options: { ifAvailable?: boolean },
    callback: (lock: unknown) => unknown,
  ): Promise<unknown>;
  query(): Promise<{ held?: { name?: string }[] }>;
}

export const AUTOSAVE_LOCK_PREFIX = 'ppo-playground-autosave:';
export const lockName = (slotId: string): string => `${AUTOSAVE_LOCK_PREFIX}${slotId}`;

type Release = () => void;

const SETTLE_MS = 2000;
const SETTLE_POLL_MS = 100;

/**
 * Take the lock `name` if nobody holds it; null when somebody does. The lock is held until the returned function
 * is called (or the tab closes).
 */
export function tryLock(locks: LockManagerLike, name: string): Promise<Release | null> {
  return new Promise<Release | null>((resolve, reject) => {
    locks
      .request(name, { ifAvailable: true }, (lock) => {
        if (!lock) {
          resolve(null);
          return undefined;
        }
        return new Promise<void>((release) => resolve(() => release()));
      })
      .catch(reject);
  });
}

/** A fresh slot id: time and randomness, in the characters autosave keys allow. */
export function newSlotId(): string {
  const rnd = Math.floor(Math.random() * 36 ** 8).toString(36);
  return `${Date.now().toString(36)}-${rnd}`;
}

interface Found {
  slot: AutosaveSlot;
  info: AutosaveInfo;
}

/** The autosave of one tab. Calls must not overlap (the worker runs them in its serial queue). */
export class TabAutosave {
  /** This tab's slot. */
  private own: AutosaveSlot;
  private ownReleased: Release | null = null;
  /** A closed tab's save this tab resumed: its lock is held until the tab's own first save replaces it. */
  private resumed: { slot: AutosaveSlot; release: Release } | null = null;
  /** The closed tab's save this tab offered (info()); a new run's first save replaces it. */
  private offered: AutosaveSlot | null = null;

  constructor(
    private readonly store: AutosaveStore,
    private readonly locks: LockManagerLike | null,
    private readonly now: () => number = () => Date.now(),
    private readonly newId: () => string = newSlotId,
    /** How long info() and resume() wait for the locks of a tab that was just closed (see settledOrphans). */
    private readonly settleMs = SETTLE_MS,
  ) {
    this.own = this.slotOf(this.newId());
  }

  /** This tab's slot id (tests). */
  get slotId(): string {
    return this.own.keys.id;
  }

  private slotOf(id: string): AutosaveSlot {
    return new AutosaveSlot(
      this.store,
      this.now,
      id === legacySlotKeys.id ? legacySlotKeys : tabSlotKeys(id),
    );
  }

  /** Every save in the store, newest first. */
  private async all(): Promise<Found[]> {
    const found: Found[] = [];
    const { withPointer } = slotIdsOf(await this.store.keys());
    for (const id of withPointer) {
      const slot = this.slotOf(id);
      const info = await slot.info().catch(() => null);
      if (info) found.push({ slot, info });
    }
    return found.sort((a, b) => b.info.savedAt - a.info.savedAt);
  }

  /** Lock names held now (by any tab of this origin, this one included). */
  private async held(): Promise<Set<string>> {
    if (!this.locks) return new Set();
    const { held = [] } = await this.locks.query();
    return new Set(held.map((l) => l.name ?? ''));
  }

  private isMine(slot: AutosaveSlot): boolean {
    return slot.keys.id === this.own.keys.id || slot.keys.id === this.resumed?.slot.keys.id;
  }

  /** Saves of tabs that are gone (nobody holds their lock), newest first; and of how many tabs still open. */
  private async orphans(): Promise<{ orphans: Found[]; live: Found[] }> {
    const all = (await this.all()).filter((f) => !this.isMine(f.slot));
    const held = await this.held();
    const orphans = all.filter((f) => !held.has(lockName(f.slot.keys.id)));
    return { orphans, live: all.filter((f) => !orphans.includes(f)) };
  }

  /**
   * As orphans(), but while a save newer than the newest orphan is held, look again for up to `settleMs`: a tab
   * that was just closed or reloaded gives its lock back a moment after it is gone (in Chromium the next page
   * can ask before that), and its save is the one to offer.
   */
  private async settledOrphans(): Promise<{ orphans: Found[]; live: Found[] }> {
    const until = Date.now() + this.settleMs;
    for (;;) {
      const found = await this.orphans();
      const newestOrphan = found.orphans[0]?.info.savedAt ?? -Infinity;
      const newerHeld = found.live.some((f) => f.info.savedAt > newestOrphan);
      if (!newerHeld || Date.now() >= until) return found;
      await new Promise<void>((r) => setTimeout(() => r(), SETTLE_POLL_MS));
    }
  }

  /**
   * The save this tab would show: its own run's (the latest save it wrote, or the save it resumed), else the
   * newest save of a tab that is gone (which resume() would bring back), else null.
   */
  async info(): Promise<AutosaveInfo | null> {
    const mine = (await this.own.info()) ?? (this.resumed ? await this.resumed.slot.info() : null);
    if (mine) return mine;
    const { orphans } = await this.settledOrphans();
    this.offered = orphans[0]?.slot ?? null;
    return orphans[0]?.info ?? null;
  }

  /** The save of this tab's run (its own latest, or the one it resumed) with its files, for recovery. */
  async load(): Promise<{ info: AutosaveInfo; files: Map<string, Uint8Array> } | null> {
    return (await this.own.load()) ?? (this.resumed ? await this.resumed.slot.load() : null);
  }

  /**
   * The save to continue, with its files: this tab's own, else a gone tab's (the offered one first), whose lock
   * this tab then holds. Null when there is none; a UserError when every save belongs to a tab still open.
   */
  async resume(): Promise<{ info: AutosaveInfo; files: Map<string, Uint8Array> } | null> {
    const mine = await this.load();
    if (mine) return mine;
    const { orphans, live } = await this.settledOrphans();
    const offered = this.offered;
    orphans.sort(
      (a, b) => Number(b.slot.keys.id === offered?.keys.id) - Number(a.slot.keys.id === offered?.keys.id),
    );
    for (const { slot } of orphans) {
      const release = this.locks ? await tryLock(this.locks, lockName(slot.keys.id)) : () => {};
      if (!release) continue; // another tab took it a moment ago
      let saved: Awaited<ReturnType<AutosaveSlot['load']>>;
      try {
        saved = await slot.load();
      } catch (e) {
        release();
        throw e;
      }
      if (!saved) {
        release();
        continue;
      }
      this.resumed?.release();
      this.resumed = { slot, release };
      this.offered = null;
      return saved;
    }
    if (live.length > 0) {
      const many = live.length > 1;
      throw new UserError(
        `The autosaved run${many ? 's' : ''} in this browser belong${many ? '' : 's'} to another tab of ` +
          'this app that is still open (each tab autosaves its own run). Continue it there, or close that tab ' +
          'and resume it here.',
      );
    }
    return null;
  }

  private async ownLock(): Promise<void> {
    if (this.ownReleased || !this.locks) return;
    for (let i = 0; i < 3; i++) {
      const release = await tryLock(this.locks, lockName(this.own.keys.id));
      if (release) {
        this.ownReleased = release;
        return;
      }
      this.own = this.slotOf(this.newId()); // (an id clash: take another)
    }
    throw new Error('could not take a Web Lock for this tab’s autosave slot');
  }

  /**
   * Save the run into this tab's slot (see AutosaveSlot.save: never throws, a failure keeps the older save).
   * After the tab's first good save, the save it resumed or was offered is replaced (deleted).
   */
  async save(
    meta: Omit<AutosaveInfo, 'savedAt' | 'bytes'>,
    makeFiles: (shared: ReadonlySet<string>) => Promise<Map<string, FileBody>>,
    /** Files that never change within the run (AutosaveSlot.save). */
    frozen: readonly string[] = [],
  ): Promise<SaveResult> {
    // Until its first save, a resumed run's save in force is the one it came from.
    const ownInfo = await this.own.info().catch(() => null);
    const elsewhere = ownInfo ? null : await this.resumedInfo();
    try {
      await this.ownLock();
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      const kept = ownInfo ?? elsewhere;
      return {
        ok: false,
        reason: 'failed',
        message:
          `Autosave failed at step ${meta.step}: ${why}. ` +
          (kept ? `The previous autosave (step ${kept.step}) is kept. ` : '') +
          'Export a checkpoint to keep this run.',
        kept,
      };
    }
    const result = await this.own.save(meta, makeFiles, elsewhere, frozen);
    if (result.ok) await this.retire().catch(() => undefined);
    return result;
  }

  private async resumedInfo(): Promise<AutosaveInfo | null> {
    return this.resumed ? this.resumed.slot.info().catch(() => null) : null;
  }

  /** After a good save: delete the save this tab resumed or declined, and what crashed tabs left half-written. */
  private async retire(): Promise<void> {
    await this.discardResumed();
    if (this.offered) {
      const slot = this.offered;
      this.offered = null;
      await this.withLockIfFree(slot.keys.id, () => slot.discard());
    }
    await this.sweepStrays();
  }

  /** Delete the save this tab resumed and give its lock back; false when it resumed none. */
  private async discardResumed(): Promise<boolean> {
    if (!this.resumed) return false;
    const { slot, release } = this.resumed;
    this.resumed = null;
    try {
      await slot.discard();
    } finally {
      release();
    }
    return true;
  }

  /** Run `job` holding `slotId`'s lock, unless another tab holds it (then skip). Without Web Locks, just run it. */
  private async withLockIfFree(slotId: string, job: () => Promise<void>): Promise<boolean> {
    if (!this.locks) {
      await job();
      return true;
    }
    const release = await tryLock(this.locks, lockName(slotId));
    if (!release) return false;
    try {
      await job();
    } finally {
      release();
    }
    return true;
  }

  /**
   * Entries of other slots that their pointer does not name: what a tab that crashed mid-save left. Only slots
   * whose lock is free (the tab is gone; a live tab holds its lock while it writes); not without Web Locks.
   */
  private async sweepStrays(): Promise<void> {
    if (!this.locks) return;
    const { files } = slotIdsOf(await this.store.keys());
    for (const [id, keys] of files) {
      const slot = this.slotOf(id);
      if (this.isMine(slot)) continue;
      if (await slot.isTidy(keys)) continue;
      await this.withLockIfFree(id, () => slot.tidy());
    }
  }

  /**
   * Forget the save info() shows: this tab's own (and the one it resumed), else the offered save of a gone tab.
   * A UserError when another tab has just taken that one.
   */
  async discard(): Promise<void> {
    const hadOwn = (await this.own.info()) !== null;
    if (hadOwn) await this.own.discard();
    if (await this.discardResumed()) return;
    if (hadOwn) return;
    const target = this.offered ?? (await this.orphans()).orphans[0]?.slot ?? null;
    this.offered = null;
    if (!target) return;
    const done = await this.withLockIfFree(target.keys.id, () => target.discard());
    if (!done) {
      throw new UserError(
        'That autosaved run was just resumed in another tab of this app, so it was not discarded.',
      );
    }
  }

  /** Give up this tab's locks (tests; a closing tab's locks go by themselves). */
  close(): void {
    this.ownReleased?.();
    this.ownReleased = null;
    this.resumed?.release();
    this.resumed = null;
  }
}
