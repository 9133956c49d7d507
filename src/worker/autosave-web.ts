/**
 * The autosave slot in the browser: core's AutosaveSlot (src/core/autosave.ts) over IndexedDB through
 * idb-keyval, in a database of its own so nothing else of the app's storage is touched. Where IndexedDB is
 * missing (a private window in some browsers), saves fail with a message and training goes on.
 */
import { createStore, del, get, keys, set, type UseStore } from 'idb-keyval';
import { AutosaveSlot, type AutosaveStore } from '../core/autosave';

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

export function browserAutosaveSlot(): AutosaveSlot {
  return new AutosaveSlot(indexedDbAutosaveStore());
}
