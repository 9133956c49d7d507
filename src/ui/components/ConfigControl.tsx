/**
 * One config key's control, generated from its CONFIG_FIELDS entry: a slider on the field's scale plus an exact
 * number box for numbers, a switch for booleans, a list for choices; the one-line doc and the allowed range
 * beneath. Live keys reach the running job at once; the others show "applies on reset" during a run.
 */
import { useEffect, useId, useState, type ReactNode } from 'react';
import {
  CONFIG_FIELDS,
  describeAllowed,
  type ConfigKey,
  type LoraTargetName,
  type NumberField,
  type StopToken,
} from '../../common/config';
import { HELDOUT } from '../../common/eval-record';
import { taskHasHeldOut } from '../lib/catalog';
import { formatNumber } from '../lib/format';
import { loraTargetView, toggleLoraTarget } from '../lib/lora-targets';
import { sliderScale, snapValue } from '../lib/slider-scale';
import { useActions, useAppliesOnReset, useEditedConfigValue, useModel, useRunStarted } from '../store/hooks';

/** Keys that get a number box but no slider (a slider over 0…2³¹ helps nobody). */
const NO_SLIDER: ReadonlySet<ConfigKey> = new Set(['seed']);

function ControlFrame(props: {
  name: ConfigKey;
  labelFor: string;
  docId: string;
  children: ReactNode;
  head?: ReactNode;
}) {
  const field = CONFIG_FIELDS[props.name];
  const started = useRunStarted();
  const waiting = useAppliesOnReset(props.name);
  return (
    <div className={`control${waiting ? ' control-waiting' : ''}`} data-key={props.name}>
      <div className="control-head">
        <label htmlFor={props.labelFor} className="control-name">
          {props.name}
        </label>
        {props.head}
      </div>
      {props.children}
      <small id={props.docId} className="control-doc">
        {field.doc} <span className="control-range">{describeAllowed(props.name)}.</span>
        {!field.live && started && (
          <span className={`tag ${waiting ? 'tag-warn' : ''}`}> applies on reset</span>
        )}
      </small>
    </div>
  );
}

/** An exact value box: edits are kept locally and committed on Enter or when leaving the box. */
function NumberBox(props: {
  name: ConfigKey;
  field: NumberField;
  value: number;
  onCommit: (v: number) => void;
  id?: string;
  docId: string;
}) {
  const [text, setText] = useState(formatNumber(props.value));
  const [editing, setEditing] = useState(false);
  useEffect(() => {
    if (!editing) setText(String(props.value));
  }, [props.value, editing]);
  const parsed = Number(text);
  const valid =
    text.trim() !== '' &&
    Number.isFinite(parsed) &&
    parsed >= props.field.min &&
    parsed <= props.field.max &&
    (!props.field.integer || Number.isInteger(parsed));
  const commit = () => {
    setEditing(false);
    if (valid && parsed !== props.value) props.onCommit(parsed);
    else setText(String(props.value));
  };
  return (
    <input
      id={props.id}
      className="number-box"
      type="text"
      inputMode="decimal"
      aria-label={`${props.name} value`}
      aria-invalid={!valid}
      aria-describedby={props.docId}
      value={text}
      onFocus={() => setEditing(true)}
      onChange={(e) => setText(e.target.value)}
      onBlur={commit}
      onKeyDown={(e) => {
        if (e.key === 'Enter') commit();
        if (e.key === 'Escape') {
          setText(String(props.value));
          setEditing(false);
        }
      }}
    />
  );
}

function NumberControl({ name }: { name: ConfigKey }) {
  const field = CONFIG_FIELDS[name] as NumberField;
  const value = useEditedConfigValue(name) as number;
  const { setConfigValue } = useActions();
  const id = useId();
  const docId = `${id}-doc`;
  const set = (v: number) => setConfigValue(name, snapValue(field, v));
  if (NO_SLIDER.has(name)) {
    return (
      <ControlFrame
        name={name}
        labelFor={id}
        docId={docId}
        head={
          <button type="button" className="small" onClick={() => set(Math.floor(Math.random() * 1_000_000))}>
            New {name}
          </button>
        }
      >
        <NumberBox name={name} field={field} value={value} onCommit={set} id={id} docId={docId} />
      </ControlFrame>
    );
  }
  const scale = sliderScale(field);
  return (
    <ControlFrame
      name={name}
      labelFor={id}
      docId={docId}
      head={<NumberBox name={name} field={field} value={value} onCommit={set} docId={docId} />}
    >
      <input
        id={id}
        type="range"
        min={0}
        max={scale.positions}
        step={1}
        value={scale.toPosition(value)}
        aria-valuetext={formatNumber(value)}
        aria-describedby={docId}
        onChange={(e) => setConfigValue(name, scale.moveTo(value, e.target.valueAsNumber))}
      />
    </ControlFrame>
  );
}

function BooleanControl({ name }: { name: ConfigKey }) {
  const value = useEditedConfigValue(name) as boolean;
  const { setConfigValue } = useActions();
  const id = useId();
  return (
    <ControlFrame
      name={name}
      labelFor={id}
      docId={`${id}-doc`}
      head={
        <input
          id={id}
          type="checkbox"
          role="switch"
          className="switch"
          checked={value}
          aria-describedby={`${id}-doc`}
          onChange={(e) => setConfigValue(name, e.target.checked)}
        />
      }
    >
      {null}
    </ControlFrame>
  );
}

function ChoiceControl({ name }: { name: ConfigKey }) {
  const field = CONFIG_FIELDS[name];
  const value = useEditedConfigValue(name) as string;
  const { setConfigValue } = useActions();
  const id = useId();
  const choices = field.type === 'choice' ? field.choices : [];
  return (
    <ControlFrame
      name={name}
      labelFor={id}
      docId={`${id}-doc`}
      head={
        <select
          id={id}
          value={value}
          aria-describedby={`${id}-doc`}
          onChange={(e) => setConfigValue(name, e.target.value as never)}
        >
          {choices.map((c) => (
            <option key={c} value={c}>
              {c}
            </option>
          ))}
        </select>
      }
    >
      {null}
    </ControlFrame>
  );
}

/**
 * A non-empty subset of the field's choices (loraTargets): one checkbox each; the last one cannot be cleared. Only
 * the loaded model family's targets are offered (../lib/lora-targets.ts).
 */
function ChoicesControl({ name }: { name: ConfigKey }) {
  const value = useEditedConfigValue(name) as LoraTargetName[];
  const family = useModel()?.family ?? null;
  const { setConfigValue } = useActions();
  const id = useId();
  const { choices, checked } = loraTargetView(family, value);
  const toggle = (c: LoraTargetName, on: boolean) => {
    const next = toggleLoraTarget(family, value, c, on);
    if (next) setConfigValue(name, next as never);
  };
  return (
    <ControlFrame name={name} labelFor={`${id}-0`} docId={`${id}-doc`}>
      <span className="inline" role="group" aria-describedby={`${id}-doc`}>
        {choices.map((c, i) => (
          <label key={c}>
            <input
              id={`${id}-${i}`}
              type="checkbox"
              checked={checked.includes(c)}
              onChange={(e) => toggle(c, e.target.checked)}
            />{' '}
            {c}
          </label>
        ))}
      </span>
    </ControlFrame>
  );
}

/**
 * evalPrompts in the app: none, or "heldout" (the task's held-out split; offered when the task has one). A file
 * path (from a config or the URL) is shown as it is; only the CLI reads files (docs/eval.md).
 */
function EvalPromptsControl({ name }: { name: ConfigKey }) {
  const value = useEditedConfigValue(name) as string | null;
  const task = useEditedConfigValue('task') as string | null;
  const { setConfigValue } = useActions();
  const id = useId();
  const heldOut = taskHasHeldOut(task);
  return (
    <ControlFrame
      name={name}
      labelFor={id}
      docId={`${id}-doc`}
      head={
        <select
          id={id}
          value={value ?? ''}
          aria-describedby={`${id}-doc`}
          onChange={(e) => setConfigValue(name, (e.target.value === '' ? null : e.target.value) as never)}
        >
          <option value="">none</option>
          <option value={HELDOUT} disabled={!heldOut && value !== HELDOUT}>
            {heldOut ? 'heldout (the task’s held-out split)' : 'heldout (this task has none)'}
          </option>
          {value !== null && value !== HELDOUT && <option value={value}>{value}</option>}
        </select>
      }
    >
      {null}
    </ControlFrame>
  );
}

/** "eos", never, or a token id. */
function StopTokenControl({ name }: { name: ConfigKey }) {
  const value = useEditedConfigValue(name) as StopToken;
  const { setConfigValue } = useActions();
  const id = useId();
  const kind = value === 'eos' ? 'eos' : value === null ? 'none' : 'id';
  return (
    <ControlFrame
      name={name}
      labelFor={id}
      docId={`${id}-doc`}
      head={
        <span className="inline">
          <select
            id={id}
            value={kind}
            aria-describedby={`${id}-doc`}
            onChange={(e) => {
              const k = e.target.value;
              setConfigValue(name, (k === 'eos' ? 'eos' : k === 'none' ? null : 0) as never);
            }}
          >
            <option value="eos">end of text</option>
            <option value="none">never stop</option>
            <option value="id">token id</option>
          </select>
          {kind === 'id' && (
            <input
              type="number"
              className="number-box"
              aria-label={`${name} token id`}
              min={0}
              step={1}
              value={value as number}
              onChange={(e) => {
                if (Number.isInteger(e.target.valueAsNumber) && e.target.valueAsNumber >= 0) {
                  setConfigValue(name, e.target.valueAsNumber as never);
                }
              }}
            />
          )}
        </span>
      }
    >
      {null}
    </ControlFrame>
  );
}

export function ConfigControl({ name }: { name: ConfigKey }) {
  const field = CONFIG_FIELDS[name];
  switch (field.type) {
    case 'number':
      return <NumberControl name={name} />;
    case 'boolean':
      return <BooleanControl name={name} />;
    case 'choice':
      return <ChoiceControl name={name} />;
    case 'choices':
      return <ChoicesControl name={name} />;
    case 'stopToken':
      return <StopTokenControl name={name} />;
    case 'string':
      return name === 'evalPrompts' ? <EvalPromptsControl name={name} /> : null;
    default:
      return null;
  }
}
