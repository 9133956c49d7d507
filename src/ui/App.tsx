import { useEffect } from 'react';
import { AlertsPanel } from './components/AlertsPanel';
import { BackendNotice } from './components/BackendBadge';
import { ChartPanel } from './components/ChartPanel';
import { CheckpointPanel } from './components/CheckpointPanel';
import { DataPanel } from './components/DataPanel';
import { EvalPanel } from './components/EvalPanel';
import { ErrorBanner } from './components/ErrorBanner';
import { AutosaveBanner } from './components/AutosaveBanner';
import { GeneratePanel } from './components/GeneratePanel';
import { HyperparameterPanel } from './components/HyperparameterPanel';
import { ModelCard } from './components/ModelCard';
import { MemoryEstimate } from './components/MemoryEstimate';
import { RewardPanel } from './components/RewardPanel';
import { LinkedRunsBanner, RunsPanel } from './components/RunsPanel';
import { SamplesPanel } from './components/SamplesPanel';
import { SupervisedPanel } from './components/SupervisedPanel';
import { TopBar } from './components/TopBar';
import { useActions } from './store/hooks';

/**
 * TensorFlow Playground's layout for RLHF: the run controls on top; data, model and reward on the left; the
 * charts in the middle with the samples below them; the hyperparameters on the right (scrolling on their own).
 */
export function App() {
  const { start } = useActions();
  useEffect(() => {
    void start();
  }, [start]);

  return (
    <div className="app">
      <TopBar />
      <MemoryEstimate />
      <BackendNotice />
      <ErrorBanner />
      <AutosaveBanner />
      <LinkedRunsBanner />
      <main className="columns">
        <aside className="col col-left" aria-label="Data, model and reward">
          <DataPanel />
          <ModelCard />
          <RewardPanel />
          <SupervisedPanel />
          <CheckpointPanel />
        </aside>
        <div className="col col-centre">
          <AlertsPanel />
          <ChartPanel />
          <EvalPanel />
          <RunsPanel />
          <SamplesPanel />
          <GeneratePanel />
        </div>
        <aside className="col col-right" aria-label="Hyperparameters">
          <HyperparameterPanel />
        </aside>
      </main>
    </div>
  );
}
