import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { App } from './App';
import { startModelWorker } from './bridge';
import { backendFromUrl } from './backend-prefs';
import { createPlaygroundStore } from './store/store';
import { StoreContext } from './store/hooks';
import './styles.css';

const worker = startModelWorker();
const store = createPlaygroundStore(worker.api, backendFromUrl());
worker.onCrash((message) => store.getState().actions.workerCrashed(message));

const root = document.getElementById('root');
if (!root) throw new Error('index.html has no #root element');
createRoot(root).render(
  <StrictMode>
    <StoreContext.Provider value={store}>
      <App />
    </StoreContext.Provider>
  </StrictMode>,
);
