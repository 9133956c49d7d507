import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { App } from './App';
import { startModelWorker, type ModelWorker, type WorkerHandle } from './bridge';
import { backendFromUrl } from './backend-prefs';
import { createPlaygroundStore } from './store/store';
import { StoreContext } from './store/hooks';
import { ReliabilityWorkerContext, type ReliabilityWorker } from './lib/autosave';
import './styles.css';

/** The model worker; `npm run dev` with `?worker=fake` uses a stand-in with synthetic metrics (layout work). */
async function connect(): Promise<WorkerHandle> {
  if (import.meta.env.DEV && new URLSearchParams(window.location.search).get('worker') === 'fake') {
    const { createFakeWorker } = await import('./dev/fake-worker');
    const api = createFakeWorker({ stepMs: 400 }) as unknown as ModelWorker;
    return { api, addCrashListener: () => {}, terminate: () => {} };
  }
  return startModelWorker();
}

const worker = await connect();
const store = createPlaygroundStore(worker.api, backendFromUrl());
worker.addCrashListener((message) => store.getState().actions.workerCrashed(message));
// A link pasted over the current one changes only the hash: read the config from it again.
window.addEventListener('hashchange', () => store.getState().actions.hashChanged(window.location.hash));

const root = document.getElementById('root');
if (!root) throw new Error('index.html has no #root element');
createRoot(root).render(
  <StrictMode>
    <StoreContext.Provider value={store}>
      <ReliabilityWorkerContext.Provider value={worker.api as unknown as ReliabilityWorker}>
        <App />
      </ReliabilityWorkerContext.Provider>
    </StoreContext.Provider>
  </StrictMode>,
);
