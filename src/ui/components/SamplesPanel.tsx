import { useDeferredValue, useId, useMemo, useState } from 'react';
import { formatNumber } from '../lib/format';
import { HEATMAP_MODES, heatScale, type HeatmapMode } from '../lib/heat';
import { useActions, useHeatmap, useSampleStep, useSamples, useSupervisedJob } from '../store/hooks';
import { HeatLegend, TokenHeatmap } from './TokenHeatmap';

const SHOWN_AT_FIRST = 8;

function StepPicker({ steps, shown }: { steps: number[]; shown: number | null }) {
  const following = useSampleStep() === null;
  const { selectSampleStep } = useActions();
  const id = useId();
  const i = shown === null ? -1 : steps.indexOf(shown);
  return (
    <span className="inline">
      <button
        type="button"
        className="small"
        aria-label="Earlier step"
        disabled={i <= 0}
        onClick={() => selectSampleStep(steps[i - 1])}
      >
        ‹
      </button>
      <label htmlFor={id} className="sr-only">
        Samples of step
      </label>
      <select
        id={id}
        value={following ? 'latest' : String(shown)}
        onChange={(e) => selectSampleStep(e.target.value === 'latest' ? null : Number(e.target.value))}
      >
        <option value="latest">newest step{steps.length > 0 ? ` (${steps[steps.length - 1]})` : ''}</option>
        {[...steps].reverse().map((s) => (
          <option key={s} value={s}>
            step {s}
          </option>
        ))}
      </select>
      <button
        type="button"
        className="small"
        aria-label="Later step"
        disabled={i < 0 || i >= steps.length - 1}
        onClick={() => selectSampleStep(i + 1 === steps.length - 1 ? null : steps[i + 1])}
      >
        ›
      </button>
    </span>
  );
}

function ModePicker() {
  const mode = useHeatmap();
  const { setHeatmap } = useActions();
  const name = useId();
  return (
    <fieldset className="inline modes">
      <legend>Colour tokens by</legend>
      {HEATMAP_MODES.map((m) => (
        <label key={m.value} title={m.doc}>
          <input
            type="radio"
            name={name}
            value={m.value}
            checked={mode === m.value}
            onChange={() => setHeatmap(m.value as HeatmapMode)}
          />
          {m.label}
        </label>
      ))}
    </fieldset>
  );
}

/**
 * The latest batch (or an earlier step's): prompt (as the model saw it: in its chat template when the run used
 * one), response as a token heatmap, score and KL.
 */
export function SamplesPanel() {
  const job = useSupervisedJob();
  const kept = useDeferredValue(useSamples());
  const wanted = useSampleStep();
  const mode = useHeatmap();
  const [showAll, setShowAll] = useState(false);
  const entry = (wanted === null ? undefined : kept.find((s) => s.step === wanted)) ?? kept[kept.length - 1];
  const samples = useMemo(() => entry?.samples ?? [], [entry]);
  const scale = useMemo(
    () =>
      heatScale(
        samples.map((s) => s.tokens),
        mode,
      ),
    [samples, mode],
  );
  const shown = showAll ? samples : samples.slice(0, SHOWN_AT_FIRST);
  const modeDoc = HEATMAP_MODES.find((m) => m.value === mode)?.doc;
  // A DPO or SFT job samples nothing: its steps carry no samples, and an RL step's would be stale.
  if (job) return null;

  return (
    <section className="card samples" aria-labelledby="samples-heading">
      <div className="section-head">
        <h2 id="samples-heading">Samples</h2>
        <StepPicker steps={kept.map((s) => s.step)} shown={entry?.step ?? null} />
        <ModePicker />
        {entry && <HeatLegend scale={scale} />}
      </div>
      {!entry ? (
        <p className="muted">The samples of each step appear here once training runs.</p>
      ) : (
        <>
          <p className="muted small">
            Step {entry.step}: {samples.length} samples. Token colour: {modeDoc}.
          </p>
          <table className="samples-table" data-testid="samples-table">
            <thead>
              <tr>
                <th scope="col">Prompt</th>
                <th scope="col">Response</th>
                <th scope="col" className="num">
                  Score
                </th>
                <th scope="col" className="num" title="Σ_t log p − log p_ref of this sample">
                  KL
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((s, i) => (
                <tr key={i}>
                  <td
                    className="prompt"
                    data-chat={s.chatPrompt !== undefined ? 'true' : undefined}
                    title={
                      s.chatPrompt !== undefined ? `In the chat template; the prompt: ${s.prompt}` : undefined
                    }
                  >
                    {s.chatPrompt ?? s.prompt}
                  </td>
                  <td className="response" title={s.response}>
                    <TokenHeatmap tokens={s.tokens} scale={scale} />
                  </td>
                  <td className="num">{formatNumber(s.score)}</td>
                  <td className="num">{formatNumber(s.kl)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {samples.length > SHOWN_AT_FIRST && (
            <button type="button" className="small" onClick={() => setShowAll(!showAll)}>
              {showAll ? 'Show fewer' : `Show all ${samples.length}`}
            </button>
          )}
        </>
      )}
    </section>
  );
}
