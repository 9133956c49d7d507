import { useId } from 'react';
import {
  useActions,
  useCanGenerate,
  useGenerating,
  useOutput,
  useGenerateParam,
  usePlayground,
} from '../store/hooks';
import type { GenerateParams } from '../store/types';

type NumericParam = Exclude<keyof GenerateParams, 'prompt'>;

function NumberField(props: {
  param: NumericParam;
  label: string;
  min: number;
  max?: number;
  step: number;
  hint?: string;
}) {
  const value = useGenerateParam(props.param);
  const { setGenerateParam } = useActions();
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{props.label}</label>
      <input
        id={id}
        type="number"
        inputMode="decimal"
        min={props.min}
        max={props.max}
        step={props.step}
        value={Number.isFinite(value) ? value : ''}
        onChange={(e) => setGenerateParam(props.param, e.target.valueAsNumber)}
        aria-describedby={props.hint ? `${id}-hint` : undefined}
      />
      {props.hint && (
        <small id={`${id}-hint`} className="muted">
          {props.hint}
        </small>
      )}
    </div>
  );
}

function PromptField() {
  const prompt = useGenerateParam('prompt');
  const { setGenerateParam } = useActions();
  const id = useId();
  return (
    <div className="field field-wide">
      <label htmlFor={id}>Prompt</label>
      <textarea
        id={id}
        rows={3}
        value={prompt}
        spellCheck={false}
        onChange={(e) => setGenerateParam('prompt', e.target.value)}
      />
    </div>
  );
}

function Output() {
  const output = useOutput();
  const generating = useGenerating();
  return (
    <section className="output" role="status" aria-label="Output" aria-live="polite" aria-busy={generating}>
      {!output && <p className="muted">{generating ? 'Generating…' : 'The continuation appears here.'}</p>}
      {output && (
        <>
          <p className="continuation">
            <span className="prompt-echo">{output.prompt}</span>
            <span className="generated" data-testid="output-text">
              {output.reply.text}
            </span>
          </p>
          <p className="stats" data-testid="output-stats">
            {output.reply.tokens.length} tokens · {output.reply.tokensPerSecond.toFixed(1)} tokens/s ·{' '}
            {Math.round(output.reply.millis)} ms
          </p>
          <ol className="tokens" aria-label="Generated tokens">
            {output.reply.tokens.map((id, i) => (
              <li key={i} title={`id ${id} · log p ${output.reply.logprobs[i].toFixed(3)}`}>
                {output.reply.tokenTexts[i]}
              </li>
            ))}
          </ol>
        </>
      )}
    </section>
  );
}

/** Prompt in, sampled continuation out, through the worker's model. */
export function GeneratePanel() {
  const canGenerate = useCanGenerate();
  const generating = useGenerating();
  const { generate } = useActions();
  const chat = usePlayground((s) => (s.model?.chatTemplate ?? false) && s.editedConfig.chatTemplate);
  return (
    <section className="card" aria-labelledby="generate-heading">
      <h2 id="generate-heading">Try the policy</h2>
      <p className="muted small">
        Sample from the policy as it is now (paused or between steps).
        {chat && ' The prompt goes in the model’s chat template, as in training (the chatTemplate setting).'}
      </p>
      <form
        className="generate-form"
        noValidate
        onSubmit={(e) => {
          e.preventDefault();
          void generate();
        }}
      >
        <PromptField />
        <NumberField param="maxNewTokens" label="Max new tokens" min={1} step={1} />
        <NumberField param="temperature" label="Temperature" min={0} step={0.1} hint="0 = greedy" />
        <NumberField param="topK" label="Top-k" min={0} step={1} hint="0 = off" />
        <NumberField param="topP" label="Top-p" min={0} max={1} step={0.05} hint="1 = off" />
        <NumberField param="seed" label="Seed" min={0} step={1} />
        <div className="actions">
          <button type="submit" className="primary" disabled={!canGenerate}>
            {generating ? 'Generating…' : 'Generate'}
          </button>
        </div>
      </form>
      <Output />
    </section>
  );
}
