import { useId, useState } from 'react';
import type { SupervisedJobWire } from '../../worker/protocol';
import { cardDefaults, DPO_FIELDS, SFT_FIELDS } from '../../common/config/jobs';
import { useActions, useIoTask, useRunState, useStep, useSupervisedJob } from '../store/hooks';

type DpoJob = Extract<SupervisedJobWire, { kind: 'dpo' }>;
type SftJob = Extract<SupervisedJobWire, { kind: 'sft' }>;
type DataFile = { name: string; text: string };

/** A labelled number input that keeps its text while typed and reports a finite number (or undefined). */
function NumberField(props: {
  label: string;
  value: number | undefined;
  onChange: (v: number | undefined) => void;
  step?: string;
}) {
  const id = useId();
  return (
    <div className="supervised-field">
      <label htmlFor={id}>{props.label}</label>
      <input
        id={id}
        type="number"
        step={props.step ?? 'any'}
        value={props.value ?? ''}
        onChange={(e) => {
          const v = e.target.valueAsNumber;
          props.onChange(Number.isFinite(v) ? v : undefined);
        }}
      />
    </div>
  );
}

function FilePicker(props: {
  label: string;
  testId: string;
  file: DataFile | null;
  disabled: boolean;
  onFile: (f: DataFile) => void;
}) {
  return (
    <div>
      <label className="file-button">
        {props.file ? `${props.label}: ${props.file.name}` : props.label}
        <input
          type="file"
          data-testid={props.testId}
          accept=".jsonl,.json,.txt,application/jsonl"
          disabled={props.disabled}
          onChange={async (e) => {
            const file = e.target.files?.[0];
            e.target.value = '';
            if (file) props.onFile({ name: file.name, text: await file.text() });
          }}
        />
      </label>
    </div>
  );
}

/**
 * DPO and SFT in the playground (docs/dpo.md "In the app", docs/sft.md): a preference file trains the policy by
 * DPO, a prompt / completion file by SFT; the run commands (Start, Step, Pause, Reset) then drive that job and the
 * charts show its metrics. After SFT, "Continue with …" starts PPO, GRPO or DPO from the SFT'd weights.
 */
export function SupervisedPanel() {
  const job = useSupervisedJob();
  const step = useStep();
  const runState = useRunState();
  const ioTask = useIoTask();
  const { setSupervisedJob, continueFromSft } = useActions();
  const [dpoFile, setDpoFile] = useState<DataFile | null>(null);
  const [sftFile, setSftFile] = useState<DataFile | null>(null);
  // The card's controls start at the settings tables' defaults (src/common/config/jobs.ts), the core's own.
  const [dpo, setDpo] = useState<Omit<DpoJob, 'kind' | 'data' | 'dataName'>>(() => cardDefaults(DPO_FIELDS));
  const [sft, setSft] = useState<Omit<SftJob, 'kind' | 'data' | 'dataName'>>(() => cardDefaults(SFT_FIELDS));
  const busy = ioTask !== null || runState === 'running';
  const dpoJob = (): DpoJob | null =>
    dpoFile && { kind: 'dpo', data: dpoFile.text, dataName: dpoFile.name, ...dpo };
  const lossId = useId();
  // More examples per step than the file has would repeat examples within a step: say so, do not train.
  const sftExamples = sftFile ? sftFile.text.split('\n').filter((l) => l.trim() !== '').length : null;
  const sftProblem =
    sftFile && sftExamples !== null && (sft.batchSize ?? 0) > sftExamples
      ? `examples per step is ${sft.batchSize}, but ${sftFile.name} has ${sftExamples} example${sftExamples === 1 ? '' : 's'}: choose at most ${sftExamples}, or add examples.`
      : null;

  return (
    <section className="card" aria-labelledby="supervised-heading">
      <h2 id="supervised-heading">DPO and SFT</h2>
      <p className="small" data-testid="supervised-status">
        {job ? (
          <>
            Training with <strong>{job.kind.toUpperCase()}</strong> on {job.dataName} ({job.examples}{' '}
            {job.kind === 'dpo' ? 'pairs' : 'examples'})
          </>
        ) : (
          'Training with the RL algorithm of the settings.'
        )}
      </p>

      <h3 className="subhead">DPO from preference pairs</h3>
      <FilePicker
        label="Preference pairs (JSONL)"
        testId="dpo-file"
        file={dpoFile}
        disabled={busy}
        onFile={setDpoFile}
      />
      <small className="muted">One JSON object per line: prompt, chosen, rejected.</small>
      <div className="supervised-grid">
        <NumberField label="beta" value={dpo.beta} onChange={(v) => setDpo({ ...dpo, beta: v })} />
        <div className="supervised-field">
          <label htmlFor={lossId}>loss</label>
          <select
            id={lossId}
            value={dpo.dpoLoss}
            onChange={(e) => setDpo({ ...dpo, dpoLoss: e.target.value as DpoJob['dpoLoss'] })}
          >
            <option value="sigmoid">sigmoid</option>
            <option value="ipo">ipo</option>
            <option value="hinge">hinge</option>
          </select>
        </div>
        <NumberField
          label="DPO steps"
          step="1"
          value={dpo.steps}
          onChange={(v) => setDpo({ ...dpo, steps: v })}
        />
        <NumberField
          label="pairs per step"
          step="1"
          value={dpo.batchSize}
          onChange={(v) => setDpo({ ...dpo, batchSize: v })}
        />
        <NumberField
          label="DPO learning rate"
          value={dpo.learningRate}
          onChange={(v) => setDpo({ ...dpo, learningRate: v })}
        />
        <NumberField
          label="eval every"
          step="1"
          value={dpo.evalEvery}
          onChange={(v) => setDpo({ ...dpo, evalEvery: v })}
        />
      </div>
      <button
        type="button"
        className="wide"
        disabled={busy || !dpoFile}
        onClick={() => void setSupervisedJob(dpoJob())}
      >
        Train with DPO
      </button>

      <h3 className="subhead">SFT warm start</h3>
      <FilePicker
        label="SFT examples (JSONL)"
        testId="sft-file"
        file={sftFile}
        disabled={busy}
        onFile={setSftFile}
      />
      <small className="muted">
        One JSON object per line: {'{"prompt", "completion"}'}, or {'{"messages"}'} (one user and one
        assistant turn) for a model with a chat template.
      </small>
      <div className="supervised-grid">
        <NumberField
          label="SFT steps"
          step="1"
          value={sft.steps}
          onChange={(v) => setSft({ ...sft, steps: v })}
        />
        <NumberField
          label="examples per step"
          step="1"
          value={sft.batchSize}
          onChange={(v) => setSft({ ...sft, batchSize: v })}
        />
        <NumberField
          label="SFT learning rate"
          value={sft.learningRate}
          onChange={(v) => setSft({ ...sft, learningRate: v })}
        />
      </div>
      {sftProblem && (
        <p className="problem" data-testid="sft-problem">
          {sftProblem}
        </p>
      )}
      <button
        type="button"
        className="wide"
        disabled={busy || !sftFile || sftProblem !== null}
        onClick={() =>
          sftFile &&
          void setSupervisedJob({ kind: 'sft', data: sftFile.text, dataName: sftFile.name, ...sft })
        }
      >
        Train with SFT
      </button>

      {job && step > 0 && (
        <div className="continue" data-testid="continue-after-sft">
          <p className="small">
            {`Continue from the ${job.kind.toUpperCase()} result (its weights become the policy and the reference):`}
          </p>
          {(['ppo', 'grpo'] as const).map((a) => (
            <button
              key={a}
              type="button"
              disabled={busy}
              onClick={() => void continueFromSft({ algorithm: a })}
            >
              {`Continue with ${a.toUpperCase()}`}
            </button>
          ))}
          {job.kind === 'sft' && (
            <button
              type="button"
              disabled={busy || !dpoFile}
              title={dpoFile ? undefined : 'Pick a preference file above first'}
              onClick={() => {
                const next = dpoJob();
                if (next) void continueFromSft({ algorithm: 'dpo', job: next });
              }}
            >
              Continue with DPO
            </button>
          )}
        </div>
      )}
      {job && (
        <button type="button" className="wide" disabled={busy} onClick={() => void setSupervisedJob(null)}>
          Back to RL
        </button>
      )}
    </section>
  );
}
