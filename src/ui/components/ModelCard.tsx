import { useEffect, useId, useRef, useState } from 'react';
import { MODEL_CHOICES } from '../lib/catalog';
import { describeError } from '../errors';
import { isModelFile } from '../lib/download';
import { readModelPick } from '../lib/pick';
import { formatBytes } from '../lib/format';
import { familyName, trainableLine } from '../lib/memory-estimate';
import {
  useActions,
  useBackend,
  useMemory,
  useModel,
  useModelChoice,
  useModelLoadState,
  usePlayground,
  useProgress,
  useRunState,
} from '../store/hooks';
import { AppliesOnReset } from './AppliesOnReset';
import { ProgressBar } from './ProgressBar';
import type { ModelSummary } from '../../worker/protocol';

const count = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });

const TOKENIZER_NAMES: Record<ModelSummary['tokenizer'], string> = {
  bytes: 'bytes',
  'gpt2-bpe': 'GPT-2 BPE',
  hf: 'tokenizer.json',
};

/** The loaded policy's shape, and the worker's tensor memory (a leak shows as a growing count). */
function ModelFacts() {
  const model = useModel();
  const memory = useMemory();
  const estimate = usePlayground((s) => s.estimate);
  const job = usePlayground((s) => s.runStatus?.job ?? null);
  const step = usePlayground((s) => s.runStatus?.step ?? 0);
  if (!model) return null;
  return (
    <dl className="facts" data-testid="model-summary">
      <dt>Source</dt>
      <dd>{model.label}</dd>
      {job && (
        <>
          {/* Which weights are in force: the job trains a copy of the source, not the source itself. */}
          <dt>Weights</dt>
          <dd data-testid="weights-in-force">
            {step > 0
              ? `${job.kind.toUpperCase()} on ${job.dataName}, step ${step}, from ${model.label}`
              : `${model.label}; ${job.kind.toUpperCase()} on ${job.dataName} not started`}
          </dd>
        </>
      )}
      <dt>Family</dt>
      <dd data-testid="model-family" title={`config.json model_type "${model.family}"`}>
        {familyName(model.family)}
      </dd>
      <dt>Parameters</dt>
      <dd title={model.params.toLocaleString('en')}>{count.format(model.params)}</dd>
      {estimate && estimate.params === model.params && (
        <>
          <dt>Trains</dt>
          <dd
            data-testid="trainable-params"
            title={
              `${estimate.policyTrainableParams.toLocaleString('en')} of the policy's parameters ` +
              `(${estimate.lora > 0 ? `LoRA r=${estimate.lora} adapters` : 'every weight'}); ` +
              `${estimate.trainableParams.toLocaleString('en')} with the value model's.`
            }
          >
            {trainableLine(estimate)}
          </dd>
        </>
      )}
      <dt>Layers × width</dt>
      <dd>
        {model.n_layer} × {model.n_embd} ({model.n_head} heads)
      </dd>
      <dt>Context</dt>
      <dd>{model.n_positions} tokens</dd>
      <dt>Tokenizer</dt>
      <dd data-testid="model-tokenizer">
        {TOKENIZER_NAMES[model.tokenizer]} ({model.vocab_size.toLocaleString('en')} ids)
        {model.chatTemplate ? ', chat template' : ''}
      </dd>
      {memory && (
        <>
          <dt>Tensors</dt>
          <dd>
            {memory.numTensors} · {formatBytes(memory.numBytes)}
          </dd>
        </>
      )}
    </dl>
  );
}

/** The config keys the picker's verdicts depend on (beside the backend). */
const FIT_KEYS = ['lora', 'loraTargets', 'algorithm', 'valueModel', 'baseDtype'] as const;

/** Built-in tiny, a Hub id, or files from disk (config.json + model.safetensors, and a Llama / Qwen tokenizer). */
function ModelPicker() {
  const choice = useModelChoice();
  const loadState = useModelLoadState();
  const progress = useProgress();
  const running = useRunState() === 'running';
  const { chooseModel, loadModel, showError, refreshModelFits } = useActions();
  // Whether each Llama / Qwen entry fits this device, and how (the worker's verdict: api.modelFits).
  const fits = usePlayground((s) => s.modelFits);
  const backend = useBackend()?.backend ?? null;
  const fitDeps = usePlayground((s) => JSON.stringify(FIT_KEYS.map((k) => s.editedConfig[k] ?? null)));
  useEffect(() => {
    void refreshModelFits();
  }, [refreshModelFits, backend, fitDeps]);
  const [files, setFiles] = useState<File[]>([]);
  const filesInput = useRef<HTMLInputElement>(null);
  const name = useId();
  const busy = loadState === 'busy';

  const load = async () => {
    if (choice === 'files') {
      if (files.length === 0) {
        filesInput.current?.click();
        return;
      }
      let picked;
      try {
        picked = await readModelPick(files);
      } catch (e) {
        showError(describeError(e));
        return;
      }
      await loadModel({ kind: 'files', files: picked });
    } else {
      const preset = MODEL_CHOICES.find((m) => m.id === choice);
      if (!preset) return;
      await loadModel(
        preset.id === 'tiny' ? { kind: 'builtin', name: 'tiny' } : { kind: 'hub', repo: preset.id },
      );
    }
  };

  return (
    <div className="model-picker">
      <fieldset className="choices" disabled={busy}>
        <legend className="sr-only">Model to train</legend>
        {MODEL_CHOICES.map((m) => (
          <label key={m.id} className="choice">
            <input
              type="radio"
              name={name}
              value={m.id}
              checked={choice === m.id}
              onChange={() => chooseModel(m.id)}
            />
            <span>
              {m.label} <small className="muted">{m.note}</small>
              {m.shape && fits?.[m.shape] && (
                <small
                  className={fits[m.shape].fits ? 'muted model-fit' : 'model-fit model-fit-over'}
                  data-testid="model-fit"
                >
                  {' · '}
                  {fits[m.shape].text}
                </small>
              )}
            </span>
          </label>
        ))}
        <label className="choice">
          <input
            type="radio"
            name={name}
            value="files"
            checked={choice === 'files'}
            onChange={() => chooseModel('files')}
          />
          <span>
            Local files{' '}
            <small className="muted">
              config.json + model.safetensors (+ tokenizer.json, tokenizer_config.json, generation_config.json
              for Llama / Qwen)
            </small>
          </span>
        </label>
      </fieldset>
      {choice === 'files' && (
        <div className="file-picks">
          <label className="file-button">
            Model files
            <input
              ref={filesInput}
              type="file"
              multiple
              accept=".json,.safetensors,.jinja,application/json"
              onChange={(e) => setFiles(Array.from(e.target.files ?? []))}
            />
          </label>
          <label className="file-button">
            Model folder
            <input
              type="file"
              // A folder pick (Chromium, Firefox, Safari); the files keep their names.
              {...{ webkitdirectory: '' }}
              onChange={(e) => setFiles(Array.from(e.target.files ?? []).filter((f) => isModelFile(f.name)))}
            />
          </label>
          <small className="muted">
            {files.length > 0 ? files.map((f) => f.name).join(', ') : 'No files chosen'}
          </small>
        </div>
      )}
      <div className="row">
        <button type="button" onClick={() => void load()} disabled={busy || running}>
          {busy ? 'Loading…' : 'Load model'}
        </button>
        <AppliesOnReset name="model" />
      </div>
      {busy && <ProgressBar progress={progress} label="Model download" />}
    </div>
  );
}

/** Why LoRA was turned on for a big model, with the way back to full fine-tuning. */
function LoraNote() {
  const note = usePlayground((s) => s.loraNote);
  const { trainAllWeights, dismissLoraNote } = useActions();
  if (!note) return null;
  return (
    <div className="lora-note small" data-testid="lora-note" role="note">
      <p>{note.text}</p>
      <div className="row">
        <button type="button" onClick={trainAllWeights}>
          Train all weights instead
        </button>
        <button type="button" className="link" onClick={dismissLoraNote}>
          OK
        </button>
      </div>
    </div>
  );
}

export function ModelCard() {
  const model = useModel();
  const loadState = useModelLoadState();
  return (
    <section className="card" aria-labelledby="model-heading">
      <h2 id="model-heading">Model</h2>
      <ModelPicker />
      {!model && (
        <p className="muted">{loadState === 'error' ? 'No model loaded.' : 'Loading the built-in model…'}</p>
      )}
      <LoraNote />
      <ModelFacts />
    </section>
  );
}
