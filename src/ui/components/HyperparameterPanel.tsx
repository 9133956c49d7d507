import { useEffect, useId, useState } from 'react';
import { CONFIG_FIELDS, CONFIG_KEYS, DEFAULT_CONFIG, type ConfigKey } from '../../common/config';
import { BASIC_KEYS, GROUP_ORDER, GROUP_TITLES, SETUP_KEYS } from '../lib/catalog';
import { sameValue } from '../store/config-sync';
import {
  useAnyAppliesOnReset,
  useConfigProblem,
  usePlayground,
  useRunStarted,
  useSupervisedJob,
} from '../store/hooks';
import { ConfigControl } from './ConfigControl';

/** Every setting with a control in this column that is not a basic one. */
const ADVANCED_KEYS: readonly ConfigKey[] = CONFIG_KEYS.filter(
  (k) =>
    !SETUP_KEYS.includes(k) &&
    !BASIC_KEYS.includes(k) &&
    (CONFIG_FIELDS[k].type !== 'string' || k === 'evalPrompts'),
);

/** Whether a key matches the filter text: its name or its one-line doc, case-insensitively. */
function matches(k: ConfigKey, filter: string): boolean {
  const f = filter.trim().toLowerCase();
  return f === '' || k.toLowerCase().includes(f) || CONFIG_FIELDS[k].doc.toLowerCase().includes(f);
}

/**
 * The right column: the basic settings first, then every other config key that has a control under
 * "Advanced", grouped as in CONFIG_FIELDS, with a filter box. Advanced opens by itself when one of its settings
 * differs from its default (a link or an import set it), so nothing that matters is hidden.
 */
export function HyperparameterPanel() {
  const changedAdvanced = usePlayground((s) =>
    ADVANCED_KEYS.some((k) => !sameValue(s.editedConfig[k] ?? null, DEFAULT_CONFIG[k] ?? null)),
  );
  const [open, setOpen] = useState(changedAdvanced);
  useEffect(() => {
    if (changedAdvanced) setOpen(true);
  }, [changedAdvanced]);
  const [filter, setFilter] = useState('');
  const filterId = useId();
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
      <fieldset className="group" data-testid="basic-settings">
        <legend>Basics</legend>
        {BASIC_KEYS.map((k) => (
          <ConfigControl key={k} name={k} />
        ))}
      </fieldset>
      <details
        className="advanced"
        open={open}
        onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}
      >
        <summary data-testid="advanced-toggle">Advanced: {ADVANCED_KEYS.length} more settings</summary>
        <div className="advanced-filter">
          <label htmlFor={filterId} className="sr-only">
            Filter settings
          </label>
          <input
            id={filterId}
            type="search"
            placeholder="Filter settings (name or meaning)"
            value={filter}
            onChange={(e) => setFilter(e.target.value)}
          />
        </div>
        {GROUP_ORDER.map((group) => {
          const keys = ADVANCED_KEYS.filter((k) => CONFIG_FIELDS[k].group === group && matches(k, filter));
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
        {!ADVANCED_KEYS.some((k) => matches(k, filter)) && (
          <p className="muted small">No setting matches “{filter}”.</p>
        )}
      </details>
    </section>
  );
}
