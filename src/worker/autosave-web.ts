/**
 * Autosave in the browser: the per-tab slots (src/services/autosave-tabs.ts, autosave.ts) over IndexedDB
 * through idb-keyval, in a database of its own so nothing else of the app's storage is touched, with the Web
 * Locks API telling which slots belong to tabs still open. Where IndexedDB is
 * missing (a private window in some browsers), saves fail with a message and training goes on.
 */
import { createStore, del, get, keys, set, type UseStore } from 'idb-keyval';
import type { AutosaveStore } from '../services/autosave';
import { TabAutosave, type LockManagerLike } from '../services/autosave-tabs';

export const AUTOSAVE_DB = 'ppo-playground-autosave';
export const AUTOSAVE_STORE = 'saves';

function unavailable(): never {
  throw new Error('this browser offers no IndexedDB here (a private window?)');
}

export function indexedDbAutosaveStore(): AutosaveStore {
  let store: UseStore | null = null;
  const use = (): UseStore => {
    if (typeof indexedDB === 'undefined') unavailable();
    store ??= createStore(AUTOSAVE_DB, AUTOSAVE_STORE);
    return store;
  };
  return {
    get: (k) => get(k, use()),
    set: (k, v) => set(k, v, use()),
    del: (k) => del(k, use()),
    keys: async () => (await keys(use())).map(String),
  };
}

/** navigator.locks where the browser offers it (secure contexts: https and localhost), else null. */
function webLocks(): LockManagerLike | null {
  const nav = (globalThis as { navigator?: { locks?: LockManagerLike } }).navigator;
  return nav?.locks ?? null;
}

/** This tab's autosave: a slot of its own, owned through a Web Lock (src/services/autosave-tabs.ts). */
export function browserAutosave(): TabAutosave {
  return new TabAutosave(indexedDbAutosaveStore(), webLocks());
}
