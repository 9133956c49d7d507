import { useId } from 'react';
import { DEFAULT_REWARD_CODE } from '../lib/catalog';
import { useActions, useIoTask, useRewardCode, useRewardCodeInUse } from '../store/hooks';

/** The body of `(sample) => number`, run by the worker in a sandbox with a time limit. */
export function RewardCodeEditor() {
  const code = useRewardCode();
  const inUse = useRewardCodeInUse();
  const ioTask = useIoTask();
  const { editRewardCode, applyRewardCode, clearRewardCode } = useActions();
  const id = useId();
  return (
    <div className="reward-code">
      <label htmlFor={id} className="field-head">
        Reward code {inUse && <span className="tag tag-live">in use</span>}
      </label>
      <textarea
        id={id}
        className="code"
        rows={4}
        spellCheck={false}
        autoCapitalize="off"
        autoCorrect="off"
        value={code}
        placeholder={DEFAULT_REWARD_CODE}
        onChange={(e) => editRewardCode(e.target.value)}
      />
      <small className="muted">
        The body of <code>(sample) =&gt; number</code>; <code>sample</code> has <code>prompt</code>,{' '}
        <code>response</code>, <code>promptTokens</code>, <code>responseTokens</code>. It runs in a sandbox
        with a time limit.
      </small>
      <div className="row">
        <button type="button" onClick={() => void applyRewardCode()} disabled={ioTask !== null}>
          Use this code
        </button>
        <button type="button" onClick={() => void clearRewardCode()} disabled={!inUse || ioTask !== null}>
          Stop using code
        </button>
      </div>
    </div>
  );
}
