import { useActions, useIoTask, useRunState, useStep } from '../store/hooks';

/** Checkpoint zip out and in, metrics as CSV/JSON, and the settings as a TRL PPOConfig. */
export function CheckpointPanel() {
  const ioTask = useIoTask();
  const step = useStep();
  const running = useRunState() === 'running';
  const { exportCheckpoint, exportMetrics, exportTrlConfig, importCheckpoint } = useActions();
  const busy = ioTask !== null;
  return (
    <section className="card" aria-labelledby="checkpoint-heading">
      <h2 id="checkpoint-heading">Checkpoint</h2>
      <div className="button-grid">
        <button type="button" onClick={() => void exportCheckpoint()} disabled={busy}>
          {ioTask === 'export' ? 'Exporting…' : 'Export checkpoint'}
        </button>
        <label className={`file-button${busy || running ? ' disabled' : ''}`}>
          {ioTask === 'import' ? 'Importing…' : 'Import checkpoint'}
          <input
            type="file"
            accept=".zip,application/zip"
            disabled={busy || running}
            onChange={async (e) => {
              const file = e.target.files?.[0];
              e.target.value = '';
              if (file) await importCheckpoint(new Uint8Array(await file.arrayBuffer()));
            }}
          />
        </label>
        <button type="button" onClick={() => void exportMetrics('csv')} disabled={busy || step === 0}>
          Metrics CSV
        </button>
        <button type="button" onClick={() => void exportMetrics('json')} disabled={busy || step === 0}>
          Metrics JSON
        </button>
        <button type="button" className="wide" onClick={() => void exportTrlConfig()} disabled={busy}>
          Export as TRL config
        </button>
      </div>
      <small className="muted">
        A checkpoint is a Hugging Face folder (policy, value model, optimiser, history) zipped; import it to
        continue the same run.
      </small>
    </section>
  );
}
