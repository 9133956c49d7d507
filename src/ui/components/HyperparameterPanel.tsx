import { CONFIG_FIELDS, CONFIG_KEYS } from '../../common/config';
import { GROUP_ORDER, GROUP_TITLES, SETUP_KEYS } from '../lib/catalog';
import { useAnyAppliesOnReset, useConfigProblem, useRunStarted, useSupervisedJob } from '../store/hooks';
import { ConfigControl } from './ConfigControl';

/** The right column: every config key that has a control, grouped as in CONFIG_FIELDS. */
export function HyperparameterPanel() {
  const problem = useConfigProblem();
  const started = useRunStarted();
  const waiting = useAnyAppliesOnReset();
  const job = useSupervisedJob();
  return (
    <section className="card hyperparameters" aria-labelledby="hp-heading">
      <h2 id="hp-heading">Hyperparameters</h2>
      <p className="muted small">
        {started
          ? 'Most settings reach the running job from its next step; those marked “applies on reset” wait for Reset.'
          : 'Changes apply to the run that Start begins.'}
      </p>
      {job ? (
        <p className="tag-warn small" data-testid="supervised-note">
          {`A ${job.kind.toUpperCase()} job replaces the RL algorithm: of these settings it takes the model, seed, maxGradNorm and LoRA keys; its own are in the DPO and SFT card.`}
        </p>
      ) : (
        <p className="muted small">DPO and SFT: the DPO and SFT card on the left.</p>
      )}
      {problem && (
        <p className="problem" data-testid="config-problem">
          {problem}
        </p>
      )}
      {waiting && (
        <p className="tag-warn small" data-testid="pending-reset">
          Some changes apply on reset.
        </p>
      )}
      {GROUP_ORDER.map((group) => {
        const keys = CONFIG_KEYS.filter((k) => CONFIG_FIELDS[k].group === group && !SETUP_KEYS.includes(k));
        if (keys.length === 0) return null;
        return (
          <fieldset key={group} className="group">
            <legend>{GROUP_TITLES[group]}</legend>
            {keys.map((k) => (
              <ConfigControl key={k} name={k} />
            ))}
          </fieldset>
        );
      })}
    </section>
  );
}
