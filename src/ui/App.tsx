import { useEffect } from 'react';
import { BackendBadge } from './components/BackendBadge';
import { ErrorBanner } from './components/ErrorBanner';
import { GeneratePanel } from './components/GeneratePanel';
import { ModelCard } from './components/ModelCard';
import { useActions } from './store/hooks';

export function App() {
  const { start } = useActions();
  useEffect(() => {
    void start();
  }, [start]);

  return (
    <div className="app">
      <header className="app-header">
        <div>
          <h1>PPO Playground</h1>
          <p className="tagline">
            GPT-2 in your browser, on WebGPU — reinforcement learning from feedback comes next.
          </p>
        </div>
      </header>
      <ErrorBanner />
      <main className="layout">
        <GeneratePanel />
        <aside className="side">
          <BackendBadge />
          <ModelCard />
        </aside>
      </main>
    </div>
  );
}
