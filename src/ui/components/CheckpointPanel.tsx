import { engineExports } from '../../common/exports/trl';
import type { TrainConfig } from '../../common/config';
import { downloadFile } from '../lib/download';
import {
  useActions,
  useIoTask,
  usePlayground,
  useRunState,
  useStarting,
  useStep,
  useSupervisedJob,
} from '../store/hooks';

/**
 * Checkpoint zip out and in, metrics as CSV/JSON, and the run's settings for other engines: one button per file,
 * each naming its engine (TRL's config class and version, OpenRLHF's train_ppo_ray, verl's main_ppo;
 * src/common/exports/trl.ts engineExports), made from the config in force (the edited one before the worker answered).
 */
export function CheckpointPanel() {
  const config = usePlayground((s) => (s.runStatus?.config ?? s.editedConfig) as TrainConfig);
  let files: ReturnType<typeof engineExports> = [];
  try {
    files = engineExports(config);
  } catch {
    // A config the engines cannot take (being edited): no export buttons until it is valid.
  }
  const ioTask = useIoTask();
  const job = useSupervisedJob()?.kind;
  // A DPO or SFT job (docs/dpo.md, docs/sft.md) is not a run of the RL settings these engines would take.
  if (job) files = [];
  const step = useStep();
  // The autosave is of the RL run: not shown during a DPO/SFT job, nor after a reset took the run back before it.
  const autosaved = usePlayground((s) => s.autosavedStep);
  const showAutosaved = autosaved !== null && !job && autosaved <= step && autosaved > 0;
  const running = useRunState() === 'running';
  const { exportCheckpoint, exportMetrics, exportTrlConfig, importCheckpoint } = useActions();
  // An import while the page's first model and run are set up would be dropped by them (store `starting`).
  const starting = useStarting();
  const busy = ioTask !== null || starting;
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
        {/* RL runs get their TRL file from the engine list below (one button per file: no near-twin here). */}
        {job === 'dpo' && (
          <button type="button" className="wide" onClick={() => void exportTrlConfig()} disabled={busy}>
            TRL 1.13 DPOConfig: trl-dpo-config.json
          </button>
        )}
      </div>
      <div role="group" aria-label="Export for other engines" className="button-grid">
        {files.map((f) => (
          <button
            key={f.fileName}
            type="button"
            className="wide"
            title={`${f.fileName}: for ${f.engine}`}
            onClick={() => downloadFile(f.fileName, f.text, f.mime)}
          >
            {f.engine}: {f.fileName}
          </button>
        ))}
      </div>
      {job === 'sft' && (
        <small className="muted" data-testid="no-engine-export">
          No export for other engines: the SFT warm start is not an RL or DPO run.{' '}
        </small>
      )}
      {showAutosaved && (
        <p className="muted small" data-testid="autosave-status" title="Saved in this browser (IndexedDB)">
          Autosaved at step {autosaved}.
        </p>
      )}
      <small className="muted">
        A checkpoint is a Hugging Face folder (policy, value model, optimiser, history) zipped; import it to
        continue the same run.
      </small>
    </section>
  );
}
