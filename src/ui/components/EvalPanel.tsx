import { useState } from 'react';
import { EVAL_CHARTS } from '../lib/catalog';
import { formatNumber } from '../lib/format';
import { useEvalLatest, useMetrics, useRunConfig, useSupervisedJob } from '../store/hooks';
import { MetricChart } from './MetricChart';

const SHOWN_AT_FIRST = 8;

/**
 * Held-out evaluation (docs/eval.md): eval/reward, eval/kl and eval/winRate over the evaluated steps, and the
 * newest evaluation's answers side by side, the reference's (the starting policy; under LoRA the base with the
 * adapters off) beside the policy's, each with its score. Shown when the run evaluates (evalEvery > 0) or its
 * history has evaluations.
 */
export function EvalPanel() {
  const config = useRunConfig();
  const metrics = useMetrics();
  const latest = useEvalLatest();
  const [showAll, setShowAll] = useState(false);
  const job = useSupervisedJob();
  const any = latest !== null || metrics.some((m) => typeof m['eval/reward'] === 'number');
  // A DPO or SFT job has no RL evaluation (DPO's eval/loss… are in its own charts).
  if (job || (config.evalEvery === 0 && !any)) return null;
  const samples = latest?.samples ?? [];
  const shown = showAll ? samples : samples.slice(0, SHOWN_AT_FIRST);
  return (
    <section className="card eval" aria-labelledby="eval-heading" data-testid="eval-panel">
      <div className="section-head">
        <h2 id="eval-heading">Held-out evaluation</h2>
        {config.evalEvery > 0 && (
          <span className="muted small">
            every {config.evalEvery} step{config.evalEvery === 1 ? '' : 's'} and at the last,{' '}
            {config.evalTemperature === 0
              ? 'greedy'
              : `sampled at T = ${config.evalTemperature}, fixed seeds`}
          </span>
        )}
      </div>
      <div className="chart-grid more">
        {EVAL_CHARTS.map((c) => (
          <MetricChart key={c.key} metric={c.key} title={c.title} height={110} sparse />
        ))}
      </div>
      {!latest ? (
        <p className="muted">
          The reference’s and the policy’s answers appear here after the first evaluation.
        </p>
      ) : (
        <>
          <p className="muted small">
            Step {latest.step}: {samples.length} prompts; policy wins {formatNumber(latest['eval/winRate'])}{' '}
            (score above the reference’s), mean score {formatNumber(latest['eval/reward'])}.
          </p>
          <table className="samples-table eval-table" data-testid="eval-table">
            <thead>
              <tr>
                <th scope="col">Prompt</th>
                <th scope="col">Reference</th>
                <th scope="col" className="num">
                  Score
                </th>
                <th scope="col">Policy</th>
                <th scope="col" className="num">
                  Score
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((s, i) => (
                <tr key={i} data-win={s.policyReward > s.referenceReward ? 'true' : undefined}>
                  <td className="prompt">{s.prompt}</td>
                  <td className="answer">
                    <Answer text={s.reference} />
                  </td>
                  <td className="num">{formatNumber(s.referenceReward)}</td>
                  <td className="answer">
                    <Answer text={s.policy} />
                  </td>
                  <td className="num">{formatNumber(s.policyReward)}</td>
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

/** An answer, or "(empty)" in words when the model stopped at once (a blank cell reads as a missing one). */
function Answer({ text }: { text: string }) {
  return text.trim() === '' ? (
    <span className="muted empty-answer" data-testid="empty-answer">
      (empty)
    </span>
  ) : (
    <>{text}</>
  );
}
