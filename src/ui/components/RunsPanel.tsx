import { useEffect, useId, useState } from 'react';
import { CONFIG_FIELDS, describeAllowed, type ConfigKey } from '../../common/config';
import { formatNumber } from '../lib/format';
import { MAX_COMPARED, rerunKeys, runKind, settingsTable, type KeptRun } from '../lib/kept-runs';
import { BASIC_KEYS } from '../lib/catalog';
import {
  useActions,
  useCompared,
  useCurrentRunId,
  useLinkedRuns,
  useRerunQueue,
  useKeptRuns,
  useKeptRunsNote,
} from '../store/hooks';

/** A run's name, edited in place: committed on Enter or when leaving the box, Escape puts it back. */
function NameBox(props: { run: KeptRun }) {
  const { renameRun } = useActions();
  const [text, setText] = useState(props.run.name);
  useEffect(() => setText(props.run.name), [props.run.name]);
  return (
    <input
      type="text"
      className="run-name"
      aria-label="Run name"
      value={text}
      onChange={(e) => setText(e.target.value)}
      onBlur={() => {
        renameRun(props.run.id, text);
        setText(props.run.name);
      }}
      onKeyDown={(e) => {
        if (e.key === 'Enter') e.currentTarget.blur();
        if (e.key === 'Escape') setText(props.run.name);
      }}
    />
  );
}

/** The value box of "Run again with…": a list for choices and booleans, a text box otherwise. */
function ValueInput(props: { name: ConfigKey; value: string; onChange: (v: string) => void; id: string }) {
  const field = CONFIG_FIELDS[props.name];
  const choices =
    field.type === 'choice' ? field.choices : field.type === 'boolean' ? ['true', 'false'] : null;
  if (choices) {
    return (
      <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.target.value)}>
        {choices.map((c) => (
          <option key={c} value={c}>
            {c}
          </option>
        ))}
      </select>
    );
  }
  return (
    <input
      id={props.id}
      type="text"
      value={props.value}
      placeholder={describeAllowed(props.name)}
      onChange={(e) => props.onChange(e.target.value)}
    />
  );
}

/** "Run again with…": the source run's config with one key changed starts a new run, compared with it. */
function RunAgainForm(props: { run: KeptRun; onClose: () => void }) {
  const { runAgainWith } = useActions();
  const keys = rerunKeys();
  const [key, setKey] = useState<ConfigKey>(keys[0]);
  const current = (k: ConfigKey) => String((props.run.config as unknown as Record<string, unknown>)[k] ?? '');
  const [value, setValue] = useState(current(keys[0]));
  const [problem, setProblem] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const keyId = useId();
  const valueId = useId();
  return (
    <form
      className="run-again"
      aria-label="Run again with…"
      onSubmit={async (e) => {
        e.preventDefault();
        setBusy(true);
        const why = await runAgainWith(props.run.id, key, value);
        setBusy(false);
        setProblem(why);
        if (why === null) props.onClose();
      }}
    >
      <p className="small">
        Run <strong>{props.run.name}</strong> again with one setting changed:
      </p>
      <label htmlFor={keyId}>Setting</label>
      <select
        id={keyId}
        value={key}
        onChange={(e) => {
          const k = e.target.value as ConfigKey;
          setKey(k);
          setValue(current(k));
          setProblem(null);
        }}
      >
        {keys.map((k) => (
          <option key={k} value={k}>
            {k}
          </option>
        ))}
      </select>
      <label htmlFor={valueId}>Value</label>
      <ValueInput name={key} value={value} onChange={setValue} id={valueId} />
      <button type="submit" className="small primary" disabled={busy}>
        Start run
      </button>
      <button type="button" className="small" onClick={props.onClose}>
        Cancel
      </button>
      {problem && (
        <p className="problem" role="alert" data-testid="run-again-problem">
          {problem}
        </p>
      )}
    </form>
  );
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'short', timeStyle: 'short' });

/** The newest finite reward of a run. */
function finalReward(run: KeptRun): number | null {
  for (let i = run.metrics.length - 1; i >= 0; i--) {
    const v = run.metrics[i].reward;
    if (typeof v === 'number' && Number.isFinite(v)) return v;
  }
  return null;
}

/**
 * Every kept run (newest first): its name (editable), algorithm, steps, final reward and date; a box to compare
 * it on the charts (up to MAX_COMPARED), "Run again with…", delete; and the comparison as CSV.
 */
export function RunsPanel() {
  const runs = useKeptRuns();
  const compared = useCompared();
  const currentRunId = useCurrentRunId();
  const note = useKeptRunsNote();
  const { toggleCompare, deleteRun, exportComparisonCsv, dismissKeptRunsNote } = useActions();
  const [again, setAgain] = useState<string | null>(null);
  const againRun = runs.find((r) => r.id === again);
  const newestFirst = [...runs].reverse();
  return (
    <section className="card runs" aria-labelledby="runs-heading">
      <div className="section-head">
        <h2 id="runs-heading">Runs</h2>
        <button
          type="button"
          className="small"
          onClick={exportComparisonCsv}
          disabled={runs.length === 0}
          title="The compared runs (and the current one) as one CSV with a run column"
        >
          Comparison CSV
        </button>
      </div>
      {note && (
        <p className="notice small" role="status" data-testid="runs-note">
          <span>{note}</span>{' '}
          <button type="button" className="link" onClick={dismissKeptRunsNote} aria-label="Dismiss runs note">
            ×
          </button>
        </p>
      )}
      {runs.length === 0 ? (
        <p className="muted small">
          Every run you start is kept here; tick up to {MAX_COMPARED} to compare them.
        </p>
      ) : (
        <table className="runs-table">
          <thead>
            <tr>
              <th scope="col">Compare</th>
              <th scope="col">Name</th>
              <th scope="col">Algorithm</th>
              <th scope="col">Steps</th>
              <th scope="col">Final reward</th>
              <th scope="col">Date</th>
              <th scope="col">
                <span className="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {newestFirst.map((r) => {
              const on = compared.includes(r.id);
              return (
                <tr
                  key={r.id}
                  aria-label={r.name}
                  data-run-id={r.id}
                  className={r.id === currentRunId ? 'current' : undefined}
                >
                  <td>
                    <input
                      type="checkbox"
                      aria-label="Compare"
                      checked={on}
                      disabled={!on && compared.length >= MAX_COMPARED}
                      onChange={() => toggleCompare(r.id)}
                    />
                  </td>
                  <td>
                    <NameBox run={r} />
                    {r.id === currentRunId && <span className="tag">current</span>}
                  </td>
                  <td>{runKind(r)}</td>
                  <td data-testid="run-steps">{r.metrics.length}</td>
                  <td>{formatNumber(finalReward(r))}</td>
                  <td>{dateFormat.format(r.createdAt)}</td>
                  <td className="run-actions">
                    <button type="button" className="small" onClick={() => setAgain(r.id)}>
                      Run again with…
                    </button>
                    <button
                      type="button"
                      className="small"
                      aria-label={`Delete run ${r.name}`}
                      onClick={() => {
                        if (again === r.id) setAgain(null);
                        deleteRun(r.id);
                      }}
                    >
                      Delete
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {againRun && <RunAgainForm key={againRun.id} run={againRun} onClose={() => setAgain(null)} />}
      <SettingsSideBySide runs={runs.filter((r) => compared.includes(r.id) || r.id === currentRunId)} />
    </section>
  );
}

/** The compared runs' settings side by side, the differing ones first and marked (beside the CSV). */
function SettingsSideBySide({ runs }: { runs: KeptRun[] }) {
  if (runs.length < 2) return null;
  const rows = settingsTable(runs, ['model', 'task', ...BASIC_KEYS]);
  return (
    <details className="settings-side-by-side" data-testid="settings-side-by-side">
      <summary>Settings side by side ({rows.filter((r) => r.differs).length} differ)</summary>
      <table className="runs-table settings-table">
        <thead>
          <tr>
            <th scope="col">Setting</th>
            {runs.map((r) => (
              <th key={r.id} scope="col">
                {r.name}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr
              key={row.key}
              className={row.differs ? 'differs' : undefined}
              data-differs={row.differs || undefined}
            >
              <th scope="row">{row.key}</th>
              {row.values.map((v, i) => (
                <td key={i}>{v}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </details>
  );
}

/** A link that compares runs: "This link compares 2 runs: Re-run them"; then how many are still to run. */
export function LinkedRunsBanner() {
  const linked = useLinkedRuns();
  const queue = useRerunQueue();
  const { rerunLinked, dismissLinkedRuns, cancelRerun } = useActions();
  if (linked && linked.length > 0) {
    return (
      <div className="notice" role="status" data-testid="linked-runs">
        <span>This link compares {linked.length} runs:</span>{' '}
        <button type="button" className="small primary" onClick={() => void rerunLinked()}>
          Re-run them
        </button>{' '}
        <button type="button" className="link" onClick={dismissLinkedRuns} aria-label="Dismiss linked runs">
          ×
        </button>
      </div>
    );
  }
  if (queue.length > 0) {
    return (
      <div className="notice" role="status" data-testid="linked-runs">
        <span>Re-running the linked runs: {queue.length} more after this one.</span>{' '}
        <button type="button" className="small" onClick={cancelRerun}>
          Stop after this one
        </button>
      </div>
    );
  }
  return null;
}
