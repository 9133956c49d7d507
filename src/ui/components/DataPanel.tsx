import { useEffect, useId, useState } from 'react';
import { CONFIG_FIELDS } from '../../common/config';
import { TASKS } from '../lib/catalog';
import { useActions, useEditedConfigValue } from '../store/hooks';
import { AppliesOnReset } from './AppliesOnReset';

function TaskPicker() {
  const task = useEditedConfigValue('task');
  const { setConfigValue } = useActions();
  const id = useId();
  const current = TASKS.find((t) => t.name === task);
  return (
    <div className="field">
      <span className="field-head">
        <label htmlFor={id}>Task</label>
        <AppliesOnReset name="task" />
      </span>
      <select
        id={id}
        value={task ?? ''}
        onChange={(e) => setConfigValue('task', e.target.value === '' ? null : e.target.value)}
      >
        {TASKS.map((t) => (
          <option key={t.name} value={t.name}>
            {t.label}
          </option>
        ))}
        <option value="">None (your prompts)</option>
      </select>
      <small className="muted">{current ? current.doc : CONFIG_FIELDS.task.doc}</small>
      {current && (
        <dl className="task-success" data-testid="task-success" aria-label="What success looks like">
          <dt>Reward</dt>
          <dd>{current.reward.text}</dd>
          <dt>A good run</dt>
          <dd title={`Measured: ${current.source}`}>{current.goodRun}.</dd>
        </dl>
      )}
    </div>
  );
}

/** Your own prompts, one per line; empty = the task's. Committed when the box is left. */
function PromptsEditor() {
  const prompts = useEditedConfigValue('prompts');
  const { setConfigValue } = useActions();
  const id = useId();
  const [text, setText] = useState((prompts ?? []).join('\n'));
  useEffect(() => setText((prompts ?? []).join('\n')), [prompts]);
  const commit = () => {
    const lines = text
      .split('\n')
      .map((l) => l.trimEnd())
      .filter((l) => l.trim() !== '');
    const next = lines.length > 0 ? lines : undefined;
    if (JSON.stringify(next) !== JSON.stringify(prompts)) setConfigValue('prompts', next);
  };
  return (
    <div className="field">
      <span className="field-head">
        <label htmlFor={id}>Prompts</label>
        <AppliesOnReset name="prompts" />
      </span>
      <textarea
        id={id}
        rows={3}
        spellCheck={false}
        placeholder="One prompt per line (empty: the task's prompts)"
        value={text}
        onChange={(e) => setText(e.target.value)}
        onBlur={commit}
      />
      <small className="muted">{CONFIG_FIELDS.prompts.doc}</small>
    </div>
  );
}

/** The left column's data card: which task (prompts + reward) the policy is trained on. */
export function DataPanel() {
  return (
    <section className="card" aria-labelledby="data-heading">
      <h2 id="data-heading">Data</h2>
      <TaskPicker />
      <PromptsEditor />
    </section>
  );
}
