import { useMemory, useModel, useModelPhase } from '../store/hooks';

const count = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });

function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MB`;
  return `${(n / 1024 ** 3).toFixed(2)} GB`;
}

/** The loaded policy's shape, and the worker's tensor memory (a leak shows as a growing count). */
export function ModelCard() {
  const model = useModel();
  const phase = useModelPhase();
  const memory = useMemory();
  return (
    <section className="card" aria-labelledby="model-heading">
      <h2 id="model-heading">Model</h2>
      {!model && (
        <p className="muted">{phase === 'error' ? 'No model loaded.' : 'Loading the built-in model…'}</p>
      )}
      {model && (
        <dl className="facts" data-testid="model-summary">
          <dt>Source</dt>
          <dd>{model.label}</dd>
          <dt>Parameters</dt>
          <dd title={model.params.toLocaleString('en')}>{count.format(model.params)}</dd>
          <dt>Layers × width</dt>
          <dd>
            {model.n_layer} × {model.n_embd} ({model.n_head} heads)
          </dd>
          <dt>Context</dt>
          <dd>{model.n_positions} tokens</dd>
          <dt>Tokenizer</dt>
          <dd>
            {model.tokenizer === 'bytes' ? 'bytes' : 'GPT-2 BPE'} ({model.vocab_size.toLocaleString('en')}{' '}
            ids)
          </dd>
          {memory && (
            <>
              <dt>Tensors</dt>
              <dd>
                {memory.numTensors} · {bytes(memory.numBytes)}
              </dd>
            </>
          )}
        </dl>
      )}
      {phase === 'busy' && model && <p className="muted">Reloading on the new backend…</p>}
    </section>
  );
}
