import { useContext, useEffect, useState } from 'react';
import { proxy } from 'comlink';
import { StoreContext, useStarting } from '../store/hooks';
import type { PlaygroundStore } from '../store/store';
import { describeError } from '../errors';
import {
  ReliabilityWorkerContext,
  describeAutosave,
  resumeAutosaveIntoStore,
  type ReliabilityWorker,
} from '../lib/autosave';
import type { AutosaveInfoWire, ReliabilityEvent } from '../../worker/protocol';

/**
 * Autosave and GPU recovery, in words: after a reload or a crash it offers to resume the autosaved run (or to
 * discard it); after a GPU loss, what was recovered. When the run was last saved goes to the store
 * (`autosavedStep`), which the Checkpoint card shows.
 * Storage failures and the loss itself also arrive as the worker's `error` events (the error banner).
 */
export function AutosaveBanner() {
  const api = useContext(ReliabilityWorkerContext);
  const store = useContext(StoreContext);
  // A stand-in worker (?worker=fake) has no autosave.
  if (
    !api ||
    !store ||
    typeof (api as { subscribeReliability?: unknown }).subscribeReliability !== 'function'
  )
    return null;
  return <Banner api={api} store={store} />;
}

function Banner({ api, store }: { api: ReliabilityWorker; store: PlaygroundStore }) {
  const [offer, setOffer] = useState<AutosaveInfoWire | null>(null);
  const [note, setNote] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  // The page's own model load and first configure are queued in the worker: a run resumed before they are done
  // would be dropped by them, so Resume waits (the offer can arrive before the model has loaded).
  const starting = useStarting();

  useEffect(() => {
    let alive = true;
    const onEvent = (e: ReliabilityEvent) => {
      if (!alive) return;
      switch (e.type) {
        case 'autosaved':
          // Shown in the Checkpoint card (CheckpointPanel), not as a loose line above the columns.
          store.setState({ autosavedStep: e.info.step });
          setOffer(null); // the older save was replaced by this run's
          break;
        case 'autosave-failed':
          if (e.reason !== 'nonfinite') setNote(e.message);
          break;
        case 'device-lost':
          setNote(e.message);
          break;
        case 'recovered':
        case 'recovery-failed':
          setNote(e.message);
          break;
      }
    };
    api
      .subscribeReliability(proxy(onEvent))
      .then((info) => {
        if (alive && info && !info.current) setOffer(info);
      })
      .catch(() => undefined);
    return () => {
      alive = false;
    };
  }, [api, store]);

  const resume = async () => {
    setBusy(true);
    try {
      await resumeAutosaveIntoStore(api, store);
      setOffer(null);
      setNote(null);
    } catch (e) {
      store.getState().actions.showError(describeError(e));
    } finally {
      setBusy(false);
    }
  };
  const discard = async () => {
    setBusy(true);
    try {
      await api.discardAutosave();
      setOffer(null);
    } catch (e) {
      store.getState().actions.showError(describeError(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      {offer && (
        <div className="notice autosave-offer" role="status" data-testid="autosave-offer">
          <span>
            An autosaved run is in this browser: {describeAutosave(offer)}. Resume it where it stopped?
          </span>{' '}
          <button
            type="button"
            className="small primary"
            onClick={resume}
            disabled={busy || starting}
            title={starting ? 'Ready once the page’s model has loaded' : undefined}
          >
            Resume
          </button>{' '}
          <button type="button" className="small" onClick={discard} disabled={busy || starting}>
            Discard
          </button>
        </div>
      )}
      {note && (
        <div className="notice" role="status" data-testid="reliability-notice">
          <span>{note}</span>{' '}
          <button type="button" className="link" onClick={() => setNote(null)} aria-label="Dismiss notice">
            ×
          </button>
        </div>
      )}
    </>
  );
}
